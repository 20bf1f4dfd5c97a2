-- inbox_messages: the consumer side's record of the messages it received,
-- one row per (consumer, source, message_id). The primary key is the dedup
-- key: a second delivery of the same message to the same consumer inserts
-- nothing (INSERT … ON CONFLICT DO NOTHING), and while the first delivery's
-- transaction is open the second one waits on its row, then finds it. The
-- source is part of the key because event IDs are unique only within one
-- outbox table: two outboxes (two databases, two tenant schemas) feeding one
-- consumer each have an event 17.
CREATE TABLE IF NOT EXISTS {{schema}}.inbox_messages (
    consumer     text        NOT NULL CHECK (consumer <> ''),
    source       text        NOT NULL DEFAULT '',
    message_id   text        NOT NULL CHECK (message_id <> ''),
    event_type   text        NOT NULL DEFAULT '',
    payload      jsonb       NOT NULL,
    headers      jsonb       NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(headers) = 'object'),
    received_at  timestamptz NOT NULL DEFAULT now(),
    -- NULL until the application took the row and applied its effect (or
    -- set at once when a Go handler applied it in the receiving transaction).
    processed_at timestamptz,
    PRIMARY KEY (consumer, source, message_id)
);

-- The applications' queue: SELECT … WHERE consumer = $1 AND processed_at IS
-- NULL ORDER BY received_at … FOR UPDATE SKIP LOCKED reads only the rows
-- still to do, in arrival order, and so does the consumer-lag metric.
CREATE INDEX IF NOT EXISTS inbox_messages_unprocessed_idx
    ON {{schema}}.inbox_messages (consumer, received_at) WHERE processed_at IS NULL;

-- Purge deletes processed rows by age.
CREATE INDEX IF NOT EXISTS inbox_messages_processed_at_idx
    ON {{schema}}.inbox_messages (processed_at) WHERE processed_at IS NOT NULL;

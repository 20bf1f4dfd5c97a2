-- inbox_messages on SQLite: the same contract as on PostgreSQL, in SQLite's
-- types (see 001_create_outbox_events.sql in the outbox's migrations). The
-- primary key is the dedup key: a second delivery of a message inserts
-- nothing (INSERT … ON CONFLICT DO NOTHING).
CREATE TABLE IF NOT EXISTS {{schema}}."inbox_messages" (
    "consumer"     TEXT NOT NULL CHECK ("consumer" <> ''),
    "source"       TEXT NOT NULL DEFAULT '',
    "message_id"   TEXT NOT NULL CHECK ("message_id" <> ''),
    "event_type"   TEXT NOT NULL DEFAULT '',
    "payload"      TEXT NOT NULL CHECK (json_valid("payload")),
    "headers"      TEXT NOT NULL DEFAULT '{}' CHECK (json_type("headers") = 'object'),
    "received_at"  TEXT NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f', 'now')),
    "processed_at" TEXT,
    PRIMARY KEY ("consumer", "source", "message_id")
);

-- The applications' queue and the consumer-lag metric read only the rows
-- still to do, in arrival order.
CREATE INDEX IF NOT EXISTS {{schema}}."inbox_messages_unprocessed_idx"
    ON "inbox_messages" ("consumer", "received_at") WHERE "processed_at" IS NULL;

-- Purge deletes processed rows by age.
CREATE INDEX IF NOT EXISTS {{schema}}."inbox_messages_processed_at_idx"
    ON "inbox_messages" ("processed_at") WHERE "processed_at" IS NOT NULL;

-- inbox_consumers: one row per consumer with what its receiver last read
-- from the broker (outbox receive --from nats|kafka): the broker's own
-- pending count, the receiver's poll interval and when it reported, by the
-- database clock. outbox stats and the dashboard show it next to the
-- inbox's backlog, and call a report older than three poll intervals stale
-- (the receiver stopped or cannot read the broker). A retired consumer's
-- row stays until deleted.
CREATE TABLE IF NOT EXISTS {{schema}}.inbox_consumers (
    consumer         text        PRIMARY KEY CHECK (consumer <> ''),
    broker           text        NOT NULL,
    broker_pending   bigint      NOT NULL,
    poll_interval_ms bigint      NOT NULL CHECK (poll_interval_ms > 0),
    reported_at      timestamptz NOT NULL DEFAULT now()
);

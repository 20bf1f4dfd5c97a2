-- inbox_consumers on SQLite: the same contract as on PostgreSQL (see
-- 002_create_inbox_consumers.sql there): what each consumer's receiver last
-- read from its broker, and when, by the database clock.
CREATE TABLE IF NOT EXISTS {{schema}}."inbox_consumers" (
    "consumer"         TEXT    NOT NULL PRIMARY KEY CHECK ("consumer" <> ''),
    "broker"           TEXT    NOT NULL,
    "broker_pending"   INTEGER NOT NULL,
    "poll_interval_ms" INTEGER NOT NULL CHECK ("poll_interval_ms" > 0),
    "reported_at"      TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f', 'now'))
);

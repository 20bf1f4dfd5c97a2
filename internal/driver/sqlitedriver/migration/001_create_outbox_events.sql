-- outbox_events on SQLite: the same contract as on PostgreSQL, in SQLite's
-- types. Timestamps are UTC text 'YYYY-MM-DD HH:MM:SS.SSS' (SQLite's clock
-- has millisecond precision): fixed width, so text order is time order and
-- the claim compares them as text on its index; the CHECK refuses any other
-- form a hand-written insert might use. JSON is TEXT checked by json_valid,
-- stored byte for byte.
CREATE TABLE {{schema}}."outbox_events" (
    -- AUTOINCREMENT: an ID is never reused, even after the newest rows are
    -- deleted (retention delete, purge), since consumers drop duplicates on it.
    "id"              INTEGER PRIMARY KEY AUTOINCREMENT,
    "event_type"      TEXT NOT NULL CHECK ("event_type" <> ''),
    "aggregate_type"  TEXT,
    "aggregate_id"    TEXT,
    "payload"         TEXT NOT NULL CHECK (json_valid("payload")),
    "headers"         TEXT NOT NULL DEFAULT '{}' CHECK (json_type("headers") = 'object'),
    "idempotency_key" TEXT,
    "status"          TEXT NOT NULL DEFAULT 'pending'
                      CHECK ("status" IN ('pending', 'processing', 'processed', 'failed')),
    "attempts"        INTEGER NOT NULL DEFAULT 0 CHECK ("attempts" >= 0),
    "max_attempts"    INTEGER CHECK ("max_attempts" > 0),
    "last_error"      TEXT,
    "available_at"    TEXT NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f', 'now'))
                      CHECK ("available_at" GLOB '[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9] [0-9][0-9]:[0-9][0-9]:[0-9][0-9].[0-9][0-9][0-9]'),
    "locked_until"    TEXT,
    "locked_by"       TEXT,
    "created_at"      TEXT NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f', 'now')),
    "updated_at"      TEXT NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f', 'now')),
    "processed_at"    TEXT
);

-- A duplicate key inserts nothing (the writer's ON CONFLICT … DO NOTHING).
CREATE UNIQUE INDEX {{schema}}."outbox_events_idempotency_key_idx"
    ON "outbox_events" ("idempotency_key") WHERE "idempotency_key" IS NOT NULL;

-- The claim's index: only pending rows, in the order they fall due.
CREATE INDEX {{schema}}."outbox_events_pending_idx"
    ON "outbox_events" ("available_at", "id") WHERE "status" = 'pending';

-- Lease rescue and the processing count read only in-flight rows.
CREATE INDEX {{schema}}."outbox_events_processing_idx"
    ON "outbox_events" ("locked_until") WHERE "status" = 'processing';

-- The dead-letter queue.
CREATE INDEX {{schema}}."outbox_events_failed_idx"
    ON "outbox_events" ("id") WHERE "status" = 'failed';

-- outbox_events_archive: where a relay with retention "archive" moves
-- delivered events. Same columns as outbox_events; purge deletes from it by
-- processed_at.
CREATE TABLE {{schema}}."outbox_events_archive" (
    "id"              INTEGER PRIMARY KEY,
    "event_type"      TEXT NOT NULL,
    "aggregate_type"  TEXT,
    "aggregate_id"    TEXT,
    "payload"         TEXT NOT NULL,
    "headers"         TEXT NOT NULL DEFAULT '{}',
    "idempotency_key" TEXT,
    "status"          TEXT NOT NULL DEFAULT 'processed',
    "attempts"        INTEGER NOT NULL DEFAULT 0,
    "max_attempts"    INTEGER,
    "last_error"      TEXT,
    "available_at"    TEXT NOT NULL,
    "locked_until"    TEXT,
    "locked_by"       TEXT,
    "created_at"      TEXT NOT NULL,
    "updated_at"      TEXT NOT NULL,
    "processed_at"    TEXT
);

CREATE INDEX {{schema}}."outbox_events_archive_processed_at_idx"
    ON "outbox_events_archive" ("processed_at");

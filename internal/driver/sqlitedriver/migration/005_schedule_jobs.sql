-- outbox_leases: one row per job that exactly one relay runs at a time
-- (scheduled purge, dead-letter retry); see the PostgreSQL migration.
CREATE TABLE {{schema}}."outbox_leases" (
    "name"        TEXT PRIMARY KEY,
    "holder"      TEXT NOT NULL,
    "expires_at"  TEXT NOT NULL,
    "acquired_at" TEXT NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f', 'now'))
);

-- The dead-letter slow retry: how often an event went back to pending on
-- the slow schedule, and when it goes back next (NULL: not scheduled).
ALTER TABLE {{schema}}."outbox_events" ADD COLUMN "dead_letter_retries" INTEGER NOT NULL DEFAULT 0;
ALTER TABLE {{schema}}."outbox_events" ADD COLUMN "dead_letter_retry_at" TEXT;

-- See the PostgreSQL migration: one index per pass of the slow retry.
CREATE INDEX {{schema}}."outbox_events_dead_letter_unscheduled_idx"
    ON "outbox_events" ("dead_letter_retries", "id")
    WHERE "status" = 'failed' AND "dead_letter_retry_at" IS NULL;
CREATE INDEX {{schema}}."outbox_events_dead_letter_due_idx"
    ON "outbox_events" ("dead_letter_retry_at")
    WHERE "status" = 'failed' AND "dead_letter_retry_at" IS NOT NULL;

-- outbox_leases: one row per job that exactly one relay runs at a time
-- (scheduled purge, dead-letter retry); see the PostgreSQL migration.
CREATE TABLE {{schema}}`outbox_leases` (
    `name`        VARCHAR(191) NOT NULL PRIMARY KEY,
    `holder`      VARCHAR(255) NOT NULL,
    `expires_at`  DATETIME(6) NOT NULL,
    `acquired_at` DATETIME(6) NOT NULL DEFAULT (UTC_TIMESTAMP(6))
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- The dead-letter slow retry: how often an event went back to pending on
-- the slow schedule, and when it goes back next (NULL: not scheduled).
-- Added last, so MySQL 8 and MariaDB 10.3+ add them in place. No partial
-- indexes: status leads, as in the others. One index serves both passes of
-- the slow retry: the unscheduled rows by (NULL retry time, retries, id),
-- the due ones by its leading (status, dead_letter_retry_at); a second
-- index would only cost every claim and mark one more update.
ALTER TABLE {{schema}}`outbox_events`
    ADD COLUMN `dead_letter_retries` INT NOT NULL DEFAULT 0,
    ADD COLUMN `dead_letter_retry_at` DATETIME(6) NULL,
    ADD KEY `outbox_events_dead_letter_unscheduled_idx` (`status`, `dead_letter_retry_at`, `dead_letter_retries`, `id`);

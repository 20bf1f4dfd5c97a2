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
-- indexes: status leads each, as in the others; one index per pass of the
-- slow retry (see the PostgreSQL migration).
ALTER TABLE {{schema}}`outbox_events`
    ADD COLUMN `dead_letter_retries` INT NOT NULL DEFAULT 0,
    ADD COLUMN `dead_letter_retry_at` DATETIME(6) NULL,
    ADD KEY `outbox_events_dead_letter_unscheduled_idx` (`status`, `dead_letter_retry_at`, `dead_letter_retries`, `id`),
    ADD KEY `outbox_events_dead_letter_due_idx` (`status`, `dead_letter_retry_at`);

-- outbox_events on MySQL 8 / MariaDB 10.6+: the same contract as on
-- PostgreSQL, in MySQL's types. Timestamps are DATETIME(6) holding UTC
-- (UTC_TIMESTAMP(6), microseconds, so the relay's fence compares exact
-- values whatever the session's time_zone). JSON is LONGTEXT checked by
-- JSON_VALID, which is what MariaDB's JSON type is, and which keeps the bytes
-- as written on MySQL too (its binary JSON type would reorder keys). Text
-- columns compare as binary (utf8mb4_bin): idempotency keys, relay IDs and
-- event types match case for case.
CREATE TABLE {{schema}}`outbox_events` (
    `id`              BIGINT NOT NULL AUTO_INCREMENT,
    `event_type`      VARCHAR(255) NOT NULL CHECK (`event_type` <> ''),
    `aggregate_type`  VARCHAR(255) NULL,
    `aggregate_id`    VARCHAR(255) NULL,
    `payload`         LONGTEXT NOT NULL CHECK (JSON_VALID(`payload`)),
    `headers`         LONGTEXT NOT NULL DEFAULT ('{}')
                      CHECK (JSON_VALID(`headers`) AND JSON_TYPE(`headers`) = 'OBJECT'),
    `idempotency_key` VARCHAR(255) NULL,
    `status`          VARCHAR(16) NOT NULL DEFAULT 'pending'
                      CHECK (`status` IN ('pending', 'processing', 'processed', 'failed')),
    `attempts`        INT NOT NULL DEFAULT 0 CHECK (`attempts` >= 0),
    `max_attempts`    INT NULL CHECK (`max_attempts` > 0),
    `last_error`      TEXT NULL,
    `available_at`    DATETIME(6) NOT NULL DEFAULT (UTC_TIMESTAMP(6)),
    `locked_until`    DATETIME(6) NULL,
    `locked_by`       VARCHAR(255) NULL,
    `created_at`      DATETIME(6) NOT NULL DEFAULT (UTC_TIMESTAMP(6)),
    `updated_at`      DATETIME(6) NOT NULL DEFAULT (UTC_TIMESTAMP(6)),
    `processed_at`    DATETIME(6) NULL,
    PRIMARY KEY (`id`),
    -- A duplicate key inserts nothing (the writer's ON DUPLICATE KEY UPDATE
    -- id = id). NULLs do not collide in a unique index.
    UNIQUE KEY `outbox_events_idempotency_key_idx` (`idempotency_key`),
    -- MySQL has no partial indexes: status leads each index instead, so the
    -- claim reads only the pending range in the order events fall due,
    -- however many processed rows the table holds.
    KEY `outbox_events_pending_idx` (`status`, `available_at`, `id`),
    -- Lease rescue and the processing count.
    KEY `outbox_events_processing_idx` (`status`, `locked_until`),
    -- The dead-letter queue, purge and requeue walk a status in ID order.
    KEY `outbox_events_status_id_idx` (`status`, `id`)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

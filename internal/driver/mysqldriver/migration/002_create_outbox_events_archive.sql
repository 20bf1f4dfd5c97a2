-- outbox_events_archive: where a relay with retention "archive" moves
-- delivered events. Same columns as outbox_events; purge deletes from it by
-- processed_at.
CREATE TABLE {{schema}}`outbox_events_archive` (
    `id`              BIGINT NOT NULL,
    `event_type`      VARCHAR(255) NOT NULL,
    `aggregate_type`  VARCHAR(255) NULL,
    `aggregate_id`    VARCHAR(255) NULL,
    `payload`         LONGTEXT NOT NULL,
    `headers`         LONGTEXT NOT NULL DEFAULT ('{}'),
    `idempotency_key` VARCHAR(255) NULL,
    `status`          VARCHAR(16) NOT NULL DEFAULT 'processed',
    `attempts`        INT NOT NULL DEFAULT 0,
    `max_attempts`    INT NULL,
    `last_error`      TEXT NULL,
    `available_at`    DATETIME(6) NOT NULL,
    `locked_until`    DATETIME(6) NULL,
    `locked_by`       VARCHAR(255) NULL,
    `created_at`      DATETIME(6) NOT NULL,
    `updated_at`      DATETIME(6) NOT NULL,
    `processed_at`    DATETIME(6) NULL,
    PRIMARY KEY (`id`),
    KEY `outbox_events_archive_processed_at_idx` (`processed_at`)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

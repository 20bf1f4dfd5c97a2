-- inbox_messages on MySQL 8 / MariaDB 10.6+: the same contract as on
-- PostgreSQL, in MySQL's types (see 001_create_outbox_events.sql in the
-- outbox's migrations). The primary key is the dedup key: a second delivery
-- of a message fails its INSERT with a duplicate-key error, which ends only
-- that statement, not the transaction, and which waits first for a
-- transaction that inserted the same key and is still open. Its three
-- columns stay within InnoDB's 3072-byte key limit in utf8mb4 (710
-- characters of 4 bytes).
CREATE TABLE IF NOT EXISTS {{schema}}`inbox_messages` (
    `consumer`     VARCHAR(200) NOT NULL CHECK (`consumer` <> ''),
    `source`       VARCHAR(255) NOT NULL DEFAULT '',
    `message_id`   VARCHAR(255) NOT NULL CHECK (`message_id` <> ''),
    `event_type`   VARCHAR(255) NOT NULL DEFAULT '',
    `payload`      LONGTEXT NOT NULL CHECK (JSON_VALID(`payload`)),
    `headers`      LONGTEXT NOT NULL DEFAULT ('{}')
                   CHECK (JSON_VALID(`headers`) AND JSON_TYPE(`headers`) = 'OBJECT'),
    `received_at`  DATETIME(6) NOT NULL DEFAULT (UTC_TIMESTAMP(6)),
    `processed_at` DATETIME(6) NULL,
    PRIMARY KEY (`consumer`, `source`, `message_id`),
    -- MySQL has no partial indexes: processed_at leads, so the applications'
    -- queue (processed_at IS NULL) and purge (processed_at < …) each read
    -- only their range.
    KEY `inbox_messages_unprocessed_idx` (`processed_at`, `consumer`, `received_at`)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

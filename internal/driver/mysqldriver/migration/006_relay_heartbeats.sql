-- outbox_relays: one row per running relay process, upserted at start and
-- every heartbeat interval and deleted on a graceful stop; see the
-- PostgreSQL migration.
CREATE TABLE {{schema}}`outbox_relays` (
    `relay_id`      VARCHAR(255) NOT NULL PRIMARY KEY,
    `host`          VARCHAR(255) NOT NULL,
    `pid`           INT NOT NULL,
    `version`       VARCHAR(255) NOT NULL,
    `sink`          VARCHAR(1024) NOT NULL,
    `event_types`   VARCHAR(4096) NOT NULL,
    `started_at`    DATETIME(6) NOT NULL,
    `last_seen`     DATETIME(6) NOT NULL,
    `expires_at`    DATETIME(6) NOT NULL,
    `last_claim_at` DATETIME(6) NULL
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

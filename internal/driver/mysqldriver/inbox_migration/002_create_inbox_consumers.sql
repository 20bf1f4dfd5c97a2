-- inbox_consumers on MySQL 8 / MariaDB 10.6+: the same contract as on
-- PostgreSQL (see 002_create_inbox_consumers.sql there): what each
-- consumer's receiver last read from its broker, and when, by the database
-- clock (UTC).
CREATE TABLE IF NOT EXISTS {{schema}}`inbox_consumers` (
    `consumer`         VARCHAR(200) NOT NULL CHECK (`consumer` <> ''),
    `broker`           VARCHAR(50)  NOT NULL,
    `broker_pending`   BIGINT       NOT NULL,
    `poll_interval_ms` BIGINT       NOT NULL CHECK (`poll_interval_ms` > 0),
    `reported_at`      DATETIME(6)  NOT NULL DEFAULT (UTC_TIMESTAMP(6)),
    PRIMARY KEY (`consumer`)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

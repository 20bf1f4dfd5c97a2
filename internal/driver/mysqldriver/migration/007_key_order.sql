-- Per-aggregate ordering (RelayConfig.Ordering = aggregate). AUTO_INCREMENT
-- hands out IDs at insert time and concurrent transactions commit in any
-- order, so a key's order cannot be read from the IDs; and InnoDB has no
-- horizon below which every writer has ended (PostgreSQL's snapshot xmin).
-- A per-key sequence that follows commit order stands in for both:
--
-- outbox_keys holds one row per aggregate (aggregate_type coalesced to '')
-- and the last sequence number given out for it.
CREATE TABLE {{schema}}`outbox_keys` (
    `aggregate_type` VARCHAR(255) NOT NULL,
    `aggregate_id`   VARCHAR(255) NOT NULL,
    `seq`            BIGINT NOT NULL,
    PRIMARY KEY (`aggregate_type`, `aggregate_id`)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- key_seq is the event's number within its key (0 without a key, and for
-- rows written before this migration: they come first, in ID order).
-- order_id and order_type hold the key while the event is unfinished
-- (pending, processing, failed) and NULL after: MySQL has no partial index,
-- so outbox_events_key_order_idx keeps every finished row under NULL, out
-- of the way of the claim's lookups, whatever history the table keeps.
-- Virtual columns and a column with a constant default are added in place.
ALTER TABLE {{schema}}`outbox_events`
    ADD COLUMN `key_seq` BIGINT NOT NULL DEFAULT 0,
    ADD COLUMN `order_id` VARCHAR(255)
        AS (IF(`status` IN ('pending', 'processing', 'failed'), `aggregate_id`, NULL)) VIRTUAL,
    ADD COLUMN `order_type` VARCHAR(255)
        AS (IF(`status` IN ('pending', 'processing', 'failed') AND `aggregate_id` IS NOT NULL, coalesce(`aggregate_type`, ''), NULL)) VIRTUAL,
    ADD KEY `outbox_events_key_order_idx` (`order_id`, `order_type`, `key_seq`);

-- The BEFORE INSERT trigger that fills key_seq is not created here: it
-- costs every writer a second row, so it comes only with outbox migrate
-- --ordering aggregate (key_seq_trigger.sql beside this directory).

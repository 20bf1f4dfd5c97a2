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

-- The trigger numbers every event that has an aggregate ID, so writers in
-- any language keep their plain INSERT. Its upsert locks the key's row in
-- outbox_keys until the writer's transaction ends (an exclusive record
-- lock on the primary key, no gap lock), so a second transaction writing
-- the same key waits there until the first commits or rolls back, then
-- takes the next number: a key's events commit in key_seq order, and a
-- relay that reads event n of a key has every earlier one in view. A rolled
-- back increment is undone with the rest; an insert skipped as a duplicate
-- idempotency key leaves a gap, which the order does not mind. The SELECT
-- reads the row this transaction just wrote. Writers of one aggregate
-- serialize on it, which an application that locks its aggregate's own row
-- already does. Creating a trigger takes the TRIGGER privilege (and, with
-- binary logging on MySQL, SUPER or log_bin_trust_function_creators = 1).
DELIMITER //
CREATE TRIGGER {{schema}}`outbox_events_key_seq` BEFORE INSERT ON {{schema}}`outbox_events`
FOR EACH ROW
BEGIN
    IF NEW.`aggregate_id` IS NOT NULL THEN
        INSERT INTO {{schema}}`outbox_keys` (`aggregate_type`, `aggregate_id`, `seq`)
        VALUES (coalesce(NEW.`aggregate_type`, ''), NEW.`aggregate_id`, 1)
        ON DUPLICATE KEY UPDATE `seq` = `seq` + 1;
        SET NEW.`key_seq` = (SELECT `seq` FROM {{schema}}`outbox_keys`
            WHERE `aggregate_type` = coalesce(NEW.`aggregate_type`, '') AND `aggregate_id` = NEW.`aggregate_id`);
    END IF;
END//
DELIMITER ;

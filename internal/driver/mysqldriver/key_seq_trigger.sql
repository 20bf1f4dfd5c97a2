-- The key sequence of ordered delivery (outbox migrate --ordering aggregate;
-- needs migration 7). The trigger numbers every event that has an aggregate ID, so writers in
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

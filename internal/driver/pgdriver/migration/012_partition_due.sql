-- The partition index gains available_at as its last column: a partition
-- read's "due" condition (available_at <= now()) is then checked in the
-- index, so the events of a partition not due yet (written for later, or
-- backing off after a failure) are stepped over there, without fetching
-- their rows. Before, every read fetched each such event of every
-- partition it read, on every read: a partition's events scheduled ahead
-- have older transaction IDs than the backlog behind them, so its scan met
-- them first. The index keeps its name and its leading columns, so the
-- read's SQL is unchanged and relays of earlier versions use it as well.
--
-- The drop needs the table's strongest lock. It is taken first: taken only
-- for the drop, after the build held writers back, it would deadlock with a
-- transaction that read the table and then writes it. The wait for it is
-- bounded, so that a long transaction on the table fails this migration
-- (run it again) instead of queueing every reader and writer behind it.
-- One DO block, so that the lock covers all of it also where this script
-- runs statement by statement outside a transaction (outbox migrate --print).
-- The build then holds reads and writes back; on a large table, build the
-- index beforehand without blocking (docs/operations.md: CREATE INDEX
-- CONCURRENTLY outbox_events_partition_due_idx …), and this migration keeps
-- a valid one it finds.
DO {{tag}}
DECLARE
    previous text := current_setting('lock_timeout');
    built    regclass;
BEGIN
    PERFORM set_config('lock_timeout', '10s', true);
    LOCK TABLE {{schema}}.outbox_events IN ACCESS EXCLUSIVE MODE;
    PERFORM set_config('lock_timeout', previous, true);
    built := to_regclass(format('%I.%I', {{schema_literal}}, 'outbox_events_partition_due_idx'));
    IF built IS NULL OR NOT (SELECT indisvalid FROM pg_index WHERE indexrelid = built) THEN
        IF built IS NOT NULL THEN
            DROP INDEX {{schema}}.outbox_events_partition_due_idx; -- a concurrent build that failed
        END IF;
        CREATE INDEX outbox_events_partition_due_idx ON {{schema}}.outbox_events (
            (hashtext(coalesce(aggregate_type, '') || ':' || coalesce(aggregate_id, id::text)) & 255), txid, id, available_at)
            WHERE status = 'pending';
    END IF;
    DROP INDEX {{schema}}.outbox_events_partition_idx;
    ALTER INDEX {{schema}}.outbox_events_partition_due_idx RENAME TO outbox_events_partition_idx;
END
{{tag}};

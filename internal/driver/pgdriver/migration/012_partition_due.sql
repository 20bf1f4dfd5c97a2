-- The partition index gains available_at as its last column: a partition
-- read's "due" condition (available_at <= now()) is then checked in the
-- index, so the events of a partition not due yet (written for later, or
-- backing off after a failure) are stepped over there, without fetching
-- their rows. Before, every read fetched each such event of every
-- partition it read, on every read: a partition's events scheduled ahead
-- have older transaction IDs than the backlog behind them, so its scan met
-- them first. The index keeps its name and its leading columns, so the
-- read's SQL is unchanged and relays of earlier versions use it as well.
CREATE INDEX outbox_events_partition_due_idx ON {{schema}}.outbox_events (
    (hashtext(coalesce(aggregate_type, '') || ':' || coalesce(aggregate_id, id::text)) & 255), txid, id, available_at)
    WHERE status = 'pending';
DROP INDEX {{schema}}.outbox_events_partition_idx;
ALTER INDEX {{schema}}.outbox_events_partition_due_idx RENAME TO outbox_events_partition_idx;

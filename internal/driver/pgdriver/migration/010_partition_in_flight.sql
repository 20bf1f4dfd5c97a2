-- What an ordered relay has in flight from each partition it owns: the IDs
-- of the batch it read from the partition, written before it publishes
-- them, with the owner and fence it read under and when. A relay that
-- takes the partition over after its owner's lease ran out (the owner died
-- or hung, perhaps on one of these events) counts the expiry as an attempt
-- of those still pending and not changed since (a failed publish changed
-- them), as the rescue of an expired row lease does: an event that kills
-- every relay publishing it is dead-lettered after max_attempts, and the
-- reads take such suspects alone. A record counts only while its fence is
-- the partition's: every acquisition raises the fence, so an older record
-- is never counted again. A table of its own: the reads scan
-- outbox_partitions, which this write on every batch would churn.
CREATE TABLE {{schema}}.outbox_partition_in_flight (
    partition   integer PRIMARY KEY CHECK (partition BETWEEN 0 AND 255),
    owner       text,
    fence       bigint,
    ids         bigint[],
    recorded_at timestamptz
);
INSERT INTO {{schema}}.outbox_partition_in_flight (partition) SELECT generate_series(0, 255);

-- What an ordered relay has in flight from each partition it owns: the IDs
-- of the batch it read from the partition, written before it publishes
-- them, and when. A relay that takes the partition over after its owner's
-- lease ran out (the owner died or hung, perhaps on one of these events)
-- counts the expiry as an attempt of those still pending and not changed
-- since (a failed publish changed them), as the rescue of an expired row
-- lease does: an event that kills every relay publishing it is
-- dead-lettered after max_attempts, and the reads take such suspects alone.
ALTER TABLE {{schema}}.outbox_partitions
    ADD COLUMN in_flight bigint[],
    ADD COLUMN in_flight_at timestamptz;

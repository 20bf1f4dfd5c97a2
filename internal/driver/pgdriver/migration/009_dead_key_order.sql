-- The dead-letter queue by key (an ordered relay's partition read, under
-- --ordered-failure block): a read asks, for each event it would take,
-- whether a dead event of its key comes before it, with one probe here.
-- Only failed rows with an aggregate: empty while nothing is dead, and a
-- read's cost no longer grows with the dead-letter queue (it read the whole
-- queue of its partitions before). Failed rows are few and written rarely,
-- so writers pay nothing for it.
CREATE INDEX outbox_events_dead_key_idx
    ON {{schema}}.outbox_events (coalesce(aggregate_type, ''), aggregate_id, txid, id)
    WHERE status = 'failed' AND aggregate_id IS NOT NULL;

-- Per-aggregate ordering (RelayConfig.Ordering = aggregate). txid is the
-- writing transaction's ID, filled in by the column default, so writers in
-- any language need no change to their INSERT. The ordered claim reads only
-- events whose transaction ID lies below the oldest transaction still
-- running (pg_snapshot_xmin): every event that becomes visible later sorts
-- after every event it has seen, so a key's events are released in
-- (txid, id) order without a gap, whatever order their transactions
-- commit in. Rows written before this migration keep 0 and sort first.
-- A constant default first, then the real one: no table rewrite.
ALTER TABLE {{schema}}.outbox_events ADD COLUMN txid xid8 NOT NULL DEFAULT '0';
ALTER TABLE {{schema}}.outbox_events ALTER COLUMN txid SET DEFAULT pg_current_xact_id();

-- The ordered claim's index: for one key, its unfinished events in order.
-- The claim probes it to find a key's head (the first unfinished event) and
-- the events after it. Only unfinished rows with an aggregate, so it stays
-- small however much history the table keeps.
CREATE INDEX outbox_events_key_order_idx
    ON {{schema}}.outbox_events (coalesce(aggregate_type, ''), aggregate_id, txid, id)
    WHERE status IN ('pending', 'processing', 'failed') AND aggregate_id IS NOT NULL;

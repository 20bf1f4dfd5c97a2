-- Per-aggregate ordering (RelayConfig.Ordering = aggregate). SQLite runs one
-- write transaction at a time, so IDs are handed out in commit order and a
-- key's events are ordered by id alone: no transaction column is needed.
-- The ordered claim's index: for one key, its unfinished events in order.
-- The claim probes it to find a key's head (the first unfinished event) and
-- the events after it. Only unfinished rows with an aggregate, so it stays
-- small however much history the table keeps.
CREATE INDEX {{schema}}."outbox_events_key_order_idx"
    ON "outbox_events" (coalesce("aggregate_type", ''), "aggregate_id", "id")
    WHERE "status" IN ('pending', 'processing', 'failed') AND "aggregate_id" IS NOT NULL;

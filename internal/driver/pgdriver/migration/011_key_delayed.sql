-- The pending events put off by their writer or by a retry (available_at
-- after created_at), by key: an ordered relay's partition read asks, for
-- each event it would take, whether one of these that is not due yet comes
-- before it in its key, with one probe here. Before, each read took every
-- event not yet due of its partitions, so a read's cost grew with the
-- events scheduled ahead. A row written for now (available_at =
-- created_at, both now()) is not in this index, so writers pay nothing for
-- it unless they delay an event.
CREATE INDEX outbox_events_key_delayed_idx
    ON {{schema}}.outbox_events (coalesce(aggregate_type, ''), aggregate_id, txid, id)
    WHERE status = 'pending' AND aggregate_id IS NOT NULL AND available_at > created_at;

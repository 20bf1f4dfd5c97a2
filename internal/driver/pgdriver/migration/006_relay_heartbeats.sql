-- outbox_relays: one row per running relay process, so that an operator
-- sees the relays that are connected but idle, not only those holding
-- leases. A relay upserts its row at start and every heartbeat interval,
-- off the hot path, and deletes it when it stops gracefully. All times
-- come from the database clock: expires_at is the last heartbeat plus
-- three heartbeat intervals, and a row past it is stale (the relay was
-- killed, hung, or lost the database); the heartbeat of any relay deletes
-- rows stale for more than an hour. sink is the relay's display name for
-- its sink, without credentials.
CREATE TABLE {{schema}}.outbox_relays (
    relay_id      text PRIMARY KEY,
    host          text NOT NULL,
    pid           integer NOT NULL,
    version       text NOT NULL,
    sink          text NOT NULL,
    event_types   text NOT NULL,
    started_at    timestamptz NOT NULL,
    last_seen     timestamptz NOT NULL,
    expires_at    timestamptz NOT NULL,
    last_claim_at timestamptz
);

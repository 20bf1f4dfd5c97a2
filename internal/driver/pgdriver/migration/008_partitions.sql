-- Ordered delivery by owned partitions (docs/ordering.md). Every key
-- (aggregate_type, aggregate_id) hashes to one of 256 partitions; an
-- ordered relay holds a partition by a lease on its row here and reads the
-- partition's events without writing them. The partition is an expression
-- of the key (hashtext and || are immutable), not a column: no table
-- rewrite and no change to any writer. Events without an aggregate ID hash
-- on their own ID. The number 256 is part of the expression: the Go code
-- (pgdriver.partitionExpr) spells the same one.
CREATE TABLE {{schema}}.outbox_partitions (
    partition   integer PRIMARY KEY CHECK (partition BETWEEN 0 AND 255),
    owner       text,
    -- Raised on every acquisition: a relay's marks carry the fence it read
    -- under, and take effect only while it is still the partition's.
    fence       bigint NOT NULL DEFAULT 0,
    lease_until timestamptz
);
INSERT INTO {{schema}}.outbox_partitions (partition) SELECT generate_series(0, 255);

-- The relays sharing the partitions out, each aiming for
-- ceil(256 / live rows); a row past expires_at is a relay that stopped
-- renewing (killed, hung, cut off).
CREATE TABLE {{schema}}.outbox_partition_relays (
    relay_id   text PRIMARY KEY,
    expires_at timestamptz NOT NULL
);

-- A partition's pending events in key order: what an owner reads.
CREATE INDEX outbox_events_partition_idx ON {{schema}}.outbox_events (
    (hashtext(coalesce(aggregate_type, '') || ':' || coalesce(aggregate_id, id::text)) & 255), txid, id)
    WHERE status = 'pending';

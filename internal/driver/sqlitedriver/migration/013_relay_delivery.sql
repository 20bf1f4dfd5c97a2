-- outbox_relays gains how each relay delivers (ordering, ordered_failure,
-- leases), so that a relay refuses to start beside one that delivers
-- otherwise; see the PostgreSQL migration. NULL in rows written by relays
-- of earlier versions.
ALTER TABLE {{schema}}."outbox_relays" ADD COLUMN "ordering" TEXT;
ALTER TABLE {{schema}}."outbox_relays" ADD COLUMN "ordered_failure" TEXT;
ALTER TABLE {{schema}}."outbox_relays" ADD COLUMN "leases" TEXT;

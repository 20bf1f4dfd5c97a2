-- lease_expiries counts the claims of an event that ended in a lease expiry
-- (its relay died or hung holding it); see the PostgreSQL migration. The
-- rescue counts each expiry as an attempt too, and a claim takes an event
-- with an expiry on record alone.
ALTER TABLE {{schema}}."outbox_events" ADD COLUMN "lease_expiries" INTEGER NOT NULL DEFAULT 0;

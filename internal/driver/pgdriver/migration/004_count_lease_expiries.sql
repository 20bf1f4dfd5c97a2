-- lease_expiries counts the claims of an event that ended in a lease expiry:
-- its relay died or hung while holding it, perhaps because publishing this
-- very event kills the process. The rescue counts each expiry as an attempt
-- too (attempts), so an event that keeps crashing relays is dead-lettered
-- after max_attempts; an event with an expiry on record is a suspect, and a
-- claim takes a suspect alone, so the events claimed with it pay for its
-- crashes at most once. Requeueing resets it with attempts. A constant
-- default makes this a catalog-only change: no rewrite, no scan.
ALTER TABLE {{schema}}.outbox_events ADD COLUMN lease_expiries integer NOT NULL DEFAULT 0;

-- outbox_leases: one row per job that exactly one relay of a fleet runs at a
-- time (scheduled purge, dead-letter retry). A relay holds a job while
-- holder is its ID and expires_at, set from the database clock, lies ahead;
-- it renews with a conditional upsert and any relay may take the row over
-- once it expired. A row, not an advisory lock: a session lock is lost, or
-- held by the wrong client, behind a pooler that hands each transaction to
-- another server session (PgBouncer in transaction mode).
CREATE TABLE {{schema}}.outbox_leases (
    name        text PRIMARY KEY,
    holder      text NOT NULL,
    expires_at  timestamptz NOT NULL,
    acquired_at timestamptz NOT NULL DEFAULT now()
);

-- The dead-letter slow retry: dead_letter_retries counts how often a
-- dead-lettered event went back to pending on the slow schedule;
-- dead_letter_retry_at is when it goes back next (NULL while none is
-- scheduled). Requeueing by hand clears the time and keeps the count.
-- Constant defaults: catalog-only changes, no rewrite.
ALTER TABLE {{schema}}.outbox_events
    ADD COLUMN dead_letter_retries integer NOT NULL DEFAULT 0,
    ADD COLUMN dead_letter_retry_at timestamptz;

-- The slow retry's scheduling pass reads failed rows without a retry time
-- by retry count: events out of slow retries sort after the range it
-- reads, however many pile up in the dead-letter queue.
CREATE INDEX outbox_events_dead_letter_unscheduled_idx
    ON {{schema}}.outbox_events (dead_letter_retries, id)
    WHERE status = 'failed' AND dead_letter_retry_at IS NULL;

-- The requeue pass and the stats read the scheduled retries in due order.
CREATE INDEX outbox_events_dead_letter_due_idx
    ON {{schema}}.outbox_events (dead_letter_retry_at)
    WHERE status = 'failed' AND dead_letter_retry_at IS NOT NULL;

-- outbox_relays gains how each relay delivers: ordering ('none' or
-- 'aggregate'), ordered_failure ('block' or 'skip' for an ordered relay,
-- '' otherwise) and leases ('rows' or 'partitions', the mode the relay
-- runs, never 'auto'). Every relay of a schema must deliver the same way
-- (an unordered relay beside ordered ones breaks their order, row leases
-- beside owned partitions send events twice): a relay reads the live rows
-- at start and refuses to start beside a relay that delivers otherwise.
-- NULL in rows written by relays of earlier versions, which do not say.
ALTER TABLE {{schema}}.outbox_relays
    ADD COLUMN ordering text,
    ADD COLUMN ordered_failure text,
    ADD COLUMN leases text;

-- outbox_relays gains how each relay delivers (ordering, ordered_failure,
-- leases), so that a relay refuses to start beside one that delivers
-- otherwise; see the PostgreSQL migration. NULL in rows written by relays
-- of earlier versions.
ALTER TABLE {{schema}}`outbox_relays`
    ADD COLUMN `ordering` VARCHAR(32) NULL,
    ADD COLUMN `ordered_failure` VARCHAR(32) NULL,
    ADD COLUMN `leases` VARCHAR(32) NULL;

-- outbox_relays: one row per running relay process, upserted at start and
-- every heartbeat interval and deleted on a graceful stop; see the
-- PostgreSQL migration.
CREATE TABLE {{schema}}."outbox_relays" (
    "relay_id"      TEXT PRIMARY KEY,
    "host"          TEXT NOT NULL,
    "pid"           INTEGER NOT NULL,
    "version"       TEXT NOT NULL,
    "sink"          TEXT NOT NULL,
    "event_types"   TEXT NOT NULL,
    "started_at"    TEXT NOT NULL,
    "last_seen"     TEXT NOT NULL,
    "expires_at"    TEXT NOT NULL,
    "last_claim_at" TEXT
);

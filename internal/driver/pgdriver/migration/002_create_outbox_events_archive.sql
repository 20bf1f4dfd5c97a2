-- outbox_events_archive: where a relay with retention "archive" moves
-- delivered events, so the hot table holds only undelivered ones and stays
-- small however long history is kept. Same columns as outbox_events; purge
-- deletes from it by processed_at.
CREATE TABLE {{schema}}.outbox_events_archive (
    LIKE {{schema}}.outbox_events INCLUDING DEFAULTS INCLUDING CONSTRAINTS
);
ALTER TABLE {{schema}}.outbox_events_archive ADD PRIMARY KEY (id);
CREATE INDEX outbox_events_archive_processed_at_idx
    ON {{schema}}.outbox_events_archive (processed_at);

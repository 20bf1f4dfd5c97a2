package driver

import (
	"context"
	"time"
)

// InboxRecord is one message to record in inbox_messages.
type InboxRecord struct {
	Consumer  string
	Source    string // where the message came from: with MessageID, the dedup key
	MessageID string
	EventType string
	Payload   []byte // valid JSON
	Headers   []byte // a JSON object
	// Processed sets processed_at at once: the caller applies the
	// message's effect in the same transaction. Otherwise processed_at
	// stays NULL for an application to take the row later.
	Processed bool
}

// InboxPurgeParams selects processed inbox rows to delete.
type InboxPurgeParams struct {
	Consumer  string        // empty for every consumer
	OlderThan time.Duration // processed at least this long ago, by the database clock
	BatchSize int
}

// ConsumerLag is one consumer's backlog in inbox_messages.
type ConsumerLag struct {
	Consumer string
	// Unprocessed counts the rows with processed_at NULL.
	Unprocessed int64
	// OldestUnprocessedAge is the age of the oldest of them by the
	// database clock, zero when there are none.
	OldestUnprocessedAge time.Duration
}

// BrokerReport is what a consumer's receiver last read from its broker, as
// inbox_consumers keeps it (inbox migration 002).
type BrokerReport struct {
	Consumer string
	Broker   string // the broker's kind: nats, kafka
	// Pending is the broker's own count of the consumer's messages not
	// yet acknowledged.
	Pending int64
	// Interval is the receiver's time between reads.
	Interval time.Duration
	// Age is how long ago it was reported, by the database clock; zero
	// when writing a report.
	Age time.Duration
}

// Inbox is implemented by drivers that hold the consumer-side
// inbox_messages table, which has a migration track of its own
// (inbox_migrations).
type Inbox interface {
	// MigrateInbox applies the missing inbox migrations under a lock, as
	// Migrate does for the outbox's.
	MigrateInbox(ctx context.Context) ([]Migration, error)
	// InboxMigrationSQL returns every inbox migration as one script.
	InboxMigrationSQL() string
	// InboxMigrations lists every inbox migration the driver knows.
	InboxMigrations() []Migration
	// InboxSchemaVersion returns the highest applied inbox migration, 0
	// for none.
	InboxSchemaVersion(ctx context.Context) (int, error)
	// PurgeInboxBatch deletes one batch of processed inbox rows and returns
	// how many.
	PurgeInboxBatch(ctx context.Context, p InboxPurgeParams) (int64, error)
	// InboxLag returns the backlog of every consumer with unprocessed rows,
	// by consumer name; a consumer without any is left out.
	InboxLag(ctx context.Context) ([]ConsumerLag, error)
	// ReportBroker upserts r's row of inbox_consumers in one statement,
	// reported_at set from the database clock.
	ReportBroker(ctx context.Context, r BrokerReport) error
	// InboxBrokerReports returns every row of inbox_consumers by consumer
	// name, each with its age by the database clock.
	InboxBrokerReports(ctx context.Context) ([]BrokerReport, error)
}

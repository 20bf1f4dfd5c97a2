package inbox

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/driver"
)

// PurgeBatchSizeDefault is PurgeConfig.BatchSize's default.
const PurgeBatchSizeDefault = 1000

// PurgeConfig selects the processed messages Purge deletes.
type PurgeConfig struct {
	// Schema holds inbox_messages. Defaults to outbox.SchemaDefault.
	Schema string
	// Consumer limits the purge to one consumer; empty purges every one.
	Consumer string
	// OlderThan is how long ago, by the database clock, a message must
	// have been processed to be deleted. Required. It is the dedup
	// window: a redelivery of a purged message is no longer known and is
	// handled again, so keep it longer than any broker may redeliver
	// (its retention, a relay's retries, a replay).
	OlderThan time.Duration
	// BatchSize bounds the rows one statement deletes. Defaults to
	// PurgeBatchSizeDefault.
	BatchSize int
}

// Purge deletes the messages processed more than cfg.OlderThan ago, in
// batches, and returns how many. Unprocessed messages are never deleted.
// It stops at ctx's end, returning what it deleted so far.
func Purge(ctx context.Context, db outbox.Database, cfg PurgeConfig) (int64, error) {
	if cfg.OlderThan <= 0 {
		return 0, &outbox.ConfigError{Field: "OlderThan", Err: errors.New("must be positive: it is the dedup window, such as 168h")}
	}
	cfg.BatchSize = cmp.Or(cfg.BatchSize, PurgeBatchSizeDefault)
	if cfg.BatchSize < 0 {
		return 0, &outbox.ConfigError{Field: "BatchSize", Err: errors.New("is negative")}
	}
	inb, err := inboxDriver(db, cfg.Schema)
	if err != nil {
		return 0, err
	}
	var total int64
	for {
		n, err := inb.PurgeInboxBatch(ctx, driver.InboxPurgeParams{Consumer: cfg.Consumer, OlderThan: cfg.OlderThan, BatchSize: cfg.BatchSize})
		total += n
		if err != nil {
			return total, purgeError(err)
		}
		if n < int64(cfg.BatchSize) {
			return total, nil
		}
		if err := ctx.Err(); err != nil {
			return total, err
		}
	}
}

func purgeError(err error) error {
	if errors.Is(err, driver.ErrNoTable) {
		return fmt.Errorf("inbox: purge: %w (run outbox migrate --inbox)", err)
	}
	return fmt.Errorf("inbox: purge: %w", err)
}

// ConsumerLag is one consumer's backlog: the messages stored and not yet
// processed.
type ConsumerLag struct {
	// Consumer is the consumer's name.
	Consumer string
	// Unprocessed counts its messages with processed_at NULL.
	Unprocessed int64
	// OldestUnprocessedAge is the age of the oldest of them, by the
	// database clock.
	OldestUnprocessedAge time.Duration
}

// Lag returns the backlog of every consumer in schema that has unprocessed
// messages, by name; a consumer that is caught up is left out. It reads
// only the index of unprocessed rows, so it is cheap enough for every
// metrics scrape.
func Lag(ctx context.Context, db outbox.Database, schema string) ([]ConsumerLag, error) {
	inb, err := inboxDriver(db, schema)
	if err != nil {
		return nil, err
	}
	rows, err := inb.InboxLag(ctx)
	if err != nil {
		if errors.Is(err, driver.ErrNoTable) {
			return nil, fmt.Errorf("inbox: lag: %w (run outbox migrate --inbox)", err)
		}
		return nil, fmt.Errorf("inbox: lag: %w", err)
	}
	out := make([]ConsumerLag, len(rows))
	for i, r := range rows {
		out[i] = ConsumerLag(r)
	}
	return out, nil
}

func inboxDriver(db outbox.Database, schema string) (driver.Inbox, error) {
	inb, ok := db.Driver(cmp.Or(schema, outbox.SchemaDefault)).(driver.Inbox)
	if !ok {
		return nil, fmt.Errorf("inbox: %T has no inbox table: %w", db, errors.ErrUnsupported)
	}
	return inb, nil
}

package check

import (
	"context"
	"fmt"
	"time"

	"github.com/outboxkit/outbox"
)

// writeRetryFor bounds how long one batch of the check's writes is retried
// while the database is away (a restart, a failover).
const writeRetryFor = 60 * time.Second

// writeBatchRetrying commits msgs, retrying a failed write until it
// succeeds, writeRetryFor passes or ctx ends. Every message carries an
// idempotency key, so a retry after a commit whose outcome was unknown
// (the connection broke during COMMIT) skips what did commit; the IDs of
// those are looked up by their keys. It returns one ID per message.
func (r *run) writeBatchRetrying(ctx context.Context, msgs []outbox.Message) ([]int64, error) {
	deadline := time.Now().Add(writeRetryFor)
	backoff := 100 * time.Millisecond
	for {
		ids, err := r.sc.write(ctx, msgs)
		if err == nil {
			return r.lookUpDuplicates(ctx, msgs, ids)
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("%w (retried for %v)", err, writeRetryFor)
		}
		r.count(func(rep *Report) { rep.WriteRetries++ })
		r.cfg.Logger.Warn("check: writing events failed; retrying", "error", err)
		if !sleep(ctx, backoff) {
			return nil, ctx.Err()
		}
		backoff = min(2*backoff, 2*time.Second)
	}
}

// lookUpDuplicates fills the IDs of the messages a write skipped as
// duplicates (0 in ids): an earlier attempt committed them.
func (r *run) lookUpDuplicates(ctx context.Context, msgs []outbox.Message, ids []int64) ([]int64, error) {
	mgr := r.sc.manager()
	for i, id := range ids {
		if id != 0 {
			continue
		}
		found, err := mgr.SearchEvents(ctx, outbox.SearchParams{EventFilter: outbox.EventFilter{IdempotencyKey: msgs[i].IdempotencyKey}, Limit: 1})
		if err != nil {
			return nil, fmt.Errorf("look up event %q written by an earlier attempt: %w", msgs[i].IdempotencyKey, err)
		}
		if len(found) != 1 {
			return nil, fmt.Errorf("event %q was reported as a duplicate but is not in the table", msgs[i].IdempotencyKey)
		}
		ids[i] = found[0].ID
	}
	return ids, nil
}

package outbox

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/outboxkit/outbox/internal/backoff"
	"github.com/outboxkit/outbox/internal/driver"
)

// ReplayTo defaults.
const (
	// ReplayBatchSizeDefault is how many events ReplayTo reads per
	// statement and publishes per Publish call (without a rate limit).
	ReplayBatchSizeDefault = 500
	// ReplayBatchSizeMax bounds ReplayParams.BatchSize.
	ReplayBatchSizeMax = 10000
	// ReplayAttemptsDefault is how many times ReplayTo publishes an event
	// the sink refused before it gives up and stops.
	ReplayAttemptsDefault = 5
)

// replayBackoff bounds the wait between two attempts of a refused publish.
const (
	replayBackoffBase = 500 * time.Millisecond
	replayBackoffMax  = 10 * time.Second
)

// ReplayParams selects the delivered events ReplayTo publishes and paces
// it. The filter's Status must be empty or StatusProcessed and its
// MinAttempts zero: a replay reads delivered events only, the processed
// rows of outbox_events and every row of outbox_events_archive.
type ReplayParams struct {
	EventFilter
	// AfterID starts after this event ID: pass a previous run's
	// ReplayResult.LastID to resume it.
	AfterID int64
	// UpToID stops at this event ID. Zero means the highest ID in the
	// table or the archive when the replay starts, so events written
	// while it runs are left to the relay (which delivers them to every
	// consumer anyway) and the replay ends.
	UpToID int64
	// BatchSize is how many events one read returns and one Publish call
	// carries (fewer with a Rate). Defaults to ReplayBatchSizeDefault; at
	// most ReplayBatchSizeMax.
	BatchSize int
	// Rate, when positive, bounds the replay to this many events per
	// second, so a new consumer (or the broker in front of it) is not
	// flooded; Publish calls then carry about a fifth of a second's worth.
	Rate float64
	// SinkTimeout bounds one Publish call. Defaults to SinkTimeoutDefault.
	SinkTimeout time.Duration
	// Attempts is how often one event is published before a refusal stops
	// the replay; a permanent error (Permanent) stops it at once.
	// Defaults to ReplayAttemptsDefault.
	Attempts int
	// Progress, when not nil, is called after each Publish call with the
	// running totals.
	Progress func(ReplayProgress)
}

// ReplayProgress is a replay's running totals.
type ReplayProgress struct {
	// Published counts the events the sink acknowledged.
	Published int64
	// LastID is the highest ID up to which every selected event was
	// acknowledged: resume with AfterID = LastID.
	LastID int64
}

// ReplayResult is what ReplayTo did.
type ReplayResult struct {
	ReplayProgress
	// UpToID is the replay's upper bound (ReplayParams.UpToID, or the
	// highest event ID when it started).
	UpToID int64
}

// validate checks p and fills its defaults.
func (p *ReplayParams) validate() error {
	if p.Status != "" && p.Status != StatusProcessed {
		return &ConfigError{Field: "status", Err: fmt.Errorf("%q events cannot be replayed to a sink: a replay reads delivered (processed and archived) events", p.Status)}
	}
	if p.MinAttempts != 0 {
		return &ConfigError{Field: "min_attempts", Err: errors.New("does not apply to a replay: leave it 0")}
	}
	if err := p.EventFilter.validate(); err != nil {
		return err
	}
	switch {
	case p.AfterID < 0:
		return &ConfigError{Field: "after_id", Err: fmt.Errorf("is %d: use 0 or an event ID", p.AfterID)}
	case p.UpToID < 0:
		return &ConfigError{Field: "up_to_id", Err: fmt.Errorf("is %d: use 0 or an event ID", p.UpToID)}
	case p.BatchSize < 0 || p.BatchSize > ReplayBatchSizeMax:
		return &ConfigError{Field: "batch_size", Err: fmt.Errorf("is %d: use 1 to %d", p.BatchSize, ReplayBatchSizeMax)}
	case p.Rate < 0 || math.IsNaN(p.Rate) || math.IsInf(p.Rate, 0):
		return &ConfigError{Field: "rate", Err: fmt.Errorf("is %v: use a positive number of events per second, or 0 for no limit", p.Rate)}
	case p.SinkTimeout < 0:
		return &ConfigError{Field: "sink_timeout", Err: fmt.Errorf("is %v: use a positive duration", p.SinkTimeout)}
	case p.Attempts < 0:
		return &ConfigError{Field: "attempts", Err: fmt.Errorf("is %d: use 1 or more", p.Attempts)}
	}
	if p.BatchSize == 0 {
		p.BatchSize = ReplayBatchSizeDefault
	}
	if p.SinkTimeout == 0 {
		p.SinkTimeout = SinkTimeoutDefault
	}
	if p.Attempts == 0 {
		p.Attempts = ReplayAttemptsDefault
	}
	return nil
}

func (p *ReplayParams) driver(upTo int64) driver.ReplayParams {
	return driver.ReplayParams{Filter: p.EventFilter.driver(), AfterID: p.AfterID, UpToID: upTo, Limit: p.BatchSize}
}

// CountReplay counts the delivered events ReplayTo would publish with p
// (up to p.UpToID, or to the newest event when it is zero): the dry run
// of a replay. Like the replay, it reads the history from p.AfterID up.
func (m *Manager) CountReplay(ctx context.Context, p ReplayParams) (int64, error) {
	if err := p.validate(); err != nil {
		return 0, err
	}
	return m.drv.CountReplay(ctx, p.driver(p.UpToID))
}

// ReplayTo publishes the delivered events p selects to sink, in ID order,
// without changing them: their status, attempts and processed_at stay as
// they are, and no relay sees the replay. It is meant for feeding a new
// consumer the history it missed; Replay and ReplayMatching instead send
// events back to pending so that the relays publish them again, to their
// own sinks.
//
// Events are read in keyset batches on the ID, from the table's processed
// rows and the archive merged in one statement, so an event a relay
// archives during the replay is published once. Each event keeps its ID,
// so a consumer that already has it drops the duplicate. A refused event
// is published again, after a backoff, up to p.Attempts times; the replay
// then stops with an error. When ctx ends it lets the sink call in flight
// finish (bounded by SinkTimeout), so what it reports as published is what
// the sink acknowledged, and stops.
//
// The result is valid with an error too: every selected event with an ID
// up to LastID was acknowledged, so a replay resumes with AfterID =
// LastID (the events the sink acknowledged after the first refused one
// are then published again).
func (m *Manager) ReplayTo(ctx context.Context, sink Sink, p ReplayParams) (ReplayResult, error) {
	res := ReplayResult{ReplayProgress: ReplayProgress{LastID: p.AfterID}}
	if sink == nil {
		return res, &ConfigError{Field: "sink", Err: errors.New("is nil: pass the sink to publish to")}
	}
	if err := p.validate(); err != nil {
		return res, err
	}
	res.UpToID = p.UpToID
	if res.UpToID == 0 {
		top, err := m.drv.MaxEventID(ctx)
		if err != nil {
			return res, err
		}
		res.UpToID = top
	}
	if res.UpToID <= p.AfterID {
		return res, nil
	}
	chunk := p.BatchSize
	if p.Rate > 0 {
		chunk = min(chunk, max(1, int(p.Rate/5)))
	}
	pace := newReplayPacer(p.Rate)
	dp := p.driver(res.UpToID)
	for dp.AfterID < res.UpToID {
		if err := ctx.Err(); err != nil {
			return res, err
		}
		events, next, err := m.drv.ReplayBatch(ctx, dp)
		if err != nil {
			return res, fmt.Errorf("read events after ID %d: %w", dp.AfterID, err)
		}
		batch := eventsFromRows(events)
		// An ID in both the table and the archive (restored by hand, or an
		// identity restarted) is published once.
		batch = slices.CompactFunc(batch, func(a, b Event) bool { return a.ID == b.ID })
		for start := 0; start < len(batch); start += chunk {
			part := batch[start:min(start+chunk, len(batch))]
			if err := pace.wait(ctx, res.Published); err != nil {
				return res, err
			}
			lastID, n, err := replayPublish(ctx, sink, part, p)
			res.Published += n
			if lastID > res.LastID {
				res.LastID = lastID
			}
			if p.Progress != nil && n > 0 {
				p.Progress(res.ReplayProgress)
			}
			if err != nil {
				return res, err
			}
		}
		// Every selected event up to next was published.
		res.LastID = max(res.LastID, next)
		dp.AfterID = next
	}
	return res, nil
}

// replayPublish publishes events (in ID order) until each was acknowledged
// or one ran out of attempts. It returns the highest ID up to which every
// event was acknowledged (0 when the first was not), how many the sink
// acknowledged, and the error that stopped it.
func replayPublish(ctx context.Context, sink Sink, events []Event, p ReplayParams) (int64, int64, error) {
	delivered := make([]bool, len(events))
	var n int64
	pending := events
	idx := make([]int, len(events))
	for i := range idx {
		idx[i] = i
	}
	for attempt := 1; ; attempt++ {
		// Not cancelled by a stop: a request the consumer got is one
		// the result counts (SinkTimeout bounds the wait).
		errs := callSinkOnce(context.WithoutCancel(ctx), sink, pending, p.SinkTimeout)
		var (
			again    []Event
			againIdx []int
			last     error
		)
		for i, err := range errs {
			if err == nil {
				delivered[idx[i]] = true
				n++
				continue
			}
			again, againIdx = append(again, pending[i]), append(againIdx, idx[i])
			if last == nil {
				last = err
			}
		}
		if len(again) == 0 {
			return events[len(events)-1].ID, n, nil
		}
		stop := func(err error) (int64, int64, error) {
			var lastID int64
			for i, ok := range delivered {
				if !ok {
					break
				}
				lastID = events[i].ID
			}
			return lastID, n, err
		}
		first := again[0]
		switch {
		case ctx.Err() != nil:
			return stop(ctx.Err())
		case IsPermanent(last) || attempt >= p.Attempts:
			return stop(fmt.Errorf("the sink refused event %d (%d of %d events of the batch not delivered after %d attempts): %w",
				first.ID, len(again), len(events), attempt, last))
		}
		t := time.NewTimer(backoff.Exponential(attempt, replayBackoffBase, replayBackoffMax))
		select {
		case <-ctx.Done():
			t.Stop()
			return stop(ctx.Err())
		case <-t.C:
		}
		pending, idx = again, againIdx
	}
}

// callSinkOnce calls the sink under timeout and normalizes its answer to
// one error per event; a panic fails the whole call.
func callSinkOnce(ctx context.Context, sink Sink, events []Event, timeout time.Duration) (errs []error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	defer func() {
		if p := recover(); p != nil {
			errs = BatchError(len(events), fmt.Errorf("sink panicked: %v", p))
		}
	}()
	errs = sink.Publish(ctx, events)
	switch {
	case errs == nil:
		errs = make([]error, len(events))
	case len(errs) != len(events):
		errs = BatchError(len(events), fmt.Errorf("sink returned %d results for %d events", len(errs), len(events)))
	}
	return errs
}

// replayPacer spaces publishes so that n events take at least n/rate
// seconds from the start.
type replayPacer struct {
	rate  float64
	start time.Time
}

func newReplayPacer(rate float64) *replayPacer { return &replayPacer{rate: rate, start: time.Now()} }

// wait returns once published events are within the rate, or ctx's error.
func (p *replayPacer) wait(ctx context.Context, published int64) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if p.rate <= 0 {
		return nil
	}
	due := p.start.Add(time.Duration(float64(published) / p.rate * float64(time.Second)))
	d := time.Until(due)
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

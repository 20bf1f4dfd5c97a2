package outboxadmin

import (
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/outboxkit/outbox"
)

// EventJSON is an event as the API returns it. Search results leave out
// Payload and Headers; the event detail has them.
type EventJSON struct {
	ID             int64             `json:"id"`
	EventType      string            `json:"event_type"`
	AggregateType  string            `json:"aggregate_type"`
	AggregateID    string            `json:"aggregate_id"`
	Status         outbox.Status     `json:"status"`
	Attempts       int               `json:"attempts"`
	MaxAttempts    int               `json:"max_attempts"` // 0: the relay's default
	LeaseExpiries  int               `json:"lease_expiries"`
	LastError      string            `json:"last_error"`
	IdempotencyKey string            `json:"idempotency_key"`
	CreatedAt      time.Time         `json:"created_at"`
	UpdatedAt      time.Time         `json:"updated_at"`
	AvailableAt    time.Time         `json:"available_at"`
	LockedBy       string            `json:"locked_by"`
	LockedUntil    *time.Time        `json:"locked_until"`
	ProcessedAt    *time.Time        `json:"processed_at"`
	Headers        map[string]string `json:"headers,omitzero"`
	Payload        json.RawMessage   `json:"payload,omitzero"`
}

// NewEventJSON is e as the API returns it: with Headers and Payload when
// full (the event detail), without them otherwise (search results). The
// outbox command's --json output is the same document, full.
func NewEventJSON(e *outbox.Event, full bool) EventJSON {
	j := EventJSON{
		ID: e.ID, EventType: e.EventType, AggregateType: e.AggregateType, AggregateID: e.AggregateID,
		Status: e.Status, Attempts: e.Attempts, MaxAttempts: e.MaxAttempts, LeaseExpiries: e.LeaseExpiries, LastError: e.LastError,
		IdempotencyKey: e.IdempotencyKey, CreatedAt: e.CreatedAt.UTC(), UpdatedAt: e.UpdatedAt.UTC(),
		AvailableAt: e.AvailableAt.UTC(), LockedBy: e.LockedBy,
		LockedUntil: optionalTime(e.LockedUntil), ProcessedAt: optionalTime(e.ProcessedAt),
	}
	if full {
		j.Headers = e.Headers
		if j.Headers == nil {
			j.Headers = map[string]string{}
		}
		j.Payload = e.Payload
		if len(j.Payload) == 0 {
			j.Payload = json.RawMessage("null")
		}
	}
	return j
}

func optionalTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	t = t.UTC()
	return &t
}

// FilterJSON selects events in an action's body; its fields are the search's
// query parameters.
type FilterJSON struct {
	EventType      string    `json:"type,omitempty"`
	AggregateType  string    `json:"aggregate_type,omitempty"`
	AggregateID    string    `json:"aggregate_id,omitempty"`
	IdempotencyKey string    `json:"idempotency_key,omitempty"`
	CreatedAfter   time.Time `json:"created_after,omitzero"`
	CreatedBefore  time.Time `json:"created_before,omitzero"`
	MinAttempts    int       `json:"min_attempts,omitempty"`
}

func (f FilterJSON) filter() outbox.EventFilter {
	return outbox.EventFilter{
		EventType: f.EventType, AggregateType: f.AggregateType, AggregateID: f.AggregateID,
		IdempotencyKey: f.IdempotencyKey, CreatedAfter: f.CreatedAfter, CreatedBefore: f.CreatedBefore,
		MinAttempts: f.MinAttempts,
	}
}

// errorJSON is every error answer: one line saying what is wrong and what
// to do.
type errorJSON struct {
	Error string `json:"error"`
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v) // the client went away: nothing to do
}

func writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, errorJSON{Error: msg})
}

// badParam is an invalid query parameter or body field.
type badParam struct{ msg string }

func (e *badParam) Error() string { return e.msg }

func badParamf(format string, args ...any) error { return &badParam{msg: fmt.Sprintf(format, args...)} }

// searchParams parses the search's query parameters.
func searchParams(q url.Values) (outbox.SearchParams, error) {
	var p outbox.SearchParams
	if s := q.Get("status"); s != "" {
		st, err := outbox.ParseStatus(s)
		if err != nil {
			return p, badParamf("invalid status %q: use pending, processing, processed or failed", s)
		}
		p.Status = st
	}
	p.EventType = q.Get("type")
	p.AggregateType = q.Get("aggregate_type")
	p.AggregateID = q.Get("aggregate_id")
	p.IdempotencyKey = q.Get("idempotency_key")
	var err error
	if p.CreatedAfter, err = timeParam(q, "created_after"); err != nil {
		return p, err
	}
	if p.CreatedBefore, err = timeParam(q, "created_before"); err != nil {
		return p, err
	}
	minAttempts, err := intParam(q, "min_attempts", 0, math.MaxInt32)
	if err != nil {
		return p, err
	}
	p.MinAttempts = int(minAttempts)
	if p.BeforeID, err = intParam(q, "before_id", 0, math.MaxInt64); err != nil {
		return p, err
	}
	limit, err := intParam(q, "limit", 1, outbox.SearchLimitMax)
	if err != nil {
		return p, err
	}
	p.Limit = int(limit)
	return p, nil
}

func timeParam(q url.Values, name string) (time.Time, error) {
	s := q.Get(name)
	if s == "" {
		return time.Time{}, nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, badParamf("invalid %s %q: use an RFC 3339 time such as 2025-01-31T09:00:00Z", name, s)
	}
	return t, nil
}

// intParam parses an optional integer in [lo, hi]; absent is 0.
func intParam(q url.Values, name string, lo, hi int64) (int64, error) {
	s := q.Get(name)
	if s == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < lo || n > hi {
		return 0, badParamf("invalid %s %q: use a whole number from %d to %d", name, s, lo, hi)
	}
	return n, nil
}

// CountsJSON is the counts of outbox.Stats: the document of outbox stats
// --json and the head of GET /api/stats.
type CountsJSON struct {
	Pending    int64 `json:"pending"`
	Processing int64 `json:"processing"`
	// Processed is exact in outbox stats and the planner's estimate in
	// GET /api/stats.
	Processed               int64   `json:"processed"`
	Failed                  int64   `json:"failed"`
	OldestPendingAgeSeconds float64 `json:"oldest_pending_age_seconds"`
	// DeadLetterRetryWaiting counts the failed events waiting for a slow
	// retry (the relay's DeadLetterRetry); DeadLetterRetryNextDue is when
	// the next goes back to pending, null when none waits.
	DeadLetterRetryWaiting int64      `json:"dead_letter_retry_waiting"`
	DeadLetterRetryNextDue *time.Time `json:"dead_letter_retry_next_due"`
}

// NewCountsJSON is the document of s; the lag is rounded to milliseconds.
func NewCountsJSON(s outbox.Stats) CountsJSON {
	return CountsJSON{
		Pending: s.Pending, Processing: s.Processing, Processed: s.Processed, Failed: s.Failed,
		OldestPendingAgeSeconds: roundMillis(s.OldestPendingAge.Seconds()),
		DeadLetterRetryWaiting:  s.DeadLetterRetry.Waiting,
		DeadLetterRetryNextDue:  optionalTime(s.DeadLetterRetry.NextDue),
	}
}

// Package stdoutsink is an outbox.Sink that writes every event as one line
// of JSON (JSON Lines) to an io.Writer, os.Stdout by default. It is for
// development, demos and piping events into tools such as jq.
//
// Each line is an object with these fields; optional ones are left out when
// empty:
//
//	id               event ID (number)
//	event_type       event type
//	aggregate_type   aggregate type (optional)
//	aggregate_id     aggregate ID (optional)
//	payload          the payload, embedded as JSON (not a string)
//	headers          headers as an object of strings (optional)
//	attempts         failed publishes so far (optional)
//	idempotency_key  idempotency key (optional)
//	created_at       RFC 3339 time with nanoseconds (optional)
//	available_at     RFC 3339 time with nanoseconds (optional)
//
// The payload keeps its keys, numbers and characters exactly; only
// insignificant whitespace is removed so an event stays on one line.
//
// A batch is encoded into memory and written with a single Write, so lines
// of concurrent batches never interleave and a batch costs one system call.
// If that Write fails the whole batch fails with a retryable error; some of
// its lines may have been written and will be written again on retry, which
// the outbox's at-least-once delivery allows.
package stdoutsink

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/outboxkit/outbox"
)

// Sink writes events as JSON lines. It is safe for concurrent use.
type Sink struct {
	mu sync.Mutex // serializes writes so lines of concurrent batches do not interleave
	w  io.Writer
}

var _ outbox.Sink = (*Sink)(nil)

// New returns a sink that writes to w, or to os.Stdout when w is nil. The
// sink does not close w.
func New(w io.Writer) *Sink {
	if w == nil {
		w = os.Stdout
	}
	return &Sink{w: w}
}

// line is the JSON shape of one event.
type line struct {
	ID             int64             `json:"id"`
	Tenant         string            `json:"tenant,omitempty"`
	Database       string            `json:"database,omitempty"`
	EventType      string            `json:"event_type"`
	AggregateType  string            `json:"aggregate_type,omitempty"`
	AggregateID    string            `json:"aggregate_id,omitempty"`
	Payload        json.RawMessage   `json:"payload"`
	Headers        map[string]string `json:"headers,omitempty"`
	Attempts       int               `json:"attempts,omitempty"`
	IdempotencyKey string            `json:"idempotency_key,omitempty"`
	CreatedAt      time.Time         `json:"created_at,omitzero"`
	AvailableAt    time.Time         `json:"available_at,omitzero"`
}

// Publish writes one line per event. An event whose payload is not valid
// JSON gets a permanent error and is left out; the others are written. If
// ctx has ended before the write, or the write fails, every event of the
// batch gets the same retryable error. A Write that blocks (a full pipe) is
// not interrupted by ctx. With outbox.KeyOrdered(ctx), the events after one
// of their aggregate that could not be encoded are left out as well, with
// outbox.ErrEarlierEventFailed; lines keep the batch's order either way.
func (s *Sink) Publish(ctx context.Context, events []outbox.Event) []error {
	if len(events) == 0 {
		return nil
	}
	var (
		buf  bytes.Buffer
		errs []error
	)
	enc := json.NewEncoder(&buf)
	// Keep <, > and & (and U+2028/U+2029) in payloads as they are stored.
	enc.SetEscapeHTML(false)
	ends := make([]int, len(events)) // where each event's line ends in buf
	for i := range events {
		e := &events[i]
		mark := buf.Len()
		err := enc.Encode(line{
			ID: e.ID, Tenant: e.Tenant, Database: e.Database, EventType: e.EventType, AggregateType: e.AggregateType, AggregateID: e.AggregateID,
			Payload: payloadOrNull(e.Payload), Headers: e.Headers, Attempts: e.Attempts,
			IdempotencyKey: e.IdempotencyKey, CreatedAt: e.CreatedAt.UTC(), AvailableAt: e.AvailableAt.UTC(),
		})
		if err != nil {
			buf.Truncate(mark) // drop a partial line
			if errs == nil {
				errs = make([]error, len(events))
			}
			errs[i] = outbox.Permanent(fmt.Errorf("stdoutsink: event %d: encode as JSON: %w; the stored payload must be valid JSON", e.ID, err))
		}
		ends[i] = buf.Len()
	}
	if errs != nil && outbox.KeyOrdered(ctx) {
		buf = keyOrderedLines(events, errs, buf.Bytes(), ends)
	}
	if buf.Len() == 0 {
		return errs // every event failed to encode
	}
	if err := ctx.Err(); err != nil {
		return failRest(errs, len(events), fmt.Errorf("stdoutsink: not written: %w", err))
	}
	s.mu.Lock()
	_, err := s.w.Write(buf.Bytes())
	s.mu.Unlock()
	if err != nil {
		return failRest(errs, len(events), fmt.Errorf("stdoutsink: write batch of %d events: %w", len(events), err))
	}
	return errs
}

// keyOrderedLines drops from lines (the batch's lines, event i's ending at
// ends[i]) the events written after one of their aggregate that failed to
// encode, and gives them outbox.ErrEarlierEventFailed. The whole batch is
// one write that fails or succeeds as one, so the events left go together.
func keyOrderedLines(events []outbox.Event, errs []error, lines []byte, ends []int) bytes.Buffer {
	var keep []int
	together := func(int, int) bool { return true }
	outbox.PublishKeyWaves(events, errs, together, func(wave []int) { keep = append(keep, wave...) })
	slices.Sort(keep)
	var buf bytes.Buffer
	for _, i := range keep {
		start := 0
		if i > 0 {
			start = ends[i-1]
		}
		buf.Write(lines[start:ends[i]])
	}
	return buf
}

// failRest sets err for every event that has no error yet, keeping the
// permanent errors of events that could not be encoded.
func failRest(errs []error, n int, err error) []error {
	if errs == nil {
		return outbox.BatchError(n, err)
	}
	for i := range errs {
		if errs[i] == nil {
			errs[i] = err
		}
	}
	return errs
}

// payloadOrNull returns p, or JSON null for an empty payload so the line
// stays valid JSON.
func payloadOrNull(p json.RawMessage) json.RawMessage {
	if len(p) == 0 {
		return json.RawMessage("null")
	}
	return p
}

package webhooksink

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/envelope"
)

// BatchContentType is the Content-Type of a batched request (Config.Batch):
// the CloudEvents JSON batch format.
const BatchContentType = "application/cloudevents-batch+json"

// publishBatches is Publish with Config.Batch above 1: the events go in
// requests of up to Batch events each, at most Concurrency requests at
// once. Under outbox.KeyOrdered(ctx) they go in waves of at most one event
// per aggregate (outbox.PublishKeyWaves), so an aggregate's next event is
// sent only once the request with the previous one got its 2xx.
func (s *Sink) publishBatches(ctx context.Context, events []outbox.Event) []error {
	errs := make([]error, len(events))
	if outbox.KeyOrdered(ctx) {
		outbox.PublishKeyWaves(events, errs, nil, func(wave []int) { s.sendChunks(ctx, events, wave, errs) })
	} else {
		all := make([]int, len(events))
		for i := range all {
			all[i] = i
		}
		s.sendChunks(ctx, events, all, errs)
	}
	for _, err := range errs {
		if err != nil {
			return errs
		}
	}
	return nil
}

// sendChunks sends the events at idx in requests of up to Batch events,
// concurrently, and sets their results in errs.
func (s *Sink) sendChunks(ctx context.Context, events []outbox.Event, idx []int, errs []error) {
	var wg sync.WaitGroup
	for len(idx) > 0 {
		chunk := idx[:min(len(idx), s.cfg.Batch)]
		idx = idx[len(chunk):]
		wg.Go(func() { s.sendChunk(ctx, events, chunk, errs) })
	}
	wg.Wait()
}

// sendChunk sends the events at chunk in one request and sets their
// results. A request the endpoint refuses for good (a 4xx, a redirect) is
// split: each event is sent again alone, so that one event the endpoint
// rejects does not dead-letter the others of its request.
func (s *Sink) sendChunk(ctx context.Context, events []outbox.Event, chunk []int, errs []error) {
	err := s.postBatch(ctx, events, chunk)
	if err != nil && outbox.IsPermanent(err) && len(chunk) > 1 && ctx.Err() == nil {
		var wg sync.WaitGroup
		for _, i := range chunk {
			wg.Go(func() { errs[i] = s.postBatch(ctx, events, []int{i}) })
		}
		wg.Wait()
		return
	}
	first := events[chunk[0]].ID
	for j, i := range chunk {
		switch {
		case err == nil || j == 0:
			errs[i] = err
		default:
			errs[i] = fmt.Errorf("webhooksink: event %d: sent in one request with event %d: %w", events[i].ID, first, err)
		}
	}
}

// postBatch POSTs the events at chunk as one CloudEvents JSON batch and
// returns the request's error, described as the first event's.
func (s *Sink) postBatch(ctx context.Context, events []outbox.Event, chunk []int) error {
	first := &events[chunk[0]]
	release, err := s.acquire(ctx, first)
	if err != nil {
		return err
	}
	defer release()

	var body bytes.Buffer
	body.WriteByte('[')
	for j, i := range chunk {
		if j > 0 {
			body.WriteByte(',')
		}
		envelope.AppendJSON(&body, &events[i], s.cfg.Source)
	}
	body.WriteByte(']')

	reqCtx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(reqCtx, http.MethodPost, s.rawURL, bytes.NewReader(body.Bytes()))
	if err != nil {
		// The URL was validated in New; do not quote err, which may quote it.
		return outbox.Permanent(fmt.Errorf("webhooksink: event %d: cannot build a request for %s", first.ID, s.endpoint))
	}
	for name, value := range s.cfg.Headers {
		req.Header.Set(name, value)
	}
	req.Header.Set("User-Agent", s.cfg.UserAgent)
	req.Header.Set("Content-Type", BatchContentType)
	if s.signer != nil {
		// The message ID names the request's first and last event; each
		// event of the batch carries its own id attribute for dedupe.
		id := strconv.FormatInt(first.ID, 10) + "-" + strconv.FormatInt(events[chunk[len(chunk)-1]].ID, 10)
		ts := time.Now()
		sig, err := s.signer.Sign(id, ts, body.Bytes())
		if err != nil {
			return fmt.Errorf("webhooksink: event %d: sign: %w", first.ID, err)
		}
		req.Header.Set(standardwebhooks.HeaderWebhookID, id)
		req.Header.Set(standardwebhooks.HeaderWebhookTimestamp, strconv.FormatInt(ts.Unix(), 10))
		req.Header.Set(standardwebhooks.HeaderWebhookSignature, sig)
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return s.transportError(ctx, first, err)
	}
	// Drained and closed on every path so the connection is reused.
	defer func() {
		_, _ = io.CopyN(io.Discard, resp.Body, drainMax)
		_ = resp.Body.Close()
	}()
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		return nil
	}
	return s.statusError(first, resp)
}

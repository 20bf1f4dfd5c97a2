package bench

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"

	"github.com/outboxkit/outbox"
)

// PlainLoop drains a pre-filled backlog as Reference does (claim with SKIP
// LOCKED and a lease, mark in one statement), with each event POSTed on its
// own to Config.PlainLoopURL by a keep-alive client holding
// Config.PlainLoopConcurrency requests in flight across the loops: the
// claim/POST/mark loop an engineer would write for a webhook, the
// yardstick for the webhook sink's drain. Its report is a reference report.
func (r *Runner) PlainLoop(ctx context.Context, retention outbox.Retention) (Report, error) {
	poster := newPlainPoster(r.cfg.PlainLoopURL, r.cfg.PlainLoopConcurrency)
	defer poster.client.CloseIdleConnections()
	return r.reference(ctx, retention, poster, "plain loop")
}

// validPlainLoopURL reports whether raw is an absolute http or https URL.
func validPlainLoopURL(raw string) bool {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return false
	}
	s := strings.ToLower(u.Scheme)
	return s == "http" || s == "https"
}

// plainPoster is the plain loop's publisher: one POST per event, the
// payload as the body, the event's ID in a Webhook-Id header; a 2xx answer
// acknowledges it. At most cap(sem) requests are in flight across all
// Publish calls, over a client that keeps as many idle connections.
type plainPoster struct {
	url    string
	client *http.Client
	sem    chan struct{}
}

func newPlainPoster(rawURL string, concurrency int) *plainPoster {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConnsPerHost = concurrency
	return &plainPoster{url: rawURL, client: &http.Client{Transport: t, Timeout: outbox.SinkTimeoutDefault},
		sem: make(chan struct{}, concurrency)}
}

func (p *plainPoster) Publish(ctx context.Context, events []outbox.Event) []error {
	var (
		wg     sync.WaitGroup
		errs   []error
		errsMu sync.Mutex
	)
	for i := range events {
		select {
		case p.sem <- struct{}{}:
		case <-ctx.Done():
			wg.Wait()
			return outbox.BatchError(len(events), ctx.Err())
		}
		wg.Go(func() {
			defer func() { <-p.sem }()
			if err := p.post(ctx, &events[i]); err != nil {
				errsMu.Lock()
				if errs == nil {
					errs = make([]error, len(events))
				}
				errs[i] = err
				errsMu.Unlock()
			}
		})
	}
	wg.Wait()
	return errs
}

func (p *plainPoster) post(ctx context.Context, e *outbox.Event) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.url, bytes.NewReader(e.Payload))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Webhook-Id", strconv.FormatInt(e.ID, 10))
	resp, err := p.client.Do(req)
	if err != nil {
		return err
	}
	// Drain the body so the connection goes back to the pool.
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fmt.Errorf("plain loop: POST answered %s", resp.Status)
	}
	return nil
}

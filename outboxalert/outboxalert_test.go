package outboxalert_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/testutil"
	"github.com/outboxkit/outbox/outboxalert"
	"github.com/outboxkit/outbox/outboxtest"
)

// webhook is a local alert receiver. Its handler answers with status()
// (default 204) after reading each request. An alert is recorded once: a
// body it already accepted is a retry (the alerter saw an error after the
// webhook had answered), as a real receiver would see it.
type webhook struct {
	*httptest.Server
	mu       sync.Mutex
	alerts   []outboxalert.Alert
	times    []time.Time
	requests []*http.Request
	bodies   [][]byte
	status   func(n int) int // n counts requests from 1
	resent   int             // requests that carried an alert already accepted
	got      chan struct{}
}

func newWebhook(t *testing.T, status func(n int) int) *webhook {
	t.Helper()
	w := &webhook{status: status, got: make(chan struct{}, 1000)}
	w.Server = httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		w.mu.Lock()
		w.requests = append(w.requests, r)
		w.bodies = append(w.bodies, body)
		w.times = append(w.times, time.Now())
		n := len(w.requests)
		code := http.StatusNoContent
		if w.status != nil {
			code = w.status(n)
		}
		if code < 300 && w.accepted(body) {
			w.resent++
		} else if code < 300 {
			var a outboxalert.Alert
			if err := json.Unmarshal(body, &a); err == nil {
				w.alerts = append(w.alerts, a)
			}
		}
		w.mu.Unlock()
		rw.WriteHeader(code)
		w.got <- struct{}{}
	}))
	t.Cleanup(w.Close)
	t.Cleanup(func() {
		if _, resent := w.counts(); resent > 0 {
			t.Logf("the webhook got %d alerts again after accepting them (the alerter saw an error and retried)", resent)
		}
	})
	return w
}

// counts returns the requests that carried a new alert or a failure, and
// those that re-sent an accepted alert.
func (w *webhook) counts() (fresh, resent int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.requests) - w.resent, w.resent
}

// accepted says whether an earlier request that was answered with success
// carried body; the caller holds w.mu.
func (w *webhook) accepted(body []byte) bool {
	for i, b := range w.bodies[:len(w.bodies)-1] {
		if bytes.Equal(b, body) && (w.status == nil || w.status(i+1) < 300) {
			return true
		}
	}
	return false
}

func (w *webhook) snapshot() ([]outboxalert.Alert, int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]outboxalert.Alert(nil), w.alerts...), len(w.requests)
}

// wait waits until the webhook got requests requests, not counting alerts
// sent again.
func (w *webhook) wait(t *testing.T, requests int) {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		if n, _ := w.counts(); n >= requests {
			return
		}
		select {
		case <-w.got:
		case <-deadline:
			n, _ := w.counts()
			t.Fatalf("the webhook got %d requests (not counting alerts sent again), want %d", n, requests)
		}
	}
}

// logBuffer collects log output from several goroutines.
type logBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func newAlerter(t *testing.T, cfg outboxalert.Config) (*outboxalert.Alerter, *logBuffer) {
	t.Helper()
	logs := &logBuffer{}
	cfg.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	if cfg.RetryBackoff == 0 {
		cfg.RetryBackoff = 10 * time.Millisecond
	}
	a, err := outboxalert.New(cfg)
	require.NoError(t, err)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the alerter's log:\n%s", logs)
		}
	})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = a.Close(ctx)
	})
	return a, logs
}

func closeAlerter(t *testing.T, a *outboxalert.Alerter) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, a.Close(ctx))
}

func deadEvent(id int64, typ string) outbox.Event {
	return outbox.Event{ID: id, EventType: typ, AggregateType: "order", AggregateID: fmt.Sprint(id), Attempts: 5,
		LastError: "broker said no", Status: outbox.StatusFailed, LockedBy: "relay-1"}
}

func TestSingleAlert(t *testing.T) {
	t.Parallel()
	w := newWebhook(t, nil)
	a, _ := newAlerter(t, outboxalert.Config{URL: w.URL + "/hook", Schema: "shop", Interval: time.Hour,
		Header: http.Header{"Authorization": {"Bearer alert-token"}}})
	before := time.Now().UTC()
	a.OnDeadLetter(context.Background(), deadEvent(42, "order.created"), outbox.Permanent(errors.New("broker said no")))
	w.wait(t, 1)

	alerts, _ := w.snapshot()
	require.Len(t, alerts, 1)
	got := alerts[0]
	require.Equal(t, outboxalert.KindDeadLetter, got.Kind)
	require.Equal(t, "shop", got.Schema)
	require.Equal(t, "relay-1", got.Relay)
	require.Equal(t, 1, got.Count)
	require.Equal(t, map[string]int{"order.created": 1}, got.EventTypes)
	require.WithinRange(t, got.Time, before.Add(-time.Second), time.Now().Add(time.Second))
	require.Equal(t, []outboxalert.Event{{ID: 42, Type: "order.created", AggregateType: "order", AggregateID: "42",
		Attempts: 5, LastError: "broker said no", Permanent: true, At: got.Events[0].At}}, got.Events)
	require.Equal(t, "outbox: event 42 (order.created, order 42) dead-lettered in schema shop after 5 attempts: broker said no", got.Text)

	w.mu.Lock()
	req := w.requests[0]
	w.mu.Unlock()
	require.Equal(t, http.MethodPost, req.Method)
	require.Equal(t, "/hook", req.URL.Path)
	require.Equal(t, "application/json", req.Header.Get("Content-Type"))
	require.Equal(t, "Bearer alert-token", req.Header.Get("Authorization"))
	closeAlerter(t, a)
	_, n := w.snapshot()
	require.Equal(t, 1, n, "nothing was pending at Close")
}

// An error reaches the alert as the database stores it: valid UTF-8, no
// NUL, bounded.
func TestAlertSanitizesTheError(t *testing.T) {
	t.Parallel()
	w := newWebhook(t, nil)
	a, _ := newAlerter(t, outboxalert.Config{URL: w.URL, Schema: "shop", Interval: time.Hour})
	e := deadEvent(7, "order.created")
	e.LastError = "" // not stored: the hook's caller passes the error only
	a.OnDeadLetter(context.Background(), e, errors.New("panic: bad\x00byte \xff\xfe"+strings.Repeat("x", 3000)))
	w.wait(t, 1)
	alerts, _ := w.snapshot()
	require.Len(t, alerts, 1)
	got := alerts[0].Events[0].LastError
	require.True(t, strings.HasPrefix(got, "panic: bad\uFFFDbyte \uFFFDxxx"), got[:40])
	require.LessOrEqual(t, len(got), 2000)
	require.True(t, strings.HasSuffix(got, "…"))
	closeAlerter(t, a)
}

func TestAlertsWithinIntervalWaitForIt(t *testing.T) {
	t.Parallel()
	w := newWebhook(t, nil)
	const interval = 500 * time.Millisecond
	a, _ := newAlerter(t, outboxalert.Config{URL: w.URL, Interval: interval})
	first := time.Now() // the first request is sent after this
	a.OnDeadLetter(context.Background(), deadEvent(1, "a"), errors.New("x"))
	w.wait(t, 1)
	a.OnDeadLetter(context.Background(), deadEvent(2, "a"), errors.New("x"))
	a.OnDeadLetter(context.Background(), deadEvent(3, "b"), errors.New("y"))
	w.wait(t, 2)
	alerts, _ := w.snapshot()
	require.Equal(t, 1, alerts[0].Count)
	require.Equal(t, outboxalert.KindDeadLetterSummary, alerts[1].Kind)
	require.Equal(t, 2, alerts[1].Count)
	require.Equal(t, map[string]int{"a": 1, "b": 1}, alerts[1].EventTypes)
	w.mu.Lock()
	second := w.times[1]
	w.mu.Unlock()
	require.GreaterOrEqual(t, second.Sub(first), interval, "the second request must wait out the interval")
}

func TestFloodOfDeadLettersSendsASummary(t *testing.T) {
	t.Parallel()
	pool, schema := testutil.Schema(t)
	db := outbox.Postgres(pool)
	w := newWebhook(t, nil)
	a, _ := newAlerter(t, outboxalert.Config{URL: w.URL, Schema: schema, Interval: time.Hour, MaxEvents: 10})

	const n = 1000
	msgs := make([]outbox.Message, n)
	for i := range msgs {
		typ := "order.created"
		if i%4 == 0 {
			typ = "order.paid"
		}
		msgs[i] = outbox.Message{EventType: typ, Payload: map[string]int{"i": i}}
	}
	tx, err := pool.Begin(context.Background())
	require.NoError(t, err)
	_, err = outbox.NewWriter(outbox.WriterConfig{Schema: schema}).Write(context.Background(), tx, msgs...)
	require.NoError(t, err)
	require.NoError(t, tx.Commit(context.Background()))

	rec := outboxtest.NewRecorder()
	rec.SetFail(func(outbox.Event) error { return outbox.Permanent(errors.New("rejected")) })
	relay, err := outbox.NewRelay(db, outbox.RelayConfig{Schema: schema, Sink: rec, Hooks: []outbox.Hook{a},
		PollInterval: 20 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	require.NoError(t, relay.Start(context.Background()))
	mgr := outbox.NewManager(db, outbox.ManagerConfig{Schema: schema})
	testutil.WaitFor(t, 60*time.Second, "every event dead-lettered", func() bool {
		s, err := mgr.Stats(context.Background())
		require.NoError(t, err)
		return s.Failed == n
	})
	require.NoError(t, relay.Stop(context.Background()))
	closeAlerter(t, a) // sends the pending summary

	alerts, requests := w.snapshot()
	require.LessOrEqual(t, requests, 2, "one alert at once, the rest in one summary")
	total, types := 0, map[string]int{}
	for _, al := range alerts {
		total += al.Count
		for typ, c := range al.EventTypes {
			types[typ] += c
		}
		require.LessOrEqual(t, len(al.Events), 10)
		require.Equal(t, schema, al.Schema)
	}
	require.Equal(t, n, total)
	require.Equal(t, map[string]int{"order.created": 750, "order.paid": 250}, types)
	last := alerts[len(alerts)-1]
	require.Equal(t, outboxalert.KindDeadLetterSummary, last.Kind)
	require.Len(t, last.Events, 10)
	require.Contains(t, last.Text, fmt.Sprintf("outbox: %d events dead-lettered in schema %s", last.Count, schema))
	require.Equal(t, "rejected", last.Events[0].LastError)
	require.True(t, last.Events[0].Permanent)
}

func TestWebhookDownDoesNotStallTheRelay(t *testing.T) {
	t.Parallel()
	// A webhook that never answers, and one that refuses connections.
	hang := httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		// The server notices the client hanging up only once the body is read.
		_, _ = io.Copy(io.Discard, r.Body)
		<-r.Context().Done()
	}))
	t.Cleanup(hang.Close)
	refused := httptest.NewServer(http.NotFoundHandler())
	refused.Close()

	for name, url := range map[string]string{"hanging": hang.URL, "refused": refused.URL} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			pool, schema := testutil.Schema(t)
			db := outbox.Postgres(pool)
			// Every request would wait an hour, then be retried: a relay
			// blocked by the alerter would never finish.
			a, logs := newAlerter(t, outboxalert.Config{URL: url, Interval: time.Millisecond, Timeout: time.Hour,
				Retries: 3, RetryBackoff: time.Hour})
			msgs := make([]outbox.Message, 200)
			for i := range msgs {
				msgs[i] = outbox.Message{EventType: "order.created", Payload: map[string]int{"i": i}}
			}
			tx, err := pool.Begin(context.Background())
			require.NoError(t, err)
			_, err = outbox.NewWriter(outbox.WriterConfig{Schema: schema}).Write(context.Background(), tx, msgs...)
			require.NoError(t, err)
			require.NoError(t, tx.Commit(context.Background()))
			rec := outboxtest.NewRecorder()
			rec.SetFail(func(outbox.Event) error { return outbox.Permanent(errors.New("rejected")) })
			relay, err := outbox.NewRelay(db, outbox.RelayConfig{Schema: schema, Sink: rec, Hooks: []outbox.Hook{a},
				BatchSize: 20, PollInterval: 20 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
			require.NoError(t, err)
			require.NoError(t, relay.Start(context.Background()))
			mgr := outbox.NewManager(db, outbox.ManagerConfig{Schema: schema})
			testutil.WaitFor(t, 30*time.Second, "every event dead-lettered despite the webhook", func() bool {
				s, err := mgr.Stats(context.Background())
				require.NoError(t, err)
				return s.Failed == 200
			})
			require.NoError(t, relay.Stop(context.Background()))

			// Close gives up on the stuck webhook when its context ends.
			ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
			defer cancel()
			start := time.Now()
			require.ErrorIs(t, a.Close(ctx), context.DeadlineExceeded)
			require.Less(t, time.Since(start), 10*time.Second)
			require.Contains(t, logs.String(), "the alert webhook failed")
		})
	}
}

func TestRetries(t *testing.T) {
	t.Parallel()
	t.Run("5xx then success", func(t *testing.T) {
		t.Parallel()
		w := newWebhook(t, func(n int) int {
			if n < 3 {
				return http.StatusServiceUnavailable
			}
			return http.StatusOK
		})
		a, logs := newAlerter(t, outboxalert.Config{URL: w.URL, Interval: time.Hour})
		a.OnDeadLetter(context.Background(), deadEvent(7, "x"), errors.New("boom"))
		w.wait(t, 3)
		closeAlerter(t, a)
		alerts, requests := w.snapshot()
		require.Equal(t, 3, requests)
		require.Len(t, alerts, 1)
		require.Equal(t, int64(7), alerts[0].Events[0].ID)
		w.mu.Lock()
		require.Equal(t, w.bodies[0], w.bodies[2], "a retry sends the same alert")
		w.mu.Unlock()
		require.Contains(t, logs.String(), "retrying")
		require.NotContains(t, logs.String(), "dropped")
	})
	t.Run("4xx is not retried", func(t *testing.T) {
		t.Parallel()
		w := newWebhook(t, func(int) int { return http.StatusUnauthorized })
		a, logs := newAlerter(t, outboxalert.Config{URL: w.URL, Interval: time.Hour})
		a.OnDeadLetter(context.Background(), deadEvent(7, "x"), errors.New("boom"))
		w.wait(t, 1)
		closeAlerter(t, a)
		_, requests := w.snapshot()
		require.Equal(t, 1, requests)
		require.Contains(t, logs.String(), "401 Unauthorized: check the URL and its credentials")
		require.Contains(t, logs.String(), "the alert is dropped")
	})
	t.Run("retries run out", func(t *testing.T) {
		t.Parallel()
		w := newWebhook(t, func(int) int { return http.StatusBadGateway })
		a, logs := newAlerter(t, outboxalert.Config{URL: w.URL, Interval: time.Hour, Retries: 2})
		a.OnDeadLetter(context.Background(), deadEvent(7, "x"), errors.New("boom"))
		closeAlerter(t, a)
		_, requests := w.snapshot()
		require.Equal(t, 3, requests)
		require.Contains(t, logs.String(), "attempts=3")
	})
}

func TestCredentialsNeverLogged(t *testing.T) {
	t.Parallel()
	w := newWebhook(t, func(int) int { return http.StatusInternalServerError })
	refused := httptest.NewServer(http.NotFoundHandler())
	refused.Close()
	for _, base := range []string{w.URL, refused.URL} {
		secretURL := strings.Replace(base, "http://", "http://alice:pa55word@", 1) + "/services/T0/B0/pathsecret?token=querysecret"
		a, logs := newAlerter(t, outboxalert.Config{URL: secretURL, Interval: time.Hour, Retries: 1})
		a.OnDeadLetter(context.Background(), deadEvent(1, "x"), errors.New("boom"))
		closeAlerter(t, a)
		out := logs.String()
		require.Contains(t, out, "the alert webhook failed")
		require.Contains(t, out, strings.TrimPrefix(base, "http://"), "logs name the host")
		for _, secret := range []string{"pa55word", "pathsecret", "querysecret", "alice"} {
			require.NotContains(t, out, secret)
		}
	}
	// Configuration errors do not quote the URL either.
	_, err := outboxalert.New(outboxalert.Config{URL: "ftp://bob:hunter2@example.com/x"})
	require.ErrorContains(t, err, `invalid URL: has scheme "ftp": use an http:// or https:// URL`)
	require.NotContains(t, err.Error(), "hunter2")
	_, err = outboxalert.New(outboxalert.Config{URL: "http://bob:hunter2@exa mple.com/x"})
	require.Error(t, err)
	require.NotContains(t, err.Error(), "hunter2")
}

func TestConfigErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		cfg   outboxalert.Config
		field string
	}{
		{outboxalert.Config{}, "URL"},
		{outboxalert.Config{URL: "example.com/hook"}, "URL"},
		{outboxalert.Config{URL: "http:///hook"}, "URL"},
		{outboxalert.Config{URL: "http://h", Interval: -1}, "Interval"},
		{outboxalert.Config{URL: "http://h", MaxEvents: -1}, "MaxEvents"},
		{outboxalert.Config{URL: "http://h", Timeout: -1}, "Timeout"},
		{outboxalert.Config{URL: "http://h", RetryBackoff: -1}, "RetryBackoff"},
	} {
		_, err := outboxalert.New(tc.cfg)
		var ce *outbox.ConfigError
		require.ErrorAs(t, err, &ce, "%+v", tc.cfg)
		require.Equal(t, tc.field, ce.Field)
	}
}

func TestOnDeadLetterAfterCloseIsIgnored(t *testing.T) {
	t.Parallel()
	w := newWebhook(t, nil)
	a, _ := newAlerter(t, outboxalert.Config{URL: w.URL})
	closeAlerter(t, a)
	a.OnDeadLetter(context.Background(), deadEvent(1, "x"), errors.New("boom"))
	require.NoError(t, a.Close(context.Background()))
	_, n := w.snapshot()
	require.Zero(t, n)
}

// A tenant relay's alerts name the tenant: the one of a single event, all
// of them in a summary.
func TestAlertNamesTheTenant(t *testing.T) {
	t.Parallel()
	w := newWebhook(t, nil)
	a, _ := newAlerter(t, outboxalert.Config{URL: w.URL, Interval: time.Hour})
	tenantEvent := func(id int64, tenant string) outbox.Event {
		e := deadEvent(id, "order.created")
		e.Tenant, e.Database = tenant, "db1:5432/app"
		return e
	}
	a.OnDeadLetter(context.Background(), tenantEvent(7, "s_acme"), errors.New("broker said no"))
	w.wait(t, 1)
	a.OnDeadLetter(context.Background(), tenantEvent(7, "s_globex"), errors.New("broker said no"))
	a.OnDeadLetter(context.Background(), tenantEvent(8, "s_acme"), errors.New("broker said no"))
	closeAlerter(t, a)
	w.wait(t, 2)

	alerts, _ := w.snapshot()
	require.Len(t, alerts, 2)
	one := alerts[0]
	require.Equal(t, "s_acme", one.Schema)
	require.Equal(t, []string{"db1:5432/app/s_acme"}, one.Tenants)
	require.Equal(t, "s_acme", one.Events[0].Tenant)
	require.Equal(t, "db1:5432/app", one.Events[0].Database)
	require.Equal(t, "outbox: event 7 (order.created, order 7) dead-lettered in tenant db1:5432/app/s_acme after 5 attempts: broker said no", one.Text)
	sum := alerts[1]
	require.Equal(t, outboxalert.KindDeadLetterSummary, sum.Kind)
	require.Equal(t, []string{"db1:5432/app/s_globex", "db1:5432/app/s_acme"}, sum.Tenants)
	require.Contains(t, sum.Text, "2 events dead-lettered in 2 tenants (db1:5432/app/s_globex, db1:5432/app/s_acme) since")
}

package outboxadmin_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/testutil"
	"github.com/outboxkit/outbox/outboxadmin"
)

// bundle is a migrated schema served by an admin handler.
type bundle struct {
	ctx    context.Context
	pool   *pgxpool.Pool
	schema string
	mgr    *outbox.Manager
	srv    *httptest.Server
	logs   *syncBuffer
}

// setup serves a fresh schema; change modifies the handler's config.
func setup(t *testing.T, change ...func(*outboxadmin.Config)) *bundle {
	t.Helper()
	pool, schema := testutil.Schema(t)
	b := &bundle{ctx: context.Background(), pool: pool, schema: schema, logs: &syncBuffer{},
		mgr: outbox.NewManager(outbox.Postgres(pool), outbox.ManagerConfig{Schema: schema})}
	cfg := outboxadmin.Config{Manager: b.mgr, Logger: slog.New(slog.NewTextHandler(b.logs, nil))}
	for _, c := range change {
		c(&cfg)
	}
	h, err := outboxadmin.New(cfg)
	require.NoError(t, err)
	b.srv = httptest.NewServer(h)
	t.Cleanup(b.srv.Close)
	return b
}

// write commits msgs and returns their IDs.
func (b *bundle) write(t *testing.T, msgs ...outbox.Message) []int64 {
	t.Helper()
	tx, err := b.pool.Begin(b.ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(b.ctx) }()
	res, err := outbox.NewWriter(outbox.WriterConfig{Schema: b.schema}).Write(b.ctx, tx, msgs...)
	require.NoError(t, err)
	require.NoError(t, tx.Commit(b.ctx))
	return res.IDs
}

// exec runs sql on the outbox table: {table} stands for it.
func (b *bundle) exec(t *testing.T, sql string, args ...any) {
	t.Helper()
	_, err := b.pool.Exec(b.ctx, strings.ReplaceAll(sql, "{table}", testutil.Table(b.schema)), args...)
	require.NoError(t, err)
}

func (b *bundle) setFailed(t *testing.T, id int64, lastError string) {
	t.Helper()
	b.exec(t, `UPDATE {table} SET status = 'failed', attempts = 5, last_error = $2, updated_at = now() WHERE id = $1`, id, lastError)
}

func (b *bundle) setProcessed(t *testing.T, id int64) {
	t.Helper()
	b.exec(t, `UPDATE {table} SET status = 'processed', processed_at = now(), updated_at = now() WHERE id = $1`, id)
}

func (b *bundle) event(t *testing.T, id int64) outbox.Event {
	t.Helper()
	e, err := b.mgr.Event(b.ctx, id)
	require.NoError(t, err)
	return e
}

// response is an HTTP answer read whole.
type response struct {
	code   int
	header http.Header
	body   string
}

// decode unmarshals the body into v.
func (r response) decode(t *testing.T, v any) {
	t.Helper()
	require.NoError(t, json.Unmarshal([]byte(r.body), v), "body: %s", r.body)
}

// errorText returns the body's error message.
func (r response) errorText(t *testing.T) string {
	t.Helper()
	var e struct{ Error string }
	r.decode(t, &e)
	require.NotEmpty(t, e.Error)
	require.NotContains(t, e.Error, "\n")
	return e.Error
}

// do sends a request; body, when not nil, is sent as JSON.
func (b *bundle) do(t *testing.T, method, path string, body any, hdr ...string) response {
	t.Helper()
	var rd io.Reader
	if body != nil {
		data, err := json.Marshal(body)
		require.NoError(t, err)
		rd = bytes.NewReader(data)
	}
	req, err := http.NewRequestWithContext(b.ctx, method, b.srv.URL+path, rd)
	require.NoError(t, err)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		if hdr[i] == "Host" {
			req.Host = hdr[i+1]
			continue
		}
		req.Header.Set(hdr[i], hdr[i+1])
	}
	res, err := b.srv.Client().Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	data, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	return response{code: res.StatusCode, header: res.Header, body: string(data)}
}

func (b *bundle) get(t *testing.T, path string, hdr ...string) response {
	t.Helper()
	return b.do(t, http.MethodGet, path, nil, hdr...)
}

func (b *bundle) post(t *testing.T, path string, body any, hdr ...string) response {
	t.Helper()
	return b.do(t, http.MethodPost, path, body, hdr...)
}

// getJSON GETs path, requires 200 and decodes the body into v.
func (b *bundle) getJSON(t *testing.T, path string, v any) {
	t.Helper()
	res := b.get(t, path)
	require.Equal(t, http.StatusOK, res.code, "GET %s: %s", path, res.body)
	res.decode(t, v)
}

// postJSON POSTs body, requires 200 and decodes the answer into v.
func (b *bundle) postJSON(t *testing.T, path string, body, v any) {
	t.Helper()
	res := b.post(t, path, body)
	require.Equal(t, http.StatusOK, res.code, "POST %s: %s", path, res.body)
	res.decode(t, v)
}

// seed writes a mix of events and returns their IDs: 0-2 order events of
// aggregate A-1/A-2 (0 processed), 3 an invoice with an idempotency key
// and headers, 4-5 failed, 6 pending and being retried.
func (b *bundle) seed(t *testing.T) []int64 {
	t.Helper()
	ids := b.write(t,
		outbox.Message{EventType: "order.created", AggregateType: "order", AggregateID: "A-1", Payload: map[string]int{"n": 0}},
		outbox.Message{EventType: "order.paid", AggregateType: "order", AggregateID: "A-1", Payload: map[string]int{"n": 1}},
		outbox.Message{EventType: "order.created", AggregateType: "order", AggregateID: "A-2", Payload: map[string]int{"n": 2}},
		outbox.Message{EventType: "invoice.sent", AggregateType: "invoice", AggregateID: "I-9", IdempotencyKey: "inv-9",
			Headers: map[string]string{"tenant": "acme"}, CorrelationID: "corr-9", Payload: json.RawMessage(`{"total": 12345678901234567890, "lines": [1, 2]}`)},
		outbox.Message{EventType: "order.created", AggregateType: "order", AggregateID: "A-3", Payload: map[string]int{"n": 4}},
		outbox.Message{EventType: "order.paid", AggregateType: "order", AggregateID: "A-3", Payload: map[string]int{"n": 5}},
		outbox.Message{EventType: "order.shipped", AggregateType: "order", AggregateID: "A-4", Payload: map[string]int{"n": 6}},
	)
	b.setProcessed(t, ids[0])
	b.setFailed(t, ids[4], "webhook answered 500")
	b.setFailed(t, ids[5], "webhook answered 422: unknown customer")
	b.exec(t, `UPDATE {table} SET attempts = 2, last_error = 'timeout', available_at = now() + interval '1 hour' WHERE id = $1`, ids[6])
	return ids
}

// syncBuffer is a bytes.Buffer safe for a logger and a test at once.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.String()
}

// idsOf returns the IDs of a search answer.
func idsOf(events []outboxadmin.EventJSON) []int64 {
	ids := make([]int64, len(events))
	for i, e := range events {
		ids[i] = e.ID
	}
	return ids
}

func path(format string, args ...any) string { return fmt.Sprintf(format, args...) }

// newServer serves h until the test ends.
func newServer(t *testing.T, h http.Handler) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

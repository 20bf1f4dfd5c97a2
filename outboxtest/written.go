package outboxtest

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/driver"
	"github.com/outboxkit/outbox/internal/driver/mysqldriver"
	"github.com/outboxkit/outbox/internal/driver/pgdriver"
	"github.com/outboxkit/outbox/internal/driver/sqldriver"
	"github.com/outboxkit/outbox/internal/driver/sqlitedriver"
)

// TB is the part of testing.TB the Require functions use: *testing.T,
// *testing.B and *testing.F have it. Fatalf must stop the test (testing.TB's
// does); if it returns, the Require function returns zero values.
type TB interface {
	Helper()
	Fatalf(format string, args ...any)
}

// WrittenOpts says where the outbox table is and narrows which events the
// Require functions count. The zero value (or nil) looks for any event of
// the type in the default schema on PostgreSQL.
type WrittenOpts struct {
	// Schema holds outbox_events, as in WriterConfig.Schema. Defaults to
	// outbox.SchemaDefault.
	Schema string
	// Dialect is the database of the *sql.Tx passed to the SQLTx functions,
	// as in WriterConfig.Dialect. Defaults to outbox.DialectDefault
	// (PostgreSQL). The pgx functions always read PostgreSQL.
	Dialect outbox.Dialect

	// AggregateType and AggregateID, when set, must equal the event's.
	AggregateType string
	AggregateID   string
	// Payload, when not nil, must be JSON-equal to the event's payload
	// (same values, any key order and spacing). []byte and json.RawMessage
	// are taken as JSON; any other value is marshalled with encoding/json,
	// as the Writer does.
	Payload any
	// Headers, when set, must each be present in the event's headers with
	// the same value; the event may carry others (traceparent, …).
	Headers map[string]string
}

// RequireWrittenTx fails t unless exactly one event of eventType matching
// opts is visible in tx, and returns it. It reads the outbox table inside
// tx, so it sees what tx wrote before it commits (and whatever other
// transactions committed). For a database/sql transaction, use
// RequireWrittenSQLTx.
func RequireWrittenTx(ctx context.Context, t TB, tx outbox.PgxTx, eventType string, opts *WrittenOpts) outbox.Event {
	t.Helper()
	events := requireMany(ctx, t, pgxReader{tx}, eventType, 1, opts, "RequireManyWrittenTx")
	if len(events) != 1 {
		return outbox.Event{}
	}
	return events[0]
}

// RequireManyWrittenTx fails t unless exactly n events of eventType
// matching opts are visible in tx, and returns them in ID (write) order.
// Check what differs between them, such as their payloads, on the result.
func RequireManyWrittenTx(ctx context.Context, t TB, tx outbox.PgxTx, eventType string, n int, opts *WrittenOpts) []outbox.Event {
	t.Helper()
	return requireMany(ctx, t, pgxReader{tx}, eventType, n, opts, "")
}

// RequireNotWrittenTx fails t if any event of eventType matching opts is
// visible in tx.
func RequireNotWrittenTx(ctx context.Context, t TB, tx outbox.PgxTx, eventType string, opts *WrittenOpts) {
	t.Helper()
	requireMany(ctx, t, pgxReader{tx}, eventType, 0, opts, "")
}

// RequireWrittenSQLTx is RequireWrittenTx for a database/sql transaction
// (SQLite, MySQL, MariaDB, or PostgreSQL through the pgx stdlib driver);
// opts.Dialect names its database.
func RequireWrittenSQLTx(ctx context.Context, t TB, tx outbox.SQLTx, eventType string, opts *WrittenOpts) outbox.Event {
	t.Helper()
	events := requireMany(ctx, t, sqlReader{tx}, eventType, 1, opts, "RequireManyWrittenSQLTx")
	if len(events) != 1 {
		return outbox.Event{}
	}
	return events[0]
}

// RequireManyWrittenSQLTx is RequireManyWrittenTx for a database/sql
// transaction; opts.Dialect names its database.
func RequireManyWrittenSQLTx(ctx context.Context, t TB, tx outbox.SQLTx, eventType string, n int, opts *WrittenOpts) []outbox.Event {
	t.Helper()
	return requireMany(ctx, t, sqlReader{tx}, eventType, n, opts, "")
}

// RequireNotWrittenSQLTx is RequireNotWrittenTx for a database/sql
// transaction; opts.Dialect names its database.
func RequireNotWrittenSQLTx(ctx context.Context, t TB, tx outbox.SQLTx, eventType string, opts *WrittenOpts) {
	t.Helper()
	requireMany(ctx, t, sqlReader{tx}, eventType, 0, opts, "")
}

// requireMany fails t unless exactly n events of eventType match opts; many,
// when set, is the function to suggest when more match than the one wanted.
func requireMany(ctx context.Context, t TB, r reader, eventType string, n int, opts *WrittenOpts, many string) []outbox.Event {
	t.Helper()
	if n < 0 {
		t.Fatalf("outboxtest: want %d %s events: n must be 0 or more", n, eventType)
		return nil
	}
	if opts == nil {
		opts = &WrittenOpts{}
	}
	queries, dialect, err := writtenQueries(r, opts)
	if err != nil {
		t.Fatalf("outboxtest: %v", err)
		return nil
	}
	m, err := newMatcher(opts)
	if err != nil {
		t.Fatalf("outboxtest: %v", err)
		return nil
	}
	all, err := r.events(ctx, queries.ByType, eventType)
	if err != nil {
		t.Fatalf("outboxtest: read the %s events in the transaction (%s): %v", eventType, dialect, err)
		return nil
	}
	var matched []outbox.Event
	for _, e := range all {
		if m.match(e) {
			matched = append(matched, e)
		}
	}
	if len(matched) == n {
		return matched
	}
	want := fmt.Sprintf("%d %s event%s%s", n, eventType, plural(n), m.describe())
	switch {
	case n == 0:
		t.Fatalf("outboxtest: %d %s event%s%s visible in the transaction, want none: %s",
			len(matched), eventType, plural(len(matched)), m.describe(), list(matched))
	case len(matched) > n && many != "":
		t.Fatalf("outboxtest: %d %s events%s are visible in the transaction, want 1 (for several, use %s): %s",
			len(matched), eventType, m.describe(), many, list(matched))
	default:
		types, err := r.types(ctx, queries.Types)
		if err != nil {
			types = "unknown (" + err.Error() + ")"
		}
		t.Fatalf("outboxtest: want %s visible in the transaction, found %d; %s events there: %s; event types in the table: %s",
			want, len(matched), eventType, list(all), types)
	}
	return nil
}

func writtenQueries(r reader, opts *WrittenOpts) (driver.Written, outbox.Dialect, error) {
	schema := cmp.Or(opts.Schema, outbox.SchemaDefault)
	dialect := outbox.DialectPostgres
	if _, ok := r.(sqlReader); ok {
		d, err := outbox.ParseDialect(string(cmp.Or(opts.Dialect, outbox.DialectDefault)))
		if err != nil {
			return driver.Written{}, "", fmt.Errorf("WrittenOpts.Dialect: %w", err)
		}
		dialect = d
	}
	switch dialect {
	case outbox.DialectSQLite:
		return sqldriver.WrittenQueries(sqlitedriver.Dialect{}, schema), dialect, nil
	case outbox.DialectMySQL, outbox.DialectMariaDB:
		return sqldriver.WrittenQueries(mysqldriver.Dialect{}, schema), dialect, nil
	}
	return pgdriver.WrittenQueries(schema), dialect, nil
}

// matcher holds WrittenOpts' conditions, the payload decoded once.
type matcher struct {
	opts    *WrittenOpts
	payload any // decoded opts.Payload
	raw     []byte
}

func newMatcher(opts *WrittenOpts) (matcher, error) {
	m := matcher{opts: opts}
	if opts.Payload == nil {
		return m, nil
	}
	switch p := opts.Payload.(type) {
	case json.RawMessage:
		m.raw = p
	case []byte:
		m.raw = p
	default:
		b, err := json.Marshal(p)
		if err != nil {
			return m, fmt.Errorf("WrittenOpts.Payload: %w", err)
		}
		m.raw = b
	}
	if err := json.Unmarshal(m.raw, &m.payload); err != nil {
		return m, fmt.Errorf("WrittenOpts.Payload is not valid JSON: %w", err)
	}
	return m, nil
}

func (m matcher) match(e outbox.Event) bool {
	o := m.opts
	if o.AggregateType != "" && e.AggregateType != o.AggregateType || o.AggregateID != "" && e.AggregateID != o.AggregateID {
		return false
	}
	for k, v := range o.Headers {
		if got, ok := e.Headers[k]; !ok || got != v {
			return false
		}
	}
	if m.raw == nil {
		return true
	}
	var got any
	return json.Unmarshal(e.Payload, &got) == nil && reflect.DeepEqual(got, m.payload)
}

// describe renders the conditions for a failure message.
func (m matcher) describe() string {
	o := m.opts
	var parts []string
	if o.AggregateType != "" || o.AggregateID != "" {
		parts = append(parts, "aggregate "+cmp.Or(o.AggregateType, "*")+"/"+cmp.Or(o.AggregateID, "*"))
	}
	if m.raw != nil {
		parts = append(parts, "payload "+compact(m.raw))
	}
	if len(o.Headers) > 0 {
		parts = append(parts, "headers "+headers(o.Headers))
	}
	if len(parts) == 0 {
		return ""
	}
	return " with " + strings.Join(parts, ", ")
}

// maxListed bounds the events a failure message lists.
const maxListed = 10

// list renders events for a failure message.
func list(events []outbox.Event) string {
	if len(events) == 0 {
		return "none"
	}
	var b strings.Builder
	for i, e := range events {
		if i == maxListed {
			fmt.Fprintf(&b, "; … %d more", len(events)-maxListed)
			break
		}
		if i > 0 {
			b.WriteString("; ")
		}
		fmt.Fprintf(&b, "#%d aggregate %s/%s payload %s", e.ID, e.AggregateType, e.AggregateID, compact(e.Payload))
		if len(e.Headers) > 0 {
			b.WriteString(" headers " + headers(e.Headers))
		}
	}
	return b.String()
}

// maxPayloadShown bounds a payload in a failure message.
const maxPayloadShown = 200

func compact(raw []byte) string {
	var b bytes.Buffer
	if json.Compact(&b, raw) != nil {
		b.Reset()
		b.Write(raw)
	}
	if b.Len() > maxPayloadShown {
		return b.String()[:maxPayloadShown] + "…"
	}
	return b.String()
}

func headers(h map[string]string) string {
	parts := make([]string, 0, len(h))
	for _, k := range slices.Sorted(maps.Keys(h)) {
		parts = append(parts, k+"="+h[k])
	}
	return "{" + strings.Join(parts, " ") + "}"
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

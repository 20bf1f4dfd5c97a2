package outboxtest

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/outboxkit/outbox"
)

// reader runs the driver's Written queries on a caller's transaction.
type reader interface {
	events(ctx context.Context, query, eventType string) ([]outbox.Event, error)
	types(ctx context.Context, query string) (string, error)
}

// rows is what pgx.Rows and *sql.Rows share.
type rows interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
}

type pgxReader struct{ tx outbox.PgxTx }

func (r pgxReader) events(ctx context.Context, query, eventType string) ([]outbox.Event, error) {
	rs, err := r.tx.Query(ctx, query, eventType)
	if err != nil {
		return nil, err
	}
	defer rs.Close()
	return scanEvents(rs)
}

func (r pgxReader) types(ctx context.Context, query string) (string, error) {
	rs, err := r.tx.Query(ctx, query)
	if err != nil {
		return "", err
	}
	defer rs.Close()
	return scanTypes(rs)
}

type sqlReader struct{ tx outbox.SQLTx }

func (r sqlReader) events(ctx context.Context, query, eventType string) ([]outbox.Event, error) {
	rs, err := r.tx.QueryContext(ctx, query, eventType)
	if err != nil {
		return nil, err
	}
	defer func() { _ = rs.Close() }()
	return scanEvents(rs)
}

func (r sqlReader) types(ctx context.Context, query string) (string, error) {
	rs, err := r.tx.QueryContext(ctx, query)
	if err != nil {
		return "", err
	}
	defer func() { _ = rs.Close() }()
	return scanTypes(rs)
}

func scanEvents(rs rows) ([]outbox.Event, error) {
	var events []outbox.Event
	for rs.Next() {
		var (
			e                outbox.Event
			payload, headers string
			status           string
		)
		if err := rs.Scan(&e.ID, &e.EventType, &e.AggregateType, &e.AggregateID, &payload, &headers,
			&e.IdempotencyKey, &status); err != nil {
			return nil, err
		}
		e.Payload = json.RawMessage(payload)
		e.Status = outbox.Status(status)
		if err := json.Unmarshal([]byte(headers), &e.Headers); err != nil {
			return nil, fmt.Errorf("event %d: headers: %w", e.ID, err)
		}
		if len(e.Headers) == 0 {
			e.Headers = nil
		}
		events = append(events, e)
	}
	return events, rs.Err()
}

func scanTypes(rs rows) (string, error) {
	var parts []string
	for rs.Next() {
		var (
			eventType string
			n         int64
		)
		if err := rs.Scan(&eventType, &n); err != nil {
			return "", err
		}
		parts = append(parts, fmt.Sprintf("%s ×%d", eventType, n))
	}
	if len(parts) == 0 {
		return "none", rs.Err()
	}
	return strings.Join(parts, ", "), rs.Err()
}

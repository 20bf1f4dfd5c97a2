package sqldriver

import (
	"context"
	"database/sql"

	"github.com/outboxkit/outbox/internal/driver"
)

// TxQuerier is what the writer needs from the caller's transaction:
// *sql.Tx, *sql.Conn or *sql.DB.
type TxQuerier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// Inserter stores the writer's events in the caller's transaction.
type Inserter interface {
	// Insert stores events and returns one ID per event, in order: the new
	// event's ID, or 0 for an event skipped because its idempotency key
	// exists. A duplicate key never fails the statement, so the caller's
	// transaction stays usable.
	Insert(ctx context.Context, q TxQuerier, events []driver.NewEvent) ([]int64, error)
}

// NullString binds an empty string as NULL.
func NullString(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// NullInt binds 0 as NULL.
func NullInt(n int) any {
	if n == 0 {
		return nil
	}
	return n
}

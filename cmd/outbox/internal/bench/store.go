package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/outboxkit/outbox"
)

// store is the database-specific half of a Runner: where scratch space comes
// from and how it is measured. postgres.go keeps scratch schemas, sqlite.go
// scratch files, mysql.go scratch databases; the scenarios only see these
// interfaces.
type store interface {
	// about describes the database for the report.
	about() storeInfo
	// create makes the empty scratch space name and a control connection
	// to it. The caller migrates it and drops it; on error nothing is left.
	create(ctx context.Context, name string) (scratch, error)
	close()
}

// storeInfo is what a store reports about its database.
type storeInfo struct {
	kind   string // Result.Database: postgres, sqlite, mariadb, mysql
	server string // its version
	// autovacuum is PostgreSQL's setting, nil elsewhere.
	autovacuum *bool
	// dialect is the writers' outbox.Dialect.
	dialect outbox.Dialect
	// notes say how to read this database's numbers.
	notes []string
}

// scratch is one scenario's scratch space — a schema, a file or a database
// holding the migrated outbox tables — and a control connection to it for
// setup, measurements and checks.
type scratch interface {
	// name is the scratch space's generated name: the schema's or the
	// database's, the file's without ".db". label is what Report.Schema
	// shows: the name, or the file's path.
	name() string
	label() string
	// database is the control connection, and schema the outbox Schema
	// that names the scratch tables through it and through pools.
	database() outbox.Database
	schema() string
	// drop removes the scratch space and closes the control connection.
	drop(ctx context.Context) error

	// prefill inserts n pending events with payload in one statement and
	// leaves the table settled (vacuumed, analyzed, checkpointed). With
	// keys > 0 the events are spread over that many aggregates (an ordered
	// drain); with 0 every event has its own.
	prefill(ctx context.Context, n int, payload []byte, keys int) error
	// tableSize reads what the database cheaply tells about the outbox
	// table's storage. Call it after the phase's pools are closed.
	tableSize(ctx context.Context) (TableSize, error)
	// statuses counts the events by where they are.
	statuses(ctx context.Context) (statusCounts, error)
	// backlog counts undelivered events: pending or processing.
	backlog(ctx context.Context) (int64, error)
	// truncate empties orders, the outbox table and the archive, and
	// restarts their IDs.
	truncate(ctx context.Context) error
	// settle writes out what earlier phases left in the database's
	// buffers and log (a checkpoint where the database has one and the
	// user may ask for it), so a phase does not pay for the one before it
	// and no phase is more likely than another to meet a checkpoint.
	settle(ctx context.Context) error
	// createOrders creates the writers' business table.
	createOrders(ctx context.Context) error
	// pools returns a new, empty set of pools for one phase.
	pools() pools
}

// statusCounts is where a drain's events ended.
type statusCounts struct {
	undelivered int64 // pending, processing or failed
	processed   int64
	remaining   int64 // rows left in the outbox table
	archived    int64
}

// pools are the connection pools one scenario phase opens; close closes
// them all (on PostgreSQL it also waits until their backends are gone, so
// that their statistics are flushed before the "after" reading).
type pools interface {
	// relay opens a pool set up like a relay's and returns the database
	// on it.
	relay(ctx context.Context, relayID string, conns int) (outbox.Database, error)
	// reference opens a pool like relay does and returns the reference
	// loop's statements on it.
	reference(ctx context.Context, relayID string, conns int, retention outbox.Retention) (referenceDB, error)
	// writers opens a pool with the database's default settings.
	writers(ctx context.Context, name string, conns int) (writerPool, error)
	close(ctx context.Context)
}

// referenceDB is the hand-written relay's two statements (or short
// transactions) on one database.
type referenceDB interface {
	// claim leases up to n due pending events for referenceLease.
	claim(ctx context.Context, n int) ([]outbox.Event, error)
	// mark marks the events delivered as the retention mode says, and
	// returns how many rows it marked.
	mark(ctx context.Context, ids []int64) (int64, error)
}

// writerPool hands out one connection per writer goroutine.
type writerPool interface {
	acquire(ctx context.Context) (writerConn, error)
}

// writerConn is one writer's connection.
type writerConn interface {
	// checkout commits one business transaction: an order row and its
	// event, written with w; with keys > 0 the event's aggregate is the
	// order's ID modulo keys. It returns the event's ID.
	checkout(ctx context.Context, w *outbox.Writer, customer string, cents int, payload json.RawMessage, keys int) (int64, error)
	release()
}

// orderCreated is the event each checkout writes: its aggregate is the
// order, or with keys > 0 one of keys aggregates (an ordered run's).
func orderCreated(orderID int64, payload json.RawMessage, keys int) outbox.Message {
	aggregate := orderID
	if keys > 0 {
		aggregate = orderID % int64(keys)
	}
	return outbox.Message{EventType: "order.created", AggregateType: "order",
		AggregateID: strconv.FormatInt(aggregate, 10), Payload: payload}
}

// decodeHeaders decodes a stored headers object into e.Headers.
func decodeHeaders(e *outbox.Event, headers []byte) error {
	if len(headers) <= 2 { // "{}"
		return nil
	}
	if err := json.Unmarshal(headers, &e.Headers); err != nil {
		return fmt.Errorf("event %d headers: %w", e.ID, err)
	}
	return nil
}

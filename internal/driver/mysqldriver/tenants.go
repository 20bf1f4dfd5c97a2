package mysqldriver

import (
	"context"
	"database/sql"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/outboxkit/outbox/internal/driver"
	"github.com/outboxkit/outbox/internal/driver/sqldriver"
)

var (
	_ driver.TenantDiscoverer = (*Driver)(nil)
	_ driver.TenantCounter    = (*Driver)(nil)
)

// StatsChunk is how many tenant databases one statement of CountSchemas
// counts, as on PostgreSQL.
const StatsChunk = 50

// DueChunk is how many tenant databases one statement of DueSchemas
// checks.
const DueChunk = 250

// systemDatabases are the server's own databases, never tenants, and
// public, which names the connection's own database (schemaName).
const systemDatabases = `('mysql', 'information_schema', 'performance_schema', 'sys', 'public')`

// UserSchemas lists the databases that are not the server's own: on MySQL
// a tenant's "schema" is a database.
func (d *Driver) UserSchemas(ctx context.Context) ([]string, error) {
	return d.names(ctx, `SELECT SCHEMA_NAME FROM information_schema.SCHEMATA
WHERE SCHEMA_NAME NOT IN `+systemDatabases)
}

// OutboxSchemas lists the databases holding an outbox_events table that
// the connection's user can see: information_schema shows only the tables
// the user has some privilege on, so a relay user granted a subset of
// tenants serves exactly those.
func (d *Driver) OutboxSchemas(ctx context.Context) ([]string, error) {
	return d.names(ctx, `SELECT TABLE_SCHEMA FROM information_schema.TABLES
WHERE TABLE_NAME = 'outbox_events' AND TABLE_SCHEMA NOT IN `+systemDatabases)
}

// names runs a query of one text column, sorted by byte (as PostgreSQL's
// discovery sorts by "C" collation).
func (d *Driver) names(ctx context.Context, query string) ([]string, error) {
	rows, err := d.db.QueryContext(ctx, query)
	if err != nil {
		return nil, err
	}
	defer func() { _ = rows.Close() }()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// QuerySchemas runs the operator's query in a read-only transaction, so a
// query that writes fails instead of writing on every refresh.
func (d *Driver) QuerySchemas(ctx context.Context, query string) ([]string, error) {
	tx, err := d.db.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return nil, err
	}
	defer func() { _ = tx.Rollback() }()
	rows, err := tx.QueryContext(ctx, query)
	if err != nil {
		return nil, err
	}
	defer func() { _ = rows.Close() }()
	cols, err := rows.Columns()
	if err != nil {
		return nil, err
	}
	var out []string
	seen := map[string]bool{}
	dest := make([]any, len(cols))
	for i := range dest {
		dest[i] = new(any)
	}
	for rows.Next() {
		if len(dest) == 0 {
			break
		}
		var first sql.NullString
		dest[0] = &first
		if err := rows.Scan(dest...); err != nil {
			return nil, err
		}
		if first.Valid && !seen[first.String] {
			seen[first.String] = true
			out = append(out, first.String)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	return out, tx.Commit()
}

// DueSchemas asks, one statement per DueChunk databases, which of them
// have a due pending event or an expired lease: two EXISTS probes per
// tenant, of outbox_events_pending_idx (status, available_at) and
// outbox_events_processing_idx (status, locked_until), so an idle tenant
// costs two probes of an index range that is empty. Database names are
// quoted identifiers, never text spliced in.
func (d *Driver) DueSchemas(ctx context.Context, schemas []string) (due, expired []string, err error) {
	for start := 0; start < len(schemas); start += DueChunk {
		chunk := schemas[start:min(start+DueChunk, len(schemas))]
		var b strings.Builder
		b.WriteString("SELECT i, d, x FROM (")
		for i, s := range chunk {
			if i > 0 {
				b.WriteString("\nUNION ALL ")
			}
			t := quote(s) + ".`outbox_events`"
			b.WriteString("SELECT " + strconv.Itoa(i) + " AS i, EXISTS (SELECT 1 FROM " + t +
				" WHERE status = 'pending' AND available_at <= " + now + ") AS d, EXISTS (SELECT 1 FROM " + t +
				" WHERE status = 'processing' AND locked_until < " + now + ") AS x")
		}
		b.WriteString(") s WHERE d OR x")
		if err := d.due(ctx, b.String(), chunk, &due, &expired); err != nil {
			return due, expired, err
		}
	}
	return due, expired, nil
}

func (d *Driver) due(ctx context.Context, query string, chunk []string, due, expired *[]string) error {
	rows, err := d.db.QueryContext(ctx, query)
	if err != nil {
		return err
	}
	defer func() { _ = rows.Close() }()
	for rows.Next() {
		var (
			i    int
			x, y bool
		)
		if err := rows.Scan(&i, &x, &y); err != nil {
			return err
		}
		if x {
			*due = append(*due, chunk[i])
		}
		if y {
			*expired = append(*expired, chunk[i])
		}
	}
	return rows.Err()
}

// CloseScan does nothing: DueSchemas keeps no connection.
func (d *Driver) CloseScan() {}

// ListenSchemas waits for ctx to end: MySQL has no LISTEN, and the due
// scan wakes the tenants.
func (d *Driver) ListenSchemas(ctx context.Context, _ func(schema string), _ func(), _ func(error)) {
	<-ctx.Done()
}

// CountSchemas counts the outboxes of tenant databases in one statement
// per StatsChunk databases: a UNION ALL of one branch per database, each
// one aggregate over the database's table with the definitions of Stats
// and DeadLetterRetryStats (the status values; due means available_at <=
// UTC_TIMESTAMP(6); the oldest due pending event's age, the earliest
// scheduled slow retry). One scan of each table, which Stats already makes
// to count processed rows. Database names are quoted identifiers.
func (d *Driver) CountSchemas(ctx context.Context, schemas []string) ([]driver.SchemaStats, error) {
	return d.CountSchemasChunked(ctx, schemas, StatsChunk)
}

// CountSchemasChunked is CountSchemas with chunk databases per statement,
// for tests of the chunking.
func (d *Driver) CountSchemasChunked(ctx context.Context, schemas []string, chunk int) ([]driver.SchemaStats, error) {
	out := make([]driver.SchemaStats, len(schemas))
	for start := 0; start < len(schemas); start += chunk {
		part := schemas[start:min(start+chunk, len(schemas))]
		var b strings.Builder
		for i, s := range part {
			if i > 0 {
				b.WriteString("\nUNION ALL ")
			}
			b.WriteString("SELECT " + strconv.Itoa(start+i) + `,
    COUNT(CASE WHEN status = 'pending' THEN 1 END), COUNT(CASE WHEN status = 'processing' THEN 1 END),
    COUNT(CASE WHEN status = 'processed' THEN 1 END), COUNT(CASE WHEN status = 'failed' THEN 1 END),
    COALESCE(TIMESTAMPDIFF(MICROSECOND, MIN(CASE WHEN status = 'pending' AND available_at <= ` + now + ` THEN available_at END), ` + now + `), 0),
    COUNT(CASE WHEN status = 'failed' AND dead_letter_retry_at IS NOT NULL THEN 1 END),
    MIN(CASE WHEN status = 'failed' AND dead_letter_retry_at IS NOT NULL THEN dead_letter_retry_at END)
FROM ` + Dialect{}.Table(s, "outbox_events"))
		}
		if err := d.count(ctx, b.String(), schemas, out); err != nil {
			return nil, sqldriver.WrapError(Dialect{}, err)
		}
	}
	return out, nil
}

func (d *Driver) count(ctx context.Context, query string, schemas []string, out []driver.SchemaStats) error {
	rows, err := d.db.QueryContext(ctx, query)
	if err != nil {
		return err
	}
	defer func() { _ = rows.Close() }()
	for rows.Next() {
		var (
			i   int
			s   driver.SchemaStats
			age int64
			due sqldriver.Time
		)
		if err := rows.Scan(&i, &s.Pending, &s.Processing, &s.Processed, &s.Failed, &age, &s.DeadLetterRetry.Waiting, &due); err != nil {
			return err
		}
		s.Schema = schemas[i]
		s.OldestPendingAge = max(time.Duration(age)*time.Microsecond, 0)
		s.DeadLetterRetry.NextDue = due.Time
		out[i] = s
	}
	return rows.Err()
}

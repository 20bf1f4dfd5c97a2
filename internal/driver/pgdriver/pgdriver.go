// Package pgdriver is the PostgreSQL storage driver, on pgx v5. Every SQL
// statement the outbox runs against PostgreSQL is in this package, built once
// per schema with quoted identifiers and bound parameters.
package pgdriver

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outbox/internal/driver"
)

// Driver is the outbox table in one schema, reached through a pgx pool.
type Driver struct {
	pool   *pgxpool.Pool
	schema string
	table  string // quoted, schema-qualified outbox_events
	q      queries
	// ordered holds the ordered-delivery statements: block, then skip.
	ordered [2]orderedQueries
	// parts holds the statements of ordered delivery by owned partitions.
	parts partitionQueries
	// orderedState is shared by the ordered claims of every relay loop.
	orderedState orderedState
	// scan is the connection of the tenants' due scan (tenants.go).
	scan *scanConn
}

var _ driver.Driver = (*Driver)(nil)

// New returns the driver for the outbox table in schema.
func New(pool *pgxpool.Pool, schema string) *Driver {
	d := &Driver{pool: pool, schema: schema, scan: &scanConn{}}
	d.table = pgx.Identifier{schema, "outbox_events"}.Sanitize()
	d.q = buildQueries(d.table)
	d.ordered = [2]orderedQueries{buildOrderedQueries(d.table, false), buildOrderedQueries(d.table, true)}
	d.parts = buildPartitionQueries(schema, d.table)
	return d
}

// Schema is the schema the driver works in.
func (d *Driver) Schema() string { return d.schema }

// Table is the quoted, schema-qualified name of the outbox table.
func (d *Driver) Table() string { return d.table }

// Ping checks the connection and that the table exists.
func (d *Driver) Ping(ctx context.Context) error {
	var exists bool
	// to_regclass is NULL when the table is missing: no error, no aborted tx.
	err := d.pool.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, d.table).Scan(&exists)
	if err != nil {
		return WrapConnectError(err)
	}
	if !exists {
		return fmt.Errorf("%w: %s", driver.ErrNoTable, d.table)
	}
	return nil
}

// SQLSTATE codes the driver tells apart.
const (
	codeUndefinedTable  = "42P01"
	codeInvalidSchema   = "3F000"
	codeReadOnlySQLTran = "25006" // read_only_sql_transaction: a standby, or default_transaction_read_only
)

// wrap turns a missing-table error into driver.ErrNoTable, so callers can
// tell the operator to migrate, and a write refused by a read-only server
// into driver.ErrReadOnly, so the relay waits instead of failing events,
// and marks data errors (SQLSTATE classes 22 and 23) with
// driver.ErrDataRefused.
func wrap(err error) error {
	if err == nil {
		return nil
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch code := pgErr.Code; {
		case code == codeUndefinedTable || code == codeInvalidSchema:
			return fmt.Errorf("%w: %s", driver.ErrNoTable, pgErr.Message)
		case code == codeReadOnlySQLTran:
			return driver.ReadOnlyError(err)
		case strings.HasPrefix(code, "22") || strings.HasPrefix(code, "23"):
			return fmt.Errorf("%w: %w", driver.ErrDataRefused, err)
		}
	}
	return err
}

// quoteIdent quotes one identifier.
func quoteIdent(s string) string { return pgx.Identifier{s}.Sanitize() }

// expand replaces {{schema}} in a SQL template with the quoted schema,
// {{schema_literal}} with its name as a string literal, and {{tag}} with a
// dollar-quote tag that the result does not otherwise contain.
func expand(sqlText, schema string) string {
	s := strings.NewReplacer("{{schema}}", quoteIdent(schema), "{{schema_literal}}", quoteLiteral(schema)).Replace(sqlText)
	if strings.Contains(s, "{{tag}}") {
		s = strings.ReplaceAll(s, "{{tag}}", dollarTag(strings.ReplaceAll(s, "{{tag}}", "")))
	}
	return s
}

// dollarTag returns a dollar-quote tag that body does not contain,
// whatever names were put into it.
func dollarTag(body string) string {
	tag := "$outbox$"
	for strings.Contains(body, tag) {
		tag = tag[:len(tag)-1] + "_$"
	}
	return tag
}

// WrapError maps a missing-table error to driver.ErrNoTable and a write
// refused by a read-only server to driver.ErrReadOnly, and leaves others as
// they are (data errors too: callers outside the relay report them as
// they are).
func WrapError(err error) error {
	if w := wrap(err); errors.Is(w, driver.ErrNoTable) || errors.Is(w, driver.ErrReadOnly) {
		return w
	}
	return err
}

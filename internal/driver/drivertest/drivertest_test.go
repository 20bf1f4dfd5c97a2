package drivertest_test

import (
	"fmt"
	"testing"

	"go.uber.org/goleak"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/driver/drivertest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// The shared PostgreSQL test pool lives for the whole test binary.
		goleak.IgnoreTopFunction("github.com/jackc/pgx/v5/pgxpool.(*Pool).backgroundHealthCheck"),
		goleak.IgnoreAnyFunction("github.com/jackc/puddle/v2.(*Pool[...]).createIdleResources"),
	)
}

func TestPostgres(t *testing.T) {
	t.Parallel()
	drivertest.Run(t, drivertest.Postgres())
}

// TestPostgresPgBouncer runs the suite through PgBouncer in transaction
// mode, with the pool in PgBouncer mode (no prepared statements, no
// session state).
func TestPostgresPgBouncer(t *testing.T) {
	t.Parallel()
	drivertest.Run(t, drivertest.PostgresPgBouncer())
}

func TestSQLite(t *testing.T) {
	t.Parallel()
	drivertest.Run(t, drivertest.SQLite())
}

func TestMariaDB(t *testing.T) {
	t.Parallel()
	drivertest.Run(t, drivertest.MariaDB(outbox.DialectMariaDB))
}

// TestMariaDBWithMySQLWriter runs the suite with the writer MySQL 8 needs
// (no INSERT … RETURNING), on MariaDB, which speaks both.
func TestMariaDBWithMySQLWriter(t *testing.T) {
	t.Parallel()
	drivertest.Run(t, drivertest.MariaDB(outbox.DialectMySQL))
}

// BenchmarkDrain drains DrainEvents prefilled events through one relay on
// each database: go test -run '^$' -bench Drain -benchtime 3x ./internal/driver/drivertest/
func BenchmarkDrain(b *testing.B) {
	for _, h := range []drivertest.Harness{drivertest.Postgres(), drivertest.SQLite(), drivertest.MariaDB(outbox.DialectMariaDB)} {
		b.Run(h.Name, func(b *testing.B) { drivertest.BenchDrain(b, h) })
	}
}

// BenchmarkDrainOrdered is BenchmarkDrain with an ordered relay, the events
// spread over 1,000 and over 10 aggregates, on each database:
// go test -run '^$' -bench DrainOrdered -benchtime 3x ./internal/driver/drivertest/
func BenchmarkDrainOrdered(b *testing.B) {
	for _, h := range []drivertest.Harness{drivertest.Postgres(), drivertest.SQLite(), drivertest.MariaDB(outbox.DialectMariaDB)} {
		for _, keys := range []int{1000, 10} {
			b.Run(fmt.Sprintf("%s/keys=%d", h.Name, keys), func(b *testing.B) { drivertest.BenchDrainOrdered(b, h, keys) })
		}
	}
}

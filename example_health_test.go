package outbox_test

import (
	"cmp"
	"context"
	"fmt"
	"log"
	"math/rand/v2"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/outboxmigrate"
)

// Checking the outbox table for bloat: the dead tuples vacuum has yet to
// remove, and the oldest transaction in the database, which keeps vacuum from
// removing any that died after it began. outboxprom exports the same figures
// as gauges; this is the check an application without Prometheus can run.
func ExampleManager_TableHealth() {
	ctx := context.Background()
	url := cmp.Or(os.Getenv("TEST_DATABASE_URL"), "postgres://postgres@127.0.0.1:5432/test?sslmode=disable")
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		panic(err)
	}
	defer pool.Close()
	db := outbox.Postgres(pool)
	schema := fmt.Sprintf("example_health_%d", rand.Uint32())
	defer pool.Exec(ctx, "DROP SCHEMA "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
	if _, err := outboxmigrate.Migrate(ctx, db, outboxmigrate.Config{Schema: schema}); err != nil {
		panic(err)
	}

	mgr := outbox.NewManager(db, outbox.ManagerConfig{Schema: schema})
	health, err := mgr.TableHealth(ctx)
	if err != nil {
		panic(err)
	}
	for _, t := range health.Tables {
		// Nil is a figure the database does not report: PostgreSQL
		// reports dead tuples, MySQL and SQLite do not.
		fmt.Printf("%s: dead tuples reported: %t, size reported: %t\n", t.Table, t.DeadTuples != nil, t.Bytes != nil)
	}
	// The horizon is the whole database's: a long transaction of any
	// session holds back vacuum of the outbox table too.
	if hz := health.Horizon; hz != nil && hz.Age > 10*time.Minute && hz.Holder != nil {
		log.Printf("vacuum held back for %s by %s %d (application %q, user %q, %s): end that transaction",
			hz.Age.Round(time.Second), hz.Holder.Kind, hz.Holder.PID, hz.Holder.Name, hz.Holder.User, hz.Holder.State)
	}
	fmt.Println("horizon reported:", health.Horizon != nil)
	// Output:
	// outbox_events: dead tuples reported: true, size reported: true
	// outbox_events_archive: dead tuples reported: true, size reported: true
	// horizon reported: true
}

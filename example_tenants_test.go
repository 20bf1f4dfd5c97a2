package outbox_test

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"slices"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/outboxmigrate"
)

// Serving every tenant schema with one Tenants: each tenant writes in its
// own schema, and each event reaches the sink with its tenant and an id
// that no other tenant shares.
func ExampleTenants() {
	ctx := context.Background()
	url := cmp.Or(os.Getenv("TEST_DATABASE_URL"), "postgres://postgres@127.0.0.1:5432/test?sslmode=disable")
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		panic(err)
	}
	defer pool.Close()
	db := outbox.Postgres(pool)
	prefix := fmt.Sprintf("example_tenant_%d_", rand.Uint32())
	for _, tenant := range []string{"acme", "globex"} {
		schema := prefix + tenant
		defer pool.Exec(ctx, "DROP SCHEMA "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
		if _, err := outboxmigrate.Migrate(ctx, db, outboxmigrate.Config{Schema: schema}); err != nil {
			panic(err)
		}
		// Each tenant's first event: both have ID 1.
		writer := outbox.NewWriter(outbox.WriterConfig{Schema: schema})
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			_, err := writer.Write(ctx, tx, outbox.Message{EventType: "invoice.created", Payload: map[string]string{"tenant": tenant}})
			return err
		})
		if err != nil {
			panic(err)
		}
	}

	delivered := make(chan outbox.Event, 2)
	sink := outbox.SinkFunc(func(ctx context.Context, events []outbox.Event) []error {
		for _, e := range events {
			delivered <- e
		}
		return nil
	})
	tenants, err := outbox.NewTenants(db, outbox.TenantsConfig{
		Relay:   outbox.RelayConfig{Sink: sink, Logger: slog.New(slog.DiscardHandler)},
		Schemas: prefix + "*",
	})
	if err != nil {
		panic(err)
	}
	if err := tenants.Start(ctx); err != nil {
		panic(err)
	}
	defer func() { _ = tenants.Stop(ctx) }()

	var got []string
	for range 2 {
		e := <-delivered
		got = append(got, fmt.Sprintf("tenant %s, event %d, unique id %s", e.Tenant[len(prefix):], e.ID, e.UniqueID()[len(prefix):]))
	}
	slices.Sort(got)
	for _, line := range got {
		fmt.Println(line)
	}
	// Output:
	// tenant acme, event 1, unique id acme:1
	// tenant globex, event 1, unique id globex:1
}

// Counting every tenant's outbox at once: on PostgreSQL one statement per
// 50 tenants, instead of a Stats call per tenant.
func ExampleManager_TenantStats() {
	ctx := context.Background()
	url := cmp.Or(os.Getenv("TEST_DATABASE_URL"), "postgres://postgres@127.0.0.1:5432/test?sslmode=disable")
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		panic(err)
	}
	defer pool.Close()
	db := outbox.Postgres(pool)
	prefix := fmt.Sprintf("example_stats_%d_", rand.Uint32())
	for i, tenant := range []string{"acme", "globex"} {
		schema := prefix + tenant
		defer pool.Exec(ctx, "DROP SCHEMA "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
		if _, err := outboxmigrate.Migrate(ctx, db, outboxmigrate.Config{Schema: schema}); err != nil {
			panic(err)
		}
		writer := outbox.NewWriter(outbox.WriterConfig{Schema: schema})
		for range i + 1 {
			err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				_, err := writer.Write(ctx, tx, outbox.Message{EventType: "invoice.created", Payload: map[string]string{"tenant": tenant}})
				return err
			})
			if err != nil {
				panic(err)
			}
		}
	}

	schemas, err := outbox.DiscoverTenants(ctx, db, prefix+"*", "")
	if err != nil {
		panic(err)
	}
	counts, err := outbox.NewManager(db, outbox.ManagerConfig{}).TenantStats(ctx, schemas)
	if err != nil {
		panic(err)
	}
	for _, c := range counts {
		fmt.Printf("%s: %d pending\n", c.Schema[len(prefix):], c.Pending)
	}
	// Output:
	// acme: 1 pending
	// globex: 2 pending
}

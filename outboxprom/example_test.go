package outboxprom_test

import (
	"bufio"
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/outboxmigrate"
	"github.com/outboxkit/outbox/outboxprom"
)

// Serving a relay's metrics. The metrics register on a registry of the
// application's own and observe the relay as a hook.
func Example() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, cmp.Or(os.Getenv("TEST_DATABASE_URL"), "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"))
	if err != nil {
		panic(err)
	}
	defer pool.Close()
	db := outbox.Postgres(pool)
	schema := fmt.Sprintf("example_prom_%d", rand.Uint32())
	defer pool.Exec(ctx, "DROP SCHEMA "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
	if _, err := outboxmigrate.Migrate(ctx, db, outboxmigrate.Config{Schema: schema}); err != nil {
		panic(err)
	}

	reg := prometheus.NewRegistry()
	metrics, err := outboxprom.New(outboxprom.Config{
		Registerer: reg,
		Manager:    outbox.NewManager(db, outbox.ManagerConfig{Schema: schema}),
		Schema:     schema,
		Sink:       "inprocess",
	})
	if err != nil {
		panic(err)
	}
	delivered := make(chan struct{}, 1)
	relay, err := outbox.NewRelay(db, outbox.RelayConfig{
		Schema: schema,
		Sink: outbox.SinkFunc(func(context.Context, []outbox.Event) []error {
			delivered <- struct{}{}
			return nil
		}),
		Hooks:  []outbox.Hook{metrics},
		Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		panic(err)
	}
	if err := relay.Start(ctx); err != nil {
		panic(err)
	}
	metrics.SetRelayUp(true)
	// Production code mounts the handler on its own server: /metrics.
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer srv.Close()

	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		_, err := outbox.NewWriter(outbox.WriterConfig{Schema: schema}).Write(ctx, tx, outbox.Message{EventType: "order.created", Payload: map[string]int{"order": 1}})
		return err
	})
	if err != nil {
		panic(err)
	}
	<-delivered
	if err := relay.Stop(ctx); err != nil { // Stop waits for the batch to be settled
		panic(err)
	}
	metrics.SetRelayUp(false)

	resp, err := http.Get(srv.URL)
	if err != nil {
		panic(err)
	}
	defer resp.Body.Close()
	scrape := bufio.NewScanner(resp.Body)
	for scrape.Scan() {
		line := strings.ReplaceAll(scrape.Text(), schema, "example")
		if strings.HasPrefix(line, "outbox_published_total") || strings.HasPrefix(line, `outbox_events{schema="example",status="pending"}`) ||
			strings.HasPrefix(line, "outbox_relay_up") {
			fmt.Println(line)
		}
	}
	// Output:
	// outbox_events{schema="example",status="pending"} 0
	// outbox_published_total{schema="example",sink="inprocess"} 1
	// outbox_relay_up{schema="example",sink="inprocess"} 0
}

// Metrics of a tenant supervisor: each tenant's relay gets series of its
// own (schema label the tenant, database label the database), removed with
// the tenant; TenantAggregate sums the tenants into one set for fleets of
// thousands.
func ExampleNewTenants() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, cmp.Or(os.Getenv("TEST_DATABASE_URL"), "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"))
	if err != nil {
		panic(err)
	}
	defer pool.Close()
	db := outbox.Postgres(pool)
	reg := prometheus.NewRegistry()
	metrics, err := outboxprom.NewTenants(outboxprom.TenantConfig{
		Registerer: reg, DB: db, Database: "db1:5432/app", Sink: "webhook",
		Mode: outboxprom.TenantPerTenant, // or outboxprom.TenantAggregate
	})
	if err != nil {
		panic(err)
	}
	tenants, err := outbox.NewTenants(db, outbox.TenantsConfig{
		Relay:     outbox.RelayConfig{Sink: outbox.SinkFunc(func(context.Context, []outbox.Event) []error { return nil })},
		Schemas:   "example_tenant_*",
		Observers: []outbox.TenantObserver{metrics},
	})
	if err != nil {
		panic(err)
	}
	_ = promhttp.HandlerFor(reg, promhttp.HandlerOpts{}) // serve it on /metrics
	fmt.Println(tenants != nil)
	// Output: true
}

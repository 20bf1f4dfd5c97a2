package outboxadmin_test

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/outboxadmin"
	"github.com/outboxkit/outbox/outboxmigrate"
)

// Mount the dashboard and its API under /admin/outbox/ in your own server,
// behind a bearer token. The dashboard is at /admin/outbox/, the API under
// /admin/outbox/api/.
func ExampleNew() {
	ctx := context.Background()
	url := cmp.Or(os.Getenv("TEST_DATABASE_URL"), "postgres://postgres@127.0.0.1:5432/test?sslmode=disable")
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		panic(err)
	}
	defer pool.Close()
	db := outbox.Postgres(pool)
	schema := fmt.Sprintf("example_admin_%d", rand.Uint32())
	defer pool.Exec(ctx, "DROP SCHEMA "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
	if _, err := outboxmigrate.Migrate(ctx, db, outboxmigrate.Config{Schema: schema}); err != nil {
		panic(err)
	}
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		_, err := outbox.NewWriter(outbox.WriterConfig{Schema: schema}).Write(ctx, tx,
			outbox.Message{EventType: "order.created", AggregateType: "order", AggregateID: "42", Payload: map[string]int{"total": 1999}})
		return err
	})
	if err != nil {
		panic(err)
	}

	admin, err := outboxadmin.New(outboxadmin.Config{
		Manager:   outbox.NewManager(db, outbox.ManagerConfig{Schema: schema}),
		AuthToken: "0123456789abcdef-example-token", // read it from your secret store
		BasePath:  "/admin/outbox",
		Logger:    slog.New(slog.DiscardHandler),
	})
	if err != nil {
		panic(err)
	}
	// Sample the table in the background, so the charts cover the last
	// hour even when nobody watched.
	if err := admin.Start(ctx); err != nil {
		panic(err)
	}
	defer admin.Stop(ctx)

	mux := http.NewServeMux()
	mux.Handle("/admin/outbox/", admin)
	srv := httptest.NewServer(mux) // your own http.Server
	defer srv.Close()

	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/admin/outbox/api/events?status=pending", nil)
	req.Header.Set("Authorization", "Bearer 0123456789abcdef-example-token")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		panic(err)
	}
	defer res.Body.Close()
	var page outboxadmin.EventsJSON
	if err := json.NewDecoder(res.Body).Decode(&page); err != nil {
		panic(err)
	}
	for _, e := range page.Events {
		fmt.Println(res.Status, e.ID, e.EventType, e.AggregateType+"/"+e.AggregateID, e.Status)
	}
	// Output:
	// 200 OK 1 order.created order/42 pending
}

package inbox_test

import (
	"bytes"
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/inbox"
	"github.com/outboxkit/outbox/outboxmigrate"
	"github.com/outboxkit/outbox/sink/handlersink"
)

// exampleDB connects to the test database and migrates the inbox into a
// schema of the example's own; applications keep the default, public.
func exampleDB(ctx context.Context, name string) (*pgxpool.Pool, string, func()) {
	url := cmp.Or(os.Getenv("TEST_DATABASE_URL"), "postgres://postgres@127.0.0.1:5432/test?sslmode=disable")
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		panic(err)
	}
	schema := fmt.Sprintf("example_%s_%d", name, rand.Uint32())
	if _, err := outboxmigrate.MigrateInbox(ctx, outbox.Postgres(pool), outboxmigrate.Config{Schema: schema}); err != nil {
		panic(err)
	}
	accounts := pgx.Identifier{schema, "accounts"}.Sanitize()
	if _, err := pool.Exec(ctx, "CREATE TABLE "+accounts+" (id text PRIMARY KEY, balance numeric NOT NULL);"+
		"INSERT INTO "+accounts+" VALUES ('a-1', 100)"); err != nil {
		panic(err)
	}
	return pool, schema, func() {
		_, _ = pool.Exec(ctx, "DROP SCHEMA "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
		pool.Close()
	}
}

// Applying a message's effect exactly once: the same message delivered
// three times charges the account once.
func ExampleInbox_Handle() {
	ctx := context.Background()
	pool, schema, done := exampleDB(ctx, "handle")
	defer done()
	accounts := pgx.Identifier{schema, "accounts"}.Sanitize()

	in, err := inbox.New(inbox.Config{Schema: schema, Consumer: "billing"})
	if err != nil {
		panic(err)
	}
	msg := inbox.Message{Source: "/orders", ID: "41", EventType: "order.paid", Payload: []byte(`{"account":"a-1","amount":30}`)}
	for range 3 { // the broker redelivers
		res, err := in.Handle(ctx, pool, msg, func(ctx context.Context, tx pgx.Tx) error {
			_, err := tx.Exec(ctx, "UPDATE "+accounts+" SET balance = balance - 30 WHERE id = 'a-1'")
			return err
		})
		if err != nil {
			panic(err) // nothing committed: leave the message to be redelivered
		}
		fmt.Println("duplicate:", res.Duplicate)
	}
	var balance int
	if err := pool.QueryRow(ctx, "SELECT balance FROM "+accounts).Scan(&balance); err != nil {
		panic(err)
	}
	fmt.Println("balance:", balance)
	// Output:
	// duplicate: false
	// duplicate: true
	// duplicate: true
	// balance: 70
}

// The same with database/sql; on SQLite or MySQL set Config.Dialect.
func ExampleInbox_HandleSQL() {
	ctx := context.Background()
	pool, schema, done := exampleDB(ctx, "handlesql")
	defer done()
	db := stdlib.OpenDBFromPool(pool)
	defer db.Close()
	accounts := pgx.Identifier{schema, "accounts"}.Sanitize()

	in, err := inbox.New(inbox.Config{Schema: schema, Consumer: "billing"})
	if err != nil {
		panic(err)
	}
	msg := inbox.Message{Source: "/orders", ID: "42", Payload: []byte(`{}`)}
	for range 2 {
		res, err := in.HandleSQL(ctx, db, msg, func(ctx context.Context, tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, "UPDATE "+accounts+" SET balance = balance + 5 WHERE id = 'a-1'")
			return err
		})
		if err != nil {
			panic(err)
		}
		fmt.Println("duplicate:", res.Duplicate)
	}
	// Output:
	// duplicate: false
	// duplicate: true
}

// A webhook endpoint for a relay's webhook sink that stores each message
// once for applications that take rows with SQL, as outbox receive does.
func ExampleNewWebhookHandler() {
	ctx := context.Background()
	pool, schema, done := exampleDB(ctx, "webhook")
	defer done()

	in, err := inbox.New(inbox.Config{Schema: schema, Consumer: "mailer"})
	if err != nil {
		panic(err)
	}
	h, err := inbox.NewWebhookHandler(inbox.WebhookConfig{
		// Secret: os.Getenv("WEBHOOK_SECRET"), // the relay's --webhook-secret
		Receive: func(ctx context.Context, m inbox.Message) (inbox.Result, error) {
			return in.Store(ctx, pool, m) // committed when it returns
		},
	})
	if err != nil {
		panic(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()

	for range 2 {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/outbox", bytes.NewReader([]byte(`{"order_id":"o-1"}`)))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("ce-id", "17")
		req.Header.Set("ce-source", "/orders")
		req.Header.Set("ce-type", "order.created")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			panic(err)
		}
		var body bytes.Buffer
		_, _ = body.ReadFrom(resp.Body)
		resp.Body.Close()
		fmt.Print(resp.StatusCode, " ", body.String())
	}
	lag, err := inbox.Lag(ctx, outbox.Postgres(pool), schema)
	if err != nil {
		panic(err)
	}
	fmt.Println(lag[0].Consumer, "has", lag[0].Unprocessed, "message to process")
	// Output:
	// 200 {"status":"stored"}
	// 200 {"status":"duplicate"}
	// mailer has 1 message to process
}

// The handler sink's ledger in inbox_messages: the retry of an event whose
// notification failed skips its audit, which succeeded.
func ExampleLedger() {
	ctx := context.Background()
	pool, schema, done := exampleDB(ctx, "ledger")
	defer done()

	ledger, err := inbox.NewLedger(pool, inbox.LedgerConfig{Schema: schema})
	if err != nil {
		panic(err)
	}
	sink := handlersink.New(handlersink.Config{Ledger: ledger})
	mailUp := false
	sink.HandleNamed("order.paid", "notify", func(ctx context.Context, e outbox.Event) error {
		fmt.Println("notify", e.ID, "mail up:", mailUp)
		if !mailUp {
			return errors.New("mail server down")
		}
		return nil
	})
	sink.HandleNamed("order.paid", "audit", func(ctx context.Context, e outbox.Event) error {
		fmt.Println("audit", e.ID)
		return nil
	})
	events := []outbox.Event{{ID: 7, EventType: "order.paid", Payload: []byte(`{}`)}}
	fmt.Println("first delivery:", sink.Publish(ctx, events)) // the relay retries it
	mailUp = true
	fmt.Println("retry:", sink.Publish(ctx, events)) // nil: every handler succeeded
	// Output:
	// notify 7 mail up: false
	// audit 7
	// first delivery: [handlersink: handler "notify" for "order.paid" failed on event 7: mail server down]
	// notify 7 mail up: true
	// retry: []
}

// A receiver records the broker's pending count each time it reads it;
// a dashboard reads the reports back with their age, and treats a stale
// one as the last known count, not the current one.
func ExampleBrokerReports() {
	ctx := context.Background()
	pool, schema, done := exampleDB(ctx, "broker_reports")
	defer done()
	db := outbox.Postgres(pool)

	// In the receiver, after each read of the broker (natsinbox.Pending).
	if err := inbox.ReportBroker(ctx, db, schema, inbox.BrokerReport{
		Consumer: "billing", Broker: "nats", Pending: 42, Interval: 5 * time.Second}); err != nil {
		panic(err)
	}

	reports, err := inbox.BrokerReports(ctx, db, schema)
	if err != nil {
		panic(err)
	}
	for _, r := range reports {
		fmt.Printf("%s: %d pending on %s, stale: %v\n", r.Consumer, r.Pending, r.Broker, r.Stale())
	}
	// Output:
	// billing: 42 pending on nats, stale: false
}

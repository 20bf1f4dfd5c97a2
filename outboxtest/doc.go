// Package outboxtest helps applications test code that uses the outbox.
//
// The Require functions check what a transaction wrote, in the spirit of
// River's rivertest.RequireInsertedTx. They read the outbox table inside
// the caller's transaction, still open, so they see its uncommitted events
// (and whatever other transactions committed), and fail the test with a
// list of what was written instead when the check does not hold:
//
//	tx, _ := pool.Begin(ctx)
//	defer tx.Rollback(ctx)
//	_ = app.PlaceOrder(ctx, tx, "42") // writes order.created through an outbox.Writer
//	e := outboxtest.RequireWrittenTx(ctx, t, tx, "order.created", &outboxtest.WrittenOpts{
//		AggregateID: "42",
//		Payload:     map[string]any{"id": "42", "total": 30}, // JSON-equal
//	})
//
// RequireWrittenTx wants exactly one matching event and returns it,
// RequireManyWrittenTx exactly n, RequireNotWrittenTx none. They take a
// pgx.Tx (or anything with its Query method: pgx.Conn, pgxpool.Pool); the
// SQLTx variants take a *sql.Tx of SQLite, MySQL, MariaDB or PostgreSQL
// (the pgx stdlib driver), with WrittenOpts.Dialect naming the database.
// WrittenOpts also names the schema, and narrows the match by aggregate,
// payload and headers. They take a TB, which *testing.T satisfies.
//
// Recorder is a Sink for a relay under test that keeps every event it
// accepts, can be told to fail events instead (SetFail), and lets a test
// wait until enough have arrived (WaitLen):
//
//	rec := outboxtest.NewRecorder()
//	relay, err := outbox.NewRelay(db, outbox.RelayConfig{Sink: rec})
//	// … start the relay, run the code that writes events …
//	rec.WaitLen(t, 1, 5*time.Second)
//	got := rec.Events()[0]
package outboxtest

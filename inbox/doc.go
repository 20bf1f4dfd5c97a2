// Package inbox is the consumer side of the outbox: it turns at-least-once
// delivery into exactly-once effects. A consumer records each message's
// ID in inbox_messages in the same transaction as the message's effect,
// under the primary key (consumer, source, message_id), so a redelivered
// message finds its record and is skipped.
//
//	in, err := inbox.New(inbox.Config{Consumer: "billing"})
//	...
//	res, err := in.Handle(ctx, pool, msg, func(ctx context.Context, tx pgx.Tx) error {
//		_, err := tx.Exec(ctx, `UPDATE accounts SET balance = balance - $1 WHERE id = $2`, amount, id)
//		return err
//	})
//	// err != nil: nothing committed, let the message be redelivered.
//	// res.Duplicate: applied before, nothing done now.
//
// Handle (pgx) and HandleSQL (database/sql: PostgreSQL, SQLite, MySQL and
// MariaDB) begin the transaction, record the message, run the handler and
// commit. A handler error rolls back both. Two deliveries of one message at
// the same time run the handler once: the second insert waits for the
// first transaction's uncommitted row and then finds it. Record and
// RecordSQL do the recording in a transaction the caller manages; Store and
// StoreSQL keep a message unprocessed (processed_at NULL) for applications
// that take rows with plain SQL, which is what `outbox receive` does.
//
// The dedup key includes Message.Source because event IDs are unique only
// within one outbox table: give every producer feeding a consumer its own
// source (the relay's CloudEvents source).
//
// NewWebhookHandler is an http.Handler for the webhook sink's requests: it
// verifies Standard Webhooks signatures as the sink makes them, refuses
// replays outside a timestamp tolerance and bodies over a limit, and
// answers 2xx only after the message committed.
//
// Create the table with `outbox migrate --inbox` or
// outboxmigrate.MigrateInbox; trim it with Purge (the dedup window); watch
// it with Lag and outboxprom.NewInbox. docs/consumers.md is the guide.
package inbox

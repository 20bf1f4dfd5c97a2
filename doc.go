// Package outbox is a transactional outbox for PostgreSQL, SQLite and
// MySQL/MariaDB: applications write events in the same transaction as their
// data, and a relay delivers them at least once to a sink.
//
// A service that changes its database and then publishes a message has a
// dual-write problem: the two writes cannot be atomic. Commit first and crash
// before publishing, and the event is lost; publish first and roll back, and
// consumers act on something that never happened. With an outbox the
// application inserts the event into the outbox_events table in the same
// transaction as the business rows, so the event exists if and only if the
// change committed. A [Relay] claims committed events, publishes them to a
// [Sink] (a webhook, a message broker, in-process handlers) and marks them
// processed, retrying with backoff and dead-lettering what cannot be
// delivered.
//
// # Guarantees
//
//   - At least once. An event whose transaction committed is published until
//     the sink acknowledges it or it is dead-lettered. A crash between the
//     sink's acknowledgement and the relay's mark, or a relay that lost its
//     lease, means the event is published again. Events of rolled-back
//     transactions are never published.
//   - A stable ID. [Event.ID] is the same on every delivery; consumers drop
//     duplicates on it.
//   - Unordered by default: a claim takes due events in (available_at, id)
//     order, but retries go back with a later available_at and several relays
//     or [RelayConfig.Workers] publish batches at the same time.
//   - Per-aggregate order with [RelayConfig.Ordering] = [OrderingAggregate]
//     (PostgreSQL for now): for each (AggregateType, AggregateID), the sink's
//     first acknowledgements follow the order the events were written in
//     (within a transaction, insertion order; between transactions that ran
//     one after the other, commit order; between concurrent ones, the order
//     of their first writes), across relays, crashes and retries.
//     [RelayConfig.OrderedFailure] says whether a dead-lettered event holds
//     its aggregate's later events back (block) or not (skip).
//   - Database errors never spend an event's attempts: the relay retries its
//     own statements, and events whose marks could not land are rescued when
//     their lease expires.
//
// # Databases
//
// A [Database] is the database that holds the outbox table; the relay, the
// [Manager] and the outboxmigrate package take one:
//
//   - [Postgres] wraps a *pgxpool.Pool. Writers use [Writer.Write] with a pgx
//     transaction, or [Writer.WriteSQL] on the pgx stdlib driver
//     ([DialectPostgres], the default).
//   - [SQLite] wraps a *sql.DB opened in WAL mode with a busy timeout.
//     Writers use [Writer.WriteSQL] with [DialectSQLite].
//   - [MySQL] wraps a *sql.DB of MySQL 8 or MariaDB 10.6+ opened with
//     go-sql-driver/mysql and parseTime=true. Writers use [Writer.WriteSQL]
//     with [DialectMariaDB] (one round trip per batch) or [DialectMySQL].
//
// This package imports pgx and the standard library only; on SQLite and
// MySQL the application imports the database/sql driver. [DialectOf] returns
// the writer dialect that suits a Database. The schema of every config names
// a PostgreSQL schema, an attached SQLite database ("public" means "main") or
// a MySQL database ("public" means the connection's). Only PostgreSQL has
// LISTEN/NOTIFY wake-ups; on the others the relay polls, or a writer in its
// process calls [Relay.Wake].
//
// # Creating the table
//
// The outboxmigrate package applies the embedded, numbered migrations of the
// Database's kind; the outbox command does the same with `outbox migrate`,
// and `outbox migrate --print` prints them as SQL for teams that vendor
// their migrations:
//
//	db := outbox.Postgres(pool)
//	if _, err := outboxmigrate.Migrate(ctx, db, outboxmigrate.Config{}); err != nil {
//		return err
//	}
//
// # Writing events
//
// [Writer.Write] inserts a batch of [Message] values into the caller's pgx
// transaction in one statement; [Writer.WriteSQL] does the same for a
// database/sql transaction of the database [WriterConfig.Dialect] names:
//
//	writer := outbox.NewWriter(outbox.WriterConfig{})
//	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
//		if _, err := tx.Exec(ctx, `INSERT INTO orders (id, total) VALUES ($1, $2)`, id, total); err != nil {
//			return err
//		}
//		_, err := writer.Write(ctx, tx, outbox.Message{
//			EventType: "order.created", AggregateType: "order", AggregateID: id,
//			Payload: map[string]any{"id": id, "total": total},
//		})
//		return err // the event commits or rolls back with the order
//	})
//
// The [WriteResult] holds each message's new event ID, in order. Invalid
// messages are refused with a [*MessageError] before anything is sent, so
// the transaction stays usable. A message's CorrelationID, CausationID and
// SchemaVersion are stored as the headers [HeaderCorrelationID],
// [HeaderCausationID] and [HeaderSchemaVersion]; [HeaderTraceParent] and
// [HeaderTraceState] carry W3C trace context. Delay and AvailableAt hold an
// event back; MaxAttempts overrides the relay's limit for one event.
//
// [WriterConfig.HeadersFromContext] adds headers from the caller's context to
// every message, such as the trace context the outboxotel package stores.
// [WriterConfig.NotifyInterval] (PostgreSQL) wakes listening relays; see
// Wake-ups below.
//
// # Idempotency keys
//
// [IdempotencyKey] returns the deterministic key
// aggregateType:aggregateID:eventType:YYYY-MM-DD (the date in UTC). Set it as
// [Message.IdempotencyKey] and a second write of the same business event is
// skipped without aborting the transaction: it is reported in
// [WriteResult.Duplicates] with ID 0, never as an error, and the transaction
// commits everything else. A key deduplicates only against events still in
// outbox_events, so with [RetainDelete] or [RetainArchive] only against
// events not yet delivered.
//
// # Writers in other languages
//
// The table is the contract. This is a complete pending event on every
// database; every other column has a default:
//
//	INSERT INTO outbox_events (event_type, aggregate_type, aggregate_id, payload)
//	VALUES ('order.created', 'order', 'o-1', '{"order_id": "o-1", "total": 12.5}');
//
// headers is a JSON object (default '{}'), idempotency_key is unique when
// set (on PostgreSQL use ON CONFLICT (idempotency_key) WHERE idempotency_key
// IS NOT NULL DO NOTHING), available_at in the future delays the event and
// max_attempts overrides the relay's limit. Leave id, status, attempts and
// the lease columns to their defaults. docs/databases.md lists every column
// and the types on SQLite and MySQL.
//
// # Relaying events
//
// A [Relay] runs [RelayConfig.Workers] loops that claim up to BatchSize due
// pending events under a lease (locked_by, locked_until), publish them with
// one [Sink.Publish] call bounded by SinkTimeout, and mark them. Marks are
// fenced on the claim's lease, so a relay that stalled past its lease
// changes nothing once another relay has re-claimed the events. Any number
// of relays may serve one table.
//
//	relay, err := outbox.NewRelay(outbox.Postgres(pool), outbox.RelayConfig{Sink: stdoutsink.New(nil)})
//	if err != nil {
//		return err
//	}
//	return relay.Run(ctx) // until ctx ends, then a graceful stop
//
// A failed event goes back to pending after BackoffBase·2^n (the n-th
// failure, with jitter, capped at BackoffMax) and is dead-lettered (status
// failed) when its attempts reach MaxAttempts or its error is wrapped with
// [Permanent]. Every relay also rescues events whose lease expired because
// their relay died; the expiry counts as an attempt, and a rescued event is
// claimed alone from then on, so an event whose publishing kills the relay
// is dead-lettered after MaxAttempts crashes without taking other events
// with it. [Relay.Stop] and the end of Run's context stop claiming
// and let in-flight batches finish within ShutdownTimeout; publishes still
// running after that are cancelled and their events released without
// spending an attempt.
//
// [RelayConfig] documents every field and its default; the defaults are the
// …Default constants such as [BatchSizeDefault] and [LeaseDefault], and
// [RelayConfig.WithDefaults] fills them in. [RelayConfig.EventTypes] limits a
// relay to event types matching its patterns ("order.*"), in the claim
// statement itself, so relays with disjoint patterns serve different sinks
// from one table. [ConfigureRelayPool] prepares a PostgreSQL pool that a
// relay uses alone.
//
// # Retention
//
// [RelayConfig.Retention] says what happens to a delivered event's row.
// [RetainProcessed], the default, keeps it with status processed: history
// stays queryable and replayable until [Manager.Purge] trims it.
// [RetainDelete] deletes it, and [RetainArchive] moves it to
// outbox_events_archive (which Purge also trims); both keep the hot table
// small, and the events they remove can no longer be replayed.
//
// Relays can purge on their own: with [RelayConfig.PurgeAfter] (and
// PurgeFailedAfter) the one relay of a fleet that holds the job lease, a
// row in outbox_leases judged by the database clock, deletes old events in
// batches every PurgeInterval; with [RelayConfig.DeadLetterRetry] it also
// sends dead-lettered events back to pending on a slow schedule, at most
// DeadLetterRetries times each.
//
// # Wake-ups
//
// After a full batch a relay claims again at once, and 5ms after a short one
// (a trailing claim that wake-ups do not cut short, so a busy relay claims
// every few milliseconds rather than once per commit); after the first empty
// claim that follows events it claims once more 50ms later, for a write that
// commits late without a wake-up of its own; after any other empty claim it
// sleeps PollInterval. Until a claim fills a batch the relay's workers
// take turns, so these waits pace the relay as a whole, not each worker. [Relay.Wake] ends that sleep at once, for a writer
// in the same process. On PostgreSQL,
// [RelayConfig.Listen] holds one connection in LISTEN, and writers with
// [WriterConfig.NotifyInterval] (such as [NotifyIntervalDefault]) send a
// NOTIFY in their insert statement, at most once per interval, that wakes
// the relay when the transaction commits.
//
// # Hooks
//
// [RelayConfig.Hooks] takes any mix of [HookBatch] (after every settled
// batch, with a [BatchInfo]), [HookDeadLetter] (after every dead letter),
// [HookPublish] (around every publish; it may change the headers the sink
// sees), [HookRescue] (after every lease rescue), and for the scheduled
// jobs [HookPurge], [HookLeaderLease] and [HookDeadLetterRetry]. The outboxprom, outboxalert and outboxotel packages implement them
// for Prometheus metrics, dead-letter alerts and OpenTelemetry tracing.
//
// # Sinks
//
// A [Sink] returns one error per event: nil for delivered, an error to retry
// with backoff, or an error wrapped with [Permanent] to dead-letter at once.
// An error wrapped with [Unavailable] says the sink cannot be reached at all
// (a refused connection, DNS, a TLS handshake): the relay then spends no
// attempt, stops claiming and probes the sink (its [HealthChecker], or a
// trial publish) until it answers; [HookSinkState] reports the circuit.
// A panic or a result slice of the wrong length fails the whole batch,
// retryably. [SinkFunc] adapts a function and [BatchError] fails a whole
// batch. The sink packages under sink/ are stdoutsink (JSON lines),
// webhooksink (CloudEvents over HTTP, signed with Standard Webhooks),
// handlersink (Go functions in the same process), and natssink, kafkasink,
// amqpsink, redissink and mqttsink for NATS JetStream, Kafka, RabbitMQ,
// Redis Streams and MQTT; the route package picks a broker destination per
// event. sinktest is the conformance suite every sink passes. outboxtest
// helps applications' tests: outboxtest.RequireWrittenTx checks, inside a
// transaction still open, that it wrote an event (of a type, aggregate,
// payload, headers), and outboxtest.Recorder is a recording sink.
//
// # Operating
//
// A [Manager] answers the operator's questions and runs their actions:
// [Manager.Stats] and [Manager.EstimateStats] (counts per status and the
// oldest pending event's age), [Manager.ListEvents], [Manager.SearchEvents]
// and [Manager.Event], [Manager.Retry], [Manager.RetryAllFailed] and
// [Manager.RetryMatching] for dead-lettered events, [Manager.Replay] and
// [Manager.ReplayMatching] for processed ones, [Manager.Discard] for pending
// ones, [Manager.Leases] for the relays holding events, and [Manager.Purge]
// for retention. The outbox command (cmd/outbox) wraps it: outbox stats,
// outbox events list|show|retry|replay, outbox purge, and outbox admin, which
// serves the outboxadmin dashboard.
//
// The docs directory of the repository describes the architecture, each
// database, the brokers, the operation of relays in production,
// observability, the admin dashboard and performance.
package outbox

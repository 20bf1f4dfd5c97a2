package sqldriver

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/outboxkit/outbox/internal/driver"
)

// InboxExecer is what an inbox insert needs from the caller's transaction:
// *sql.Tx, *sql.Conn or *sql.DB.
type InboxExecer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// InboxInserter records one message in inbox_messages in the caller's
// transaction.
type InboxInserter interface {
	// InsertInbox inserts r and reports whether it did: false when the
	// key exists (a duplicate), without failing the transaction. A
	// transaction that inserted the same key and is still open is waited
	// for.
	InsertInbox(ctx context.Context, q InboxExecer, r *driver.InboxRecord) (bool, error)
}

// InboxDialect is the inbox's part of a Dialect: its migration track and
// the purge, whose shape differs (MySQL deletes with ORDER BY … LIMIT,
// SQLite through a rowid subquery).
type InboxDialect interface {
	// InboxMigrations returns the embedded inbox migrations.
	InboxMigrations() []Migration
	// InboxMigrationSQL renders every inbox migration for schema.
	InboxMigrationSQL(schema string) string
	// MigrateInbox applies the missing inbox migrations under the
	// dialect's lock.
	MigrateInbox(ctx context.Context, db *sql.DB, schema string) ([]Migration, error)
	// InboxSchemaVersion returns the highest applied inbox migration.
	InboxSchemaVersion(ctx context.Context, db *sql.DB, schema string) (int, error)
	// InboxPurge deletes up to a limit of table's processed rows that were
	// processed before Now plus the bound milliseconds (negative), of the
	// bound consumer or of all when it is empty; the arguments are bound
	// as (millis, consumer, consumer, limit).
	InboxPurge(table string) string
	// InboxConsumerUpsert inserts or replaces one row of inbox_consumers,
	// reported_at the database's Now; the arguments are bound as
	// (consumer, broker, broker_pending, poll_interval_ms).
	InboxConsumerUpsert(table string) string
}

func (d *Driver) inboxDialect() (InboxDialect, error) {
	id, ok := d.d.(InboxDialect)
	if !ok {
		return nil, fmt.Errorf("%s has no inbox: %w", d.d.Name(), errors.ErrUnsupported)
	}
	return id, nil
}

// MigrateInbox applies the inbox migrations the schema lacks.
func (d *Driver) MigrateInbox(ctx context.Context) ([]driver.Migration, error) {
	id, err := d.inboxDialect()
	if err != nil {
		return nil, err
	}
	applied, err := id.MigrateInbox(ctx, d.db, d.schema)
	return infos(applied), d.wrap(err)
}

// InboxMigrationSQL returns every inbox migration for the driver's schema.
func (d *Driver) InboxMigrationSQL() string {
	id, err := d.inboxDialect()
	if err != nil {
		return "-- " + err.Error() + "\n"
	}
	return id.InboxMigrationSQL(d.schema)
}

// InboxMigrations lists the embedded inbox migrations.
func (d *Driver) InboxMigrations() []driver.Migration {
	id, err := d.inboxDialect()
	if err != nil {
		return nil
	}
	return infos(id.InboxMigrations())
}

// InboxSchemaVersion returns the highest applied inbox migration.
func (d *Driver) InboxSchemaVersion(ctx context.Context) (int, error) {
	id, err := d.inboxDialect()
	if err != nil {
		return 0, err
	}
	v, err := id.InboxSchemaVersion(ctx, d.db, d.schema)
	return v, d.wrap(err)
}

// PurgeInboxBatch deletes one batch of processed inbox rows, oldest first.
func (d *Driver) PurgeInboxBatch(ctx context.Context, p driver.InboxPurgeParams) (int64, error) {
	id, err := d.inboxDialect()
	if err != nil {
		return 0, err
	}
	res, err := d.db.ExecContext(ctx, id.InboxPurge(d.d.Table(d.schema, "inbox_messages")),
		-p.OlderThan.Milliseconds(), p.Consumer, p.Consumer, p.BatchSize)
	if err != nil {
		return 0, d.wrap(err)
	}
	return res.RowsAffected()
}

// InboxLag reads each consumer's unprocessed rows and the oldest one's age,
// against the database clock read in the same statement.
func (d *Driver) InboxLag(ctx context.Context) ([]driver.ConsumerLag, error) {
	t := d.d.Table(d.schema, "inbox_messages")
	rows, err := d.db.QueryContext(ctx, `SELECT consumer, count(*), min(received_at), `+d.d.Now()+`
FROM `+t+` WHERE processed_at IS NULL GROUP BY consumer ORDER BY consumer`)
	if err != nil {
		return nil, d.wrap(err)
	}
	defer func() { _ = rows.Close() }()
	var out []driver.ConsumerLag
	for rows.Next() {
		var (
			l           driver.ConsumerLag
			oldest, now Time
		)
		if err := rows.Scan(&l.Consumer, &l.Unprocessed, &oldest, &now); err != nil {
			return nil, err
		}
		l.OldestUnprocessedAge = max(now.Sub(oldest.Time), 0)
		out = append(out, l)
	}
	return out, d.wrap(rows.Err())
}

// ReportBroker upserts r's row of inbox_consumers.
func (d *Driver) ReportBroker(ctx context.Context, r driver.BrokerReport) error {
	id, err := d.inboxDialect()
	if err != nil {
		return err
	}
	_, err = d.db.ExecContext(ctx, id.InboxConsumerUpsert(d.d.Table(d.schema, "inbox_consumers")),
		r.Consumer, r.Broker, r.Pending, max(r.Interval.Milliseconds(), 1))
	return d.wrap(err)
}

// InboxBrokerReports reads inbox_consumers with each row's age against the
// database clock read in the same statement.
func (d *Driver) InboxBrokerReports(ctx context.Context) ([]driver.BrokerReport, error) {
	t := d.d.Table(d.schema, "inbox_consumers")
	rows, err := d.db.QueryContext(ctx, `SELECT consumer, broker, broker_pending, poll_interval_ms, reported_at, `+d.d.Now()+`
FROM `+t+` ORDER BY consumer`)
	if err != nil {
		return nil, d.wrap(err)
	}
	defer func() { _ = rows.Close() }()
	var out []driver.BrokerReport
	for rows.Next() {
		var (
			r             driver.BrokerReport
			ms            int64
			reported, now Time
		)
		if err := rows.Scan(&r.Consumer, &r.Broker, &r.Pending, &ms, &reported, &now); err != nil {
			return nil, err
		}
		r.Interval = time.Duration(ms) * time.Millisecond
		r.Age = max(now.Sub(reported.Time), 0)
		out = append(out, r)
	}
	return out, d.wrap(rows.Err())
}

var _ driver.Inbox = (*Driver)(nil)

// Package outboxmigrate creates and upgrades the outbox schema on
// PostgreSQL, SQLite and MySQL/MariaDB. Migrations are embedded in the
// binary, numbered, written for each database, and recorded in the
// outbox_migrations table (version, name, applied_at) next to
// outbox_events; Migrate applies the missing ones and is safe to run from
// several processes at once. Teams that manage schema changes with goose,
// atlas or golang-migrate vendor the output of SQL instead.
package outboxmigrate

import (
	"context"
	"errors"
	"fmt"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/driver"
)

// Config selects the schema to migrate.
type Config struct {
	// Schema holds outbox_events. Defaults to outbox.SchemaDefault.
	Schema string
	// PartitionArchive, when set, makes outbox_events_archive a table
	// partitioned by range of processed_at, one partition per PeriodDaily
	// or PeriodWeekly (UTC), so that purging it drops whole partitions
	// instead of deleting rows. Existing archived rows stay, in one
	// partition for everything before the next period. PostgreSQL only;
	// once set, the period cannot be changed. Empty (the default) leaves
	// the archive a plain table.
	PartitionArchive Period
	// Ordering, set to outbox.OrderingAggregate, prepares the schema for
	// relays with RelayConfig.Ordering = outbox.OrderingAggregate. On
	// MySQL/MariaDB that creates the BEFORE INSERT trigger that numbers
	// each aggregate's events (key_seq): it costs every writer a second row
	// and makes the writers of one aggregate wait for each other, so it is
	// not part of the numbered migrations, and an ordered relay refuses to
	// start without it. Once created it stays (drop it by hand only with no
	// ordered relay running). PostgreSQL and SQLite need nothing beyond
	// the migrations. Empty or outbox.OrderingNone (the default) changes
	// nothing.
	Ordering outbox.Ordering
}

// Period is the span of one partition of a partitioned archive.
type Period string

// Partition periods.
const (
	// PeriodDaily is one partition per UTC day.
	PeriodDaily Period = driver.PeriodDaily
	// PeriodWeekly is one partition per ISO week, from Monday 00:00 UTC.
	PeriodWeekly Period = driver.PeriodWeekly
)

// ErrPeriodChange is returned by Migrate when the archive is already
// partitioned with another period than Config.PartitionArchive.
var ErrPeriodChange = driver.ErrPeriodChange

// ErrPartitionUnsupported is returned when Config.PartitionArchive is set
// for a database other than PostgreSQL.
var ErrPartitionUnsupported = fmt.Errorf("archive partitioning is PostgreSQL only: %w", errors.ErrUnsupported)

// partitioner checks cfg.PartitionArchive and returns the driver's
// partitioning, nil when none is asked for.
func partitioner(drv driver.Driver, cfg Config) (driver.ArchivePartitioner, error) {
	switch cfg.PartitionArchive {
	case "":
		return nil, nil
	case PeriodDaily, PeriodWeekly:
	default:
		return nil, &outbox.ConfigError{Field: "PartitionArchive", Err: fmt.Errorf("unknown period %q: use daily or weekly", cfg.PartitionArchive)}
	}
	p, ok := drv.(driver.ArchivePartitioner)
	if !ok {
		return nil, ErrPartitionUnsupported
	}
	return p, nil
}

// Migration is one numbered schema change.
type Migration struct {
	// Version is the migration's number: 1 for the first.
	Version int
	// Name is what it does, such as create_outbox_events.
	Name string
}

// Result reports a Migrate call.
type Result struct {
	// Applied lists the migrations this call applied, in order; empty when
	// the schema was already current.
	Applied []Migration
	// Version is the schema's version after the call.
	Version int
	// Archive reports the archive's partitioning when
	// Config.PartitionArchive was set.
	Archive ArchivePartitioning
}

// ArchivePartitioning reports what Migrate did to the archive's partitions.
type ArchivePartitioning struct {
	// Period is the archive's partition period.
	Period Period
	// Converted is true when this call turned the plain archive into a
	// partitioned one.
	Converted bool
	// Created names the partitions this call created, oldest first (those
	// of the conversion itself are not listed).
	Created []string
}

// Migrate applies the migrations cfg.Schema lacks and reports them, under a
// lock that makes concurrent callers wait, then find nothing left to do:
//
//   - PostgreSQL: it creates the schema if needed and takes a session
//     advisory lock per schema, then applies every missing migration in one
//     transaction.
//   - SQLite: one BEGIN IMMEDIATE transaction, whose write lock is the lock.
//     The schema is an attached database ("public" means "main").
//   - MySQL/MariaDB: it creates the database the schema names if needed
//     ("public" means the connection's) and holds a named lock (GET_LOCK)
//     per database, waiting up to 5 minutes for another migrator. MySQL
//     commits each DDL statement at once, so each migration is its own
//     step: one that fails half way is not recorded, and what it created
//     must be dropped by hand before the next run (the error names the
//     migration).
//
// With Config.PartitionArchive it then partitions the archive and creates
// the partitions ahead, in the same transaction; run again with the same
// period, it only creates partitions that are missing.
func Migrate(ctx context.Context, db outbox.Database, cfg Config) (Result, error) {
	drv := db.Driver(cfg.Schema)
	if err := checkOrdering(cfg); err != nil {
		return Result{}, fmt.Errorf("outboxmigrate: %w", err)
	}
	part, err := partitioner(drv, cfg)
	if err != nil {
		return Result{}, fmt.Errorf("outboxmigrate: %w", err)
	}
	var (
		applied []driver.Migration
		res     Result
	)
	if part != nil {
		var pr driver.PartitionResult
		applied, pr, err = part.MigratePartitioned(ctx, string(cfg.PartitionArchive))
		res.Archive = ArchivePartitioning{Period: Period(pr.Period), Converted: pr.Converted, Created: pr.Created}
	} else {
		applied, err = drv.Migrate(ctx)
	}
	if err != nil {
		return Result{}, fmt.Errorf("outboxmigrate: %w", err)
	}
	for _, m := range applied {
		res.Applied = append(res.Applied, Migration(m))
	}
	if p, ok := drv.(driver.OrderingPreparer); ok && cfg.Ordering == outbox.OrderingAggregate {
		if err := p.PrepareOrdering(ctx); err != nil {
			return res, fmt.Errorf("outboxmigrate: prepare ordering: %w", err)
		}
	}
	res.Version, err = drv.SchemaVersion(ctx)
	if err != nil {
		return res, fmt.Errorf("outboxmigrate: read version: %w", err)
	}
	return res, nil
}

// SQL returns every migration for cfg.Schema as one script in the SQL of
// db's database, ready to vendor, followed, with Config.Ordering on
// MySQL/MariaDB, by the key-sequence trigger.
// It leaves out the archive's partitioning: see PartitionSQL.
func SQL(db outbox.Database, cfg Config) string {
	drv := db.Driver(cfg.Schema)
	s := drv.MigrationSQL()
	if p, ok := drv.(driver.OrderingPreparer); ok && cfg.Ordering == outbox.OrderingAggregate {
		if o := p.PrepareOrderingSQL(); o != "" {
			s += "\n-- ordered delivery (outbox migrate --ordering aggregate)\n" + o
		}
	}
	return s
}

// checkOrdering validates Config.Ordering.
func checkOrdering(cfg Config) error {
	switch cfg.Ordering {
	case "", outbox.OrderingNone, outbox.OrderingAggregate:
		return nil
	}
	return &outbox.ConfigError{Field: "Ordering", Err: fmt.Errorf("unknown ordering %q: use aggregate or none", cfg.Ordering)}
}

// PartitionSQL returns the script that partitions the archive as
// cfg.PartitionArchive says, to run after the one SQL returns. It computes
// the partition boundaries from the database clock when it runs, and does
// nothing when the archive already has that period. It needs no connection.
func PartitionSQL(db outbox.Database, cfg Config) (string, error) {
	part, err := partitioner(db.Driver(cfg.Schema), cfg)
	if err != nil {
		return "", fmt.Errorf("outboxmigrate: %w", err)
	}
	if part == nil {
		return "", nil
	}
	return part.PartitionSQL(string(cfg.PartitionArchive)), nil
}

// Version returns the highest migration applied to cfg.Schema, 0 when none.
func Version(ctx context.Context, db outbox.Database, cfg Config) (int, error) {
	return db.Driver(cfg.Schema).SchemaVersion(ctx)
}

// Latest returns the newest migration this build knows.
func Latest(db outbox.Database) Migration {
	ms := db.Driver("").Migrations()
	return Migration(ms[len(ms)-1])
}

// The inbox's migration track: inbox_messages, for consumers (package
// inbox), recorded in inbox_migrations apart from the outbox's own, so a
// consumer's database gets the inbox alone and a service that both writes
// and consumes gets both.

// MigrateInbox applies the inbox migrations cfg.Schema lacks, under a lock
// of the inbox's own, as Migrate does for the outbox's.
// Config.PartitionArchive does not apply.
func MigrateInbox(ctx context.Context, db outbox.Database, cfg Config) (Result, error) {
	inb, err := inboxDriver(db, cfg)
	if err != nil {
		return Result{}, err
	}
	applied, err := inb.MigrateInbox(ctx)
	if err != nil {
		return Result{}, fmt.Errorf("outboxmigrate: inbox: %w", err)
	}
	var res Result
	for _, m := range applied {
		res.Applied = append(res.Applied, Migration(m))
	}
	res.Version, err = inb.InboxSchemaVersion(ctx)
	if err != nil {
		return res, fmt.Errorf("outboxmigrate: read inbox version: %w", err)
	}
	return res, nil
}

// InboxSQL returns every inbox migration for cfg.Schema as one script in
// the SQL of db's database, ready to vendor.
func InboxSQL(db outbox.Database, cfg Config) string {
	inb, err := inboxDriver(db, cfg)
	if err != nil {
		return "-- " + err.Error() + "\n"
	}
	return inb.InboxMigrationSQL()
}

// InboxVersion returns the highest inbox migration applied to cfg.Schema,
// 0 when none.
func InboxVersion(ctx context.Context, db outbox.Database, cfg Config) (int, error) {
	inb, err := inboxDriver(db, cfg)
	if err != nil {
		return 0, err
	}
	return inb.InboxSchemaVersion(ctx)
}

// LatestInbox returns the newest inbox migration this build knows.
func LatestInbox(db outbox.Database) Migration {
	inb, err := inboxDriver(db, Config{})
	if err != nil {
		return Migration{}
	}
	ms := inb.InboxMigrations()
	return Migration(ms[len(ms)-1])
}

func inboxDriver(db outbox.Database, cfg Config) (driver.Inbox, error) {
	inb, ok := db.Driver(cfg.Schema).(driver.Inbox)
	if !ok {
		return nil, fmt.Errorf("outboxmigrate: %T has no inbox migrations: %w", db, errors.ErrUnsupported)
	}
	return inb, nil
}

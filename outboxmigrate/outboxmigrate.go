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
	"fmt"

	"github.com/outboxkit/outbox"
)

// Config selects the schema to migrate.
type Config struct {
	// Schema holds outbox_events. Defaults to outbox.SchemaDefault.
	Schema string
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
func Migrate(ctx context.Context, db outbox.Database, cfg Config) (Result, error) {
	drv := db.Driver(cfg.Schema)
	applied, err := drv.Migrate(ctx)
	if err != nil {
		return Result{}, fmt.Errorf("outbox migrate: %w", err)
	}
	res := Result{}
	for _, m := range applied {
		res.Applied = append(res.Applied, Migration(m))
	}
	res.Version, err = drv.SchemaVersion(ctx)
	if err != nil {
		return res, fmt.Errorf("outbox migrate: read version: %w", err)
	}
	return res, nil
}

// SQL returns every migration for cfg.Schema as one script in the SQL of
// db's database, ready to vendor.
func SQL(db outbox.Database, cfg Config) string { return db.Driver(cfg.Schema).MigrationSQL() }

// Version returns the highest migration applied to cfg.Schema, 0 when none.
func Version(ctx context.Context, db outbox.Database, cfg Config) (int, error) {
	return db.Driver(cfg.Schema).SchemaVersion(ctx)
}

// Latest returns the newest migration this build knows.
func Latest(db outbox.Database) Migration {
	ms := db.Driver("").Migrations()
	return Migration(ms[len(ms)-1])
}

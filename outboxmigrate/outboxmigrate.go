// Package outboxmigrate creates and upgrades the outbox schema. Migrations
// are embedded in the binary, numbered, and recorded in outbox_migrations in
// the same schema; Migrate applies the missing ones and is safe to run from
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
	Version int
	Name    string
}

// Result reports a Migrate call.
type Result struct {
	// Applied lists the migrations this call applied, in order; empty when
	// the schema was already current.
	Applied []Migration
	// Version is the schema's version after the call.
	Version int
}

// Migrate creates the schema if needed and applies the migrations it lacks,
// in one transaction under a PostgreSQL advisory lock: concurrent callers
// wait, then find nothing left to do.
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

// SQL returns every migration for cfg.Schema as one script, ready to vendor.
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

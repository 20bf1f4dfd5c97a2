package outboxcdc

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outbox/internal/driver/pgdriver"
)

// Slot describes a capture slot after Setup.
type Slot struct {
	// Name is the slot's and the publication's name.
	Name string
	// Snapshot is the pg_snapshot taken when the slot was created: the
	// events it sees were written before the slot existed and are left to
	// the table path (outbox.RelayConfig.CaptureSlot names the slot whose
	// recorded snapshot the table path reads).
	Snapshot string
	// Created is true when Setup created the slot.
	Created bool
	// Failover is true when Setup created it as a failover slot
	// (PostgreSQL 17 and later): standbys that synchronize slots keep it
	// through a promotion. Older servers have no such slots; after a
	// failover the relay creates a new one (docs/cdc.md#failover).
	Failover bool
}

// ReplicationConfig returns a copy of cfg that opens a logical replication
// connection (replication=database), with the text formats the decoder
// reads (ISO dates in UTC).
func ReplicationConfig(cfg *pgconn.Config) *pgconn.Config {
	c := cfg.Copy()
	params := map[string]string{}
	if name, ok := c.RuntimeParams["application_name"]; ok {
		params["application_name"] = name
	}
	params["replication"] = "database"
	params["DateStyle"] = "ISO"
	params["TimeZone"] = "UTC"
	c.RuntimeParams = params
	return c
}

// CheckWALLevel returns an error wrapping ErrWALLevel, saying what to
// change, unless the server's wal_level is logical.
func CheckWALLevel(ctx context.Context, pool *pgxpool.Pool) error {
	level, err := pgdriver.New(pool, "public").WALLevel(ctx)
	if err != nil {
		return fmt.Errorf("outboxcdc: read wal_level: %w", err)
	}
	if level != "logical" {
		return fmt.Errorf("%w (it is %s): run ALTER SYSTEM SET wal_level = logical (or set it in postgresql.conf; on a managed service, its logical replication parameter, such as rds.logical_replication = 1) and restart the server; check that max_replication_slots and max_wal_senders are at least 1 more than in use", ErrWALLevel, level)
	}
	return nil
}

// Setup checks wal_level and creates what a capture relay of group needs
// on the outbox table in schema, where it is missing: the outbox_capture
// table, the publication (inserts only) and the logical replication slot
// (pgoutput), recording the snapshot of the slot's creation. repl is the
// connection configuration of the database (ReplicationConfig is applied
// to it). `outbox migrate --logical` calls it; so does a relay on its
// first start. A slot found without its record (its creator died between
// the two) is dropped and created again: nothing was streamed from it; so
// is a slot the server invalidated (wal_status lost), whose undelivered
// events the new slot's snapshot hands to the table path.
func Setup(ctx context.Context, pool *pgxpool.Pool, repl *pgconn.Config, schema, group string) (Slot, error) {
	if schema == "" {
		schema = "public"
	}
	if err := CheckWALLevel(ctx, pool); err != nil {
		return Slot{}, err
	}
	d := pgdriver.New(pool, schema)
	if err := d.Ping(ctx); err != nil {
		return Slot{}, fmt.Errorf("outboxcdc: %w (run outbox migrate first)", err)
	}
	name := SlotName(schema, group)
	if err := d.EnsureCaptureTable(ctx); err != nil {
		return Slot{}, fmt.Errorf("outboxcdc: create outbox_capture: %w", err)
	}
	if err := d.EnsurePublication(ctx, name); err != nil {
		return Slot{}, fmt.Errorf("outboxcdc: create publication %s: %w", name, err)
	}
	rec, recorded, err := d.CaptureSlot(ctx, name)
	if err != nil {
		return Slot{}, fmt.Errorf("outboxcdc: read outbox_capture: %w", err)
	}
	exists, lost, err := d.SlotExists(ctx, name)
	if err != nil {
		return Slot{}, fmt.Errorf("outboxcdc: read pg_replication_slots: %w", err)
	}
	if exists && recorded && !lost {
		return Slot{Name: name, Snapshot: rec.Snapshot}, nil
	}
	conn, err := pgconn.ConnectConfig(ctx, ReplicationConfig(repl))
	if err != nil {
		return Slot{}, fmt.Errorf("outboxcdc: open a replication connection: %w", err)
	}
	defer func() { _ = conn.Close(context.WithoutCancel(ctx)) }()
	if exists {
		if err := pglogrepl.DropReplicationSlot(ctx, conn, name, pglogrepl.DropReplicationSlotOptions{}); err != nil && !isObjectInUse(err) {
			return Slot{}, fmt.Errorf("outboxcdc: drop the unrecorded slot %s: %w", name, err)
		}
	}
	res, failover, err := createSlot(ctx, conn, name)
	if err != nil {
		if isDuplicateObject(err) {
			// Another relay created it a moment ago; it records it too.
			return Slot{}, fmt.Errorf("outboxcdc: slot %s is being created by another relay: %w", name, err)
		}
		return Slot{}, fmt.Errorf("outboxcdc: create replication slot %s: %w", name, err)
	}
	// The exported snapshot lives while conn runs no other command.
	snap, err := d.RecordCaptureSlot(ctx, name, res.SnapshotName)
	if err != nil {
		return Slot{}, fmt.Errorf("outboxcdc: record slot %s: %w", name, err)
	}
	return Slot{Name: name, Snapshot: snap, Created: true, Failover: failover}, nil
}

// Drop removes the slot, the publication and the records of group's
// capture relays on schema: `outbox migrate --drop-logical`. It refuses
// while a relay streams from the slot.
func Drop(ctx context.Context, pool *pgxpool.Pool, schema, group string) (droppedSlot, droppedPublication bool, err error) {
	if schema == "" {
		schema = "public"
	}
	d := pgdriver.New(pool, schema)
	name := SlotName(schema, group)
	// A relay that just stopped leaves its walsender for a moment: give
	// it dropWait to release the slot.
	deadline := time.Now().Add(dropWait)
	for {
		lag, found, err := d.ReplicationSlotLag(ctx, name)
		if err != nil || !found || !lag.Active || time.Now().After(deadline) {
			break
		}
		select {
		case <-ctx.Done():
			return false, false, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	return d.DropCapture(ctx, name)
}

// dropWait is how long Drop waits for an active slot to be released.
const dropWait = 5 * time.Second

// isObjectInUse reports SQLSTATE 55006: the slot is active for another
// process.
func isObjectInUse(err error) bool { return sqlState(err) == "55006" }

// isDuplicateObject reports SQLSTATE 42710.
func isDuplicateObject(err error) bool { return sqlState(err) == "42710" }

func sqlState(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code
	}
	return ""
}

// SlotState is a capture slot of a schema and whether a relay streams
// from it.
type SlotState = pgdriver.RecordedSlot

// Slots lists the capture slots of schema that exist. One that is not
// Active keeps WAL on the server's disk, which fills while it grows: start
// a capture relay of its group or drop it with `outbox migrate
// --drop-logical`. A poll relay reports them when it starts: an inactive
// one as left behind, an active one because the poll relay would deliver
// the events the stream delivers a second time.
func Slots(ctx context.Context, pool *pgxpool.Pool, schema string) ([]SlotState, error) {
	if schema == "" {
		schema = "public"
	}
	return pgdriver.New(pool, schema).CaptureSlots(ctx)
}

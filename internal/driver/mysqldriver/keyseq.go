package mysqldriver

import (
	"context"
	"database/sql"
	_ "embed" // the key-sequence trigger
	"errors"

	"github.com/outboxkit/outbox/internal/driver/sqldriver"
)

// keySeqTrigger is the BEFORE INSERT trigger that numbers each aggregate's
// events (key_seq) from outbox_keys, in the mysql client's DELIMITER form.
// Migration 7 adds the table, the column and the index but not the
// trigger: it costs every writer a second row (and serializes the writers
// of an aggregate), so only schemas prepared for ordered delivery get it.
//
//go:embed key_seq_trigger.sql
var keySeqTrigger string

// keySeqTriggerName is the trigger's name.
const keySeqTriggerName = "outbox_events_key_seq"

// erTriggerExists is MySQL's ER_TRG_ALREADY_EXISTS.
const erTriggerExists = 1359

var _ sqldriver.KeySequenceInstaller = Dialect{}

// KeySequenceSQL returns the trigger's DDL for schema, for the mysql client.
func (Dialect) KeySequenceSQL(schema string) string { return render(keySeqTrigger, schema) }

// KeySequenceInstalled reports whether schema has the trigger.
func (Dialect) KeySequenceInstalled(ctx context.Context, q sqldriver.Querier, schema string) (bool, error) {
	var n int
	err := q.QueryRowContext(ctx, `SELECT count(*) FROM information_schema.TRIGGERS
WHERE TRIGGER_SCHEMA = coalesce(?, DATABASE()) AND TRIGGER_NAME = ? AND EVENT_OBJECT_TABLE = 'outbox_events'`,
		schemaArg(schema), keySeqTriggerName).Scan(&n)
	return n > 0, err
}

// InstallKeySequence creates the trigger unless schema has it. CREATE
// TRIGGER waits for the metadata lock on outbox_events, that is for every
// open transaction that wrote to it, and holds back new writers meanwhile:
// every event committed after it returns is numbered. Two installers at
// once: the second finds the trigger there (ER_TRG_ALREADY_EXISTS).
func (d Dialect) InstallKeySequence(ctx context.Context, db *sql.DB, schema string) error {
	ok, err := d.KeySequenceInstalled(ctx, db, schema)
	if err != nil || ok {
		return err
	}
	for _, stmt := range sqldriver.Statements(d.KeySequenceSQL(schema)) {
		if _, err := db.ExecContext(ctx, stmt); err != nil {
			if ErrorNumber(err) == erTriggerExists {
				return nil
			}
			if d.IsNoTable(err) {
				return errors.Join(err, errors.New("the key sequence needs schema migration 7: run outbox migrate"))
			}
			return err
		}
	}
	return nil
}

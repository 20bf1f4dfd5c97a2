package mysqldriver

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/outboxkit/outbox/internal/driver"
	"github.com/outboxkit/outbox/internal/driver/sqldriver"
)

// erSpecificAccessDenied is "Access denied; you need the PROCESS
// privilege", which INNODB_TRX and INNODB_METRICS answer without it.
const erSpecificAccessDenied = 1227

// TableHealth reads InnoDB's table sizes from information_schema.TABLES,
// the history list length (undo of committed transactions that purge has
// not removed yet: InnoDB's dead rows, for the whole server) and the
// oldest open transaction, which holds purge back. None of it reads a
// table's rows. Without the PROCESS privilege the last two are unknown.
func (d Dialect) TableHealth(ctx context.Context, q sqldriver.Querier, schema string) (driver.TableHealth, error) {
	var h driver.TableHealth
	// TABLE_ROWS is InnoDB's estimate; DATA_FREE is space allocated to the
	// table but unused. MySQL 8 caches these for
	// information_schema_stats_expiry seconds; MariaDB reads them live.
	rows, err := q.QueryContext(ctx, `SELECT TABLE_NAME, TABLE_ROWS, DATA_LENGTH + INDEX_LENGTH, DATA_FREE
FROM information_schema.TABLES
WHERE TABLE_SCHEMA = coalesce(?, DATABASE()) AND TABLE_NAME IN ('outbox_events', 'outbox_events_archive')
ORDER BY TABLE_NAME`, schemaArg(schema))
	if err != nil {
		return h, err
	}
	defer func() { _ = rows.Close() }()
	for rows.Next() {
		var (
			t                 driver.TableStorage
			live, bytes, free sql.NullInt64
		)
		if err := rows.Scan(&t.Table, &live, &bytes, &free); err != nil {
			return h, err
		}
		t.LiveRows, t.Bytes, t.FreeBytes = nullable(live), nullable(bytes), nullable(free)
		h.Tables = append(h.Tables, t)
	}
	if err := rows.Err(); err != nil {
		return h, err
	}
	if len(h.Tables) == 0 || h.Tables[0].Table != driver.TableEvents {
		return h, fmt.Errorf("%w: %s", driver.ErrNoTable, d.Table(schema, driver.TableEvents))
	}
	if h.HistoryLength, err = historyLength(ctx, q); err != nil {
		return h, err
	}
	h.Horizon, err = oldestTransaction(ctx, q)
	return h, err
}

// historyLength reads trx_rseg_history_len, a counter InnoDB keeps enabled
// by default; nil when it is missing or not readable.
func historyLength(ctx context.Context, q sqldriver.Querier) (*int64, error) {
	var n int64
	err := q.QueryRowContext(ctx, "SELECT `COUNT` FROM information_schema.INNODB_METRICS WHERE NAME = 'trx_rseg_history_len'").Scan(&n)
	switch {
	case errors.Is(err, sql.ErrNoRows), ErrorNumber(err) == erSpecificAccessDenied:
		return nil, nil
	case err != nil:
		return nil, err
	}
	return &n, nil
}

// oldestTransaction finds the oldest open InnoDB transaction of another
// connection: its read view (or its own undo) keeps purge from removing
// what committed after it started. Both tables are in-memory lists of the
// server's transactions and connections; INNODB_TRX is a copy that InnoDB
// renews only when nobody read it for 100ms, so a reader polling faster sees
// the list of its first read. trx_started has whole seconds, so the age may
// be up to a second long.
func oldestTransaction(ctx context.Context, q sqldriver.Querier) (*driver.Horizon, error) {
	var (
		hz              driver.Horizon
		holder          driver.HorizonHolder
		micros          sql.NullInt64
		user, host, cmd sql.NullString
	)
	err := q.QueryRowContext(ctx, `SELECT t.trx_mysql_thread_id, p.USER, p.HOST, p.COMMAND,
    TIMESTAMPDIFF(MICROSECOND, t.trx_started, NOW(6))
FROM information_schema.INNODB_TRX AS t
LEFT JOIN information_schema.PROCESSLIST AS p ON p.ID = t.trx_mysql_thread_id
WHERE t.trx_mysql_thread_id <> CONNECTION_ID()
ORDER BY t.trx_started, t.trx_id
LIMIT 1`).Scan(&holder.PID, &user, &host, &cmd, &micros)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return &hz, nil
	case ErrorNumber(err) == erSpecificAccessDenied:
		return nil, nil
	case err != nil:
		return nil, err
	}
	holder.Kind, holder.User, holder.Client, holder.State = driver.HorizonSession, user.String, host.String, cmd.String
	hz.Age = time.Duration(max(micros.Int64, 0)) * time.Microsecond
	hz.Holder = &holder
	return &hz, nil
}

func nullable(n sql.NullInt64) *int64 {
	if !n.Valid {
		return nil
	}
	return &n.Int64
}

package pgdriver

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxkit/outbox/internal/driver"
)

// tableHealthSQL reads each existing outbox table's statistics. The
// pg_stat_get_* functions read one table's entry from the cumulative
// statistics; the pg_stat_user_tables view would compute its columns for
// every table in the database first. pg_total_relation_size adds up the
// relation's files (heap, indexes, TOAST) without reading them. A
// partitioned archive is the sum of its leaf partitions (pg_partition_tree
// reads the catalog; the parent itself holds nothing), with the latest
// vacuum and analyze of any of them.
const tableHealthSQL = `SELECT t.name, sum(pg_stat_get_live_tuples(part.oid))::bigint,
    sum(pg_stat_get_dead_tuples(part.oid))::bigint, sum(pg_total_relation_size(part.oid))::bigint,
    max(pg_stat_get_last_vacuum_time(part.oid)), max(pg_stat_get_last_autovacuum_time(part.oid)),
    max(pg_stat_get_last_analyze_time(part.oid)), max(pg_stat_get_last_autoanalyze_time(part.oid))
FROM unnest($1::text[], $2::text[]) WITH ORDINALITY AS t(name, qualified, ord)
CROSS JOIN LATERAL to_regclass(t.qualified) AS r(oid)
CROSS JOIN LATERAL (
    SELECT r.oid UNION SELECT p.relid FROM pg_partition_tree(r.oid) AS p WHERE p.isleaf
) AS part(oid)
WHERE r.oid IS NOT NULL
GROUP BY t.name, t.ord
ORDER BY t.ord`

// horizonSQL finds what holds back vacuum in this database: sessions with a
// transaction ID or a snapshot (backend_xid, backend_xmin), prepared
// transactions and replication slots. Vacuum of a table ignores sessions of
// other databases (and autovacuum workers), so they are left out; sessions
// without a database are walsenders, whose hot-standby feedback counts
// everywhere. Age is the oldest start among the holders (slots record
// none; other users' sessions show none without pg_read_all_stats); the
// holder reported is the one furthest back by transaction ID, the oldest
// start breaking ties, so that a snapshot taken while an old transaction
// ran names the old transaction. All of it is read from shared memory.
const horizonSQL = `WITH holders AS (
    SELECT 'session' AS kind, a.pid::bigint AS pid, coalesce(a.application_name, '') AS name,
        coalesce(a.usename::text, '') AS usr,
        coalesce(host(a.client_addr) || ':' || a.client_port, '') AS client,
        coalesce(a.state, '') AS state, a.xact_start AS since,
        greatest(age(a.backend_xid), age(a.backend_xmin))::bigint AS xid_age
    FROM pg_stat_activity a
    WHERE (a.backend_xid IS NOT NULL OR a.backend_xmin IS NOT NULL)
        AND a.pid <> pg_backend_pid()
        AND a.backend_type <> 'autovacuum worker'
        AND (a.datname = current_database() OR a.datid IS NULL)
    UNION ALL
    SELECT 'prepared_transaction', 0, p.gid, p.owner::text, '', '', p.prepared, age(p.transaction)::bigint
    FROM pg_prepared_xacts p
    WHERE p.database = current_database()
    UNION ALL
    SELECT 'replication_slot', coalesce(s.active_pid, 0), s.slot_name::text, '', '',
        CASE WHEN s.active THEN 'active' ELSE 'inactive' END, NULL, age(s.xmin)::bigint
    FROM pg_replication_slots s
    WHERE s.xmin IS NOT NULL
)
SELECT (SELECT greatest(extract(epoch FROM now() - min(since)) * 1e6, 0)::bigint FROM holders),
    h.kind, h.pid, h.name, h.usr, h.client, h.state, h.xid_age
FROM (SELECT) AS one
LEFT JOIN LATERAL (
    SELECT * FROM holders ORDER BY xid_age DESC NULLS LAST, since NULLS LAST LIMIT 1
) AS h ON true`

// TableHealth reads the outbox tables' statistics and the database's
// vacuum horizon: two statements on the statistics and shared memory, none
// of which reads a table.
func (d *Driver) TableHealth(ctx context.Context) (driver.TableHealth, error) {
	var h driver.TableHealth
	names := []string{driver.TableEvents, driver.TableArchive}
	qualified := []string{d.table, pgx.Identifier{d.schema, driver.TableArchive}.Sanitize()}
	rows, err := d.pool.Query(ctx, tableHealthSQL, names, qualified)
	if err != nil {
		return h, wrap(err)
	}
	h.Tables, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (driver.TableStorage, error) {
		var (
			t                 driver.TableStorage
			live, dead, bytes int64
			v                 [4]*time.Time
		)
		err := row.Scan(&t.Table, &live, &dead, &bytes, &v[0], &v[1], &v[2], &v[3])
		t.LiveRows, t.DeadTuples, t.Bytes = &live, &dead, &bytes
		t.Vacuum = &driver.VacuumTimes{LastVacuum: deref(v[0]), LastAutovacuum: deref(v[1]),
			LastAnalyze: deref(v[2]), LastAutoanalyze: deref(v[3])}
		return t, err
	})
	if err != nil {
		return h, wrap(err)
	}
	if len(h.Tables) == 0 || h.Tables[0].Table != driver.TableEvents {
		return h, fmt.Errorf("%w: %s", driver.ErrNoTable, d.table)
	}
	h.Horizon, err = d.horizon(ctx)
	return h, wrap(err)
}

func (d *Driver) horizon(ctx context.Context) (*driver.Horizon, error) {
	var (
		ageMicros, pid, xidAge          *int64
		kind, name, user, client, state *string
	)
	err := d.pool.QueryRow(ctx, horizonSQL).Scan(&ageMicros, &kind, &pid, &name, &user, &client, &state, &xidAge)
	if err != nil {
		return nil, err
	}
	hz := &driver.Horizon{}
	if kind == nil {
		zero := int64(0)
		hz.XIDAge = &zero
		return hz, nil
	}
	if ageMicros != nil {
		hz.Age = time.Duration(*ageMicros) * time.Microsecond
	}
	hz.XIDAge = xidAge
	hz.Holder = &driver.HorizonHolder{Kind: *kind, PID: *pid, Name: *name, User: *user, Client: *client, State: *state}
	return hz, nil
}

func deref(t *time.Time) time.Time {
	if t == nil {
		return time.Time{}
	}
	return *t
}

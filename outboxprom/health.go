package outboxprom

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/outboxkit/outbox"
)

// healthDescs are the gauges of Manager.TableHealth. A figure the database
// does not report has no series, rather than a 0 that would read as
// healthy.
type healthDescs struct {
	liveRows, deadTuples, bytes, freeBytes, lastVacuum *prometheus.Desc
	horizonAge, horizonXIDAge, historyLength           *prometheus.Desc
	sqliteBytes, sqliteFree, sqliteWAL                 *prometheus.Desc
}

func newHealthDescs(labels prometheus.Labels) healthDescs {
	table := []string{"table"}
	desc := func(name, help string, variable []string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, variable, labels)
	}
	return healthDescs{
		liveRows: desc("outbox_table_live_rows",
			"Live rows per table, the statistics' estimate (PostgreSQL n_live_tup, InnoDB TABLE_ROWS).", table),
		deadTuples: desc("outbox_table_dead_tuples",
			"Dead row versions per table that vacuum has yet to remove (PostgreSQL n_dead_tup).", table),
		bytes: desc("outbox_table_bytes",
			"Bytes per table with its indexes (and TOAST on PostgreSQL).", table),
		freeBytes: desc("outbox_table_free_bytes",
			"Bytes allocated to the table but unused (InnoDB DATA_FREE).", table),
		lastVacuum: desc("outbox_table_last_vacuum_timestamp_seconds",
			"Unix time of the table's last vacuum, manual or automatic (PostgreSQL); absent if it never ran.", table),
		horizonAge: desc("outbox_vacuum_horizon_age_seconds",
			"Seconds the oldest transaction or snapshot in the database that holds back vacuum (InnoDB purge) has been open; 0 when none.", nil),
		horizonXIDAge: desc("outbox_vacuum_horizon_xid_age",
			"Transaction IDs between the vacuum horizon and now, counting replication slots and prepared transactions (PostgreSQL).", nil),
		historyLength: desc("outbox_innodb_history_length",
			"InnoDB history list length, server-wide: undo logs of committed transactions that purge has not removed yet (MySQL/MariaDB).", nil),
		sqliteBytes: desc("outbox_sqlite_file_bytes", "Bytes of the SQLite database file.", nil),
		sqliteFree: desc("outbox_sqlite_free_bytes",
			"Bytes of free pages in the SQLite database file, left by deleted rows; only VACUUM returns them.", nil),
		sqliteWAL: desc("outbox_sqlite_wal_bytes", "Bytes of the SQLite WAL file.", nil),
	}
}

func (d healthDescs) describe(ch chan<- *prometheus.Desc) {
	for _, desc := range []*prometheus.Desc{d.liveRows, d.deadTuples, d.bytes, d.freeBytes, d.lastVacuum,
		d.horizonAge, d.horizonXIDAge, d.historyLength, d.sqliteBytes, d.sqliteFree, d.sqliteWAL} {
		ch <- desc
	}
}

func (d healthDescs) collect(ch chan<- prometheus.Metric, h outbox.TableHealth) {
	gauge := func(desc *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(desc, prometheus.GaugeValue, v, labels...)
	}
	optional := func(desc *prometheus.Desc, n *int64, labels ...string) {
		if n != nil {
			gauge(desc, float64(*n), labels...)
		}
	}
	for _, t := range h.Tables {
		optional(d.liveRows, t.LiveRows, t.Table)
		optional(d.deadTuples, t.DeadTuples, t.Table)
		optional(d.bytes, t.Bytes, t.Table)
		optional(d.freeBytes, t.FreeBytes, t.Table)
		if v := t.Vacuum; v != nil {
			last := v.LastVacuum
			if v.LastAutovacuum.After(last) {
				last = v.LastAutovacuum
			}
			if !last.IsZero() {
				gauge(d.lastVacuum, float64(last.UnixMilli())/1000, t.Table)
			}
		}
	}
	if hz := h.Horizon; hz != nil {
		gauge(d.horizonAge, hz.Age.Seconds())
		optional(d.horizonXIDAge, hz.XIDAge)
	}
	optional(d.historyLength, h.HistoryLength)
	if f := h.File; f != nil {
		gauge(d.sqliteBytes, float64(f.Bytes))
		gauge(d.sqliteFree, float64(f.FreeBytes))
		optional(d.sqliteWAL, f.WALBytes)
	}
}

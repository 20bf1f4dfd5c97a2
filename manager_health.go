package outbox

import (
	"context"
	"time"

	"github.com/outboxkit/outbox/internal/driver"
)

// HorizonKind says what holds back vacuum.
type HorizonKind string

// Holders of the vacuum horizon.
const (
	// HorizonSession is a session's open transaction or snapshot (on
	// MySQL/MariaDB, any open InnoDB transaction).
	HorizonSession HorizonKind = driver.HorizonSession
	// HorizonPreparedTransaction is a prepared (two-phase) transaction
	// that was never committed or rolled back (PostgreSQL).
	HorizonPreparedTransaction HorizonKind = driver.HorizonPreparedTransaction
	// HorizonReplicationSlot is a replication slot's xmin, held for a
	// standby with hot_standby_feedback (PostgreSQL).
	HorizonReplicationSlot HorizonKind = driver.HorizonReplicationSlot
)

// TableHealth is how much room the outbox tables take, how much of it is
// garbage, and what keeps the database from cleaning it up. The outbox
// rewrites its rows constantly (insert, claim, mark, delete), so its table
// bloats as soon as vacuum (PostgreSQL) or purge (InnoDB) falls behind, and
// the claim slows down with it. It is read from the database's catalog and
// statistics only, never by scanning a table.
//
// A nil pointer is a value this database does not report.
type TableHealth struct {
	// Tables has outbox_events, then outbox_events_archive when it exists.
	Tables []TableStorage
	// Horizon is the oldest transaction in the database that holds back
	// the removal of dead rows (PostgreSQL, MySQL/MariaDB); nil on SQLite,
	// which cannot see other connections' transactions.
	Horizon *VacuumHorizon
	// HistoryLength is InnoDB's history list length (MySQL/MariaDB, for
	// the whole server): undo logs of committed transactions that purge
	// has not removed yet. It grows while a transaction stays open.
	HistoryLength *int64
	// File is the SQLite database file; nil on other databases.
	File *DatabaseFile
}

// TableStorage is one table's size and garbage.
type TableStorage struct {
	// Table is outbox_events or outbox_events_archive.
	Table string
	// LiveRows is the statistics' row estimate (PostgreSQL's n_live_tup,
	// InnoDB's TABLE_ROWS).
	LiveRows *int64
	// DeadTuples counts row versions that vacuum has yet to remove
	// (PostgreSQL's n_dead_tup).
	DeadTuples *int64
	// Bytes is the table's storage with its indexes (and TOAST on
	// PostgreSQL).
	Bytes *int64
	// FreeBytes is space allocated to the table but unused (InnoDB's
	// DATA_FREE).
	FreeBytes *int64
	// Vacuum is when PostgreSQL last vacuumed and analyzed the table; nil
	// on other databases.
	Vacuum *VacuumTimes
}

// VacuumTimes are the last vacuum and analyze of a table, manual and
// automatic; zero for never (since the statistics were last reset). A
// partitioned table reports the latest of its partitions.
type VacuumTimes struct {
	LastVacuum, LastAutovacuum, LastAnalyze, LastAutoanalyze time.Time
}

// VacuumHorizon is the oldest transaction or snapshot that keeps vacuum (or
// InnoDB's purge) from removing dead rows: every row version that became
// dead after it started stays, in the outbox table as in every other.
type VacuumHorizon struct {
	// Age is how long the oldest holder whose start the database records
	// has been open (PostgreSQL's xact_start or prepare time, InnoDB's
	// trx_started, to the second); zero when nothing holds the horizon
	// back. On PostgreSQL, other users' sessions show their start only to
	// members of pg_read_all_stats, and replication slots have none:
	// XIDAge still counts them.
	Age time.Duration
	// XIDAge is how many transaction IDs old the horizon is: the largest
	// age(backend_xmin), age(backend_xid), age of a prepared transaction
	// or of a replication slot's xmin (PostgreSQL).
	XIDAge *int64
	// Holder is the holder furthest back; nil when there is none.
	Holder *HorizonHolder
}

// HorizonHolder says who holds the horizon back, to find and end it.
type HorizonHolder struct {
	Kind HorizonKind
	// PID is the backend's pid (pg_terminate_backend) or the MySQL
	// connection ID (KILL); 0 for prepared transactions and inactive
	// slots.
	PID int64
	// Name is the session's application_name, the prepared transaction's
	// GID or the slot's name.
	Name string
	// User is the database user.
	User string
	// Client is the client's address and port, when known.
	Client string
	// State is the session's state ("idle in transaction", "active"; on
	// MySQL the command, "Sleep" for a connection idle in its
	// transaction), or "active"/"inactive" for a slot.
	State string
}

// DatabaseFile is an SQLite database file's storage.
type DatabaseFile struct {
	// Bytes is the file's size: page_count × page_size.
	Bytes int64
	// FreeBytes is the free pages that deleted rows left: SQLite reuses
	// them, and only VACUUM gives them back to the file system.
	FreeBytes int64
	// WALBytes is the size of the -wal file, which grows while a reader
	// keeps checkpoints from finishing; nil outside WAL mode.
	WALBytes *int64
}

// TableHealth reads the outbox tables' storage and the vacuum horizon. It
// runs a few statements on the catalog and statistics and reads no table,
// so it is cheap enough for metrics scrapes (outboxprom samples it with the
// other table gauges).
func (m *Manager) TableHealth(ctx context.Context) (TableHealth, error) {
	h, err := m.drv.TableHealth(ctx)
	if err != nil {
		return TableHealth{}, err
	}
	out := TableHealth{Tables: make([]TableStorage, len(h.Tables)), HistoryLength: h.HistoryLength}
	for i, t := range h.Tables {
		out.Tables[i] = TableStorage{Table: t.Table, LiveRows: t.LiveRows, DeadTuples: t.DeadTuples,
			Bytes: t.Bytes, FreeBytes: t.FreeBytes}
		if v := t.Vacuum; v != nil {
			out.Tables[i].Vacuum = &VacuumTimes{LastVacuum: v.LastVacuum, LastAutovacuum: v.LastAutovacuum,
				LastAnalyze: v.LastAnalyze, LastAutoanalyze: v.LastAutoanalyze}
		}
	}
	if hz := h.Horizon; hz != nil {
		out.Horizon = &VacuumHorizon{Age: hz.Age, XIDAge: hz.XIDAge}
		if w := hz.Holder; w != nil {
			out.Horizon.Holder = &HorizonHolder{Kind: HorizonKind(w.Kind), PID: w.PID, Name: w.Name,
				User: w.User, Client: w.Client, State: w.State}
		}
	}
	if f := h.File; f != nil {
		out.File = &DatabaseFile{Bytes: f.Bytes, FreeBytes: f.FreeBytes, WALBytes: f.WALBytes}
	}
	return out, nil
}

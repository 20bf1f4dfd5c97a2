package driver

import "time"

// Table names the health report uses.
const (
	TableEvents  = "outbox_events"
	TableArchive = "outbox_events_archive"
)

// HorizonKind values: what holds back vacuum (PostgreSQL) or purge
// (InnoDB).
const (
	HorizonSession             = "session"
	HorizonPreparedTransaction = "prepared_transaction"
	HorizonReplicationSlot     = "replication_slot"
)

// TableHealth is the outbox tables' storage and what holds back its cleanup,
// read from the database's catalog and statistics only. A nil pointer is a
// value this database does not report.
type TableHealth struct {
	// Tables has outbox_events, then outbox_events_archive when it exists.
	Tables []TableStorage
	// Horizon is nil where the database cannot tell (SQLite).
	Horizon *Horizon
	// HistoryLength is InnoDB's history list length (MySQL/MariaDB).
	HistoryLength *int64
	// File is the SQLite database file.
	File *DatabaseFile
}

// TableStorage is one table's size and garbage.
type TableStorage struct {
	Table      string
	LiveRows   *int64 // the statistics' estimate
	DeadTuples *int64 // PostgreSQL
	Bytes      *int64 // table, indexes and TOAST
	FreeBytes  *int64 // allocated but unused (InnoDB's DATA_FREE)
	Vacuum     *VacuumTimes
}

// VacuumTimes are the last (auto)vacuum and (auto)analyze; zero for never.
type VacuumTimes struct {
	LastVacuum, LastAutovacuum, LastAnalyze, LastAutoanalyze time.Time
}

// Horizon is the oldest transaction or snapshot in the database that holds
// back vacuum (purge on InnoDB).
type Horizon struct {
	// Age is the age of the oldest holder whose start the database records;
	// zero when nothing holds the horizon back.
	Age time.Duration
	// XIDAge is the oldest holder's age in transaction IDs (PostgreSQL).
	XIDAge *int64
	// Holder is the holder furthest back; nil when there is none.
	Holder *HorizonHolder
}

// HorizonHolder says who holds the horizon back.
type HorizonHolder struct {
	Kind   string // HorizonSession, HorizonPreparedTransaction or HorizonReplicationSlot
	PID    int64  // backend or connection ID; 0 when none
	Name   string // application_name, prepared transaction GID or slot name
	User   string
	Client string // client address
	State  string
}

// DatabaseFile is an SQLite database file's storage.
type DatabaseFile struct {
	Bytes     int64  // page_count × page_size
	FreeBytes int64  // freelist_count × page_size
	WALBytes  *int64 // the -wal file; nil outside WAL mode or for a database without a file
}

package outbox

import (
	"database/sql"

	"github.com/outboxkit/outbox/internal/driver"
	"github.com/outboxkit/outbox/internal/driver/mysqldriver"
	"github.com/outboxkit/outbox/internal/driver/sqlitedriver"
)

// SQLite returns the SQLite database reached through db, which the
// application opens with the database/sql driver of its choice (the outbox
// CLI uses the pure-Go modernc.org/sqlite; this package imports none).
//
// Open it in WAL mode with a busy timeout, so that readers never block the
// one writer and a writer waits for the lock instead of failing with
// "database is locked"; with modernc.org/sqlite:
//
//	sql.Open("sqlite", "file:app.db?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)")
//
// The schema of the relay, Manager and migrator configs names an attached
// database; the default ("public") means "main". Several relay processes may
// share one file: claims take SQLite's write lock (BEGIN IMMEDIATE) and
// leases hold as on PostgreSQL. SQLite has no LISTEN: a writer in the
// relay's process wakes it with Relay.Wake. Write events with
// WriterConfig.Dialect set to DialectSQLite.
func SQLite(db *sql.DB) Database { return sqliteDatabase{db: db} }

type sqliteDatabase struct{ db *sql.DB }

func (s sqliteDatabase) Driver(schema string) driver.Driver { return sqlitedriver.New(s.db, schema) }

// MySQL returns the MySQL 8 or MariaDB 10.6+ database reached through db,
// which the application opens with github.com/go-sql-driver/mysql (this
// package does not import it). Use a DSN with parseTime=true; the outbox
// stores UTC in DATETIME(6) columns whatever the session's time zone.
//
// The schema of the relay, Manager and migrator configs names a database;
// the default ("public") means the DSN's database. Claims use
// FOR UPDATE SKIP LOCKED, so any number of relays share the table. MySQL has
// no LISTEN: a writer in the relay's process wakes it with Relay.Wake. Write
// events with WriterConfig.Dialect set to DialectMariaDB or DialectMySQL.
func MySQL(db *sql.DB) Database { return mysqlDatabase{db: db} }

type mysqlDatabase struct{ db *sql.DB }

func (m mysqlDatabase) Driver(schema string) driver.Driver { return mysqldriver.New(m.db, schema) }

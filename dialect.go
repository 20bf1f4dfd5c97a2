package outbox

import "fmt"

// Dialect names the SQL the Writer speaks to the caller's transaction. The
// relay, the Manager and the migrator get theirs from the Database.
type Dialect string

// The dialects.
const (
	// DialectPostgres writes with one INSERT … ON CONFLICT DO NOTHING per
	// batch, through a pgx transaction (Write) or a database/sql one on the
	// pgx stdlib driver (WriteSQL). The default.
	DialectPostgres Dialect = "postgres"
	// DialectSQLite writes with one INSERT … ON CONFLICT DO NOTHING
	// RETURNING per batch (WriteSQL only).
	DialectSQLite Dialect = "sqlite"
	// DialectMariaDB writes with one INSERT … ON DUPLICATE KEY UPDATE
	// RETURNING per batch, which MariaDB has since 10.5 (WriteSQL only).
	DialectMariaDB Dialect = "mariadb"
	// DialectMySQL writes one INSERT … ON DUPLICATE KEY UPDATE per message,
	// since MySQL has no INSERT … RETURNING to report several new IDs at
	// once. It works on MariaDB too (WriteSQL only).
	DialectMySQL Dialect = "mysql"
)

// DialectDefault is the Writer's dialect when none is configured.
const DialectDefault = DialectPostgres

// ParseDialect returns the dialect named s.
func ParseDialect(s string) (Dialect, error) {
	switch d := Dialect(s); d {
	case DialectPostgres, DialectSQLite, DialectMariaDB, DialectMySQL:
		return d, nil
	}
	return "", &ConfigError{Field: "Dialect", Err: fmt.Errorf("unknown dialect %q: use postgres, sqlite, mariadb or mysql", s)}
}

// DialectOf returns the writer dialect that suits db: DialectPostgres,
// DialectSQLite, or DialectMySQL for a MySQL database (which also serves
// MariaDB; choose DialectMariaDB there for one round trip per batch).
func DialectOf(db Database) Dialect {
	switch db.(type) {
	case sqliteDatabase:
		return DialectSQLite
	case mysqlDatabase:
		return DialectMySQL
	}
	return DialectPostgres
}

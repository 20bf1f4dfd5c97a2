package outboxcdc

import (
	"context"
	"strconv"
	"strings"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// failoverSlotVersion is the first server version (server_version_num)
// with failover slots: a standby with sync_replication_slots keeps a copy
// of the slot, so it exists on the new primary after a promotion.
const failoverSlotVersion = 170000

// createSlot creates the logical replication slot name (pgoutput) and
// exports a snapshot of the moment it was created. On PostgreSQL 17 and
// later the slot is a failover slot; failover reports whether it is.
func createSlot(ctx context.Context, conn *pgconn.PgConn, name string) (res pglogrepl.CreateReplicationSlotResult, failover bool, err error) {
	cmd, failover := createSlotCommand(name, serverVersionNum(conn.ParameterStatus("server_version")))
	res, err = pglogrepl.ParseCreateReplicationSlot(conn.Exec(ctx, cmd))
	return res, failover, err
}

// createSlotCommand is the replication command that creates slot name on
// a server of version (server_version_num; 0 when unknown, treated as the
// oldest): the option list of PostgreSQL 15 and later, with FAILOVER from
// 17; the older keyword form before 15.
func createSlotCommand(name string, version int) (cmd string, failover bool) {
	slot := pgx.Identifier{name}.Sanitize()
	switch {
	case version >= failoverSlotVersion:
		return "CREATE_REPLICATION_SLOT " + slot + " LOGICAL pgoutput (SNAPSHOT 'export', FAILOVER)", true
	case version >= 150000:
		return "CREATE_REPLICATION_SLOT " + slot + " LOGICAL pgoutput (SNAPSHOT 'export')", false
	default:
		return "CREATE_REPLICATION_SLOT " + slot + " LOGICAL pgoutput EXPORT_SNAPSHOT", false
	}
}

// serverVersionNum turns a server_version parameter ("15.20 (Debian
// 15.20-0+deb12u1)", "17.2", "16beta1") into server_version_num's form
// (150020, 170002, 160000); 0 when it cannot be read.
func serverVersionNum(v string) int {
	end := strings.IndexFunc(v, func(r rune) bool { return (r < '0' || r > '9') && r != '.' })
	if end >= 0 {
		v = v[:end]
	}
	parts := strings.Split(v, ".")
	major, err := strconv.Atoi(parts[0])
	if err != nil || major < 10 {
		return 0
	}
	minor := 0
	if len(parts) > 1 {
		minor, _ = strconv.Atoi(parts[1])
	}
	return major*10000 + minor
}

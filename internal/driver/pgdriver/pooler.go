package pgdriver

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outboxkit/outbox/internal/driver"
)

// pgbouncerParams are the startup parameters PgBouncer keeps per client and
// sets on whichever server connection runs the client's transaction; any
// other startup parameter is session state it refuses ("unsupported
// startup parameter") or, when told to ignore it, drops.
var pgbouncerParams = map[string]bool{
	"application_name": true, "client_encoding": true, "datestyle": true, "timezone": true,
	"standard_conforming_strings": true,
}

// CheckPooler tells whether a pooler sits between the pool and the server:
// PgBouncer (like other poolers) gives each client a cancel key of its own,
// so the process ID the connection was given at its start differs from
// the server's pg_backend_pid(). It also lists the session state the
// pool's configuration relies on: named prepared statements (pgx's default
// statement cache) and startup parameters PgBouncer does not carry over.
func (d *Driver) CheckPooler(ctx context.Context) (driver.PoolerInfo, error) {
	var info driver.PoolerInfo
	cfg := d.pool.Config().ConnConfig
	if cfg.DefaultQueryExecMode == pgx.QueryExecModeCacheStatement && cfg.StatementCacheCapacity > 0 {
		info.SessionState = append(info.SessionState, "named prepared statements (pgx's statement cache)")
	}
	var params []string
	for k := range cfg.RuntimeParams {
		if !pgbouncerParams[strings.ToLower(k)] {
			params = append(params, k)
		}
	}
	sort.Strings(params)
	for _, k := range params {
		info.SessionState = append(info.SessionState, "the startup parameter "+k)
	}
	conn, err := d.pool.Acquire(ctx)
	if err != nil {
		return info, WrapConnectError(err)
	}
	defer conn.Release()
	var serverPID uint32
	if err := conn.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&serverPID); err != nil {
		return info, err
	}
	info.Pooled = serverPID != conn.Conn().PgConn().PID()
	return info, nil
}

// WrapConnectError marks PgBouncer's refusal of a startup parameter (which
// it answers for any parameter it does not track, in every pool mode) as
// driver.ErrPooler, and leaves other errors as they are.
func WrapConnectError(err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "08P01" && strings.HasPrefix(pgErr.Message, "unsupported startup parameter") {
		return fmt.Errorf("%w: %w", driver.ErrPooler, err)
	}
	return err
}

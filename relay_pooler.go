package outbox

import (
	"context"
	"fmt"
	"strings"

	"github.com/outboxkit/outbox/internal/driver"
)

// checkPooler refuses to start a relay whose database connection goes
// through a pooler that would break it: a relay not in PgBouncer mode, or
// one in PgBouncer mode whose pool still keeps session state.
func (r *Relay) checkPooler(ctx context.Context) error {
	c, ok := r.drv.(driver.PoolerChecker)
	if !ok {
		return nil
	}
	info, err := c.CheckPooler(ctx)
	if err != nil {
		return fmt.Errorf("outbox: relay: database: %w", err)
	}
	switch {
	case r.cfg.PgBouncer && len(info.SessionState) > 0:
		return fmt.Errorf("outbox: relay: %w: PgBouncer mode is on, but the pool keeps session state (%s): configure it with outbox.ConfigurePgBouncer",
			ErrPooler, strings.Join(info.SessionState, ", "))
	case !r.cfg.PgBouncer && info.Pooled:
		return fmt.Errorf("outbox: relay: %w: the database is reached through a connection pooler such as PgBouncer (the server's backend PID is not the connection's), "+
			"which in transaction mode breaks prepared statements and LISTEN: "+pgBouncerModeHint+" or connect it to PostgreSQL directly", ErrPooler)
	}
	return nil
}

// pgBouncerModeHint is how to run a relay through PgBouncer, for the errors
// that find one in the way.
const pgBouncerModeHint = "run the relay in PgBouncer mode (RelayConfig.PgBouncer and ConfigurePgBouncer; outbox --pgbouncer)"

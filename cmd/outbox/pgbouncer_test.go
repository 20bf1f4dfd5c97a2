package main_test

import (
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/internal/testutil"
	"github.com/outboxkit/outbox/internal/testutil/pgbouncer"
)

func TestRelayThroughPgBouncerNeedsTheMode(t *testing.T) {
	t.Parallel()
	b := setup(t)
	srv := newGateServer(t)
	srv.letThrough()
	// relay runs the relay through url until it fails; extra are flags
	// after the command (the global --pgbouncer works there too).
	relay := func(url string, extra ...string) result {
		return run(t, nil, append([]string{"--database-url", url, "--schema", b.schema,
			"relay", "--sink", srv.URL, "--poll-interval", "50ms", "--log-level", "warn"}, extra...)...)
	}

	t.Run("refused startup parameter", func(t *testing.T) {
		t.Parallel()
		// PgBouncer refuses the relay's synchronous_commit at connect.
		bouncer := pgbouncer.Start(t, testutil.DatabaseURL(), pgbouncer.Options{})
		requireFail(t, relay(bouncer.URL(t, testutil.DatabaseURL())), 1,
			"unsupported startup parameter: synchronous_commit", "the database URL reaches PgBouncer: pass --pgbouncer")
	})
	t.Run("detected", func(t *testing.T) {
		t.Parallel()
		// This PgBouncer lets the parameter through (and drops it): the
		// relay still notices the pooler before it claims anything.
		bouncer := pgbouncer.Start(t, testutil.DatabaseURL(), pgbouncer.Options{IgnoreStartupParameters: []string{"synchronous_commit"}})
		requireFail(t, relay(bouncer.URL(t, testutil.DatabaseURL())), 1,
			"reached through a connection pooler such as PgBouncer", "outbox --pgbouncer")
	})
	t.Run("no LISTEN", func(t *testing.T) {
		t.Parallel()
		requireFail(t, relay(testutil.DatabaseURL(), "--pgbouncer", "--listen"), 2,
			"invalid --listen: is set with PgBouncer")
	})
	t.Run("PostgreSQL only", func(t *testing.T) {
		t.Parallel()
		requireFail(t, relay("sqlite:///tmp/outbox-never-created.db", "--pgbouncer"), 2, "invalid --pgbouncer")
	})
	t.Run("no migrate", func(t *testing.T) {
		t.Parallel()
		requireFail(t, run(t, nil, "--database-url", testutil.DatabaseURL(), "--schema", b.schema, "--pgbouncer", "migrate"), 2,
			"invalid --pgbouncer", "advisory lock")
	})
	require.Empty(t, srv.ackedIDs(), "no relay ran")
}

func TestRelayInPgBouncerModeDelivers(t *testing.T) {
	t.Parallel()
	b := setup(t)
	srv := newGateServer(t)
	srv.letThrough()
	bouncer := pgbouncer.Start(t, testutil.DatabaseURL(), pgbouncer.Options{})
	p := start(t, nil, "--database-url", bouncer.URL(t, testutil.DatabaseURL()), "--pgbouncer", "--schema", b.schema,
		"relay", "--sink", srv.URL, "--workers", "3", "--batch-size", "7", "--poll-interval", "20ms", "--log-level", "info")
	total := 0
	for range 5 {
		total += len(b.writeN(t, 20))
		testutil.WaitFor(t, 30*time.Second, "batch delivered", func() bool {
			require.False(t, p.exited(), "stderr:\n%s", p.stderr.String())
			return b.stats(t).Processed == int64(total)
		})
	}
	require.Len(t, srv.ackedIDs(), total)
	require.Equal(t, 0, p.stop(t, syscall.SIGTERM))
	require.Contains(t, p.stderr.String(), "pgbouncer=true")
	require.NotContains(t, p.stderr.String(), "level=WARN")
}

package pgdriver_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/internal/driver/pgdriver"
	"github.com/outboxkit/outbox/internal/testutil"
)

// A connection that goes half-open between the pool and the LISTEN
// statement's reply must not hold the listener for good: LISTEN gives up,
// and the listener starts again on a new connection.
func TestListenGivesUpOnASilentConnection(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cfg, proxy := testutil.ProxiedPoolConfig(t)
	cfg.MaxConns = 1
	cfg.ConnConfig.ConnectTimeout = 5 * time.Second
	pool, err := pgxpool.NewWithConfig(b.ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	// The pool's one connection is open and idle when the network goes
	// silent, so the listener's LISTEN is the first thing sent on it.
	require.NoError(t, pool.Ping(b.ctx))
	proxy.Blackhole()

	drv := pgdriver.New(pool, b.schema)
	ctx, cancel := context.WithCancel(b.ctx)
	errs := make(chan error, 10)
	connected := make(chan struct{}, 10)
	woken := make(chan string, 10)
	done := make(chan struct{})
	go func() {
		defer close(done)
		drv.ListenSchemas(ctx, func(s string) { woken <- s },
			func() { connected <- struct{}{} },
			func(err error) { errs <- err })
	}()
	t.Cleanup(func() { cancel(); <-done })

	select {
	case err := <-errs:
		require.ErrorContains(t, err, "LISTEN failed")
	case <-connected:
		t.Fatal("LISTEN took effect on a silent connection")
	case <-time.After(20 * time.Second):
		t.Fatal("the listener still waits for LISTEN's reply after 20s")
	}

	proxy.Heal()
	select {
	case <-connected:
	case <-time.After(30 * time.Second):
		t.Fatal("the listener did not start again on a new connection")
	}
	_, err = b.pool.Exec(b.ctx, `SELECT pg_notify($1, $2)`, pgdriver.NotifyChannel, b.schema)
	require.NoError(t, err)
	select {
	case s := <-woken:
		require.Equal(t, b.schema, s)
	case <-time.After(10 * time.Second):
		t.Fatal("no notification reached the new LISTEN connection")
	}
}

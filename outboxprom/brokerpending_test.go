package outboxprom_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/outboxprom"
)

// The gauge follows the read; a failed read removes it and sets the ok
// gauge to 0; Run ends with its context.
func TestBrokerPendingPolls(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	var n atomic.Int64
	var fail atomic.Bool
	n.Store(10)
	p, err := outboxprom.NewBrokerPending(outboxprom.BrokerPendingConfig{Registerer: reg, Consumer: "billing", Broker: "nats",
		Interval: 10 * time.Millisecond, Read: func(context.Context) (int64, error) {
			if fail.Load() {
				return 0, errors.New("broker unreachable")
			}
			return n.Load(), nil
		}})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); p.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	value := func() (float64, float64, bool) {
		mfs, err := reg.Gather()
		require.NoError(t, err)
		var pending, ok float64
		found := false
		for _, mf := range mfs {
			for _, m := range mf.GetMetric() {
				switch mf.GetName() {
				case "outbox_consumer_broker_pending":
					pending, found = m.GetGauge().GetValue(), true
				case "outbox_consumer_broker_pending_ok":
					ok = m.GetGauge().GetValue()
				}
			}
		}
		return pending, ok, found
	}
	waitFor := func(msg string, cond func(pending, ok float64, found bool) bool) {
		deadline := time.Now().Add(10 * time.Second)
		for {
			if cond(value()) {
				return
			}
			require.True(t, time.Now().Before(deadline), "waiting for %s", msg)
			time.Sleep(5 * time.Millisecond)
		}
	}
	waitFor("10 pending", func(p, ok float64, found bool) bool { return found && p == 10 && ok == 1 })
	n.Store(3)
	waitFor("3 pending", func(p, ok float64, found bool) bool { return found && p == 3 && ok == 1 })
	fail.Store(true)
	waitFor("the series gone after a failed read", func(p, ok float64, found bool) bool { return !found && ok == 0 })
	fail.Store(false)
	waitFor("3 pending again", func(p, ok float64, found bool) bool { return found && p == 3 && ok == 1 })
	require.Equal(t, 1, testutil.CollectAndCount(reg, "outbox_consumer_broker_pending"))

	_, err = outboxprom.NewBrokerPending(outboxprom.BrokerPendingConfig{})
	require.ErrorContains(t, err, "Read")
}

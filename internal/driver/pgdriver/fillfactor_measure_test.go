package pgdriver_test

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/internal/driver"
)

// TestMeasureFillfactor measures the WAL written per relayed event at
// several fillfactors of outbox_events: rounds of 15 events inserted by the
// writer's statement, claimed and marked processed by the relay's, as a
// relay under steady traffic does. It runs only when
// OUTBOX_MEASURE_FILLFACTOR is set:
//
//	OUTBOX_MEASURE_FILLFACTOR=1 go test -run TestMeasureFillfactor -v ./internal/driver/pgdriver/
func TestMeasureFillfactor(t *testing.T) {
	if os.Getenv("OUTBOX_MEASURE_FILLFACTOR") == "" {
		t.Skip("set OUTBOX_MEASURE_FILLFACTOR to measure")
	}
	const rounds, perRound = 300, 15
	payload := []byte(fmt.Sprintf(`{"order_id":1,"pad":%q}`, strings.Repeat("x", 280)))
	events := make([]driver.NewEvent, perRound)
	for i := range events {
		events[i] = driver.NewEvent{EventType: "order.created", AggregateType: "order", AggregateID: fmt.Sprint(i),
			Payload: payload, Headers: []byte(`{}`)}
	}
	t.Logf("| fillfactor | WAL bytes per event (insert, claim, mark) | table size |")
	for _, ff := range []int{100, 90, 80, 70, 50} {
		b := setup(t)
		table := b.drv.Table()
		b.exec(t, fmt.Sprintf(`ALTER TABLE %s SET (fillfactor = %d, autovacuum_enabled = false)`, table, ff))
		var start string
		require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT pg_current_wal_lsn()::text`).Scan(&start))
		for range rounds {
			b.insertEvents(t, events)
			c := b.claim(t, "r", 1000, time.Minute)
			require.Len(t, c.Events, perRound)
			n, err := b.drv.MarkProcessed(b.ctx, driver.Fence{RelayID: "r", LockedUntil: c.LockedUntil}, claimIDs(c), driver.RetainProcessed)
			require.NoError(t, err)
			require.EqualValues(t, perRound, n)
		}
		var wal, size int64
		require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), $1::pg_lsn)::bigint, pg_total_relation_size($2)`,
			start, table).Scan(&wal, &size))
		t.Logf("| %d | %d | %d KiB |", ff, wal/(rounds*perRound), size/1024)
	}
}

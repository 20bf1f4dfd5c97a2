package pgdriver_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/outboxkit/outbox/internal/driver"
	"github.com/outboxkit/outbox/internal/driver/pgdriver"
	"github.com/outboxkit/outbox/internal/testutil"
)

// BenchmarkPartitionReadMark measures one ordered relay's database work per
// batch on one connection: the partition read of up to 1000 events over
// 10,000 keys and the mark that deletes them, without and with the
// in-flight record (migration 10), whose cost is the difference; a read
// takes up to 1000 events of a partition (one or two partitions a batch)
// or 32 (the relay's limit at batch 1000 with all 256 partitions: about 31).
func BenchmarkPartitionReadMark(b *testing.B) {
	for _, record := range []bool{false, true} {
		for _, perPart := range []int{1000, 32} {
			b.Run(fmt.Sprintf("record=%t/per_partition=%d", record, perPart), func(b *testing.B) {
				benchmarkPartitionReadMark(b, record, perPart, 0)
			})
		}
	}
}

// BenchmarkPartitionReadScheduledAhead is BenchmarkPartitionReadMark (with
// the record) beside 100,000 events of other keys written for the next
// day: what the events scheduled ahead cost each read.
func BenchmarkPartitionReadScheduledAhead(b *testing.B) {
	for _, perPart := range []int{1000, 32} {
		b.Run(fmt.Sprintf("per_partition=%d", perPart), func(b *testing.B) {
			benchmarkPartitionReadMark(b, true, perPart, 100000)
		})
	}
}

func benchmarkPartitionReadMark(b *testing.B, record bool, perPart, scheduled int) {
	pool, schema := testutil.Schema(b)
	drv := pgdriver.New(pool, schema)
	ctx := context.Background()
	if _, err := drv.BalancePartitions(ctx, driver.BalanceParams{RelayID: "r", Lease: time.Hour}); err != nil {
		b.Fatal(err)
	}
	backlog := 100000
	if os.Getenv("OUTBOX_BENCH_SMOKE") == "1" { // scripts/test's one-iteration run
		backlog, scheduled = 2000, min(scheduled, 2000)
	}
	if scheduled > 0 {
		_, err := pool.Exec(ctx, `INSERT INTO `+drv.Table()+` (event_type, aggregate_type, aggregate_id, payload, available_at)
			SELECT 'reminder.due', 'reminder', g::text, '{}', now() + interval '1 day'
			FROM generate_series(1, $1) g`, scheduled)
		if err != nil {
			b.Fatal(err)
		}
	}
	fill := func() {
		_, err := pool.Exec(ctx, `INSERT INTO `+drv.Table()+` (event_type, aggregate_type, aggregate_id, payload)
			SELECT 'order.created', 'order', (g % 10000)::text, '{"order_id":12345,"customer":"c-1","total_cents":4999,"currency":"EUR"}'
			FROM generate_series(1, $1) g`, backlog)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := pool.Exec(ctx, `VACUUM ANALYZE `+drv.Table()); err != nil {
			b.Fatal(err)
		}
	}
	fill()
	var events int
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		c, err := drv.ReadPartitions(ctx, driver.PartitionClaimParams{RelayID: "r", BatchSize: 1000,
			PerPartition: perPart, MinLease: time.Second, Offset: i, RecordInFlight: record})
		if err != nil {
			b.Fatal(err)
		}
		if len(c.Events) == 0 {
			b.StopTimer()
			fill()
			b.StartTimer()
			continue
		}
		ids := make([]int64, len(c.Events))
		for j, e := range c.Events {
			ids[j] = e.ID
		}
		f := driver.Fence{RelayID: "r", LockedUntil: c.LockedUntil, Parts: c.Parts, Fences: c.Fences, InFlight: c.InFlight}
		if _, err := drv.MarkProcessed(ctx, f, ids, driver.RetainDelete); err != nil {
			b.Fatal(err)
		}
		events += len(c.Events)
	}
	if events > 0 {
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(events), "ns/event")
		b.ReportMetric(float64(events)/float64(b.N), "events/batch")
	}
}

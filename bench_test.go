package outbox_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/testutil"
)

// BenchmarkWrite measures the writer: one transaction per op holding
// msgsPerTx events.
func BenchmarkWrite(b *testing.B) {
	for _, perTx := range []int{1, 10, 100} {
		b.Run(fmt.Sprintf("events_per_tx=%d", perTx), func(b *testing.B) {
			pool, schema := testutil.Schema(b)
			w := outbox.NewWriter(outbox.WriterConfig{Schema: schema})
			msgs := make([]outbox.Message, perTx)
			for i := range msgs {
				msgs[i] = outbox.Message{EventType: "order.created", AggregateType: "order", AggregateID: fmt.Sprint(i),
					Payload: []byte(`{"order_id":12345,"customer":"c-1","total_cents":4999,"currency":"EUR","lines":[{"sku":"A","qty":1}]}`)}
			}
			ctx := context.Background()
			b.ResetTimer()
			for b.Loop() {
				tx, err := pool.Begin(ctx)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := w.Write(ctx, tx, msgs...); err != nil {
					b.Fatal(err)
				}
				if err := tx.Commit(ctx); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N*perTx)/b.Elapsed().Seconds(), "events/s")
		})
	}
}

// BenchmarkRelayDrain drains a pre-filled backlog to a discarding sink.
func BenchmarkRelayDrain(b *testing.B) {
	for _, cfg := range []struct{ batch, workers int }{{100, 1}, {1000, 2}} {
		b.Run(fmt.Sprintf("batch=%d/workers=%d", cfg.batch, cfg.workers), func(b *testing.B) {
			pool, schema := testutil.Schema(b)
			ctx := context.Background()
			const backlog = 50000
			_, err := pool.Exec(ctx, `INSERT INTO `+testutil.Table(schema)+` (event_type, aggregate_type, aggregate_id, payload)
				SELECT 'order.created', 'order', g::text, '{"order_id":12345,"customer":"c-1","total_cents":4999,"currency":"EUR"}'
				FROM generate_series(1, $1) g`, backlog*b.N)
			if err != nil {
				b.Fatal(err)
			}
			_, _ = pool.Exec(ctx, `VACUUM ANALYZE `+testutil.Table(schema))
			var delivered atomic.Int64
			done := make(chan struct{})
			sink := outbox.SinkFunc(func(_ context.Context, events []outbox.Event) []error {
				if delivered.Add(int64(len(events))) == int64(backlog*b.N) {
					close(done)
				}
				return nil
			})
			r, err := outbox.NewRelay(outbox.Postgres(pool), outbox.RelayConfig{Sink: sink, Schema: schema, BatchSize: cfg.batch,
				Workers: cfg.workers, PollInterval: 10 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
			if err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			start := time.Now()
			if err := r.Start(ctx); err != nil {
				b.Fatal(err)
			}
			<-done
			elapsed := time.Since(start)
			b.StopTimer()
			if err := r.Stop(ctx); err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(backlog*b.N)/elapsed.Seconds(), "events/s")
		})
	}
}

// BenchmarkReplayTo replays a delivered history, half of it archived, to a
// discarding sink: all of it, and a filter matching one event in 100 (which
// reads the whole range to find them).
func BenchmarkReplayTo(b *testing.B) {
	const history = 100000
	pool, schema := testutil.Schema(b)
	ctx := context.Background()
	archive := pgx.Identifier{schema, "outbox_events_archive"}.Sanitize()
	for _, q := range []string{
		`INSERT INTO ` + archive + ` (id, event_type, aggregate_type, aggregate_id, payload, status, processed_at)
			SELECT g, 'order.created', 'order', (g % 100)::text, '{"order_id":12345,"customer":"c-1","total_cents":4999,"currency":"EUR"}', 'processed', now()
			FROM generate_series(1, $1 / 2) g`,
		`INSERT INTO ` + testutil.Table(schema) + ` (id, event_type, aggregate_type, aggregate_id, payload, status, processed_at)
			SELECT g, 'order.created', 'order', (g % 100)::text, '{"order_id":12345,"customer":"c-1","total_cents":4999,"currency":"EUR"}', 'processed', now()
			FROM generate_series($1 / 2 + 1, $1) g`,
	} {
		if _, err := pool.Exec(ctx, q, history); err != nil {
			b.Fatal(err)
		}
	}
	if _, err := pool.Exec(ctx, `ANALYZE `+testutil.Table(schema)+`; ANALYZE `+archive); err != nil {
		b.Fatal(err)
	}
	mgr := outbox.NewManager(outbox.Postgres(pool), outbox.ManagerConfig{Schema: schema})
	discard := outbox.SinkFunc(func(context.Context, []outbox.Event) []error { return nil })
	for _, tc := range []struct {
		name string
		f    outbox.EventFilter
		want int64
	}{{"all", outbox.EventFilter{}, history}, {"one_in_100", outbox.EventFilter{AggregateID: "7"}, history / 100}} {
		b.Run(tc.name, func(b *testing.B) {
			var read int64
			for b.Loop() {
				res, err := mgr.ReplayTo(ctx, discard, outbox.ReplayParams{EventFilter: tc.f})
				if err != nil {
					b.Fatal(err)
				}
				if res.Published != tc.want {
					b.Fatalf("published %d, want %d", res.Published, tc.want)
				}
				read += history
			}
			b.ReportMetric(float64(read)/b.Elapsed().Seconds(), "rows_scanned/s")
			b.ReportMetric(float64(int64(b.N)*tc.want)/b.Elapsed().Seconds(), "events/s")
		})
	}
}

package bench

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/driver"
	"github.com/outboxkit/outbox/internal/driver/pgdriver"
	"github.com/outboxkit/outbox/internal/testutil"
)

// The statement benchmarks time one claim or one mark of a whole batch, the
// relay's statements (pgdriver) beside the reference loop's, on a table
// pre-filled with b.N batches. Run them with -benchmem: allocs/event is the
// Go allocations per claimed event, payload included.
//
//	go test -run '^$' -bench 'Claim|Mark' -benchmem ./internal/bench

func BenchmarkClaim(b *testing.B) {
	for _, batch := range []int{100, 1000} {
		for _, impl := range []string{"relay", "reference"} {
			b.Run(fmt.Sprintf("batch=%d/impl=%s", batch, impl), func(b *testing.B) {
				st := newStmtBench(b, batch, outbox.RetainProcessed)
				st.prefill(b, b.N*batch)
				claim := st.claimFunc(impl)
				b.ReportAllocs()
				allocs := mallocs()
				b.ResetTimer()
				for range b.N {
					if ids := claim(b); len(ids) != batch {
						b.Fatalf("claimed %d events, want %d", len(ids), batch)
					}
				}
				b.StopTimer()
				st.report(b, batch, mallocs()-allocs)
			})
		}
	}
}

func BenchmarkMark(b *testing.B) {
	for _, retention := range Retentions {
		for _, batch := range []int{100, 1000} {
			for _, impl := range []string{"relay", "reference"} {
				b.Run(fmt.Sprintf("retention=%s/batch=%d/impl=%s", retention, batch, impl), func(b *testing.B) {
					st := newStmtBench(b, batch, retention)
					st.prefill(b, b.N*batch)
					claim, mark := st.claimFunc(impl), st.markFunc(impl)
					b.ReportAllocs()
					b.ResetTimer()
					for range b.N {
						b.StopTimer()
						ids := claim(b)
						b.StartTimer()
						if n := mark(b, ids); n != int64(batch) {
							b.Fatalf("marked %d events, want %d", n, batch)
						}
					}
					b.StopTimer()
					st.report(b, batch, 0)
				})
			}
		}
	}
}

// stmtBench is one scratch table with the relay's driver and the reference
// loop on it, over a pool configured like a relay's.
type stmtBench struct {
	ctx     context.Context
	pool    *pgxpool.Pool
	table   string
	drv     *pgdriver.Driver
	ref     *pgReference
	batch   int
	ret     outbox.Retention
	lockedT time.Time // the relay's last claim's lease, its marks' fence
}

const stmtRelayID = "bench-stmt"

func newStmtBench(b *testing.B, batch int, retention outbox.Retention) *stmtBench {
	b.Helper()
	_, schema := testutil.Schema(b)
	pc, err := pgxpool.ParseConfig(testutil.DatabaseURL())
	if err != nil {
		b.Fatal(err)
	}
	outbox.ConfigureRelayPool(pc, stmtRelayID)
	pc.MaxConns = 2
	ctx := context.Background()
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(pool.Close)
	table := pgx.Identifier{schema, "outbox_events"}.Sanitize()
	archive := pgx.Identifier{schema, "outbox_events_archive"}.Sanitize()
	return &stmtBench{ctx: ctx, pool: pool, table: table, drv: pgdriver.New(pool, schema), batch: batch, ret: retention,
		ref: newPgReference(pool, table, archive, retention)}
}

func (st *stmtBench) prefill(b *testing.B, n int) {
	b.Helper()
	_, err := st.pool.Exec(st.ctx, `INSERT INTO `+st.table+` (event_type, aggregate_type, aggregate_id, payload)
SELECT 'order.created', 'order', g::text, $2::jsonb FROM generate_series(1, $1::int) AS g`, n, string(Payload(PayloadSizeDefault)))
	if err != nil {
		b.Fatal(err)
	}
	if _, err := st.pool.Exec(st.ctx, `VACUUM ANALYZE `+st.table); err != nil {
		b.Fatal(err)
	}
}

func (st *stmtBench) claimFunc(impl string) func(b *testing.B) []int64 {
	if impl == "reference" {
		return func(b *testing.B) []int64 {
			events, err := st.ref.claim(st.ctx, st.batch)
			if err != nil {
				b.Fatal(err)
			}
			ids := make([]int64, len(events))
			for i := range events {
				ids[i] = events[i].ID
			}
			return ids
		}
	}
	return func(b *testing.B) []int64 {
		claim, err := st.drv.Claim(st.ctx, driver.ClaimParams{RelayID: stmtRelayID, BatchSize: st.batch, Lease: time.Minute})
		if err != nil {
			b.Fatal(err)
		}
		st.lockedT = claim.LockedUntil
		ids := make([]int64, len(claim.Events))
		for i := range claim.Events {
			ids[i] = claim.Events[i].ID
		}
		return ids
	}
}

func (st *stmtBench) markFunc(impl string) func(b *testing.B, ids []int64) int64 {
	if impl == "reference" {
		return func(b *testing.B, ids []int64) int64 {
			n, err := st.ref.mark(st.ctx, ids)
			if err != nil {
				b.Fatal(err)
			}
			return n
		}
	}
	return func(b *testing.B, ids []int64) int64 {
		n, err := st.drv.MarkProcessed(st.ctx, driver.Fence{RelayID: stmtRelayID, LockedUntil: st.lockedT}, ids, driver.Retention(st.ret))
		if err != nil {
			b.Fatal(err)
		}
		return n
	}
}

// report adds events/s and, when allocs is set, allocs/event.
func (st *stmtBench) report(b *testing.B, batch int, allocs uint64) {
	events := float64(b.N * batch)
	b.ReportMetric(events/b.Elapsed().Seconds(), "events/s")
	if allocs > 0 {
		b.ReportMetric(float64(allocs)/events, "allocs/event")
	}
}

func mallocs() uint64 {
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.Mallocs
}

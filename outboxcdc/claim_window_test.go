package outboxcdc_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/outboxkit/outbox/internal/driver"
	"github.com/outboxkit/outbox/internal/driver/pgdriver"
	"github.com/outboxkit/outbox/internal/testutil/pgcluster"
	"github.com/outboxkit/outbox/outboxcdc"
	"github.com/outboxkit/outbox/outboxtest"
)

// prepareSlot creates the publication and the slot of b's schema and
// records its snapshot, with no relay streaming from it.
func (b bundle) prepareSlot(t testing.TB) outboxcdc.Slot {
	t.Helper()
	r, err := outboxcdc.New(b.pool, &b.pool.Config().ConnConfig.Config, outboxcdc.Config{Sink: outboxtest.NewRecorder(), Schema: b.schema, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	slot, err := r.Prepare(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return slot
}

// testClaimWindow: the table path's claim reads a bounded window of the
// oldest due pending rows (ten batches, at least 1,000), not the stream's
// whole backlog. A row it owns (a failed publish) behind more unsettled
// stream rows than that waits; once the stream has settled enough of them
// it is claimed.
func testClaimWindow(t *testing.T, url string) {
	b := setup(t, url)
	ctx := context.Background()
	slot := b.prepareSlot(t)
	// The stream's backlog: pending rows written after the slot, which no
	// relay has streamed yet.
	if _, err := b.pool.Exec(ctx, `INSERT INTO `+b.table+` (event_type, payload) SELECT 'streamed', '{}' FROM generate_series(1, 2500)`); err != nil {
		t.Fatal(err)
	}
	// A row of the table path, due after all of them: its publish failed.
	var retried int64
	if err := b.pool.QueryRow(ctx, `INSERT INTO `+b.table+` (event_type, payload) VALUES ('retried', '{}') RETURNING id`).Scan(&retried); err != nil {
		t.Fatal(err)
	}
	if _, err := b.pool.Exec(ctx, `UPDATE `+b.table+` SET attempts = 1, last_error = 'refused', updated_at = clock_timestamp() WHERE id = $1`, retried); err != nil {
		t.Fatal(err)
	}
	drv := pgdriver.New(b.pool, b.schema)
	claim := func() []driver.Event {
		t.Helper()
		c, err := drv.Claim(ctx, driver.ClaimParams{RelayID: "table", BatchSize: 10, Lease: time.Minute, CaptureSlot: slot.Name})
		if err != nil {
			t.Fatal(err)
		}
		return c.Events
	}
	if got := claim(); len(got) != 0 {
		t.Fatalf("claimed %d events (first %d) beyond the window of %d rows", len(got), got[0].ID, pgdriver.CaptureClaimWindowMin)
	}
	// The stream settles its oldest 2,000 rows: the retried row is in the
	// window now.
	if _, err := b.pool.Exec(ctx, `UPDATE `+b.table+` SET status = 'processed', processed_at = now()
WHERE id IN (SELECT id FROM `+b.table+` WHERE event_type = 'streamed' ORDER BY id LIMIT 2000)`); err != nil {
		t.Fatal(err)
	}
	got := claim()
	if len(got) != 1 || got[0].ID != retried {
		t.Fatalf("claimed %v, want only the retried event %d (the stream's rows are not the table path's)", got, retried)
	}
}

// BenchmarkCaptureTableClaim measures one claim of a capture relay's table
// path while the stream's backlog holds many pending rows (50,000; 2,000
// with OUTBOX_BENCH_SMOKE=1), none of them the table path's: the claim
// finds nothing, and its cost is what it reads to learn that.
func BenchmarkCaptureTableClaim(b *testing.B) {
	c := pgcluster.Start(b, pgcluster.Options{Settings: map[string]string{"wal_level": "logical", "max_replication_slots": "4", "max_wal_senders": "4"}})
	bb := setup(b, c.URL())
	ctx := context.Background()
	slot := bb.prepareSlot(b)
	backlog := smoke(50000, 2000)
	if _, err := bb.pool.Exec(ctx, `INSERT INTO `+bb.table+` (event_type, payload) SELECT 'streamed', '{}' FROM generate_series(1, $1::int)`, backlog); err != nil {
		b.Fatal(err)
	}
	if _, err := bb.pool.Exec(ctx, `VACUUM ANALYZE `+bb.table); err != nil {
		b.Fatal(err)
	}
	drv := pgdriver.New(bb.pool, bb.schema)
	p := driver.ClaimParams{RelayID: "table", BatchSize: 100, Lease: time.Minute, CaptureSlot: slot.Name}
	for b.Loop() {
		cl, err := drv.Claim(ctx, p)
		if err != nil {
			b.Fatal(err)
		}
		if len(cl.Events) != 0 {
			b.Fatalf("claimed %d of the stream's events", len(cl.Events))
		}
	}
}

func smoke(full, small int) int {
	if os.Getenv("OUTBOX_BENCH_SMOKE") == "1" {
		return small
	}
	return full
}

package outboxcdc_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/driver"
	"github.com/outboxkit/outbox/internal/driver/pgdriver"
	"github.com/outboxkit/outbox/internal/testutil"
	"github.com/outboxkit/outbox/outboxcdc"
	"github.com/outboxkit/outbox/outboxtest"
)

// testEventTypes: a capture relay serving a.* streams only those events;
// the slot advances past the others, which stay pending, untouched by the
// stream, by its table path and by the table path's safety net (even once
// the slot's catalog_xmin has passed their transaction), until a poll
// relay serving b.* delivers them.
func testEventTypes(t *testing.T, url string) {
	b := setup(t, url)
	ctx := context.Background()
	rec := outboxtest.NewRecorder()
	b.start(t, rec, func(c *outboxcdc.Config, r *outbox.RelayConfig) {
		c.EventTypes, r.EventTypes = []string{"a.*"}, []string{"a.*"}
	})
	b.insert(t, "a.1", "b.1", "a.2")
	var lsn string
	if err := b.pool.QueryRow(ctx, `SELECT pg_current_wal_lsn()::text`).Scan(&lsn); err != nil {
		t.Fatal(err)
	}
	rec.WaitLen(t, 2, 10*time.Second)
	if got := types(rec.Events()); !slices.Equal(got, []string{"a.1", "a.2"}) {
		t.Fatalf("streamed %v, want [a.1 a.2]", got)
	}
	slot := outboxcdc.SlotName(b.schema, "")
	testutil.WaitFor(t, 20*time.Second, "the slot confirmed past b.1", func() bool {
		var ok bool
		if err := b.pool.QueryRow(ctx, `SELECT confirmed_flush_lsn >= $1::pg_lsn FROM pg_replication_slots WHERE slot_name = $2`, lsn, slot).Scan(&ok); err != nil {
			t.Fatal(err)
		}
		return ok && b.count(t, `status = 'processed'`) == 2
	})
	// The slot's catalog_xmin passes b.1's transaction: without event
	// types the safety net would now claim it.
	testutil.WaitFor(t, 60*time.Second, "catalog_xmin past b.1", func() bool {
		if _, err := b.pool.Exec(ctx, `CHECKPOINT`); err != nil {
			t.Fatal(err)
		}
		b.insert(t, "a.filler")
		var passed bool
		if err := b.pool.QueryRow(ctx, `SELECT age((e.txid::text::bigint % 4294967296)::text::xid) > age(s.catalog_xmin)
FROM `+b.table+` e, pg_replication_slots s WHERE e.event_type = 'b.1' AND s.slot_name = $1`, slot).Scan(&passed); err != nil {
			t.Fatal(err)
		}
		return passed
	})
	c, err := pgdriver.New(b.pool, b.schema).Claim(ctx, driver.ClaimParams{RelayID: "probe", BatchSize: 100, Lease: time.Minute,
		CaptureSlot: slot, EventTypes: []string{"a.*"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range c.Events {
		if e.EventType == "b.1" {
			t.Fatalf("the table path of a.* claimed b.1")
		}
	}
	if n := b.count(t, `event_type = 'b.1' AND status = 'pending' AND attempts = 0 AND updated_at = created_at`); n != 1 {
		t.Fatalf("b.1 touched by the a.* relay (%d untouched pending rows)", n)
	}
	// Its own relay delivers it.
	other := outboxtest.NewRecorder()
	poll, err := outbox.NewRelay(outbox.Postgres(b.pool), outbox.RelayConfig{Sink: other, Schema: b.schema, EventTypes: []string{"b.*"},
		PollInterval: 50 * time.Millisecond, Logger: quiet(), HeartbeatInterval: -1, SummaryInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	if err := poll.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := poll.Stop(context.Background()); err != nil {
			t.Errorf("poll relay: %v", err)
		}
	})
	other.WaitLen(t, 1, 10*time.Second)
	if got := types(other.Events()); !slices.Equal(got, []string{"b.1"}) {
		t.Fatalf("the b.* relay delivered %v, want [b.1]", got)
	}
	for _, e := range rec.Events() {
		if e.EventType == "b.1" {
			t.Fatalf("the a.* capture relay delivered b.1")
		}
	}
}

func TestMatchTypeAgreesWithLike(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		pattern, name string
		want          bool
	}{
		{"a.*", "a.1", true}, {"a.*", "a.", true}, {"a.*", "b.1", false}, {"*", "", true},
		{"a?", "a?", true}, {"a?", "ab", false}, {"*.paid", "order.paid", true}, {"*.paid", "order.paid.x", false},
		{"a_b", "a_b", true}, {"a_b", "axb", false}, {"a%", "a%", true}, {"a%", "ab", false},
		{"*x*y", "xxyy", true}, {"ü*", "über", true}, {"exact", "exact", true}, {"exact", "exactly", false},
	} {
		if got := outboxcdc.MatchEventType(tc.pattern, tc.name); got != tc.want {
			t.Errorf("MatchEventType(%q, %q) = %v, want %v", tc.pattern, tc.name, got, tc.want)
		}
	}
}

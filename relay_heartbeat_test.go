package outbox_test

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/testutil"
	"github.com/outboxkit/outbox/outboxtest"
)

// TestRelayHeartbeatWithoutTable: a schema without outbox_relays (dropped
// here; a schema before migration 006 alike) turns the heartbeat off with
// a warning, the relay delivers all the same, and Manager.Relays falls
// back to the lease holders.
func TestRelayHeartbeatWithoutTable(t *testing.T) {
	t.Parallel()
	b := setupRelay(t)
	_, err := b.pool.Exec(b.ctx, `DROP TABLE "`+b.schema+`".outbox_relays`)
	require.NoError(t, err)
	logs := &logBuffer{}
	logs.dumpOnFailure(t)
	rec := outboxtest.NewRecorder()
	b.start(t, outbox.RelayConfig{Sink: rec, HeartbeatInterval: 20 * time.Millisecond, Logger: logs.logger()})
	require.Contains(t, logs.String(), "relay heartbeat off: outbox_relays is missing")

	ids := b.write(t, 3, nil)
	rec.WaitLen(t, len(ids), 20*time.Second)
	b.waitStats(t, "the events marked processed", func(s outbox.Stats) bool { return s.Processed == int64(len(ids)) })
	relays, err := b.mgr.Relays(b.ctx)
	require.NoError(t, err)
	require.Empty(t, relays, "no heartbeat rows and no leases")
	require.Equal(t, 1, strings.Count(logs.String(), "relay heartbeat"), "warned once")
}

// TestRelayHeartbeatOff: a negative interval writes no row.
func TestRelayHeartbeatOff(t *testing.T) {
	t.Parallel()
	b := setupRelay(t)
	b.start(t, outbox.RelayConfig{Sink: outboxtest.NewRecorder(), HeartbeatInterval: -1})
	relays, err := b.mgr.Relays(b.ctx)
	require.NoError(t, err)
	require.Empty(t, relays)
}

// TestRelayHeartbeatSinkName: the sink's String names it by default, and
// a SinkName that is a URL loses its credentials.
func TestRelayHeartbeatSinkName(t *testing.T) {
	t.Parallel()
	b := setupRelay(t)
	b.start(t, outbox.RelayConfig{Sink: namedSink{}, RelayID: "named"})
	b.start(t, outbox.RelayConfig{Sink: outboxtest.NewRecorder(), RelayID: "url",
		SinkName: "nats://user:hunter2@nats-1:4222/?token=abc"})
	testutil.WaitFor(t, 10*time.Second, "both relays listed", func() bool {
		relays, err := b.mgr.Relays(b.ctx)
		require.NoError(t, err)
		return len(relays) == 2
	})
	relays, err := b.mgr.Relays(b.ctx)
	require.NoError(t, err)
	require.Equal(t, "named", relays[0].RelayID)
	require.Equal(t, "mysink(broker-1)", relays[0].Sink)
	require.Equal(t, "nats://nats-1:4222/", relays[1].Sink)
}

type namedSink struct{}

func (namedSink) Publish(_ context.Context, events []outbox.Event) []error { return nil }
func (namedSink) String() string                                           { return "mysink(broker-1)" }

// TestRelayDeliveryMustMatch: every relay of a schema must deliver the same
// way. A relay refuses to start beside a live relay that delivers
// otherwise (ordering, ordered failure policy or leases), names it and says
// how each delivers, and takes nothing; one that delivers the same way
// joins; once the others stopped, any delivery starts. Stale rows and rows
// of relays of earlier versions (no delivery recorded) are not checked.
func TestRelayDeliveryMustMatch(t *testing.T) {
	t.Parallel()
	b := setupRelay(t)
	rec := outboxtest.NewRecorder()
	// Long enough that no row goes stale under a slow beat; a graceful
	// stop deletes the row at once.
	const beat = time.Second
	ordered := b.start(t, outbox.RelayConfig{Sink: rec, RelayID: "ordered-a", Ordering: outbox.OrderingAggregate, HeartbeatInterval: beat})

	refused := func(cfg outbox.RelayConfig, want ...string) {
		t.Helper()
		cfg.Schema, cfg.Sink, cfg.HeartbeatInterval = b.schema, rec, beat
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
		r, err := outbox.NewRelay(b.db, cfg)
		require.NoError(t, err)
		err = r.Start(b.ctx)
		require.Error(t, err, "%s started beside a relay that delivers otherwise", cfg.RelayID)
		require.ErrorContains(t, err, "every relay of a schema must deliver the same way")
		for _, w := range want {
			require.ErrorContains(t, err, w)
		}
		var owned int
		require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT (SELECT count(*) FROM "`+b.schema+`".outbox_partitions WHERE owner = $1)
    + (SELECT count(*) FROM "`+b.schema+`".outbox_partition_relays WHERE relay_id = $1)`, cfg.RelayID).Scan(&owned))
		require.Zero(t, owned, "%s took partitions or joined their share-out before it was refused", cfg.RelayID)
	}
	const others = `relay "ordered-a" (host `
	const orderedWith = "delivers with ordering aggregate, ordered failure block, leases partitions"
	refused(outbox.RelayConfig{RelayID: "unordered-b"}, others, orderedWith,
		"this relay would deliver with ordering none, leases rows")
	refused(outbox.RelayConfig{RelayID: "skip-c", Ordering: outbox.OrderingAggregate, OrderedFailure: outbox.OrderedFailureSkip},
		others, "this relay would deliver with ordering aggregate, ordered failure skip, leases partitions")
	refused(outbox.RelayConfig{RelayID: "rows-d", Ordering: outbox.OrderingAggregate, Leases: outbox.LeasesRows},
		others, "this relay would deliver with ordering aggregate, ordered failure block, leases rows")
	refused(outbox.RelayConfig{RelayID: "partitions-e", Leases: outbox.LeasesPartitions},
		others, "this relay would deliver with ordering none, leases partitions")

	same := b.start(t, outbox.RelayConfig{Sink: rec, RelayID: "ordered-f", Ordering: outbox.OrderingAggregate, HeartbeatInterval: beat})
	relays, err := b.mgr.Relays(b.ctx)
	require.NoError(t, err)
	require.Len(t, relays, 2, "the refused relays left no heartbeat row")
	for _, r := range relays {
		require.Equal(t, outbox.OrderingAggregate, r.Ordering, r.RelayID)
		require.Equal(t, outbox.OrderedFailureBlock, r.OrderedFailure, r.RelayID)
		require.Equal(t, outbox.LeasesPartitions, r.Leases, r.RelayID)
	}
	ids := b.write(t, 20, nil)
	rec.WaitLen(t, len(ids), 20*time.Second)

	// A row gone stale, and a live row of a relay of an earlier version
	// (no delivery recorded), are not checked.
	ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
	defer cancel()
	require.NoError(t, ordered.Stop(ctx))
	require.NoError(t, same.Stop(ctx))
	_, err = b.pool.Exec(b.ctx, `INSERT INTO "`+b.schema+`".outbox_relays
    (relay_id, host, pid, version, sink, event_types, started_at, last_seen, expires_at, ordering, ordered_failure, leases)
VALUES ('killed', 'h', 1, 'v', 's', '', now(), now(), now() - interval '1 second', 'aggregate', 'block', 'partitions'),
       ('older', 'h', 2, 'v', 's', '', now(), now(), now() + interval '1 minute', NULL, NULL, NULL)`)
	require.NoError(t, err)
	b.start(t, outbox.RelayConfig{Sink: rec, RelayID: "unordered-b", HeartbeatInterval: beat})
	relays, err = b.mgr.Relays(b.ctx)
	require.NoError(t, err)
	require.Len(t, relays, 3)
	require.Equal(t, "older", relays[1].RelayID)
	require.Empty(t, relays[1].Ordering, "a relay of an earlier version records no delivery")
	require.Equal(t, outbox.OrderingNone, relays[2].Ordering)
	require.Empty(t, relays[2].OrderedFailure)
	require.Equal(t, outbox.LeasesRows, relays[2].Leases)
}

// TestRelayDeliveryWatched: a relay the start's check could not see (its
// heartbeat off, or its first beat failed; here a row written later) is
// found by the later beats, which log it once for as long as it runs.
func TestRelayDeliveryWatched(t *testing.T) {
	t.Parallel()
	b := setupRelay(t)
	logs := &logBuffer{}
	logs.dumpOnFailure(t)
	b.start(t, outbox.RelayConfig{Sink: outboxtest.NewRecorder(), RelayID: "unordered", HeartbeatInterval: 20 * time.Millisecond,
		Logger: logs.logger()})
	rival := func() {
		_, err := b.pool.Exec(b.ctx, `INSERT INTO "`+b.schema+`".outbox_relays
    (relay_id, host, pid, version, sink, event_types, started_at, last_seen, expires_at, ordering, ordered_failure, leases)
VALUES ('rival', 'web-2', 7, 'v', 's', '', now(), now(), now() + interval '1 minute', 'aggregate', 'skip', 'rows')`)
		require.NoError(t, err)
	}
	// beats waits until the relay began n beats after this call, each
	// after the one before had read the rows (a beat writes, then reads).
	beats := func(n int) {
		t.Helper()
		var last time.Time
		require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT clock_timestamp()`).Scan(&last))
		for range n {
			testutil.WaitFor(t, 10*time.Second, "a beat of the relay", func() bool {
				var seen time.Time
				require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT last_seen FROM "`+b.schema+`".outbox_relays WHERE relay_id = 'unordered'`).Scan(&seen))
				if seen.After(last) {
					last = seen
					return true
				}
				return false
			})
		}
	}
	const line = "another relay of the schema delivers otherwise"
	count := func() int { return strings.Count(logs.String(), line) }
	rival()
	testutil.WaitFor(t, 10*time.Second, "the rival logged", func() bool { return count() == 1 })
	require.True(t, logs.hasLine(line, "other_relay=rival", "other_host=web-2", "other_pid=7",
		`other_delivery="ordering aggregate, ordered failure skip, leases rows"`, `delivery="ordering none, leases rows"`))
	beats(3)
	require.Equal(t, 1, count(), "logged once while it runs")

	_, err := b.pool.Exec(b.ctx, `DELETE FROM "`+b.schema+`".outbox_relays WHERE relay_id = 'rival'`)
	require.NoError(t, err)
	beats(2) // the second began after the first had read the rows without the rival
	rival()
	testutil.WaitFor(t, 10*time.Second, "the rival logged again once it came back", func() bool { return count() == 2 })
}

// TestRelaysWithoutMigrationsGrant: a role that may read the outbox and
// outbox_relays but not outbox_migrations (a monitoring role) still lists
// the relays, without how they deliver.
func TestRelaysWithoutMigrationsGrant(t *testing.T) {
	t.Parallel()
	b := setupRelay(t)
	b.start(t, outbox.RelayConfig{Sink: outboxtest.NewRecorder(), RelayID: "watched"})
	role := b.schema + "_monitor"
	r, s := pgx.Identifier{role}.Sanitize(), func(table string) string { return pgx.Identifier{b.schema, table}.Sanitize() }
	pool := testutil.RolePool(t, b.pool, role,
		`GRANT USAGE ON SCHEMA `+pgx.Identifier{b.schema}.Sanitize()+` TO `+r,
		`GRANT SELECT ON `+s("outbox_events")+`, `+s("outbox_relays")+` TO `+r)

	relays, err := outbox.NewManager(outbox.Postgres(pool), outbox.ManagerConfig{Schema: b.schema}).Relays(b.ctx)
	require.NoError(t, err)
	require.Len(t, relays, 1)
	require.Equal(t, "watched", relays[0].RelayID)
	require.Empty(t, relays[0].Ordering, "how it delivers needs the schema version")
	relays, err = b.mgr.Relays(b.ctx)
	require.NoError(t, err)
	require.Equal(t, outbox.OrderingNone, relays[0].Ordering)
}

package drivertest

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/driver"
)

// Run runs the conformance suite against h's database, every test in
// parallel.
func Run(t *testing.T, h Harness) {
	tests := []struct {
		name string
		fn   func(t *testing.T, h Harness)
	}{
		{"WriteReturnsIDsInOrder", testWriteReturnsIDsInOrder},
		{"WriteDuplicateKeysKeepTransactionUsable", testWriteDuplicateKeys},
		{"WriteRolledBackIsNeverClaimed", testWriteRollback},
		{"WriteLargeBatch", testWriteLargeBatch},
		{"PlainSQLInsertIsClaimable", testPlainSQLInsert},
		{"ClaimTakesExactlyTheLimitInOrder", testClaimExactLimit},
		{"ClaimSkipsFutureEvents", testClaimSkipsFuture},
		{"ClaimFiltersEventTypes", testClaimFiltersEventTypes},
		{"ClaimKeepsWithinByteBudget", testClaimByteBudget},
		{"ClaimSkipsLockedRows", testClaimSkipsLocked},
		{"ConcurrentClaimsAreDisjoint", testConcurrentClaims},
		{"ConcurrentLoopsAndWritersNeverFail", testConcurrentLoops},
		{"MarksAreFencedByLease", testFencing},
		{"MarkFailedBacksOffByDatabaseClock", testBackoff},
		{"DeadLetterAtMaxAttempts", testDeadLetterAtMaxAttempts},
		{"PermanentFailureDeadLettersAtOnce", testPermanentFailure},
		{"ReleaseSpendsNoAttempt", testRelease},
		{"RefusedMarksAreDataErrors", testRefusedMarks},
		{"RescueExpiredLeases", testRescue},
		{"SuspectIsClaimedAlone", testSuspectIsClaimedAlone},
		{"RescueDeadLettersOutOfAttempts", testRescueDeadLetters},
		{"ReadOnlyDatabaseRefusesWithErrReadOnly", testReadOnly},
		{"RetentionModes", testRetentionModes},
		{"ArchiveKeepsExistingIDs", testArchiveKeepsExistingIDs},
		{"ReplayReadsTableAndArchiveInIDOrder", testReplay},
		{"Purge", testPurge},
		{"LeaseAcquireRenewStealRelease", testLease},
		{"LeaseRaceHasOneWinner", testLeaseRace},
		{"DeadLetterRetry", testDeadLetterRetry},
		{"Heartbeat", testHeartbeat},
		{"RelayHeartbeat", testRelayHeartbeat},
		{"RelayDeliveryMustMatch", testRelayDelivery},
		{"RelayDeliveryConcurrentStarts", testRelayDeliveryConcurrentStarts},
		{"Stats", testStats},
		{"RequeueAndRequeueStatus", testRequeue},
		{"ListAndGet", testListAndGet},
		{"AdminSearchAndCount", testAdminSearch},
		{"AdminActions", testAdminActions},
		{"AdminLeasesAndSample", testAdminLeasesAndSample},
		{"TableHealth", testTableHealth},
		{"MigrateIsIdempotentAndSafeConcurrently", testMigrate},
		{"MigrationSQLAppliesAsPrinted", testMigrationSQL},
		{"RelaysEndToEnd", testRelaysEndToEnd},
		{"RelayRetriesThenDeadLetters", testRelayDeadLetter},
		{"RelayStoresSanitizedErrors", testRelayStoresSanitizedErrors},
		{"RelayDeadLettersRefusedMarks", testRelayDeadLettersRefusedMarks},
	}
	tests = append(tests, orderedTests...)
	if h.NoOrdering != "" {
		tests = append(tests, struct {
			name string
			fn   func(t *testing.T, h Harness)
		}{"OrderingRefused", testOrderingRefused})
	}
	for _, tc := range tests {
		if h.Pooled && sessionBound[tc.name] {
			continue
		}
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t, h)
		})
	}
}

// sessionBound names the tests of what needs a server session of its own,
// which a pooler in transaction mode does not give: migrations take a
// session's advisory lock (operators run them against the server).
var sessionBound = map[string]bool{"MigrateIsIdempotentAndSafeConcurrently": true}

// bundle is one test's database and the outbox objects on it.
type bundle struct {
	ctx    context.Context
	db     *DB
	drv    driver.Driver
	writer *outbox.Writer
	mgr    *outbox.Manager
}

func setup(t *testing.T, h Harness) bundle {
	t.Helper()
	db := h.Open(t, false)
	return newBundle(db)
}

func newBundle(db *DB) bundle {
	return bundle{
		ctx: context.Background(), db: db, drv: db.Database.Driver(db.Schema),
		writer: outbox.NewWriter(outbox.WriterConfig{Schema: db.Schema, Dialect: db.Dialect}),
		mgr:    outbox.NewManager(db.Database, outbox.ManagerConfig{Schema: db.Schema}),
	}
}

// write commits msgs in one transaction and returns the result.
func (b bundle) write(t testing.TB, msgs ...outbox.Message) outbox.WriteResult {
	t.Helper()
	tx, err := b.db.Begin(b.ctx)
	require.NoError(t, err)
	res, err := tx.Write(b.ctx, b.writer, msgs...)
	if err != nil {
		_ = tx.Rollback(b.ctx)
		require.NoError(t, err)
	}
	require.NoError(t, tx.Commit(b.ctx))
	return res
}

// insert commits n plain events and returns their IDs.
func (b bundle) insert(t testing.TB, n int) []int64 {
	t.Helper()
	msgs := make([]outbox.Message, n)
	for i := range msgs {
		msgs[i] = outbox.Message{EventType: "e", AggregateID: fmt.Sprint(i), Payload: json.RawMessage(fmt.Sprint(i))}
	}
	return b.write(t, msgs...).IDs
}

func (b bundle) claim(t testing.TB, relay string, n int, lease time.Duration) driver.Claim {
	t.Helper()
	c, err := b.drv.Claim(b.ctx, driver.ClaimParams{RelayID: relay, BatchSize: n, Lease: lease})
	require.NoError(t, err)
	return c
}

func (b bundle) get(t testing.TB, id int64) driver.Event {
	t.Helper()
	e, err := b.drv.GetEvent(b.ctx, id)
	require.NoError(t, err)
	return e
}

func claimIDs(c driver.Claim) []int64 {
	ids := make([]int64, len(c.Events))
	for i, e := range c.Events {
		ids[i] = e.ID
	}
	return ids
}

func testWriteReturnsIDsInOrder(t *testing.T, h Harness) {
	b := setup(t, h)
	res := b.write(t,
		outbox.Message{EventType: "order.created", AggregateType: "order", AggregateID: "1", Payload: map[string]int{"n": 1}},
		outbox.Message{EventType: "order.paid", AggregateType: "order", AggregateID: "1", Payload: json.RawMessage(`{"b": 2, "a": [1, 2]}`),
			CorrelationID: "corr", CausationID: "cause", SchemaVersion: "2", Headers: map[string]string{"tenant": "acme"}},
		outbox.Message{EventType: "order.shipped", Payload: []byte(`"ünï"`), MaxAttempts: 9, Delay: time.Hour},
	)
	require.Len(t, res.IDs, 3)
	require.Empty(t, res.Duplicates)
	require.Less(t, res.IDs[0], res.IDs[1])
	require.Less(t, res.IDs[1], res.IDs[2])

	e0 := b.get(t, res.IDs[0])
	require.Equal(t, "order.created", e0.EventType)
	require.Equal(t, "order", e0.AggregateType)
	require.JSONEq(t, `{"n":1}`, string(e0.Payload))
	require.Equal(t, driver.StatusPending, e0.Status)
	require.Zero(t, e0.MaxAttempts)
	require.Empty(t, e0.Headers)
	require.WithinDuration(t, e0.CreatedAt, e0.AvailableAt, time.Second)

	e1 := b.get(t, res.IDs[1])
	require.JSONEq(t, `{"b": 2, "a": [1, 2]}`, string(e1.Payload))
	if h.ExactJSON {
		require.Equal(t, `{"b": 2, "a": [1, 2]}`, string(e1.Payload), "payload bytes as stored")
	}
	require.Equal(t, map[string]string{"correlation_id": "corr", "causation_id": "cause", "schema_version": "2", "tenant": "acme"}, e1.Headers)

	e2 := b.get(t, res.IDs[2])
	require.Equal(t, `"ünï"`, string(e2.Payload))
	require.Equal(t, 9, e2.MaxAttempts)
	require.Empty(t, e2.AggregateID)
	require.InDelta(t, time.Hour.Seconds(), e2.AvailableAt.Sub(e2.CreatedAt).Seconds(), 1)

	at := time.Date(2030, 1, 2, 3, 4, 5, 6_000_000, time.UTC)
	e3 := b.get(t, b.write(t, outbox.Message{EventType: "x", Payload: 1, AvailableAt: at}).IDs[0])
	require.True(t, at.Equal(e3.AvailableAt), "available_at %v, want %v", e3.AvailableAt, at)
}

func testWriteDuplicateKeys(t *testing.T, h Harness) {
	b := setup(t, h)
	first := b.write(t, outbox.Message{EventType: "e", Payload: 1, IdempotencyKey: "k1"})
	require.NotZero(t, first.IDs[0])

	tx, err := b.db.Begin(b.ctx)
	require.NoError(t, err)
	res, err := tx.Write(b.ctx, b.writer,
		outbox.Message{EventType: "e", Payload: 2, IdempotencyKey: "k1"}, // exists
		outbox.Message{EventType: "e", Payload: 3},
		outbox.Message{EventType: "e", Payload: 4, IdempotencyKey: "k2"},
		outbox.Message{EventType: "e", Payload: 5, IdempotencyKey: "k2"}, // same batch
		outbox.Message{EventType: "e", Payload: 6, IdempotencyKey: "K1"}, // keys are case-sensitive
	)
	require.NoError(t, err)
	require.Equal(t, []int{0, 3}, res.Duplicates)
	require.Zero(t, res.IDs[0])
	require.Zero(t, res.IDs[3])
	require.NotZero(t, res.IDs[1])
	require.NotZero(t, res.IDs[2])
	require.NotZero(t, res.IDs[4])
	require.NoError(t, tx.Check(b.ctx), "a duplicate must not abort the caller's transaction")
	// A later write in the same transaction sees its own keys.
	again, err := tx.Write(b.ctx, b.writer, outbox.Message{EventType: "e", Payload: 7, IdempotencyKey: "k2"})
	require.NoError(t, err)
	require.Equal(t, []int{0}, again.Duplicates)
	require.NoError(t, tx.Commit(b.ctx))

	require.Equal(t, "4", string(b.get(t, res.IDs[2]).Payload))
	require.Equal(t, "3", string(b.get(t, res.IDs[1]).Payload))
	require.Equal(t, 4, b.db.Count(t, b.db.Table))
	n, err := b.mgr.CountEvents(b.ctx, outbox.EventFilter{IdempotencyKey: "k1"})
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
}

func testWriteRollback(t *testing.T, h Harness) {
	b := setup(t, h)
	tx, err := b.db.Begin(b.ctx)
	require.NoError(t, err)
	_, err = tx.Write(b.ctx, b.writer, outbox.Message{EventType: "ghost", Payload: 1, IdempotencyKey: "g"})
	require.NoError(t, err)
	require.NoError(t, tx.Rollback(b.ctx))
	require.Empty(t, b.claim(t, "r", 10, time.Minute).Events)
	// The rolled-back key is free again.
	res := b.write(t, outbox.Message{EventType: "real", Payload: 1, IdempotencyKey: "g"})
	require.Empty(t, res.Duplicates)
	c := b.claim(t, "r", 10, time.Minute)
	require.Equal(t, res.IDs, claimIDs(c))
	require.Equal(t, "real", c.Events[0].EventType)
}

func testWriteLargeBatch(t *testing.T, h Harness) {
	b := setup(t, h)
	msgs := make([]outbox.Message, 2500)
	for i := range msgs {
		msgs[i] = outbox.Message{EventType: "bulk", Payload: i}
		if i%3 == 0 {
			msgs[i].IdempotencyKey = fmt.Sprint("k", i%900) // repeats from 900 on
		}
	}
	res := b.write(t, msgs...)
	require.Len(t, res.IDs, len(msgs))
	dups := 0
	for i, id := range res.IDs {
		if id == 0 {
			dups++
			require.GreaterOrEqual(t, i, 900)
			continue
		}
		require.Equal(t, fmt.Sprint(i), string(b.get(t, id).Payload), "message %d", i)
		if i > 0 && i%500 == 0 {
			break // spot checks are enough
		}
	}
	require.Equal(t, len(msgs)-len(res.Duplicates), b.db.Count(t, b.db.Table))
	require.Len(t, res.Duplicates, (2500+2)/3-300)
}

func testPlainSQLInsert(t *testing.T, h Harness) {
	b := setup(t, h)
	// The contract for writers in other languages: four columns, the rest
	// defaulted.
	b.db.Exec(t, `INSERT INTO `+b.db.Table+` (event_type, aggregate_type, aggregate_id, payload) VALUES ('user.created', 'user', '42', '{"name":"Ada"}');`)
	c := b.claim(t, "r", 10, time.Minute)
	require.Len(t, c.Events, 1)
	e := c.Events[0]
	require.Equal(t, "user.created", e.EventType)
	require.Equal(t, "42", e.AggregateID)
	require.JSONEq(t, `{"name":"Ada"}`, string(e.Payload))
	require.Empty(t, e.Headers)
	require.Zero(t, e.Attempts)
}

func testClaimExactLimit(t *testing.T, h Harness) {
	b := setup(t, h)
	ids := b.insert(t, 25)
	now := b.db.Now(t)
	c := b.claim(t, "r1", 10, time.Minute)
	require.Equal(t, ids[:10], claimIDs(c))
	for _, e := range c.Events {
		require.Equal(t, driver.StatusProcessing, e.Status)
		require.Equal(t, "r1", e.LockedBy)
		require.True(t, c.LockedUntil.Equal(e.LockedUntil))
		// What the claim returned is what the row holds.
		stored := b.get(t, e.ID)
		require.True(t, c.LockedUntil.Equal(stored.LockedUntil), "stored %v, claimed %v", stored.LockedUntil, c.LockedUntil)
		require.Equal(t, driver.StatusProcessing, stored.Status)
	}
	// The lease is set by the database clock: now + lease.
	require.WithinDuration(t, now.Add(time.Minute), c.LockedUntil, 5*time.Second)

	c2 := b.claim(t, "r2", 100, time.Minute)
	require.Equal(t, ids[10:], claimIDs(c2))
	require.Empty(t, b.claim(t, "r3", 100, time.Minute).Events)
}

func testClaimSkipsFuture(t *testing.T, h Harness) {
	b := setup(t, h)
	ids := b.insert(t, 3)
	b.db.SetTime(t, b.db.Table, "available_at", time.Hour, ids[1])
	require.Equal(t, []int64{ids[0], ids[2]}, claimIDs(b.claim(t, "r", 10, time.Minute)))
	// Claim order is by due time: an event made due earlier comes first.
	more := b.insert(t, 2)
	b.db.SetTime(t, b.db.Table, "available_at", -time.Hour, more[1])
	require.Equal(t, []int64{more[1], more[0]}, claimIDs(b.claim(t, "r", 10, time.Minute)))
}

func testClaimFiltersEventTypes(t *testing.T, h Harness) {
	b := setup(t, h)
	res := b.write(t,
		outbox.Message{EventType: "order.created", Payload: 1},
		outbox.Message{EventType: "user.created", Payload: 2},
		outbox.Message{EventType: "a_b", Payload: 3},
		outbox.Message{EventType: "axb", Payload: 4},
		outbox.Message{EventType: "ORDER.paid", Payload: 5},
	)
	c, err := b.drv.Claim(b.ctx, driver.ClaimParams{RelayID: "r", BatchSize: 10, Lease: time.Minute, EventTypes: []string{"order.*", "a_b"}})
	require.NoError(t, err)
	require.Equal(t, []int64{res.IDs[0], res.IDs[2]}, claimIDs(c), "_ matches itself; matching is case-sensitive")
}

// testClaimByteBudget: with MaxBytes a claim takes events in order while
// their stored payload and header bytes stay within the budget, and the
// first one always, however large; a suspect is still claimed alone.
func testClaimByteBudget(t *testing.T, h Harness) {
	b := setup(t, h)
	msgs := make([]outbox.Message, 7)
	for i := range msgs {
		// About 1 KB each, under any database's compression threshold.
		msgs[i] = outbox.Message{EventType: fmt.Sprint("t", i%2), Payload: strings.Repeat(fmt.Sprint(i), 1000)}
	}
	ids := b.write(t, msgs...).IDs
	claim := func(maxBytes int64, types ...string) []int64 {
		t.Helper()
		c, err := b.drv.Claim(b.ctx, driver.ClaimParams{RelayID: "r", BatchSize: 100, Lease: time.Minute, MaxBytes: maxBytes, EventTypes: types})
		require.NoError(t, err)
		for _, e := range c.Events {
			require.Len(t, e.Payload, 1002, "whole events")
			require.True(t, c.LockedUntil.Equal(e.LockedUntil))
		}
		return claimIDs(c)
	}
	require.Equal(t, ids[:2], claim(2500), "two fit, a third would not")
	require.Equal(t, ids[2:3], claim(1), "the first event is taken even alone over the budget")
	require.Equal(t, []int64{ids[3], ids[5]}, claim(2500, "t1"), "with an event type filter")
	// A suspect is claimed alone, within any budget.
	c := b.claim(t, "dead", 1, time.Minute)
	require.Equal(t, ids[4:5], claimIDs(c))
	b.db.SetTime(t, b.db.Table, "locked_until", -time.Second, ids[4])
	_, err := b.drv.RescueExpired(b.ctx, driver.RescueParams{Limit: 10, MaxAttempts: 5})
	require.NoError(t, err)
	require.Equal(t, ids[4:5], claim(1<<20))
	require.Equal(t, ids[6:], claim(1<<20))
	require.Empty(t, claim(1<<20))
}

func testClaimSkipsLocked(t *testing.T, h Harness) {
	if !h.SkipLocked {
		t.Skip(h.Name + " has a single writer: no locked rows to skip")
	}
	b := setup(t, h)
	ids := b.insert(t, 10)
	release := b.db.LockRows(t, ids[:4])
	defer release()
	ctx, cancel := context.WithTimeout(b.ctx, 5*time.Second)
	defer cancel()
	c, err := b.drv.Claim(ctx, driver.ClaimParams{RelayID: "r", BatchSize: 100, Lease: time.Minute})
	require.NoError(t, err, "claim must not wait on locked rows")
	require.Equal(t, ids[4:], claimIDs(c))
}

func testConcurrentClaims(t *testing.T, h Harness) {
	b := setup(t, h)
	const total = 600
	ids := b.insert(t, total)
	var (
		mu   sync.Mutex
		seen = map[int64]string{}
		wg   sync.WaitGroup
	)
	for r := range 4 {
		wg.Go(func() {
			relay := fmt.Sprint("r", r)
			for {
				c, err := b.drv.Claim(b.ctx, driver.ClaimParams{RelayID: relay, BatchSize: 37, Lease: time.Minute})
				if err != nil {
					t.Error(err)
					return
				}
				if len(c.Events) == 0 {
					return
				}
				if len(c.Events) > 37 {
					t.Errorf("claimed %d, over the limit", len(c.Events))
				}
				mu.Lock()
				for _, e := range c.Events {
					if prev, dup := seen[e.ID]; dup {
						t.Errorf("event %d claimed by %s and %s", e.ID, prev, relay)
					}
					seen[e.ID] = relay
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	require.Len(t, seen, total)
	for _, id := range ids {
		require.Contains(t, seen, id)
	}
}

func testFencing(t *testing.T, h Harness) {
	b := setup(t, h)
	b.insert(t, 3)
	stale := b.claim(t, "slow", 10, time.Minute)
	require.Len(t, stale.Events, 3)
	ids := claimIDs(stale)

	// The slow relay's lease expires; the rows are rescued and re-claimed
	// (alone, as suspects).
	b.db.SetTime(t, b.db.Table, "locked_until", -time.Second)
	rescued, err := b.drv.RescueExpired(b.ctx, driver.RescueParams{Limit: 100, MaxAttempts: 5})
	require.NoError(t, err)
	require.Equal(t, ids, rescued.Rescued)
	fresh := b.claim(t, "fast", 10, time.Minute)
	require.Equal(t, ids[:1], claimIDs(fresh))

	staleFence := driver.Fence{RelayID: "slow", LockedUntil: stale.LockedUntil}
	n, err := b.drv.MarkProcessed(b.ctx, staleFence, ids, driver.RetainProcessed)
	require.NoError(t, err)
	require.Zero(t, n, "stale relay marked rows it no longer holds")
	res, err := b.drv.MarkFailed(b.ctx, staleFence, 5, []driver.Failure{{ID: ids[0], Error: "x"}})
	require.NoError(t, err)
	require.Empty(t, res.Dead)
	require.Empty(t, res.Retried)
	n, err = b.drv.Release(b.ctx, staleFence, ids)
	require.NoError(t, err)
	require.Zero(t, n)

	// The same relay ID with another lease end is fenced out too, however
	// close: the stored precision is exact.
	for _, off := range []time.Duration{-time.Millisecond, time.Millisecond} {
		other := driver.Fence{RelayID: "fast", LockedUntil: fresh.LockedUntil.Add(off)}
		n, err = b.drv.MarkProcessed(b.ctx, other, ids, driver.RetainDelete)
		require.NoError(t, err)
		require.Zero(t, n, off)
	}
	n, err = b.drv.MarkProcessed(b.ctx, driver.Fence{RelayID: "fast", LockedUntil: fresh.LockedUntil}, ids, driver.RetainProcessed)
	require.NoError(t, err)
	require.EqualValues(t, 1, n, "the lease covers the one event claimed")
	e := b.get(t, ids[0])
	require.Equal(t, driver.StatusProcessed, e.Status)
	require.False(t, e.ProcessedAt.IsZero())
	require.True(t, e.LockedUntil.IsZero())
	require.Equal(t, "fast", e.LockedBy)
}

func testBackoff(t *testing.T, h Harness) {
	b := setup(t, h)
	res := b.write(t, outbox.Message{EventType: "e", Payload: 1}, outbox.Message{EventType: "e", Payload: 2, MaxAttempts: 1})
	ids := res.IDs
	c := b.claim(t, "r", 10, time.Minute)
	f := driver.Fence{RelayID: "r", LockedUntil: c.LockedUntil}
	fr, err := b.drv.MarkFailed(b.ctx, f, 3, []driver.Failure{
		{ID: ids[0], Error: "down", Delay: 2 * time.Second},
		{ID: ids[1], Error: "down", Delay: 2 * time.Second},
	})
	require.NoError(t, err)
	require.Equal(t, []int64{ids[0]}, fr.Retried)
	require.Equal(t, []int64{ids[1]}, fr.Dead)

	e := b.get(t, ids[0])
	require.Equal(t, driver.StatusPending, e.Status)
	require.Equal(t, 1, e.Attempts)
	require.Equal(t, "down", e.LastError)
	// Both timestamps come from the database clock in one statement.
	require.Equal(t, 2*time.Second, e.AvailableAt.Sub(e.UpdatedAt))
	require.True(t, e.LockedUntil.IsZero())
	require.Empty(t, b.claim(t, "r", 10, time.Minute).Events, "backing off")
	b.db.SetTime(t, b.db.Table, "available_at", -time.Millisecond, ids[0])
	require.Equal(t, []int64{ids[0]}, claimIDs(b.claim(t, "r", 10, time.Minute)))
}

func testDeadLetterAtMaxAttempts(t *testing.T, h Harness) {
	b := setup(t, h)
	id := b.insert(t, 1)[0]
	for attempt := 1; attempt <= 3; attempt++ {
		c := b.claim(t, "r", 10, time.Minute)
		require.Equal(t, []int64{id}, claimIDs(c), "attempt %d", attempt)
		require.Equal(t, attempt-1, c.Events[0].Attempts)
		fr, err := b.drv.MarkFailed(b.ctx, driver.Fence{RelayID: "r", LockedUntil: c.LockedUntil}, 3,
			[]driver.Failure{{ID: id, Error: fmt.Sprint("fail ", attempt)}})
		require.NoError(t, err)
		if attempt < 3 {
			require.Equal(t, []int64{id}, fr.Retried)
		} else {
			require.Equal(t, []int64{id}, fr.Dead)
		}
	}
	e := b.get(t, id)
	require.Equal(t, driver.StatusFailed, e.Status)
	require.Equal(t, 3, e.Attempts)
	require.Equal(t, "fail 3", e.LastError)
	require.Empty(t, b.claim(t, "r", 10, time.Minute).Events)
}

func testPermanentFailure(t *testing.T, h Harness) {
	b := setup(t, h)
	id := b.insert(t, 1)[0]
	c := b.claim(t, "r", 10, time.Minute)
	fr, err := b.drv.MarkFailed(b.ctx, driver.Fence{RelayID: "r", LockedUntil: c.LockedUntil}, 5,
		[]driver.Failure{{ID: id, Error: "400 bad request", Permanent: true, Delay: time.Hour}})
	require.NoError(t, err)
	require.Equal(t, []int64{id}, fr.Dead)
	e := b.get(t, id)
	require.Equal(t, driver.StatusFailed, e.Status)
	require.Equal(t, 1, e.Attempts)
	require.Equal(t, "400 bad request", e.LastError)
}

// testRefusedMarks: a mark the database refuses for a row's data fails with
// an error wrapping driver.ErrDataRefused, and changes nothing; a retry
// would fail the same way, so the relay settles row by row instead.
func testRefusedMarks(t *testing.T, h Harness) {
	b := setup(t, h)
	refuseMarks(t, h, b.db)
	ids := b.write(t, outbox.Message{EventType: "e", AggregateID: "poison", Payload: 1}, outbox.Message{EventType: "e", Payload: 2}).IDs
	c := b.claim(t, "r", 10, time.Minute)
	f := driver.Fence{RelayID: "r", LockedUntil: c.LockedUntil}
	_, err := b.drv.MarkProcessed(b.ctx, f, ids, driver.RetainProcessed)
	require.ErrorIs(t, err, driver.ErrDataRefused)
	_, err = b.drv.MarkFailed(b.ctx, f, 5, []driver.Failure{{ID: ids[1], Error: "HTTP 403: forbidden"}})
	require.ErrorIs(t, err, driver.ErrDataRefused)
	for _, id := range ids {
		require.Equal(t, driver.StatusProcessing, b.get(t, id).Status, "a refused mark changes nothing")
	}
	if h.Name != "sqlite" { // SQLite stores any bytes
		_, err = b.drv.MarkFailed(b.ctx, f, 5, []driver.Failure{{ID: ids[1], Error: "bad \xff\xfe bytes"}})
		require.ErrorIs(t, err, driver.ErrDataRefused, "invalid UTF-8")
	}
	// Row by row, the other row's mark succeeds.
	n, err := b.drv.MarkProcessed(b.ctx, f, ids[1:], driver.RetainProcessed)
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
	// A connection-level error is not a data error.
	cancelled, cancel := context.WithCancel(b.ctx)
	cancel()
	_, err = b.drv.MarkProcessed(cancelled, f, ids[:1], driver.RetainProcessed)
	require.Error(t, err)
	require.NotErrorIs(t, err, driver.ErrDataRefused)
}

func testRelease(t *testing.T, h Harness) {
	b := setup(t, h)
	ids := b.insert(t, 2)
	c := b.claim(t, "r", 10, time.Minute)
	n, err := b.drv.Release(b.ctx, driver.Fence{RelayID: "r", LockedUntil: c.LockedUntil}, ids)
	require.NoError(t, err)
	require.EqualValues(t, 2, n)
	e := b.get(t, ids[0])
	require.Equal(t, driver.StatusPending, e.Status)
	require.Zero(t, e.Attempts)
	require.True(t, e.LockedUntil.IsZero())
	require.Equal(t, ids, claimIDs(b.claim(t, "r2", 10, time.Minute)))
}

func testRescue(t *testing.T, h Harness) {
	b := setup(t, h)
	ids := b.insert(t, 5)
	// One event failed a publish before: its error is kept.
	first := b.claim(t, "r", 1, time.Minute)
	_, err := b.drv.MarkFailed(b.ctx, driver.Fence{RelayID: "r", LockedUntil: first.LockedUntil}, 5,
		[]driver.Failure{{ID: ids[0], Error: "HTTP 503"}})
	require.NoError(t, err)
	b.db.SetTime(t, b.db.Table, "available_at", -time.Second, ids[0])
	// A relay claims and dies; a live one holds another lease.
	dead := b.claim(t, "dead", 3, time.Minute)
	live := b.claim(t, "live", 2, time.Minute)
	require.Equal(t, ids[:3], claimIDs(dead))
	b.db.SetTime(t, b.db.Table, "locked_until", -time.Second, ids[:3]...)

	p := driver.RescueParams{Limit: 2, MaxAttempts: 5}
	rescued, err := b.drv.RescueExpired(b.ctx, p)
	require.NoError(t, err)
	require.Len(t, rescued.Rescued, 2, "rescue takes at most the limit")
	p.Limit = 10
	more, err := b.drv.RescueExpired(b.ctx, p)
	require.NoError(t, err)
	require.ElementsMatch(t, ids[:3], append(rescued.Rescued, more.Rescued...))
	require.Empty(t, append(rescued.Dead, more.Dead...))
	none, err := b.drv.RescueExpired(b.ctx, p)
	require.NoError(t, err)
	require.Empty(t, none.Rescued, "live leases are left alone")

	e := b.get(t, ids[1])
	require.Equal(t, driver.StatusPending, e.Status)
	require.True(t, e.LockedUntil.IsZero())
	require.Equal(t, 1, e.Attempts, "an expiry counts as an attempt")
	require.Equal(t, 1, e.LeaseExpiries)
	require.Equal(t, "lease expired while held by relay dead", e.LastError)
	e = b.get(t, ids[0])
	require.Equal(t, 2, e.Attempts)
	require.Equal(t, 1, e.LeaseExpiries)
	require.Equal(t, "HTTP 503; lease expired while held by relay dead", e.LastError, "the earlier error is kept")

	// Suspects are claimed alone, in claim order, before the others.
	for _, id := range ids[:3] {
		c := b.claim(t, "heir", 10, time.Minute)
		require.Equal(t, []int64{id}, claimIDs(c))
		n, err := b.drv.MarkProcessed(b.ctx, driver.Fence{RelayID: "heir", LockedUntil: c.LockedUntil}, claimIDs(c), driver.RetainProcessed)
		require.NoError(t, err)
		require.EqualValues(t, 1, n)
	}
	n, err := b.drv.MarkProcessed(b.ctx, driver.Fence{RelayID: "live", LockedUntil: live.LockedUntil}, claimIDs(live), driver.RetainProcessed)
	require.NoError(t, err)
	require.EqualValues(t, 2, n)
}

// testSuspectIsClaimedAlone: an event with a lease expiry on record is the
// whole of its claim, wherever it falls among the due events; the events
// before it are claimed next, as a batch.
func testSuspectIsClaimedAlone(t *testing.T, h Harness) {
	b := setup(t, h)
	ids := b.insert(t, 6)
	c := b.claim(t, "dead", 1, time.Minute)
	require.Equal(t, ids[:1], claimIDs(c))
	b.db.SetTime(t, b.db.Table, "locked_until", -time.Second, ids[0])
	_, err := b.drv.RescueExpired(b.ctx, driver.RescueParams{Limit: 10, MaxAttempts: 5})
	require.NoError(t, err)
	// Due after ids[2]: the claim's first rows are not suspects.
	b.db.SetTime(t, b.db.Table, "available_at", -time.Hour, ids[1], ids[2])
	b.db.SetTime(t, b.db.Table, "available_at", -time.Minute, ids[0])

	c = b.claim(t, "r", 10, time.Minute)
	require.Equal(t, ids[:1], claimIDs(c), "the suspect alone")
	require.Equal(t, 1, c.Events[0].LeaseExpiries, "a claim says it is a suspect (the relay publishes it with nothing else in flight)")
	c = b.claim(t, "r", 10, time.Minute)
	require.Equal(t, ids[1:], claimIDs(c), "the rest as a batch")
	require.Zero(t, c.Events[0].LeaseExpiries)

	// Requeueing resets the record with the attempts.
	b.db.SetTime(t, b.db.Table, "locked_until", -time.Second)
	_, err = b.drv.RescueExpired(b.ctx, driver.RescueParams{Limit: 10, MaxAttempts: 5})
	require.NoError(t, err)
	_, err = b.drv.Discard(b.ctx, ids, "operator")
	require.NoError(t, err)
	changed, err := b.drv.Requeue(b.ctx, ids, []string{driver.StatusFailed})
	require.NoError(t, err)
	require.Equal(t, ids, changed)
	e := b.get(t, ids[0])
	require.Zero(t, e.Attempts)
	require.Zero(t, e.LeaseExpiries)
	require.Equal(t, ids, claimIDs(b.claim(t, "r", 10, time.Minute)), "no suspects left")
}

// testRescueDeadLetters: an event whose claims keep ending in a lease
// expiry (publishing it kills the relay) is dead-lettered when the expiry
// uses up its last attempt, and the rescue returns it as stored.
func testRescueDeadLetters(t *testing.T, h Harness) {
	b := setup(t, h)
	id := b.write(t, outbox.Message{EventType: "huge", AggregateID: "a-1", Payload: 1}).IDs[0]
	for attempt := 1; attempt <= 3; attempt++ {
		c := b.claim(t, fmt.Sprint("relay-", attempt), 10, time.Minute)
		require.Equal(t, []int64{id}, claimIDs(c), "attempt %d", attempt)
		b.db.SetTime(t, b.db.Table, "locked_until", -time.Second, id)
		res, err := b.drv.RescueExpired(b.ctx, driver.RescueParams{Limit: 10, MaxAttempts: 3})
		require.NoError(t, err)
		if attempt < 3 {
			require.Equal(t, []int64{id}, res.Rescued)
			require.Empty(t, res.Dead)
			continue
		}
		require.Empty(t, res.Rescued)
		require.Len(t, res.Dead, 1)
		d := res.Dead[0]
		require.Equal(t, id, d.ID)
		require.Equal(t, "huge", d.EventType)
		require.Equal(t, "a-1", d.AggregateID)
		require.Equal(t, driver.StatusFailed, d.Status)
		require.Equal(t, 3, d.Attempts)
		require.Equal(t, 3, d.LeaseExpiries)
		require.Equal(t, "lease expired while held by relay relay-1; lease expired while held by relay relay-2; "+
			"lease expired while held by relay relay-3 (dead-lettered after 3 attempts, 3 of them ending in a lease expiry: "+
			"publishing this event may crash or stall the relay)", d.LastError)
	}
	require.Equal(t, driver.StatusFailed, b.get(t, id).Status)
	require.Empty(t, b.claim(t, "r", 10, time.Minute).Events)

	// The event's own max_attempts wins over the rescue's default.
	id2 := b.write(t, outbox.Message{EventType: "e", Payload: 2, MaxAttempts: 1}).IDs[0]
	b.claim(t, "r", 10, time.Minute)
	b.db.SetTime(t, b.db.Table, "locked_until", -time.Second, id2)
	res, err := b.drv.RescueExpired(b.ctx, driver.RescueParams{Limit: 10, MaxAttempts: 5})
	require.NoError(t, err)
	require.Len(t, res.Dead, 1)
	require.Equal(t, id2, res.Dead[0].ID)

	// A long earlier error is cut, and the note kept whole, within the
	// bound.
	id3 := b.write(t, outbox.Message{EventType: "e", Payload: 3}).IDs[0]
	c := b.claim(t, "r", 10, time.Minute)
	_, err = b.drv.MarkFailed(b.ctx, driver.Fence{RelayID: "r", LockedUntil: c.LockedUntil}, 5,
		[]driver.Failure{{ID: id3, Error: strings.Repeat("é", 1000)}})
	require.NoError(t, err)
	b.db.SetTime(t, b.db.Table, "available_at", -time.Second, id3)
	b.claim(t, "r", 10, time.Minute)
	b.db.SetTime(t, b.db.Table, "locked_until", -time.Second, id3)
	_, err = b.drv.RescueExpired(b.ctx, driver.RescueParams{Limit: 10, MaxAttempts: 5})
	require.NoError(t, err)
	e := b.get(t, id3)
	require.LessOrEqual(t, len(e.LastError), 2000)
	require.True(t, strings.HasSuffix(e.LastError, "…; lease expired while held by relay r"), e.LastError)
}

// testReadOnly checks that every write of the relay on a read-only
// database fails with an error that wraps outbox.ErrReadOnly (the relay
// then waits instead of failing events) and changes nothing.
func testReadOnly(t *testing.T, h Harness) {
	b := setup(t, h)
	ids := b.insert(t, 4)
	claim := b.claim(t, "rw", 2, time.Minute)
	require.Len(t, claim.Events, 2)
	fence := driver.Fence{RelayID: "rw", LockedUntil: claim.LockedUntil}
	ro := b.db.ReopenReadOnly(t).Driver(b.db.Schema)
	// The reads work.
	require.NoError(t, ro.Ping(b.ctx))
	_, err := ro.Stats(b.ctx)
	require.NoError(t, err)

	_, err = ro.Claim(b.ctx, driver.ClaimParams{RelayID: "ro", BatchSize: 10, Lease: time.Minute})
	require.ErrorIs(t, err, outbox.ErrReadOnly, "claim: %v", err)
	_, err = ro.MarkProcessed(b.ctx, fence, ids[:1], driver.RetainProcessed)
	require.ErrorIs(t, err, outbox.ErrReadOnly, "mark processed: %v", err)
	_, err = ro.MarkProcessed(b.ctx, fence, ids[:1], driver.RetainDelete)
	require.ErrorIs(t, err, outbox.ErrReadOnly, "mark deleted: %v", err)
	_, err = ro.MarkFailed(b.ctx, fence, 5, []driver.Failure{{ID: ids[0], Error: "boom", Delay: time.Second}})
	require.ErrorIs(t, err, outbox.ErrReadOnly, "mark failed: %v", err)
	_, err = ro.Release(b.ctx, fence, ids[:2])
	require.ErrorIs(t, err, outbox.ErrReadOnly, "release: %v", err)
	b.db.SetTime(t, b.db.Table, "locked_until", -time.Second, ids[1])
	_, err = ro.RescueExpired(b.ctx, driver.RescueParams{Limit: 10, MaxAttempts: 5})
	require.ErrorIs(t, err, outbox.ErrReadOnly, "rescue: %v", err)

	for i, id := range ids {
		e := b.get(t, id)
		require.Zero(t, e.Attempts, "event %d", id)
		if i < 2 {
			require.Equal(t, driver.StatusProcessing, e.Status, "event %d", id)
		} else {
			require.Equal(t, driver.StatusPending, e.Status, "event %d", id)
		}
	}
}

func testRetentionModes(t *testing.T, h Harness) {
	b := setup(t, h)
	ids := b.insert(t, 9)
	for i, mode := range []driver.Retention{driver.RetainProcessed, driver.RetainDelete, driver.RetainArchive} {
		c := b.claim(t, "r", 3, time.Minute)
		require.Equal(t, ids[i*3:i*3+3], claimIDs(c))
		// A fence from another lease changes nothing, whatever the mode.
		n, err := b.drv.MarkProcessed(b.ctx, driver.Fence{RelayID: "other", LockedUntil: c.LockedUntil}, claimIDs(c), mode)
		require.NoError(t, err)
		require.Zero(t, n, mode)
		n, err = b.drv.MarkProcessed(b.ctx, driver.Fence{RelayID: "r", LockedUntil: c.LockedUntil}, claimIDs(c), mode)
		require.NoError(t, err)
		require.EqualValues(t, 3, n, mode)
	}
	require.Equal(t, 3, b.db.Count(t, b.db.Table), "processed kept, deleted and archived gone")
	require.Equal(t, 3, b.db.Count(t, b.db.Archive))
	_, err := b.drv.GetEvent(b.ctx, ids[3])
	require.ErrorIs(t, err, driver.ErrNotFound)

	// Deleted IDs are never handed out again: consumers deduplicate on them.
	next := b.insert(t, 1)
	require.Greater(t, next[0], ids[8])

	n, err := b.drv.PurgeArchiveBatch(b.ctx, time.Hour, 10)
	require.NoError(t, err)
	require.Zero(t, n, "nothing archived an hour ago")
	b.db.SetTime(t, b.db.Archive, "processed_at", -2*time.Hour)
	n, err = b.drv.PurgeArchiveBatch(b.ctx, time.Hour, 2)
	require.NoError(t, err)
	require.EqualValues(t, 2, n)
	require.Equal(t, 1, b.db.Count(t, b.db.Archive))
}

// testArchiveKeepsExistingIDs: after TRUNCATE … RESTART IDENTITY (or an
// insert with an explicit ID) an event's ID can already be in the archive.
// Archiving it must still succeed, for the whole batch, and keep the
// archived row; a failing mark would re-send the batch forever.
func testArchiveKeepsExistingIDs(t *testing.T, h Harness) {
	b := setup(t, h)
	archive := func(want int) {
		t.Helper()
		c := b.claim(t, "r", 10, time.Minute)
		require.Len(t, c.Events, want)
		n, err := b.drv.MarkProcessed(b.ctx, driver.Fence{RelayID: "r", LockedUntil: c.LockedUntil}, claimIDs(c), driver.RetainArchive)
		require.NoError(t, err)
		require.EqualValues(t, want, n, "every fenced row moved")
	}
	old := b.write(t, outbox.Message{EventType: "old", Payload: 1}, outbox.Message{EventType: "old", Payload: 2}).IDs
	archive(2)

	// Empty the table and restart its IDs, as an operator might.
	switch h.Name {
	case "postgres", "postgres-pgbouncer":
		b.db.Exec(t, `TRUNCATE `+b.db.Table+` RESTART IDENTITY`)
	case "sqlite":
		b.db.Exec(t, `DELETE FROM `+b.db.Table+`; UPDATE sqlite_sequence SET seq = 0 WHERE name = 'outbox_events'`)
	default: // MySQL, MariaDB: TRUNCATE restarts AUTO_INCREMENT
		b.db.Exec(t, `TRUNCATE TABLE `+b.db.Table)
	}
	reused := b.write(t, outbox.Message{EventType: "new", Payload: 3}, outbox.Message{EventType: "new", Payload: 4},
		outbox.Message{EventType: "new", Payload: 5}).IDs
	require.Equal(t, old, reused[:2], "the IDs restarted")
	archive(3)
	require.Zero(t, b.db.Count(t, b.db.Table))
	require.Equal(t, 3, b.db.Count(t, b.db.Archive), "the archived rows are kept, the new third one added")

	// An explicit ID that is already archived.
	b.db.Exec(t, fmt.Sprintf(`INSERT INTO %s (id, event_type, payload) VALUES (%d, 'explicit', '6')`, b.db.Table, reused[2]))
	archive(1)
	require.Equal(t, 3, b.db.Count(t, b.db.Archive))
}

// process claims and marks every due event processed.
func (b bundle) process(t testing.TB, ids []int64) {
	t.Helper()
	c := b.claim(t, "p", len(ids), time.Minute)
	require.Equal(t, ids, claimIDs(c))
	n, err := b.drv.MarkProcessed(b.ctx, driver.Fence{RelayID: "p", LockedUntil: c.LockedUntil}, ids, driver.RetainProcessed)
	require.NoError(t, err)
	require.EqualValues(t, len(ids), n)
}

func testPurge(t *testing.T, h Harness) {
	b := setup(t, h)
	ids := b.insert(t, 6)
	b.process(t, ids[:4])
	b.db.SetTime(t, b.db.Table, "processed_at", -48*time.Hour, ids[:3]...)
	discarded, err := b.drv.Discard(b.ctx, ids[4:], "bad")
	require.NoError(t, err)
	require.Equal(t, ids[4:], discarded)

	n, err := b.drv.PurgeBatch(b.ctx, driver.PurgeParams{Status: driver.StatusProcessed, OlderThan: 72 * time.Hour, BatchSize: 10})
	require.NoError(t, err)
	require.Zero(t, n, "nothing is older than 3 days")
	n, err = b.drv.PurgeBatch(b.ctx, driver.PurgeParams{Status: driver.StatusProcessed, OlderThan: 24 * time.Hour, BatchSize: 2})
	require.NoError(t, err)
	require.EqualValues(t, 2, n, "one batch deletes at most the batch size")
	_, err = b.drv.GetEvent(b.ctx, ids[0])
	require.ErrorIs(t, err, driver.ErrNotFound, "oldest IDs first")

	purged, err := b.mgr.Purge(b.ctx, outbox.PurgeParams{OlderThan: 24 * time.Hour, BatchSize: 10}, nil)
	require.NoError(t, err)
	require.EqualValues(t, 1, purged)
	b.db.SetTime(t, b.db.Table, "updated_at", -48*time.Hour, ids[4])
	purged, err = b.mgr.Purge(b.ctx, outbox.PurgeParams{Status: outbox.StatusFailed, OlderThan: 24 * time.Hour}, nil)
	require.NoError(t, err)
	require.EqualValues(t, 1, purged)
	_, err = b.drv.PurgeBatch(b.ctx, driver.PurgeParams{Status: driver.StatusPending, OlderThan: time.Hour, BatchSize: 1})
	require.Error(t, err)
	require.Equal(t, 2, b.db.Count(t, b.db.Table))
}

func testStats(t *testing.T, h Harness) {
	b := setup(t, h)
	s, err := b.drv.Stats(b.ctx)
	require.NoError(t, err)
	require.Equal(t, driver.Stats{}, s)

	ids := b.insert(t, 10)
	b.process(t, ids[:3])
	b.claim(t, "r", 2, time.Minute)
	_, err = b.drv.Discard(b.ctx, ids[5:6], "x")
	require.NoError(t, err)
	b.db.SetTime(t, b.db.Table, "available_at", time.Hour, ids[9])
	b.db.SetTime(t, b.db.Table, "available_at", -30*time.Second, ids[6])

	s, err = b.drv.Stats(b.ctx)
	require.NoError(t, err)
	require.Equal(t, driver.Stats{Pending: 4, Processing: 2, Processed: 3, Failed: 1, OldestPendingAge: s.OldestPendingAge}, s)
	require.InDelta(t, 30, s.OldestPendingAge.Seconds(), 5, "the age of the oldest due event, by the database clock")

	est, err := b.drv.EstimateStats(b.ctx)
	require.NoError(t, err)
	require.Equal(t, s.Pending, est.Pending)
	require.Equal(t, s.Processing, est.Processing)
	require.Equal(t, s.Failed, est.Failed)
	require.GreaterOrEqual(t, est.Processed, int64(0))
	require.InDelta(t, 30, est.OldestPendingAge.Seconds(), 5)
}

func testRequeue(t *testing.T, h Harness) {
	b := setup(t, h)
	ids := b.insert(t, 6)
	b.process(t, ids[:3])
	_, err := b.drv.Discard(b.ctx, ids[3:], "broken")
	require.NoError(t, err)

	changed, err := b.drv.Requeue(b.ctx, []int64{ids[3], ids[0], 999999}, []string{driver.StatusFailed})
	require.NoError(t, err)
	require.Equal(t, []int64{ids[3]}, changed)
	e := b.get(t, ids[3])
	require.Equal(t, driver.StatusPending, e.Status)
	require.Zero(t, e.Attempts)
	require.Empty(t, e.LastError, "a retried event starts afresh, without its old error")

	n, last, err := b.drv.RequeueStatus(b.ctx, driver.StatusFailed, 0, 1)
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
	require.Equal(t, ids[4], last)
	require.Empty(t, b.get(t, ids[4]).LastError)
	require.Equal(t, "broken", b.get(t, ids[5]).LastError, "not requeued yet")
	n, last, err = b.drv.RequeueStatus(b.ctx, driver.StatusFailed, last, 10)
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
	require.Equal(t, ids[5], last)
	_, _, err = b.drv.RequeueStatus(b.ctx, driver.StatusPending, 0, 10)
	require.Error(t, err)

	replayed, err := b.mgr.Replay(b.ctx, ids[1])
	require.NoError(t, err)
	require.Equal(t, []int64{ids[1]}, replayed)
	e = b.get(t, ids[1])
	require.Equal(t, driver.StatusPending, e.Status)
	require.True(t, e.ProcessedAt.IsZero())
	require.Len(t, b.claim(t, "r", 10, time.Minute).Events, 4)
}

func testListAndGet(t *testing.T, h Harness) {
	b := setup(t, h)
	res := b.write(t,
		outbox.Message{EventType: "a", AggregateType: "order", AggregateID: "1", Payload: 1},
		outbox.Message{EventType: "b", AggregateType: "order", AggregateID: "2", Payload: 2},
		outbox.Message{EventType: "a", AggregateType: "user", AggregateID: "1", Payload: 3},
	)
	ids := res.IDs
	list, err := b.mgr.ListEvents(b.ctx, outbox.ListParams{EventType: "a"})
	require.NoError(t, err)
	require.Equal(t, []int64{ids[2], ids[0]}, eventIDs(list), "newest first")
	list, err = b.mgr.ListEvents(b.ctx, outbox.ListParams{AggregateType: "order", AggregateID: "2"})
	require.NoError(t, err)
	require.Equal(t, []int64{ids[1]}, eventIDs(list))
	list, err = b.mgr.ListEvents(b.ctx, outbox.ListParams{Status: outbox.StatusPending, BeforeID: ids[2], Limit: 1})
	require.NoError(t, err)
	require.Equal(t, []int64{ids[1]}, eventIDs(list))
	_, err = b.drv.GetEvent(b.ctx, ids[2]+1000)
	require.ErrorIs(t, err, driver.ErrNotFound)
}

func eventIDs(events []outbox.Event) []int64 {
	ids := make([]int64, len(events))
	for i, e := range events {
		ids[i] = e.ID
	}
	return ids
}

func testAdminSearch(t *testing.T, h Harness) {
	b := setup(t, h)
	res := b.write(t,
		outbox.Message{EventType: "a", AggregateType: "order", AggregateID: "1", Payload: 1, IdempotencyKey: "key-1"},
		outbox.Message{EventType: "b", AggregateType: "order", AggregateID: "2", Payload: 2},
		outbox.Message{EventType: "a", AggregateType: "user", AggregateID: "1", Payload: 3},
	)
	ids := res.IDs
	c := b.claim(t, "r", 1, time.Minute)
	_, err := b.drv.MarkFailed(b.ctx, driver.Fence{RelayID: "r", LockedUntil: c.LockedUntil}, 5, []driver.Failure{{ID: ids[0], Error: "x"}})
	require.NoError(t, err)
	now := b.get(t, ids[2]).CreatedAt

	search := func(f outbox.EventFilter) []int64 {
		t.Helper()
		events, err := b.mgr.SearchEvents(b.ctx, outbox.SearchParams{EventFilter: f})
		require.NoError(t, err)
		n, err := b.mgr.CountEvents(b.ctx, f)
		require.NoError(t, err)
		require.EqualValues(t, len(events), n, "count agrees with search")
		return eventIDs(events)
	}
	require.Equal(t, []int64{ids[2], ids[1], ids[0]}, search(outbox.EventFilter{}))
	require.Equal(t, []int64{ids[0]}, search(outbox.EventFilter{IdempotencyKey: "key-1"}))
	require.Equal(t, []int64{ids[0]}, search(outbox.EventFilter{MinAttempts: 1}))
	require.Equal(t, []int64{ids[2], ids[0]}, search(outbox.EventFilter{AggregateID: "1"}))
	require.Equal(t, []int64{ids[1], ids[0]}, search(outbox.EventFilter{Status: outbox.StatusPending, AggregateType: "order"}))
	require.Equal(t, []int64{ids[1]}, search(outbox.EventFilter{Status: outbox.StatusPending, AggregateType: "order", EventType: "b"}))
	require.Equal(t, []int64{ids[2], ids[1], ids[0]}, search(outbox.EventFilter{CreatedAfter: now.Add(-time.Minute), CreatedBefore: now.Add(time.Minute)}))
	require.Empty(t, search(outbox.EventFilter{CreatedAfter: now.Add(time.Minute)}))

	page, err := b.mgr.SearchEvents(b.ctx, outbox.SearchParams{BeforeID: ids[2], Limit: 1})
	require.NoError(t, err)
	require.Equal(t, []int64{ids[1]}, eventIDs(page))
}

func testAdminActions(t *testing.T, h Harness) {
	b := setup(t, h)
	ids := b.insert(t, 5)
	c := b.claim(t, "r", 1, time.Minute)
	require.Equal(t, ids[:1], claimIDs(c))

	discarded, err := b.mgr.Discard(b.ctx, "operator said so", ids...)
	require.NoError(t, err)
	require.Equal(t, ids[1:], discarded, "processing events are left to their relay")
	e := b.get(t, ids[1])
	require.Equal(t, driver.StatusFailed, e.Status)
	require.Equal(t, "operator said so", e.LastError)

	n, err := b.mgr.RetryMatching(b.ctx, outbox.EventFilter{}, nil)
	require.NoError(t, err)
	require.EqualValues(t, 4, n)

	n2, last, err := b.drv.RequeueMatching(b.ctx, driver.Filter{Status: driver.StatusFailed}, 0, 10)
	require.NoError(t, err)
	require.Zero(t, n2)
	require.Zero(t, last)
	_, _, err = b.drv.RequeueMatching(b.ctx, driver.Filter{Status: driver.StatusPending}, 0, 10)
	require.Error(t, err)

	ev, err := b.mgr.SetMaxAttempts(b.ctx, ids[2], 7)
	require.NoError(t, err)
	require.Equal(t, 7, ev.MaxAttempts)
	ev, err = b.mgr.SetMaxAttempts(b.ctx, ids[2], 7) // unchanged value: still found
	require.NoError(t, err)
	require.Equal(t, 7, ev.MaxAttempts)
	ev, err = b.mgr.SetMaxAttempts(b.ctx, ids[2], 0)
	require.NoError(t, err)
	require.Zero(t, ev.MaxAttempts)
	_, err = b.mgr.SetMaxAttempts(b.ctx, ids[4]+1000, 3)
	require.ErrorIs(t, err, outbox.ErrNotFound)

	retried, err := b.mgr.RetryAllFailed(b.ctx, 0, nil)
	require.NoError(t, err)
	require.Zero(t, retried)
}

func testAdminLeasesAndSample(t *testing.T, h Harness) {
	b := setup(t, h)
	ids := b.insert(t, 5)
	ca := b.claim(t, "relay-a", 2, time.Minute)
	b.claim(t, "relay-b", 1, 2*time.Minute)
	leases, err := b.drv.Leases(b.ctx)
	require.NoError(t, err)
	require.Len(t, leases, 2)
	require.Equal(t, "relay-a", leases[0].RelayID)
	require.EqualValues(t, 2, leases[0].Events)
	require.True(t, ca.LockedUntil.Equal(leases[0].FirstEnd))
	require.True(t, ca.LockedUntil.Equal(leases[0].LastEnd))
	require.Equal(t, "relay-b", leases[1].RelayID)
	require.WithinDuration(t, leases[1].Now.Add(2*time.Minute), leases[1].FirstEnd, 5*time.Second)

	s, err := b.drv.Sample(b.ctx)
	require.NoError(t, err)
	if h.LiveInsertCounter {
		require.GreaterOrEqual(t, s.Inserted, int64(len(ids)))
	}
	require.EqualValues(t, 2, s.Stats.Pending)
	require.EqualValues(t, 3, s.Stats.Processing)
}

func testMigrate(t *testing.T, h Harness) {
	db := h.Open(t, true)
	drv := db.Database.Driver(db.Schema)
	ctx := context.Background()
	require.ErrorIs(t, drv.Ping(ctx), driver.ErrNoTable)
	v, err := drv.SchemaVersion(ctx)
	require.NoError(t, err)
	require.Zero(t, v)

	var wg sync.WaitGroup
	applied := make([]int, 4)
	for i := range applied {
		wg.Go(func() {
			ms, err := drv.Migrate(ctx)
			if err != nil {
				t.Error(err)
			}
			applied[i] = len(ms)
		})
	}
	wg.Wait()
	total := 0
	for _, n := range applied {
		total += n
	}
	all := drv.Migrations()
	require.Equal(t, len(all), total, "each migration applied exactly once")
	v, err = drv.SchemaVersion(ctx)
	require.NoError(t, err)
	require.Equal(t, all[len(all)-1].Version, v)
	require.NoError(t, drv.Ping(ctx))
	again, err := drv.Migrate(ctx)
	require.NoError(t, err)
	require.Empty(t, again)
}

func testMigrationSQL(t *testing.T, h Harness) {
	db := h.Open(t, true)
	drv := db.Database.Driver(db.Schema)
	db.Exec(t, drv.MigrationSQL())
	ctx := context.Background()
	require.NoError(t, drv.Ping(ctx))
	b := newBundle(db)
	ids := b.insert(t, 2)
	require.Equal(t, ids, claimIDs(b.claim(t, "r", 10, time.Minute)))
}

package main_test

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/driver/drivertest"
	"github.com/outboxkit/outbox/internal/testutil"
)

// orderEndpoint is a webhook endpoint that fails about one request in ten at
// random and records, per aggregate (ce-subject), the order of the first
// acknowledgements. It does nothing to keep order itself: the webhook sink
// stops a key at its first failure in a batch (KeyOrdered), and the relay
// keeps the key's later events from being claimed until the failed one is
// acknowledged.
type orderEndpoint struct {
	*httptest.Server
	mu       sync.Mutex
	rng      *rand.Rand
	acked    map[int64]bool
	order    map[string][]int64 // key → first acknowledgements
	requests int
}

func newOrderEndpoint(t *testing.T) *orderEndpoint {
	t.Helper()
	s := &orderEndpoint{rng: rand.New(rand.NewPCG(1, 2)), acked: map[int64]bool{}, order: map[string][]int64{}}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		id, err := strconv.ParseInt(r.Header.Get("ce-id"), 10, 64)
		if err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		key := r.Header.Get("ce-subject")
		s.mu.Lock()
		defer s.mu.Unlock()
		s.requests++
		if s.rng.IntN(10) == 0 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		if !s.acked[id] {
			s.acked[id] = true
			s.order[key] = append(s.order[key], id)
		}
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *orderEndpoint) firstAcks() (map[string][]int64, map[int64]bool, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	order := make(map[string][]int64, len(s.order))
	for k, v := range s.order {
		order[k] = append([]int64(nil), v...)
	}
	acked := make(map[int64]bool, len(s.acked))
	for id := range s.acked {
		acked[id] = true
	}
	return order, acked, s.requests
}

// killingFleet runs n relays (the real binary) with args(id) and SIGKILLs a
// random one every interval, starting a new one in its place, until
// stopKilling; stopAll then stops the survivors with SIGTERM and checks that
// each exits cleanly.
type killingFleet struct {
	mu     sync.Mutex
	relays []*process
	kills  int
	stop   chan struct{}
	killer sync.WaitGroup
}

func startKillingFleet(t *testing.T, n int, interval time.Duration, seed uint64, args func(id string) []string) *killingFleet {
	t.Helper()
	f := &killingFleet{relays: make([]*process, n), stop: make(chan struct{})}
	for i := range f.relays {
		f.relays[i] = start(t, nil, args(fmt.Sprintf("r%d", i))...)
	}
	f.killer.Go(func() {
		tick := time.NewTicker(interval)
		defer tick.Stop()
		rng := rand.New(rand.NewPCG(seed, seed+1))
		for {
			select {
			case <-f.stop:
				return
			case <-tick.C:
			}
			i := rng.IntN(len(f.relays))
			f.mu.Lock()
			p := f.relays[i]
			require.False(t, p.exited(), "relay exited on its own; stderr:\n%s", p.stderr.String())
			_ = p.cmd.Process.Signal(syscall.SIGKILL)
			<-p.done
			f.kills++
			f.relays[i] = start(t, nil, args(fmt.Sprintf("r%d-%d", i, f.kills))...)
			f.mu.Unlock()
		}
	})
	return f
}

// stopKilling ends the kills and returns how many there were.
func (f *killingFleet) stopKilling() int {
	close(f.stop)
	f.killer.Wait()
	return f.kills
}

func (f *killingFleet) stopAll(t *testing.T) {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, p := range f.relays {
		require.Equal(t, 0, p.stop(t, syscall.SIGTERM), "stderr:\n%s", p.stderr.String())
	}
}

// mergeCommitted joins the writers' committed IDs per key (each writer has
// keys of its own) and counts them.
func mergeCommitted(committed []map[string][]int64) (want map[string][]int64, total int) {
	want = map[string][]int64{}
	for _, c := range committed {
		for k, ids := range c {
			want[k] = ids
			total += len(ids)
		}
	}
	return want, total
}

// requireFirstAcksInCommitOrder checks that exactly the committed events
// were acknowledged (none lost, no ghost) and that every key's first
// acknowledgements follow its commit order.
func (s *orderEndpoint) requireFirstAcksInCommitOrder(t *testing.T, want map[string][]int64, total, kills int, detail any) {
	t.Helper()
	order, acked, requests := s.firstAcks()
	require.Len(t, acked, total, "every committed event acknowledged, and nothing else (no ghost); %v", detail)
	for k, ids := range want {
		require.Equal(t, ids, order[k], "key %s: first acknowledgements in commit order", k)
	}
	t.Logf("%d events of %d keys, %d requests, %d relays killed", total, len(want), requests, kills)
}

// Three ordered relays (the real binary) serve 200 keys while writers
// commit each key's events one transaction after another (some with several
// events of a key, one in ten rolled back), the endpoint fails one request
// in ten, and a relay is SIGKILLed and restarted every second: nothing is
// lost, nothing rolled back is sent, and every key's first acknowledgements
// follow its commit order.
func TestOrderedRelaysSIGKILLKeepOrder(t *testing.T) {
	t.Parallel()
	b := setup(t)
	srv := newOrderEndpoint(t)
	relayArgs := func(id string) []string {
		return []string{"--database-url", testutil.DatabaseURL(), "--schema", b.schema, "relay",
			"--sink", srv.URL, "--relay-id", id,
			"--ordering", "aggregate", "--batch-size", "50", "--workers", "2",
			"--poll-interval", "20ms", "--lease", "2s", "--sink-timeout", "1s",
			"--max-attempts", "1000", "--backoff-base", "10ms", "--backoff-max", "200ms", "--log-level", "error"}
	}
	fleet := startKillingFleet(t, 3, time.Second, 3, relayArgs)

	const keys, writers = 200, 4
	writeFor := 5 * time.Second
	committed := make([]map[string][]int64, writers)
	var wg sync.WaitGroup
	for w := range writers {
		committed[w] = map[string][]int64{}
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			writer := outbox.NewWriter(outbox.WriterConfig{Schema: b.schema})
			tick := time.NewTicker(20 * time.Millisecond)
			defer tick.Stop()
			for end := time.Now().Add(writeFor); time.Now().Before(end); <-tick.C {
				var msgs []outbox.Message
				for range 1 + rng.IntN(2) {
					key := fmt.Sprintf("k%d", w+writers*rng.IntN(keys/writers)) // this writer's keys only
					for range 1 + rng.IntN(3) {
						msgs = append(msgs, outbox.Message{EventType: "order.changed", AggregateType: "order",
							AggregateID: key, Payload: map[string]int{"n": len(msgs)}})
					}
				}
				tx, err := b.pool.Begin(b.ctx)
				require.NoError(t, err)
				res, err := writer.Write(b.ctx, tx, msgs...)
				require.NoError(t, err)
				if rng.IntN(10) == 0 {
					require.NoError(t, tx.Rollback(b.ctx))
					continue
				}
				require.NoError(t, tx.Commit(b.ctx))
				for i, m := range msgs {
					committed[w][m.AggregateID] = append(committed[w][m.AggregateID], res.IDs[i])
				}
			}
		})
	}
	wg.Wait()
	kills := fleet.stopKilling()
	want, total := mergeCommitted(committed)
	for deadline := time.Now().Add(60 * time.Second); ; {
		s := b.stats(t)
		if s.Processed == int64(total) && s.Pending == 0 && s.Processing == 0 {
			break
		}
		if time.Now().After(deadline) {
			rows, err := b.pool.Query(b.ctx, `SELECT id, aggregate_id, status, attempts, lease_expiries, available_at - now(), locked_until - now(), txid::text, pg_snapshot_xmin(pg_current_snapshot())::text FROM `+testutil.Table(b.schema)+` WHERE status <> 'processed' ORDER BY aggregate_id, txid, id LIMIT 40`)
			require.NoError(t, err)
			for rows.Next() {
				vals, _ := rows.Values()
				t.Log(vals...)
			}
			rows.Close()
			t.Fatalf("timed out: %+v of %d", s, total)
		}
		time.Sleep(50 * time.Millisecond)
	}
	srv.requireFirstAcksInCommitOrder(t, want, total, kills, "")
	fleet.stopAll(t)
}

// Bad ordering and lease values are usage errors, and so are ordering and
// partition leases with a type filter; SQLite has no partition leases.
func TestRelayOrderingFlags(t *testing.T) {
	t.Parallel()
	requireFail(t, run(t, nil, "relay", "--sink", "stdout:", "--ordering", "sideways"),
		2, `invalid --ordering "sideways": use none or aggregate`)
	requireFail(t, run(t, nil, "relay", "--sink", "stdout:", "--ordered-failure", "skip"),
		2, "--ordered-failure skip needs --ordering aggregate")
	requireFail(t, run(t, nil, "--database-url", testutil.DatabaseURL(), "relay", "--sink", "stdout:", "--ordering", "aggregate", "--event-types", "a.*"),
		2, "--event-types", "does not support an event type filter: a key's order spans its event types")
	requireFail(t, run(t, nil, "relay", "--sink", "stdout:", "--leases", "shared"),
		2, `invalid --leases "shared": use auto, rows or partitions`)
	requireFail(t, run(t, nil, "--database-url", testutil.DatabaseURL(), "relay", "--sink", "stdout:", "--leases", "partitions", "--event-types", "a.*"),
		2, "--leases partitions cannot be used with --event-types: a relay owns every event of its partitions", "use --leases rows with an event type filter")
	requireFail(t, run(t, nil, "--database-url", testutil.DatabaseURL(), "relay", "--sink", "stdout:", "--leases", "partitions", "--capture", "logical"),
		2, "--leases partitions cannot be used with --capture logical")
	// Several databases: PostgreSQL ones pass the lease check (and stop at
	// the sink here), a MySQL/MariaDB one does not.
	other, err := url.Parse(testutil.DatabaseURL())
	require.NoError(t, err)
	other.Path = "/postgres"
	requireFail(t, run(t, nil, "--database-url", testutil.DatabaseURL(), "--database-url", other.String(), "relay", "--sink", "bogus:",
		"--tenant-schemas", "none_*", "--leases", "partitions"), 2, `unknown sink scheme "bogus"`)
	requireFail(t, run(t, nil, "--database-url", mariaDBURL(t, "test"), "--database-url", mariaDBURL(t, "mysql"), "relay", "--sink", "stdout:",
		"--tenant-schemas", "none_*", "--leases", "partitions"), 2, "invalid --leases partitions: owned partitions are PostgreSQL's")
	sqlite := "sqlite://" + filepath.Join(t.TempDir(), "app.db")
	requireOK(t, run(t, nil, "--database-url", sqlite, "migrate"))
	requireFail(t, run(t, nil, "--database-url", sqlite, "relay", "--sink", "stdout:", "--leases", "partitions"),
		2, "invalid --leases partitions: owned partitions are PostgreSQL's (schema migration 8); on sqlite use --leases auto or rows")
}

// The same on SQLite: two ordered relays (the real binary) on one file,
// writers committing each key's events one transaction after another (one
// in ten rolled back), the endpoint failing one request in ten, and a relay
// SIGKILLed and restarted every 700ms: nothing lost, no ghost, and every
// key's first acknowledgements follow its commit order.
func TestOrderedRelaysSIGKILLKeepOrderSQLite(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "app.db")
	testOrderedSQLFleet(t, "sqlite://"+path, drivertest.OpenSQLiteFile(t, path), outbox.DialectSQLite, false)
}

// The same on MariaDB, where writers share keys: two writers' transactions
// on one key run at once, and the second waits on the key's row (migration
// 7's trigger) until the first ends, so the commit order is the key_seq
// order; the test takes it from there, and checks that each writer's own
// commits of a key come in that order.
func TestOrderedRelaysSIGKILLKeepOrderMariaDB(t *testing.T) {
	t.Parallel()
	name, db := drivertest.MySQLDatabase(t)
	testOrderedSQLFleet(t, mariaDBURL(t, name), db, outbox.DialectMariaDB, true)
}

// testOrderedSQLFleet runs two ordered relays and two writers on a
// database/sql database. With shared, the writers write the same keys, and
// each key's commit order is read back from key_seq (MySQL/MariaDB).
func testOrderedSQLFleet(t *testing.T, url string, db *sql.DB, dialect outbox.Dialect, shared bool) {
	requireOK(t, run(t, nil, "--database-url", url, "migrate", "--ordering", "aggregate"))
	ctx := context.Background()
	var database outbox.Database
	if dialect == outbox.DialectSQLite {
		database = outbox.SQLite(db)
	} else {
		database = outbox.MySQL(db)
	}
	mgr := outbox.NewManager(database, outbox.ManagerConfig{})
	srv := newOrderEndpoint(t)
	relayArgs := func(id string) []string {
		return []string{"--database-url", url, "relay", "--sink", srv.URL, "--relay-id", id,
			"--ordering", "aggregate", "--batch-size", "20", "--workers", "2",
			"--poll-interval", "20ms", "--lease", "2s", "--sink-timeout", "1s",
			"--max-attempts", "1000", "--backoff-base", "10ms", "--backoff-max", "200ms", "--log-level", "error"}
	}
	fleet := startKillingFleet(t, 2, 700*time.Millisecond, 5, relayArgs)

	const keys, writers = 40, 2
	committed := make([]map[string][]int64, writers)
	var wg sync.WaitGroup
	for w := range writers {
		committed[w] = map[string][]int64{}
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 9))
			writer := outbox.NewWriter(outbox.WriterConfig{Dialect: dialect})
			tick := time.NewTicker(20 * time.Millisecond)
			defer tick.Stop()
			for end := time.Now().Add(4 * time.Second); time.Now().Before(end); <-tick.C {
				var msgs []outbox.Message
				key := fmt.Sprintf("k%d", w+writers*rng.IntN(keys/writers)) // this writer's keys only
				if shared {
					key = fmt.Sprintf("k%d", rng.IntN(keys/4))
				}
				for range 1 + rng.IntN(3) {
					msgs = append(msgs, outbox.Message{EventType: "order.changed", AggregateType: "order",
						AggregateID: key, Payload: map[string]int{"n": len(msgs)}})
				}
				tx, err := db.BeginTx(ctx, nil)
				require.NoError(t, err)
				res, err := writer.WriteSQL(ctx, tx, msgs...)
				require.NoError(t, err)
				if rng.IntN(10) == 0 {
					require.NoError(t, tx.Rollback())
					continue
				}
				require.NoError(t, tx.Commit())
				committed[w][key] = append(committed[w][key], res.IDs...)
			}
		})
	}
	wg.Wait()
	kills := fleet.stopKilling()
	var want map[string][]int64
	total := 0
	if shared {
		want = map[string][]int64{}
		rows, err := db.QueryContext(ctx, "SELECT aggregate_id, id FROM outbox_events ORDER BY aggregate_id, key_seq, id")
		require.NoError(t, err)
		defer rows.Close()
		for rows.Next() {
			var (
				key string
				id  int64
			)
			require.NoError(t, rows.Scan(&key, &id))
			want[key] = append(want[key], id)
			total++
		}
		require.NoError(t, rows.Err())
		for _, c := range committed {
			for key, ids := range c {
				require.Subset(t, want[key], ids)
				pos := map[int64]int{}
				for i, id := range want[key] {
					pos[id] = i
				}
				for i := 1; i < len(ids); i++ {
					require.Less(t, pos[ids[i-1]], pos[ids[i]], "key %s: a writer's commits in key_seq order", key)
				}
			}
		}
	} else {
		want, total = mergeCommitted(committed)
	}
	var last outbox.Stats
	testutil.WaitFor(t, 60*time.Second, "every committed event processed", func() bool {
		s, err := mgr.Stats(ctx)
		require.NoError(t, err)
		last = s
		return s.Processed == int64(total) && s.Pending == 0 && s.Processing == 0
	})
	srv.requireFirstAcksInCommitOrder(t, want, total, kills, fmt.Sprintf("stats %+v", last))
	fleet.stopAll(t)
}

package sqldriver

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/outboxkit/outbox/internal/driver"
)

var _ driver.OrderedClaimer = (*Driver)(nil)

// CommitOrderedIDs is implemented by a dialect whose IDs are handed out in
// commit order: every event of a transaction that committed before another
// has a lower ID than all of the other's. SQLite is one (one write
// transaction at a time, and AUTOINCREMENT never reuses an ID), so a key's
// events are ordered by ID and the ordered claim needs no more.
type CommitOrderedIDs interface {
	// IDsInCommitOrder is a marker.
	IDsInCommitOrder()
}

// KeySequenced is implemented by a dialect whose IDs do not follow commit
// order but whose events carry a per-key sequence that does: MySQL/MariaDB,
// where AUTO_INCREMENT hands out IDs at insert time, concurrent
// transactions commit in any order, and InnoDB exposes no horizon below
// which every writer has ended (nothing like PostgreSQL's snapshot xmin).
//
// Its migration 7 gives every event a key_seq, set by a BEFORE INSERT
// trigger from a row per key in outbox_keys (an upsert that adds one), and
// two virtual columns, order_id and order_type, that hold the key while the
// event is unfinished and NULL after, indexed with key_seq as
// outbox_events_key_order_idx (MySQL has no partial index: the finished rows
// all sit under NULL, out of the way of every lookup). The upsert locks the
// key's row until the writer's transaction ends, so a second writer of the
// key waits for the first to commit or roll back before it takes its
// number: a key's events commit in key_seq order, and a claim that reads an
// event of a key has every committed event before it in view. The claim
// orders a key's events by (key_seq, id); rows written before the migration
// have key_seq 0 and come first, in ID order.
type KeySequenced interface {
	// KeySequence is a marker.
	KeySequence()
}

// OrderingSupported returns nil on a dialect that can keep a key's commit
// order and driver.ErrOrderingUnsupported on the others.
func (d *Driver) OrderingSupported() error {
	switch d.d.(type) {
	case CommitOrderedIDs, KeySequenced:
		return nil
	}
	return driver.ErrOrderingUnsupported
}

// keyOrder writes the ordered claim's key terms: by ID where IDs follow
// commit order, by (key_seq, id) through the key-order columns where a
// per-key sequence does (seq).
type keyOrder struct{ seq bool }

func (d *Driver) keys() keyOrder {
	_, seq := d.d.(KeySequenced)
	return keyOrder{seq: seq}
}

// match says row a, an unfinished row looked up in
// outbox_events_key_order_idx, belongs to b's aggregate (aggregate_type
// coalesced to ”).
func (k keyOrder) match(a, b string) string {
	if k.seq {
		return a + `.order_id = ` + b + `.aggregate_id AND ` + a + `.order_type = coalesce(` + b + `.aggregate_type, '')`
	}
	return `coalesce(` + a + `.aggregate_type, '') = coalesce(` + b + `.aggregate_type, '') AND ` + a + `.aggregate_id = ` + b + `.aggregate_id`
}

// unfinished is the condition under which row a holds back the later
// events of its aggregate: pending (due or in backoff), processing, or,
// under the block policy, failed and not discarded by an operator. The
// first conjunct is outbox_events_key_order_idx's predicate, word for word,
// so that SQLite uses the partial index; on MySQL it is the virtual
// column's.
func (k keyOrder) unfinished(a string, skip bool) string {
	c := a + `.status IN ('pending', 'processing', 'failed') AND ` + a + `.aggregate_id IS NOT NULL AND `
	if k.seq {
		c = a + `.order_id IS NOT NULL AND `
	}
	if skip {
		return c + a + `.status <> 'failed'`
	}
	return c + `(` + a + `.status <> 'failed' OR ` + a + `.dead_letter_retries <> ` + strconv.Itoa(driver.DiscardedRetries) + `)`
}

// before says a's event comes before b's in their key's order.
func (k keyOrder) before(a, b string) string {
	if k.seq {
		return `(` + a + `.key_seq < ` + b + `.key_seq OR (` + a + `.key_seq = ` + b + `.key_seq AND ` + a + `.id < ` + b + `.id))`
	}
	return a + `.id < ` + b + `.id`
}

// keyIndex forces the key-order index on MySQL, whose optimizer may prefer a
// status index otherwise.
func (d *Driver) keyIndex() string {
	if d.keys().seq {
		return d.d.Index("outbox_events_key_order_idx")
	}
	return ""
}

// errClaimRaced rolls back an ordered claim whose update found an event no
// longer pending: an operator changed it between the read and the update.
// The claim returns nothing; the next one reads afresh.
var errClaimRaced = errors.New("an event changed during the ordered claim")

// ClaimOrdered leases a batch that keeps per-aggregate order, in one
// transaction:
//
//   - heads (two statements, see heads): up to half the batch size of due
//     pending events with no unfinished event of their key before them
//     (one probe of outbox_events_key_order_idx each), in due order;
//   - runs: for the heads with a key, the events of the key that follow
//     the head, at most the batch size over the number of heads each,
//     with whether each can go now (pending, due, not a suspect);
//   - the update of the IDs picked: a suspect head (lease expiry on
//     record) alone, as in the unordered claim; otherwise the heads in due
//     order, each followed by its run up to the first event that cannot go,
//     cut at the batch size (a cut run is a prefix: still in order), and
//     with a byte budget where the running total passes it.
//
// On SQLite the claim runs under the database's one write lock, so it sees
// every committed event and no other claim runs at the same time. On MySQL
// relays claim concurrently: the heads are locked with SKIP LOCKED, so two
// claims take disjoint heads, and a key's later events are never a head to
// another claim while its head is unfinished (pending, then processing): the
// events of a run can only be taken by the claim that holds the head. The
// update's status test and row count catch an operator's change in between.
func (d *Driver) ClaimOrdered(ctx context.Context, p driver.OrderedClaimParams) (driver.Claim, error) {
	if err := d.OrderingSupported(); err != nil {
		return driver.Claim{}, err
	}
	k := d.keys()
	var claim driver.Claim
	err := d.inTx(ctx, func(tx Tx) error {
		claim = driver.Claim{}
		heads, seqs, now, err := d.heads(ctx, tx, k, p)
		if err != nil || len(heads) == 0 {
			return err
		}
		pick := d.orderedPick(heads)
		if len(pick) == 0 {
			var runs map[int64][]orderedFollower
			if k.seq {
				runs, err = d.followersBySeq(ctx, tx, heads, seqs, p)
			} else {
				runs, err = d.followers(ctx, tx, heads, p)
			}
			if err != nil {
				return err
			}
			pick = pickRuns(heads, runs, p.BatchSize)
		}
		if p.MaxBytes > 0 {
			// A prefix of the publish order: each key keeps a prefix of
			// its run. The headers count as their JSON text, as stored.
			sizes := make([]int64, len(pick))
			for i, e := range pick {
				h, err := json.Marshal(e.Headers)
				if err != nil {
					return err
				}
				sizes[i] = int64(len(e.Payload) + len(h))
			}
			pick = pick[:driver.FitBudget(sizes, p.MaxBytes)]
		}
		lockedUntil, err := d.parseStored(d.d.FormatTime(now.Add(p.Lease)))
		if err != nil {
			return err
		}
		ids := make([]int64, len(pick))
		for i := range pick {
			ids[i] = pick[i].ID
		}
		upd := append([]any{p.RelayID, d.d.FormatTime(lockedUntil), d.d.FormatTime(now)}, int64Args(ids)...)
		res, err := tx.ExecContext(ctx, `UPDATE `+d.table+d.d.ByID()+`
SET status = 'processing', locked_by = ?, locked_until = ?, updated_at = ?
WHERE id IN (`+placeholders(len(ids))+`) AND status = 'pending'`, upd...)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil {
			return err
		} else if n != int64(len(ids)) {
			return errClaimRaced
		}
		for i := range pick {
			e := &pick[i]
			e.Status, e.LockedBy, e.LockedUntil, e.UpdatedAt = driver.StatusProcessing, p.RelayID, lockedUntil, now
		}
		claim = driver.Claim{Events: pick, LockedUntil: lockedUntil}
		return nil
	})
	if errors.Is(err, errClaimRaced) {
		return driver.Claim{}, nil
	}
	return claim, err
}

// orderedState is what ClaimOrdered remembers between claims.
type orderedState struct {
	fullAt  atomic.Int64 // when the last whole-backlog search ran, Unix ns
	clogged atomic.Bool  // it found heads the window had not
}

// orderedWindow is how many due pending events, per event of the batch
// size, the first search for heads looks at.
const orderedWindow = 2

// orderedFullEvery bounds how often an ordered claim searches the whole
// backlog for heads when its window finds none and is not known to be
// clogged.
const orderedFullEvery = time.Second

// heads finds and locks up to half the batch size of due pending events
// that are first of their key, in due order, and reads the database clock.
// With a per-key sequence each head's key_seq comes along, by ID.
//
// The search reads without locking, first among the window of the first
// due pending events (orderedWindow times the batch size), then, when that
// finds nothing, in the whole backlog, at most once per orderedFullEvery
// unless the last such search found heads the window missed (a window
// clogged with blocked keys' events): while every due key is in flight,
// every pending event is a follower, and the whole search costs a probe of
// each. The heads found are then locked by ID with SKIP LOCKED (MySQL; on
// SQLite the claim holds the write lock) and read again: one another claim
// took in between is passed over. A head stays a head until it is claimed:
// what comes before it in its key committed before it (key_seq, or IDs in
// commit order), so nothing can appear there.
func (d *Driver) heads(ctx context.Context, tx Tx, k keyOrder, p driver.OrderedClaimParams) ([]driver.Event, map[int64]int64, time.Time, error) {
	search := func(from string, args ...any) ([]int64, error) {
		return queryIDs(ctx, tx, `SELECT e.id
FROM `+from+`
WHERE e.status = 'pending' AND e.available_at <= `+d.d.Now()+`
  AND (e.aggregate_id IS NULL OR NOT EXISTS (
      SELECT 1 FROM `+d.table+` o`+d.keyIndex()+`
      WHERE `+k.match("o", "e")+` AND `+k.unfinished("o", p.Skip)+` AND `+k.before("o", "e")+`))
ORDER BY e.available_at, e.id
LIMIT ?`, append(args, max(p.BatchSize/2, 1))...)
	}
	ids, err := search(`(
    SELECT w.id FROM `+d.table+` w`+d.d.Index("outbox_events_pending_idx")+`
    WHERE w.status = 'pending' AND w.available_at <= `+d.d.Now()+`
    ORDER BY w.available_at, w.id
    LIMIT ?
) win
JOIN `+d.table+` e ON e.id = win.id`, p.BatchSize*orderedWindow)
	if err != nil {
		return nil, nil, time.Time{}, err
	}
	st := &d.ordered
	if len(ids) == 0 && (st.clogged.Load() || time.Since(time.Unix(0, st.fullAt.Load())) >= orderedFullEvery) {
		st.fullAt.Store(time.Now().UnixNano())
		if ids, err = search(d.table + ` e` + d.d.Index("outbox_events_pending_idx")); err != nil {
			return nil, nil, time.Time{}, err
		}
		st.clogged.Store(len(ids) > 0)
	} else if len(ids) > 0 {
		st.clogged.Store(false)
	}
	if len(ids) == 0 {
		return nil, nil, time.Time{}, nil
	}
	seqCol := ""
	if k.seq {
		seqCol = `, key_seq`
	}
	rows, err := tx.QueryContext(ctx, `SELECT `+d.cols+`, `+d.d.Now()+seqCol+`
FROM `+d.table+d.d.ByID()+`
WHERE id IN (`+placeholders(len(ids))+`) AND status = 'pending' AND available_at <= `+d.d.Now()+d.d.ForUpdateSkipLocked(), int64Args(ids)...)
	if err != nil {
		return nil, nil, time.Time{}, err
	}
	defer func() { _ = rows.Close() }()
	var (
		heads []driver.Event
		seqs  = map[int64]int64{}
		now   Time
	)
	for rows.Next() {
		var seq int64
		extra := []any{&now}
		if k.seq {
			extra = append(extra, &seq)
		}
		e, err := scanEvent(rows, extra...)
		if err != nil {
			return nil, nil, time.Time{}, err
		}
		seqs[e.ID] = seq
		heads = append(heads, e)
	}
	// In due order, sorted here: MySQL would sort the LONGTEXT rows in a
	// temporary table.
	slices.SortFunc(heads, func(a, b driver.Event) int {
		return cmp.Or(a.AvailableAt.Compare(b.AvailableAt), cmp.Compare(a.ID, b.ID))
	})
	return heads, seqs, now.Time, rows.Err()
}

// orderedPick returns the first suspect head alone, or nil when no head is
// a suspect.
func (d *Driver) orderedPick(heads []driver.Event) []driver.Event {
	for _, h := range heads {
		if h.LeaseExpiries > 0 {
			return []driver.Event{h}
		}
	}
	return nil
}

// orderedFollower is an event after a head, and whether it can go now.
type orderedFollower struct {
	event driver.Event
	ok    bool
}

// followers reads, for every head with a key, the unfinished events of the
// key after it, in ID order, at most the batch size over the number of
// heads per key.
func (d *Driver) followers(ctx context.Context, tx Tx, heads []driver.Event, p driver.OrderedClaimParams) (map[int64][]orderedFollower, error) {
	var keyed []int64
	for _, h := range heads {
		if h.AggregateID != "" {
			keyed = append(keyed, h.ID)
		}
	}
	if len(keyed) == 0 {
		return nil, nil
	}
	per := max(p.BatchSize/len(heads), 1)
	k := d.keys()
	// The bound: the ID of the head's per-th follower, or the largest ID
	// when the key has fewer, one probe of outbox_events_key_order_idx per
	// head; then the followers up to it, a range of the same index. The
	// heads are materialized so that the bound is computed once per head,
	// not once per follower, and bounds the range scan from above.
	args := append([]any{per - 1}, int64Args(keyed)...)
	rows, err := tx.QueryContext(ctx, `WITH h AS MATERIALIZED (
    SELECT h.id, h.aggregate_type, h.aggregate_id, coalesce((
        SELECT b.id FROM `+d.table+` b
        WHERE `+k.match("b", "h")+` AND `+k.unfinished("b", p.Skip)+` AND b.id > h.id
        ORDER BY b.id LIMIT 1 OFFSET ?), 9223372036854775807) AS bound
    FROM `+d.table+` h
    WHERE h.id IN (`+placeholders(len(keyed))+`)
)
SELECT `+eventColumns("o.")+`, h.id,
    (o.status = 'pending' AND o.available_at <= `+d.d.Now()+` AND o.lease_expiries = 0)
FROM h
JOIN `+d.table+` o ON `+k.match("o", "h")+` AND `+k.unfinished("o", p.Skip)+`
    AND o.id > h.id AND o.id <= h.bound
ORDER BY h.id, o.id`, args...)
	if err != nil {
		return nil, err
	}
	defer func() { _ = rows.Close() }()
	out := map[int64][]orderedFollower{}
	for rows.Next() {
		var (
			f    orderedFollower
			head int64
		)
		if f.event, err = scanEvent(rows, &head, &f.ok); err != nil {
			return nil, err
		}
		out[head] = append(out[head], f)
	}
	return out, rows.Err()
}

// followersBySeq reads, for every head with a key, the unfinished events of
// the key after it in (key_seq, id) order, at most the batch size over the
// number of heads per key: one statement, a UNION ALL of one range of
// outbox_events_key_order_idx per head, each read in index order and cut by
// its own LIMIT (MariaDB has no LATERAL join to say it once).
func (d *Driver) followersBySeq(ctx context.Context, tx Tx, heads []driver.Event, seqs map[int64]int64, p driver.OrderedClaimParams) (map[int64][]orderedFollower, error) {
	k := d.keys()
	per := max(p.BatchSize/len(heads), 1)
	var (
		parts []string
		args  []any
	)
	for _, h := range heads {
		if h.AggregateID == "" {
			continue
		}
		parts = append(parts, `(SELECT `+eventColumns("o.")+`, ? AS head,
    (o.status = 'pending' AND o.available_at <= `+d.d.Now()+` AND o.lease_expiries = 0) AS ok, o.key_seq AS s
FROM `+d.table+` o`+d.keyIndex()+`
WHERE o.order_id = ? AND o.order_type = ? AND `+k.unfinished("o", p.Skip)+`
  AND (o.key_seq > ? OR (o.key_seq = ? AND o.id > ?))
ORDER BY o.key_seq, o.id
LIMIT ?)`)
		args = append(args, h.ID, h.AggregateID, h.AggregateType, seqs[h.ID], seqs[h.ID], h.ID, per)
	}
	if len(parts) == 0 {
		return nil, nil
	}
	// No ORDER BY over the union: sorting rows that carry LONGTEXT
	// columns takes an on-disk temporary table on MariaDB (ten times the
	// statement's time). Each part comes in order from its index range;
	// the rows are sorted here all the same.
	rows, err := tx.QueryContext(ctx, strings.Join(parts, "\nUNION ALL\n"), args...)
	if err != nil {
		return nil, err
	}
	defer func() { _ = rows.Close() }()
	type row struct {
		f         orderedFollower
		head, seq int64
	}
	var got []row
	for rows.Next() {
		var r row
		if r.f.event, err = scanEvent(rows, &r.head, &r.f.ok, &r.seq); err != nil {
			return nil, err
		}
		got = append(got, r)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	slices.SortFunc(got, func(a, b row) int {
		return cmp.Or(cmp.Compare(a.head, b.head), cmp.Compare(a.seq, b.seq), cmp.Compare(a.f.event.ID, b.f.event.ID))
	})
	out := map[int64][]orderedFollower{}
	for _, r := range got {
		out[r.head] = append(out[r.head], r.f)
	}
	return out, nil
}

// pickRuns lays out the batch: each head in due order followed by the
// events of its run that can go, up to the first that cannot, cut at size.
func pickRuns(heads []driver.Event, runs map[int64][]orderedFollower, size int) []driver.Event {
	out := make([]driver.Event, 0, min(size, len(heads)*2))
	for _, h := range heads {
		if len(out) == size {
			break
		}
		out = append(out, h)
		for _, f := range runs[h.ID] {
			if !f.ok || len(out) == size {
				break
			}
			out = append(out, f.event)
		}
	}
	return slices.Clip(out)
}

// BlockedAggregates lists aggregates held back by a failed first event:
// keys whose head (first unfinished event) is failed, or pending in backoff
// after a failed attempt, while later events of the key wait. It reads only
// unfinished rows (the key-order, pending and failed indexes).
func (d *Driver) BlockedAggregates(ctx context.Context, skip bool, limit int) ([]driver.BlockedAggregate, int64, error) {
	if err := d.OrderingSupported(); err != nil {
		return nil, 0, err
	}
	k := d.keys()
	from := `FROM ` + d.table + ` h
WHERE ` + k.unfinished("h", skip) + `
  AND (h.status = 'failed' OR (h.status = 'pending' AND h.attempts > 0 AND h.available_at > ` + d.d.Now() + `))
  AND NOT EXISTS (SELECT 1 FROM ` + d.table + ` o` + d.keyIndex() + ` WHERE ` + k.match("o", "h") + ` AND ` + k.unfinished("o", skip) + ` AND ` + k.before("o", "h") + `)
  AND EXISTS (SELECT 1 FROM ` + d.table + ` w` + d.keyIndex() + ` WHERE ` + k.match("w", "h") + ` AND ` + k.unfinished("w", skip) + ` AND ` + k.before("h", "w") + `)`
	var total int64
	if err := d.db.QueryRowContext(ctx, `SELECT count(*) `+from).Scan(&total); err != nil {
		return nil, 0, d.wrap(err)
	}
	if total == 0 || limit <= 0 {
		return nil, total, nil
	}
	rows, err := d.db.QueryContext(ctx, `SELECT coalesce(h.aggregate_type, ''), h.aggregate_id, h.id, h.status,
    (SELECT count(*) FROM `+d.table+` w`+d.keyIndex()+` WHERE `+k.match("w", "h")+` AND `+k.unfinished("w", skip)+` AND `+k.before("h", "w")+`)
`+from+`
ORDER BY h.id
LIMIT ?`, limit)
	if err != nil {
		return nil, 0, d.wrap(err)
	}
	defer func() { _ = rows.Close() }()
	var out []driver.BlockedAggregate
	for rows.Next() {
		var b driver.BlockedAggregate
		if err := rows.Scan(&b.AggregateType, &b.AggregateID, &b.HeadID, &b.HeadStatus, &b.Waiting); err != nil {
			return nil, 0, d.wrap(err)
		}
		out = append(out, b)
	}
	return out, total, d.wrap(rows.Err())
}

// KeySequenceInstaller is implemented by a KeySequenced dialect whose key
// sequence (MySQL/MariaDB's trigger) is installed apart from the numbered
// migrations, only in schemas prepared for ordered delivery.
type KeySequenceInstaller interface {
	// KeySequenceSQL returns the DDL that installs it in schema.
	KeySequenceSQL(schema string) string
	// KeySequenceInstalled reports whether schema has it.
	KeySequenceInstalled(ctx context.Context, q Querier, schema string) (bool, error)
	// InstallKeySequence installs it unless schema has it.
	InstallKeySequence(ctx context.Context, db *sql.DB, schema string) error
}

var _ driver.OrderingPreparer = (*Driver)(nil)

// PrepareOrdering installs the dialect's key sequence, if it has one.
func (d *Driver) PrepareOrdering(ctx context.Context) error {
	if k, ok := d.d.(KeySequenceInstaller); ok {
		return d.wrap(k.InstallKeySequence(ctx, d.db, d.schema))
	}
	return nil
}

// PrepareOrderingSQL returns the dialect's key-sequence DDL, or "".
func (d *Driver) PrepareOrderingSQL() string {
	if k, ok := d.d.(KeySequenceInstaller); ok {
		return k.KeySequenceSQL(d.schema)
	}
	return ""
}

// OrderingPrepared returns nil unless the dialect has a key sequence that
// the schema lacks, and then an error wrapping
// driver.ErrOrderingNotPrepared.
func (d *Driver) OrderingPrepared(ctx context.Context) error {
	k, ok := d.d.(KeySequenceInstaller)
	if !ok {
		return nil
	}
	installed, err := k.KeySequenceInstalled(ctx, d.db, d.schema)
	if err != nil {
		return d.wrap(err)
	}
	if !installed {
		return driver.ErrOrderingNotPrepared
	}
	return nil
}

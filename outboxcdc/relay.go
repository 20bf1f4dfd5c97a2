package outboxcdc

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/driver/pgdriver"
)

// Relay streams committed outbox inserts from the slot of its group to
// its sink. Make one with New; Run streams (or stands by) until ctx ends.
type Relay struct {
	cfg  Config
	pool *pgxpool.Pool
	repl *pgconn.Config
	drv  *pgdriver.Driver
	log  *slog.Logger
	slot Slot

	// confirmed is the LSN up to which every transaction's events were
	// acknowledged by the sink and settled in the table: what the relay
	// reports to the server as flushed.
	confirmed atomic.Uint64
	// settledSeq is the sequence number of the last chunk settled.
	settledSeq atomic.Uint64
	streaming  atomic.Bool
}

// New returns a capture relay on pool's database; repl is the database's
// connection configuration, from which the relay opens its replication
// connection (ReplicationConfig). It does not touch the database.
func New(pool *pgxpool.Pool, repl *pgconn.Config, cfg Config) (*Relay, error) {
	if pool == nil || repl == nil {
		return nil, &outbox.ConfigError{Field: "pool", Err: errors.New("is nil")}
	}
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Relay{
		cfg: cfg, pool: pool, repl: repl, drv: pgdriver.New(pool, cfg.Schema),
		log: cfg.Logger.With(slog.String("component", "outboxcdc"), slog.String("relay_id", cfg.RelayID)),
	}, nil
}

// Prepare checks wal_level and creates the publication and the slot when
// they are missing (Setup). The returned Slot's Name is the table path's
// outbox.RelayConfig.CaptureSlot. Run calls it when it was not
// called.
func (r *Relay) Prepare(ctx context.Context) (Slot, error) {
	s, err := Setup(ctx, r.pool, r.repl, r.cfg.Schema, r.cfg.Group)
	if err != nil {
		return Slot{}, err
	}
	if s.Created {
		r.log.Info("created the replication slot and its publication", slog.String("slot", s.Name),
			slog.Bool("failover_slot", s.Failover))
	}
	r.slot = s
	return s, nil
}

// Streaming reports whether the relay holds the slot now (false while it
// stands by).
func (r *Relay) Streaming() bool { return r.streaming.Load() }

// Run streams from the slot until ctx ends, then lets the events it
// received finish publishing, settles them, reports the confirmed position
// and returns nil. While another relay streams from the slot it stands by
// and takes over once that relay's connection is gone; after a lost
// connection it reconnects. It returns an error only for what a retry
// cannot fix: wal_level, a missing table.
func (r *Relay) Run(ctx context.Context) error {
	if r.slot.Name == "" {
		if _, err := r.Prepare(ctx); err != nil {
			return err
		}
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	lagCtx, stopLag := context.WithCancel(ctx)
	defer stopLag()
	wg.Go(func() { r.lagLoop(lagCtx) })

	standing := false
	for {
		err := r.stream(ctx)
		if ctx.Err() != nil {
			return nil
		}
		switch {
		case isObjectInUse(err):
			if !standing {
				r.log.Info("standing by: another relay streams from the slot; taking over when it stops",
					slog.String("slot", r.slot.Name))
			}
			standing = true
		case errors.Is(err, ErrWALLevel):
			return err
		case sqlState(err) == "42704" || (sqlState(err) == "55000" && strings.Contains(err.Error(), "invalidated")):
			// undefined_object, or object_not_in_prerequisite_state for a
			// slot the server invalidated: the slot is gone or useless.
			// Dropped, invalidated by max_slot_wal_keep_size, or absent on
			// a promoted standby. A new slot records a new snapshot: the
			// events it does not stream, the table path claims.
			r.log.Error("the replication slot is gone; creating it again: events written since the last confirmed position are delivered by the table path",
				slog.String("slot", r.slot.Name), slog.String("error", err.Error()))
			if _, err := r.Prepare(ctx); err != nil {
				if errors.Is(err, ErrWALLevel) {
					return err
				}
				r.log.Warn("creating the replication slot failed; retrying", slog.String("error", err.Error()))
			}
		default:
			standing = false
			r.log.Warn("capture stream ended; reconnecting", slog.String("slot", r.slot.Name),
				slog.String("error", err.Error()), slog.Duration("retry_in", r.cfg.RetryInterval))
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(r.cfg.RetryInterval):
		}
	}
}

// chunk is a run of decoded events in commit order, handed from the
// receiver to the publisher; end, when not zero, is the end LSN of the
// transaction whose commit closed it.
type chunk struct {
	events []outbox.Event
	txids  []uint64  // the events' transactions, for the settler's visibility wait
	bad    []failure // rows the stream could not read: dead-lettered
	end    pglogrepl.LSN
	seq    uint64
}

// addTxid records the transaction of an event of the chunk.
func (c *chunk) addTxid(txid uint64) {
	if txid != 0 && (len(c.txids) == 0 || c.txids[len(c.txids)-1] != txid) {
		c.txids = append(c.txids, txid)
	}
}

// settlement is a published run of chunks: what to mark, and the position
// that becomes confirmed once it is marked.
type settlement struct {
	txids     []uint64
	delivered []int64
	failures  []failure
	end       pglogrepl.LSN
	seq       uint64
}

// stream holds the slot for one connection's life.
func (r *Relay) stream(ctx context.Context) error {
	conn, err := pgconn.ConnectConfig(ctx, ReplicationConfig(r.repl))
	if err != nil {
		return fmt.Errorf("replication connection: %w", err)
	}
	defer func() { _ = conn.Close(context.WithoutCancel(ctx)) }()
	// Start at the slot's confirmed position (LSN 0 asks for it).
	err = pglogrepl.StartReplication(ctx, conn, r.slot.Name, 0, pglogrepl.StartReplicationOptions{
		PluginArgs: []string{"proto_version '1'", "publication_names '" + r.slot.Name + "'"},
	})
	if err != nil {
		return err
	}
	r.confirmed.Store(0)
	r.settledSeq.Store(0)
	r.streaming.Store(true)
	defer r.streaming.Store(false)
	r.log.Info("streaming from the replication slot", slog.String("slot", r.slot.Name),
		slog.String("sink_retention", string(r.cfg.Retention)))

	// work ends the publisher and the settler at once (a lost connection);
	// the chunks channel's close ends them after the last chunk (a stop).
	work, stopWork := context.WithCancel(context.WithoutCancel(ctx))
	defer stopWork()
	// A few chunks queue at most: while the publisher is busy the
	// receiver grows its current chunk up to BatchSize instead, so memory
	// stays within a few batches however large the burst.
	chunks := make(chan chunk, 4)
	settles := newSettleQueue()
	var wg sync.WaitGroup
	wg.Go(func() { r.publishLoop(work, chunks, settles) })
	wg.Go(func() { r.settleLoop(work, settles) })
	leaseCtx, stopLease := context.WithCancel(work)
	defer stopLease()
	wg.Go(func() { r.leaseLoop(leaseCtx) })

	rcv := receiver{r: r, conn: conn, chunks: chunks, relations: map[uint32]*relation{}}
	// A stop interrupts the receiver's read at once (see receiver.run).
	stopRead := context.AfterFunc(ctx, func() { _ = conn.Conn().SetReadDeadline(time.Now()) })
	err = rcv.run(ctx)
	stopRead()
	// The last status update and the lease release below write on the
	// connection; reads are over.
	_ = conn.Conn().SetReadDeadline(time.Time{})
	close(chunks)
	stopLease()
	if ctx.Err() != nil && err == nil {
		// A stop: the queued chunks finish, then the last position goes
		// out on the still-open connection.
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(r.cfg.SinkTimeout + 5*time.Second):
			stopWork()
			<-done
		}
		if err := rcv.sendStatus(context.WithoutCancel(ctx), false); err != nil {
			r.log.Warn("could not report the confirmed position at stop; the next relay starts from the one reported before", slog.String("error", err.Error()))
		}
		r.release(context.WithoutCancel(ctx))
		r.log.Info("capture stream stopped", slog.String("slot", r.slot.Name),
			slog.String("confirmed_lsn", pglogrepl.LSN(r.confirmed.Load()).String()))
		return nil
	}
	stopWork()
	wg.Wait()
	return err
}

// isTimeout reports whether err is a read that hit its deadline.
func isTimeout(err error) bool {
	var ne net.Error
	return pgconn.Timeout(err) || (errors.As(err, &ne) && ne.Timeout())
}

// release deletes the holder's lease row after a graceful stop.
func (r *Relay) release(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_ = r.drv.ReleaseLease(ctx, pgdriver.CaptureLeaseName(r.slot.Name), r.cfg.RelayID)
}

// leaseLoop keeps the holder's lease row fresh while the relay streams.
func (r *Relay) leaseLoop(ctx context.Context) {
	tick := time.NewTicker(r.cfg.Lease / 3)
	defer tick.Stop()
	for {
		cctx, cancel := context.WithTimeout(ctx, r.cfg.Lease/3)
		if err := r.drv.HoldCapture(cctx, r.slot.Name, r.cfg.RelayID, r.cfg.Lease); err != nil && ctx.Err() == nil {
			r.log.Warn("renewing the capture lease row failed", slog.String("error", err.Error()))
		}
		cancel()
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// advance raises the confirmed position to lsn.
func (r *Relay) advance(lsn pglogrepl.LSN) {
	for {
		cur := r.confirmed.Load()
		if uint64(lsn) <= cur || r.confirmed.CompareAndSwap(cur, uint64(lsn)) {
			return
		}
	}
}

// confirmDelay is how soon a settled position is reported while chunks
// are in flight.
const confirmDelay = 10 * time.Millisecond

// receiver reads the replication stream and decodes it into chunks.
type receiver struct {
	r         *Relay
	conn      *pgconn.PgConn
	chunks    chan<- chunk
	relations map[uint32]*relation
	cols      []column // the last insert's columns, reused
	dec       decoder
	cur       chunk
	inTx      bool
	sentSeq   uint64
	walEnd    pglogrepl.LSN // the server's sent position, from keepalives
	sentPos   pglogrepl.LSN // the position last reported
	next      time.Time     // next status update
	deadline  time.Time     // the read deadline set on the socket
}

func (c *receiver) run(ctx context.Context) error {
	c.next = time.Now().Add(c.r.cfg.StatusInterval)
	for {
		now := time.Now()
		if !now.Before(c.next) {
			if err := c.sendStatus(ctx, false); err != nil {
				return err
			}
		}
		deadline := c.next
		if c.cur.end != 0 && !c.offer() {
			// A finished commit waits for the busy publisher.
			deadline = now.Add(time.Millisecond)
		}
		if c.sentSeq != c.r.settledSeq.Load() || pglogrepl.LSN(c.r.confirmed.Load()) != c.sentPos {
			// Chunks in flight: report each settled one promptly, so a
			// crash replays as little as possible.
			if d := now.Add(confirmDelay); d.Before(deadline) {
				deadline = d
			}
			if pglogrepl.LSN(c.r.confirmed.Load()) != c.sentPos {
				if err := c.sendStatus(ctx, false); err != nil {
					return err
				}
			}
		}
		// The wait is bounded by a read deadline on the socket, not a
		// context: pgconn watches a cancelable context with a goroutine of
		// its own per call, which at one call per decoded row cost the
		// relay more CPU than the decoding (a burst of 300k rows). A
		// timeout leaves the connection usable (a partly read message
		// resumes on the next call); stop's AfterFunc in stream moves the
		// deadline to now. The deadline set is kept while it is still
		// ahead and not later than the one wanted (waking early only
		// loops once more): each change re-arms a runtime timer, three
		// times per one-event transaction otherwise.
		if deadline.Before(c.deadline) || !c.deadline.After(now) {
			if err := c.conn.Conn().SetReadDeadline(deadline); err != nil {
				return err
			}
			c.deadline = deadline
		}
		if ctx.Err() != nil {
			return nil //nolint:nilerr // a stop ends the stream: not a failure
		}
		msg, err := c.conn.ReceiveMessage(context.Background())
		if err != nil {
			if ctx.Err() != nil {
				return nil //nolint:nilerr // a stop cuts the read short: not a failure
			}
			if isTimeout(err) {
				continue
			}
			return err
		}
		switch msg := msg.(type) {
		case *pgproto3.ErrorResponse:
			return pgconn.ErrorResponseToPgError(msg)
		case *pgproto3.CopyData:
			if err := c.handle(ctx, msg.Data); err != nil {
				return err
			}
		}
	}
}

func (c *receiver) handle(ctx context.Context, data []byte) error {
	if len(data) == 0 {
		return nil
	}
	switch data[0] {
	case pglogrepl.PrimaryKeepaliveMessageByteID:
		pkm, err := pglogrepl.ParsePrimaryKeepaliveMessage(data[1:])
		if err != nil {
			return err
		}
		if pkm.ServerWALEnd > c.walEnd {
			c.walEnd = pkm.ServerWALEnd
		}
		if pkm.ReplyRequested {
			return c.sendStatus(ctx, false)
		}
	case pglogrepl.XLogDataByteID:
		xld, err := pglogrepl.ParseXLogData(data[1:])
		if err != nil {
			return err
		}
		if len(xld.WALData) == 0 {
			return nil
		}
		return c.logical(ctx, xld.WALData)
	}
	return nil
}

// insert decodes an Insert message straight from its bytes (parseInsert):
// pglogrepl.Parse copies every column into allocations of its own, which
// cost the relay more CPU per event of a burst than everything else it
// does.
func (c *receiver) insert(ctx context.Context, data []byte) error {
	relID, cols, err := parseInsert(data, c.cols)
	c.cols = cols
	if err != nil {
		return fmt.Errorf("decode pgoutput message: %w", err)
	}
	rel := c.relations[relID]
	if rel == nil {
		return nil
	}
	ev, txid, ok, err := rel.decode(&c.dec, cols, c.r.cfg.EventTypes)
	if err != nil {
		if ev.ID == 0 {
			return fmt.Errorf("cannot read an inserted outbox row: %w", err)
		}
		// Its row is in the table: dead-letter it there, with the
		// reason, rather than skip it in silence.
		c.r.log.Error("cannot decode an inserted outbox row; dead-lettering it",
			slog.Int64("event_id", ev.ID), slog.String("error", err.Error()))
		c.cur.bad = append(c.cur.bad, failure{id: ev.ID, err: outbox.Permanent(fmt.Errorf("capture: %w", err))})
		c.cur.addTxid(txid)
		return nil
	}
	if ok {
		c.cur.addTxid(txid)
		c.cur.events = append(c.cur.events, ev)
		if len(c.cur.events) >= c.r.cfg.BatchSize {
			return c.send(ctx)
		}
	}
	return nil
}

// logical decodes one pgoutput message.
func (c *receiver) logical(ctx context.Context, data []byte) error {
	switch data[0] {
	case 'I':
		return c.insert(ctx, data)
	case 'B':
		// Begin: Int64 final LSN, Int64 commit time, Int32 xid.
		c.inTx = true
		return nil
	case 'C':
		// Commit: Int8 flags, Int64 commit LSN, Int64 end LSN, Int64
		// commit time.
		if len(data) < 26 {
			return errors.New("decode pgoutput message: commit cut short")
		}
		c.commit(pglogrepl.LSN(binary.BigEndian.Uint64(data[10:18])))
		return nil
	}
	m, err := pglogrepl.Parse(data)
	if err != nil {
		return fmt.Errorf("decode pgoutput message: %w", err)
	}
	if m, ok := m.(*pglogrepl.RelationMessage); ok && m.Namespace == c.r.cfg.Schema && m.RelationName == "outbox_events" {
		c.relations[m.RelationID] = newRelation(m)
	}
	return nil
}

// commit ends a transaction at end, its end LSN.
func (c *receiver) commit(end pglogrepl.LSN) {
	c.inTx = false
	c.cur.end = end
	if len(c.cur.events) == 0 && len(c.cur.bad) == 0 && c.sentSeq == c.r.settledSeq.Load() {
		// Nothing in flight: the commit needs no publish.
		c.r.advance(c.cur.end)
		c.cur = chunk{}
		return
	}
	// To the publisher if it is free; else the chunk grows with the
	// next commits, and run offers it again.
	c.offer()
}

// offer hands the current chunk to the publisher if it can take it now,
// and reports whether it did.
func (c *receiver) offer() bool {
	c.cur.seq = c.sentSeq + 1
	select {
	case c.chunks <- c.cur:
		c.sentSeq++
		c.cur = chunk{}
		return true
	default:
		return false
	}
}

// send hands the current chunk to the publisher, keeping the server
// informed while the publisher is busy.
func (c *receiver) send(ctx context.Context) error {
	c.sentSeq++
	c.cur.seq = c.sentSeq
	for {
		wait := time.Until(c.next)
		if wait <= 0 {
			if err := c.sendStatus(ctx, false); err != nil {
				return err
			}
			continue
		}
		t := time.NewTimer(wait)
		select {
		case c.chunks <- c.cur:
			t.Stop()
			c.cur = chunk{}
			return nil
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
	}
}

// sendStatus reports the confirmed position: past every settled
// transaction, and up to the server's sent position when nothing is in
// flight.
func (c *receiver) sendStatus(ctx context.Context, reply bool) error {
	if !c.inTx && len(c.cur.events) == 0 && len(c.cur.bad) == 0 && c.sentSeq == c.r.settledSeq.Load() && c.walEnd > 0 {
		c.r.advance(c.walEnd)
	}
	pos := pglogrepl.LSN(c.r.confirmed.Load())
	c.next = time.Now().Add(c.r.cfg.StatusInterval)
	// Sent even before anything is confirmed (position 0 moves nothing):
	// the server ends a walsender that hears nothing for
	// wal_sender_timeout.
	err := pglogrepl.SendStandbyStatusUpdate(ctx, c.conn, pglogrepl.StandbyStatusUpdate{
		WALWritePosition: pos, WALFlushPosition: pos, WALApplyPosition: pos, ReplyRequested: reply,
	})
	if err != nil {
		return fmt.Errorf("send standby status: %w", err)
	}
	c.sentPos = pos
	return nil
}

package bench

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/inbox"
	"github.com/outboxkit/outbox/outboxmigrate"
	"github.com/outboxkit/outbox/sink/webhooksink"
)

// receiveConsumer is the consumer the receive scenario stores under.
const receiveConsumer = "bench"

// Receive measures `outbox receive`'s path into the inbox against a
// hand-written insert loop, in the same run (PostgreSQL only):
//
//   - receive: the webhook sink (Writers requests in flight, signed, one
//     event per request, as the relay sends them) POSTs Events events to an
//     inbox.WebhookHandler on loopback whose Receive is inbox.Store on a
//     pool of Writers connections with the database's defaults: what
//     `outbox receive` serves.
//   - reference: Writers goroutines insert the same messages (same source,
//     IDs, payload and headers) with INSERT … ON CONFLICT DO NOTHING, one
//     autocommitted statement each, on a pool alike.
//
// Each phase runs in a scratch schema of its own migrated with the inbox
// track, and checks that every message is stored exactly once. The report
// is receive's, with the reference's rate and receive/reference in
// DrainStats.
func (r *Runner) Receive(ctx context.Context) (Report, error) {
	rep := Report{Scenario: ScenarioReceive}
	if _, ok := r.st.(*pgStore); !ok {
		return rep, errors.New("receive: runs on PostgreSQL only")
	}
	events := benchEvents(r.cfg.Events, r.payload)
	var headers []byte
	err := r.withInbox(ctx, &rep, func(s scratch, pool *pgxpool.Pool, table string) error {
		r.progress("receive: POSTing %d events through the webhook sink (%d in flight) into the inbox", len(events), r.cfg.Writers)
		rss := startRSS()
		elapsed, dups, err := r.receiveWebhooks(ctx, s, pool, events)
		rep.RSSPeakBytes = rss.Stop()
		if err != nil {
			return err
		}
		rep.Events, rep.Duplicates, rep.Seconds = int64(len(events)), dups, elapsed.Seconds()
		rep.EventsPerS = float64(len(events)) / elapsed.Seconds()
		if err := checkInboxRows(ctx, pool, table, len(events)); err != nil {
			return err
		}
		// The reference stores the very headers the handler stored.
		return pool.QueryRow(ctx, `SELECT headers::text FROM `+table+` LIMIT 1`).Scan(&headers)
	})
	if err != nil {
		return rep, fmt.Errorf("receive: %w", err)
	}
	var refRep Report
	err = r.withInbox(ctx, &refRep, func(_ scratch, pool *pgxpool.Pool, table string) error {
		r.progress("receive: inserting %d messages with %d hand-written INSERT … ON CONFLICT loops", len(events), r.cfg.Writers)
		elapsed, err := r.insertLoop(ctx, pool, table, events, headers)
		if err != nil {
			return err
		}
		rate := float64(len(events)) / elapsed.Seconds()
		rep.DrainStats = &DrainStats{ReferenceEventsPerS: rate, RatioToReference: ratio(rep.EventsPerS, rate)}
		return checkInboxRows(ctx, pool, table, len(events))
	})
	if err != nil {
		return rep, fmt.Errorf("receive reference: %w", err)
	}
	return rep, nil
}

// withInbox runs fn in a scratch schema migrated with the inbox track,
// with a pool of Writers connections with the database's defaults.
func (r *Runner) withInbox(ctx context.Context, rep *Report, fn func(s scratch, pool *pgxpool.Pool, table string) error) error {
	return r.withScratch(ctx, rep, func(s scratch) error {
		if _, err := outboxmigrate.MigrateInbox(ctx, s.database(), outboxmigrate.Config{Schema: s.schema()}); err != nil {
			return err
		}
		if err := s.settle(ctx); err != nil {
			return err
		}
		ps, ok := s.pools().(*pgPools)
		if !ok {
			return errors.New("runs on PostgreSQL only")
		}
		defer ps.close(ctx)
		pc := ps.s.st.base.Copy()
		pc.ConnConfig.RuntimeParams["application_name"] = "outbox-bench-receive"
		pc.MaxConns = int32(min(r.cfg.Writers, 1<<20))
		pool, err := ps.connect(ctx, pc)
		if err != nil {
			return err
		}
		return fn(s, pool, pgx.Identifier{s.schema(), "inbox_messages"}.Sanitize())
	})
}

// receiveWebhooks serves an inbox webhook handler on loopback and
// publishes events to it through the webhook sink; it returns the wall
// time from the first request to the last answer.
func (r *Runner) receiveWebhooks(ctx context.Context, s scratch, pool *pgxpool.Pool, events []outbox.Event) (time.Duration, int64, error) {
	var key [24]byte
	_, _ = rand.Read(key[:])
	secret := "whsec_" + base64.StdEncoding.EncodeToString(key[:])
	in, err := inbox.New(inbox.Config{Schema: s.schema(), Consumer: receiveConsumer, Dialect: outbox.DialectPostgres})
	if err != nil {
		return 0, 0, err
	}
	var dups atomic.Int64
	h, err := inbox.NewWebhookHandler(inbox.WebhookConfig{Secret: secret, Logger: r.cfg.Logger,
		Receive: func(ctx context.Context, m inbox.Message) (inbox.Result, error) {
			// As outbox receive does: each store bounded on its own.
			ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			res, err := in.Store(ctx, pool, m)
			if res.Duplicate {
				dups.Add(1)
			}
			return res, err
		}})
	if err != nil {
		return 0, 0, err
	}
	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", "127.0.0.1:0")
	if err != nil {
		return 0, 0, err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	var served sync.WaitGroup
	served.Go(func() { _ = srv.Serve(ln) })
	defer func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
		served.Wait()
	}()
	sink, err := webhooksink.New(webhooksink.Config{URL: "http://" + ln.Addr().String() + "/", Secret: secret, Concurrency: r.cfg.Writers})
	if err != nil {
		return 0, 0, err
	}
	defer func() { _ = sink.Close() }()
	rec := newRecorder(sink, len(events))
	start := time.Now()
	err = publishBatches(ctx, rec, events, r.cfg.BatchSize, r.cfg.MaxInFlight)
	elapsed := time.Since(start)
	if sinkErr := rec.err(); sinkErr != nil {
		err = sinkErr
	}
	if err != nil {
		return 0, 0, err
	}
	if delivered, _, _ := rec.counts(); delivered != int64(len(events)) {
		return 0, 0, fmt.Errorf("%d of %d events acknowledged", delivered, len(events))
	}
	return elapsed, dups.Load(), nil
}

// insertLoop inserts events' messages with Writers goroutines, one
// autocommitted INSERT … ON CONFLICT DO NOTHING each: the hand-written
// receiver.
func (r *Runner) insertLoop(ctx context.Context, pool *pgxpool.Pool, table string, events []outbox.Event, headers []byte) (time.Duration, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	q := `INSERT INTO ` + table + ` (consumer, source, message_id, event_type, payload, headers)
VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT DO NOTHING`
	var (
		next atomic.Int64
		wg   sync.WaitGroup
	)
	start := time.Now()
	for range r.cfg.Writers {
		wg.Go(func() {
			for {
				i := next.Add(1) - 1
				if i >= int64(len(events)) || ctx.Err() != nil {
					return
				}
				e := &events[i]
				if _, err := pool.Exec(ctx, q, receiveConsumer, webhooksink.SourceDefault, strconv.FormatInt(e.ID, 10),
					e.EventType, string(e.Payload), string(headers)); err != nil {
					cancel(err)
					return
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	if err := context.Cause(ctx); err != nil {
		return 0, err
	}
	return elapsed, nil
}

// checkInboxRows checks that table holds exactly want messages, each
// once: none lost, none doubled.
func checkInboxRows(ctx context.Context, pool *pgxpool.Pool, table string, want int) error {
	var n, distinct int64
	if err := pool.QueryRow(ctx, `SELECT count(*), count(DISTINCT message_id) FROM `+table+` WHERE consumer = $1`, receiveConsumer).Scan(&n, &distinct); err != nil {
		return err
	}
	if n != int64(want) || distinct != int64(want) {
		return fmt.Errorf("the inbox holds %d rows (%d distinct ids), want %d", n, distinct, want)
	}
	return nil
}

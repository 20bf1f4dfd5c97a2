package bench

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
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

// The consumers the receive scenario stores under: the receiver's and the
// hand-written loop's, in one table.
const (
	receiveConsumer   = "bench"
	referenceConsumer = "bench-reference"
	handHTTPConsumer  = "bench-hand-http"
)

// receiveRounds is how many times receive alternates between the receiver
// and the hand-written loop, each storing a share of the events: load that
// comes and goes on the machine then falls on both alike.
const receiveRounds = 4

// Receive measures `outbox receive`'s path into the inbox against a
// hand-written insert loop, in the same run (PostgreSQL only):
//
//   - receive: the webhook sink (Writers requests in flight, signed, one
//     event per request as the relay sends them by default, or a
//     CloudEvents batch of ReceiveBatch) POSTs the events to an
//     inbox.WebhookHandler on loopback whose Receive is inbox.Store on a
//     pool of Writers connections with the database's defaults, and whose
//     ReceiveBatch (a batch's events, one round trip) is inbox.StoreBatch:
//     what `outbox receive` serves.
//
//   - reference: Writers goroutines insert the same messages (same source,
//     IDs, payload and headers) with INSERT … ON CONFLICT DO NOTHING, one
//     autocommitted statement each, on a pool alike.
//
//   - hand-written webhook handler: the webhook sink alike POSTs the same
//     events to a net/http handler of the bare minimum on a third pool
//     alike: read the body, check the signature with crypto/hmac, one
//     autocommitted INSERT … ON CONFLICT DO NOTHING of the same row. It
//     makes the HTTP hop the reference loop does not, so receive against
//     it is what the inbox's code costs over any webhook receiver.
//
// All store into one scratch inbox_messages, under consumers of their
// own, taking turns in receiveRounds rounds of Events/receiveRounds
// events each; at the end each consumer must hold every message exactly
// once. The report is receive's, with the reference's rate,
// receive/reference, the hand-written handler's rate and
// receive/hand-written in DrainStats.
func (r *Runner) Receive(ctx context.Context) (Report, error) {
	rep := Report{Scenario: ScenarioReceive}
	if _, ok := r.st.(*pgStore); !ok {
		return rep, errors.New("receive: runs on PostgreSQL only")
	}
	events := benchEvents(r.cfg.Events, r.payload)
	err := r.withScratch(ctx, &rep, func(s scratch) error {
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
		receiverPool, err := r.inboxPool(ctx, ps, "outbox-bench-receive")
		if err != nil {
			return err
		}
		referencePool, err := r.inboxPool(ctx, ps, "outbox-bench-receive-reference")
		if err != nil {
			return err
		}
		handPool, err := r.inboxPool(ctx, ps, "outbox-bench-receive-hand-http")
		if err != nil {
			return err
		}
		table := pgx.Identifier{s.schema(), "inbox_messages"}.Sanitize()
		rc, err := r.startReceiver(ctx, s, receiverPool)
		if err != nil {
			return err
		}
		defer rc.stop(ctx)

		var (
			headers                        []byte
			hand                           *receiver
			receiveTime, refTime, handTime time.Duration
		)
		rss := startRSS()
		for round := range receiveRounds {
			chunk := events[round*len(events)/receiveRounds : (round+1)*len(events)/receiveRounds]
			if len(chunk) == 0 {
				continue
			}
			r.progress("receive: round %d of %d: POSTing %d events through the webhook sink (%d in flight) into the inbox",
				round+1, receiveRounds, len(chunk), r.cfg.Writers)
			d, err := rc.publish(ctx, chunk)
			if err != nil {
				return err
			}
			receiveTime += d
			if headers == nil {
				// The reference stores the very headers the handler stored.
				if err := receiverPool.QueryRow(ctx, `SELECT headers::text FROM `+table+` LIMIT 1`).Scan(&headers); err != nil {
					return err
				}
			}
			r.progress("receive: round %d of %d: inserting %d messages with %d hand-written INSERT … ON CONFLICT loops",
				round+1, receiveRounds, len(chunk), r.cfg.Writers)
			if d, err = r.insertLoop(ctx, referencePool, table, chunk, headers); err != nil {
				return err
			}
			refTime += d
			if hand == nil {
				if hand, err = r.startHandHTTP(ctx, handPool, table, headers); err != nil {
					return err
				}
				defer hand.stop(ctx)
			}
			r.progress("receive: round %d of %d: POSTing %d events through the webhook sink (%d in flight) to a hand-written webhook handler",
				round+1, receiveRounds, len(chunk), r.cfg.Writers)
			if d, err = hand.publish(ctx, chunk); err != nil {
				return err
			}
			handTime += d
		}
		rss.stopInto(&rep)
		if r.cfg.ReceiveBatch > 1 {
			rep.WebhookBatch = r.cfg.ReceiveBatch
		}
		rep.Events, rep.Duplicates, rep.Seconds = int64(len(events)), rc.dups.Load(), receiveTime.Seconds()
		rep.EventsPerS = float64(len(events)) / receiveTime.Seconds()
		refRate := float64(len(events)) / refTime.Seconds()
		handRate := float64(len(events)) / handTime.Seconds()
		rep.DrainStats = &DrainStats{ReferenceEventsPerS: refRate, RatioToReference: ratio(rep.EventsPerS, refRate),
			HandHTTPEventsPerS: handRate, RatioToHandHTTP: ratio(rep.EventsPerS, handRate)}
		return errors.Join(checkInboxRows(ctx, receiverPool, table, receiveConsumer, len(events)),
			checkInboxRows(ctx, receiverPool, table, referenceConsumer, len(events)),
			checkInboxRows(ctx, receiverPool, table, handHTTPConsumer, len(events)))
	})
	if err != nil {
		return rep, fmt.Errorf("receive: %w", err)
	}
	return rep, nil
}

// inboxPool opens a pool of Writers connections with the database's
// defaults.
func (r *Runner) inboxPool(ctx context.Context, ps *pgPools, name string) (*pgxpool.Pool, error) {
	pc := ps.s.st.base.Copy()
	pc.ConnConfig.RuntimeParams["application_name"] = name
	pc.MaxConns = int32(min(r.cfg.Writers, 1<<20))
	return ps.connect(ctx, pc)
}

// receiver is an inbox webhook handler served on loopback and the webhook
// sink that POSTs to it.
type receiver struct {
	srv    *http.Server
	served sync.WaitGroup
	sink   *webhooksink.Sink
	dups   atomic.Int64
	r      *Runner
}

// startReceiver serves an inbox webhook handler storing into pool on
// loopback, as outbox receive does, and makes the webhook sink that
// publishes to it.
func (r *Runner) startReceiver(ctx context.Context, s scratch, pool *pgxpool.Pool) (*receiver, error) {
	var key [24]byte
	_, _ = rand.Read(key[:])
	secret := "whsec_" + base64.StdEncoding.EncodeToString(key[:])
	in, err := inbox.New(inbox.Config{Schema: s.schema(), Consumer: receiveConsumer, Dialect: outbox.DialectPostgres})
	if err != nil {
		return nil, err
	}
	rc := &receiver{r: r}
	h, err := inbox.NewWebhookHandler(inbox.WebhookConfig{Secret: secret, Logger: r.cfg.Logger,
		Receive: func(ctx context.Context, m inbox.Message) (inbox.Result, error) {
			ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			res, err := in.Store(ctx, pool, m)
			if res.Duplicate {
				rc.dups.Add(1)
			}
			return res, err
		},
		ReceiveBatch: func(ctx context.Context, ms []inbox.Message) ([]inbox.Result, error) {
			ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			results, err := in.StoreBatch(ctx, pool, ms)
			for _, res := range results {
				if res.Duplicate {
					rc.dups.Add(1)
				}
			}
			return results, err
		}})
	if err != nil {
		return nil, err
	}
	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	rc.srv = &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	rc.served.Go(func() { _ = rc.srv.Serve(ln) })
	rc.sink, err = webhooksink.New(webhooksink.Config{URL: "http://" + ln.Addr().String() + "/", Secret: secret, Concurrency: r.cfg.Writers,
		Batch: r.cfg.ReceiveBatch})
	if err != nil {
		rc.stop(ctx)
		return nil, err
	}
	return rc, nil
}

// startHandHTTP serves, on loopback, the webhook handler an engineer would
// write by hand, storing into pool what the inbox's handler stores (headers
// are the ones it stored), and makes the webhook sink that publishes to it.
func (r *Runner) startHandHTTP(ctx context.Context, pool *pgxpool.Pool, table string, headers []byte) (*receiver, error) {
	var key [24]byte
	_, _ = rand.Read(key[:])
	secret := "whsec_" + base64.StdEncoding.EncodeToString(key[:])
	q := `INSERT INTO ` + table + ` (consumer, source, message_id, event_type, payload, headers)
VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT DO NOTHING`
	hdrs := string(headers)
	h := http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, err := io.ReadAll(http.MaxBytesReader(w, req.Body, inbox.MaxBodyBytesDefault))
		if err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		id, ts := req.Header.Get("webhook-id"), req.Header.Get("webhook-timestamp")
		mac := hmac.New(sha256.New, key[:])
		mac.Write([]byte(id + "." + ts + "."))
		mac.Write(body)
		if !slices.Contains(strings.Fields(req.Header.Get("webhook-signature")), "v1,"+base64.StdEncoding.EncodeToString(mac.Sum(nil))) {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		ctx, cancel := context.WithTimeout(req.Context(), 30*time.Second)
		defer cancel()
		if _, err := pool.Exec(ctx, q, handHTTPConsumer, req.Header.Get("ce-source"), id, req.Header.Get("ce-type"), string(body), hdrs); err != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	rc := &receiver{r: r, srv: &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}}
	rc.served.Go(func() { _ = rc.srv.Serve(ln) })
	rc.sink, err = webhooksink.New(webhooksink.Config{URL: "http://" + ln.Addr().String() + "/", Secret: secret, Concurrency: r.cfg.Writers,
		Batch: 1})
	if err != nil {
		rc.stop(ctx)
		return nil, err
	}
	return rc, nil
}

// publish POSTs events and returns the wall time from the first request to
// the last answer.
func (rc *receiver) publish(ctx context.Context, events []outbox.Event) (time.Duration, error) {
	rec := newRecorder(rc.sink, len(events))
	start := time.Now()
	err := publishBatches(ctx, rec, events, rc.r.cfg.BatchSize, rc.r.cfg.MaxInFlight)
	elapsed := time.Since(start)
	if sinkErr := rec.err(); sinkErr != nil {
		err = sinkErr
	}
	if err != nil {
		return 0, err
	}
	if delivered, _, _ := rec.counts(); delivered != int64(len(events)) {
		return 0, fmt.Errorf("%d of %d events acknowledged", delivered, len(events))
	}
	return elapsed, nil
}

// stop shuts the server down, then the sink.
func (rc *receiver) stop(ctx context.Context) {
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	_ = rc.srv.Shutdown(sctx)
	rc.served.Wait()
	if rc.sink != nil {
		_ = rc.sink.Close()
	}
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
				if _, err := pool.Exec(ctx, q, referenceConsumer, webhooksink.SourceDefault, strconv.FormatInt(e.ID, 10),
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

// checkInboxRows checks that table holds exactly want messages for
// consumer, each once: none lost, none doubled.
func checkInboxRows(ctx context.Context, pool *pgxpool.Pool, table, consumer string, want int) error {
	var n, distinct int64
	if err := pool.QueryRow(ctx, `SELECT count(*), count(DISTINCT message_id) FROM `+table+` WHERE consumer = $1`, consumer).Scan(&n, &distinct); err != nil {
		return err
	}
	if n != int64(want) || distinct != int64(want) {
		return fmt.Errorf("the inbox holds %d rows (%d distinct ids) for %s, want %d", n, distinct, consumer, want)
	}
	return nil
}

package kafkasink_test

import (
	"cmp"
	"context"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/testutil"
	"github.com/outboxkit/outbox/route"
	"github.com/outboxkit/outbox/sink/kafkasink"
)

// Shape of the bench's events (outbox bench drain): 325-byte payloads, a
// distinct aggregate ID each, published in batches of 1000 with 4 batches
// in flight (outbox relay's defaults since issue 15).
const (
	knobEvents    = 50_000
	knobBatch     = 1000
	knobInFlight  = 4
	knobPayload   = 325
	knobTopic     = "outbox.knobs"
	knobPartition = 4
)

// sinkKnobs are the sink URL options the Kfake benchmarks compare, each
// against the defaults (linger 10ms, batches up to 1,000,012 bytes,
// snappy).
var sinkKnobs = []string{"", "linger=0", "linger=1ms", "max_record_bytes=65536", "compression=none", "compression=lz4"}

// kfakeSink opens kafkasink on brokers from a kafka:// URL with the query
// options query (and the route to knobTopic), closed when b ends.
func kfakeSink(b *testing.B, brokers []string, query string) *kafkasink.Sink {
	cfg, err := kafkasink.ConfigFromURL("kafka://" + strings.Join(brokers, ",") + "?route=" + knobTopic + "&" + query)
	if err != nil {
		b.Fatal(err)
	}
	cfg.Logger = quiet
	s, err := kafkasink.New(b.Context(), cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Close() })
	return s
}

// knobName names a sub-benchmark after its URL options.
func knobName(query string) string { return cmp.Or(query, "defaults") }

// BenchmarkKfakeSink publishes knobEvents events through kafkasink to an
// in-process kfake cluster, knobInFlight batches at once, with its
// defaults and with each of sinkKnobs: the sink's ceiling as outbox
// bench's sink scenario measures it.
//
//	go test -run '^$' -bench 'Kfake' -benchtime 5x -count 2 ./sink/kafkasink
func BenchmarkKfakeSink(b *testing.B) {
	events := knobBenchEvents(knobEvents)
	for _, query := range sinkKnobs {
		b.Run(knobName(query), func(b *testing.B) {
			s := kfakeSink(b, kfakeCluster(b), query)
			var rate eventRate
			b.ResetTimer()
			for b.Loop() {
				start := time.Now()
				inFlight(b, len(events), func(lo, hi int) error {
					for _, err := range s.Publish(b.Context(), events[lo:hi]) {
						if err != nil {
							return err
						}
					}
					return nil
				})
				rate.add(len(events), time.Since(start))
			}
			rate.report(b)
		})
	}
}

// BenchmarkKfakeProducerKnobs produces the same records with the sink's own
// client options (ConnectOptions: idempotent, acks=all, snappy, linger 10ms) and one
// franz-go producer setting changed at a time, each batch produced and
// awaited as the sink does.
func BenchmarkKfakeProducerKnobs(b *testing.B) {
	variants := []struct {
		name string
		opts []kgo.Opt
	}{
		{"defaults", nil}, // the sink's and franz-go v1.22's: linger 10ms, batches up to 1,000,012 bytes, 50,000 records buffered
		{"linger=0", []kgo.Opt{kgo.ProducerLinger(0)}},
		{"linger=1ms", []kgo.Opt{kgo.ProducerLinger(time.Millisecond)}},
		{"linger=10ms", []kgo.Opt{kgo.ProducerLinger(10 * time.Millisecond)}},
		{"batch_max_bytes=16KiB", []kgo.Opt{kgo.ProducerBatchMaxBytes(16 << 10)}},
		{"batch_max_bytes=64KiB", []kgo.Opt{kgo.ProducerBatchMaxBytes(64 << 10)}},
		{"max_buffered_records=1000", []kgo.Opt{kgo.MaxBufferedRecords(1000)}},
		{"max_buffered_records=100000", []kgo.Opt{kgo.MaxBufferedRecords(100_000)}},
		{"compression=none", []kgo.Opt{kgo.ProducerBatchCompression(kgo.NoCompression())}},
	}
	events := knobBenchEvents(knobEvents)
	for _, v := range variants {
		b.Run(v.name, func(b *testing.B) {
			brokers := kfakeCluster(b)
			r, err := route.New(knobTopic)
			if err != nil {
				b.Fatal(err)
			}
			opts, err := kafkasink.ConnectOptions(kafkasink.Config{Brokers: brokers, Router: r, Logger: quiet})
			if err != nil {
				b.Fatal(err)
			}
			client, err := kgo.NewClient(append(opts, v.opts...)...)
			if err != nil {
				b.Fatal(err)
			}
			defer client.Close()
			var rate eventRate
			b.ResetTimer()
			for b.Loop() {
				start := time.Now()
				inFlight(b, len(events), func(lo, hi int) error {
					return produceBatch(b.Context(), client, events[lo:hi])
				})
				rate.add(len(events), time.Since(start))
			}
			rate.report(b)
		})
	}
}

// eventRate sums the events and the time of a benchmark's iterations, so
// the reported rate is over all of them, not the last one's.
type eventRate struct {
	events  int
	elapsed time.Duration
}

func (r *eventRate) add(events int, elapsed time.Duration) {
	r.events += events
	r.elapsed += elapsed
}

// report reports the rate as events/s.
func (r *eventRate) report(b *testing.B) {
	if r.elapsed > 0 {
		b.ReportMetric(float64(r.events)/r.elapsed.Seconds(), "events/s")
	}
}

// produceBatch produces one record per event, keyed by aggregate ID, and
// waits for every ack.
func produceBatch(ctx context.Context, client *kgo.Client, events []outbox.Event) error {
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		firstErr error
	)
	wg.Add(len(events))
	for i := range events {
		rec := &kgo.Record{Topic: knobTopic, Key: []byte(events[i].AggregateID), Value: events[i].Payload}
		client.Produce(ctx, rec, func(_ *kgo.Record, err error) {
			if err != nil {
				mu.Lock()
				if firstErr == nil {
					firstErr = err
				}
				mu.Unlock()
			}
			wg.Done()
		})
	}
	wg.Wait()
	return firstErr
}

// inFlight calls publish for consecutive batches of knobBatch out of n,
// knobInFlight at once; the first error fails b.
func inFlight(b *testing.B, n int, publish func(lo, hi int) error) {
	var (
		next   atomic.Int64
		wg     sync.WaitGroup
		failed atomic.Pointer[error]
	)
	for range knobInFlight {
		wg.Go(func() {
			for {
				lo := int(next.Add(knobBatch)) - knobBatch
				if lo >= n || failed.Load() != nil {
					return
				}
				if err := publish(lo, min(lo+knobBatch, n)); err != nil {
					failed.CompareAndSwap(nil, &err)
					return
				}
			}
		})
	}
	wg.Wait()
	if err := failed.Load(); err != nil {
		b.Fatal(*err)
	}
}

// kfakeCluster starts a one-broker kfake cluster with knobTopic seeded
// (knobPartition partitions), closed when b ends.
func kfakeCluster(b *testing.B) []string {
	fake, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(knobPartition, knobTopic))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(fake.Close)
	return fake.ListenAddrs()
}

// knobBenchEvents returns n events shaped as outbox bench's.
func knobBenchEvents(n int) []outbox.Event {
	payload := []byte(`{"order":"` + strings.Repeat("x", knobPayload-len(`{"order":""}`)) + `"}`)
	now := time.Now()
	events := make([]outbox.Event, n)
	for i := range events {
		id := int64(i + 1)
		events[i] = outbox.Event{ID: id, EventType: "order.created", AggregateType: "order",
			AggregateID: strconv.FormatInt(id, 10), Payload: payload, Status: outbox.StatusProcessing,
			AvailableAt: now, CreatedAt: now, UpdatedAt: now}
	}
	return events
}

// markCounter is a relay hook that counts published events.
type markCounter struct{ n atomic.Int64 }

func (m *markCounter) OnBatch(_ context.Context, b outbox.BatchInfo) { m.n.Add(int64(b.Published)) }

// BenchmarkKfakeRelayDrain drains a pre-filled backlog of knobEvents
// events with outbox.Relay (batch knobBatch, one claim loop, knobInFlight
// batches in flight) through kafkasink to kfake, with its defaults and
// with no linger: the drain
// outbox bench drain would measure, which cannot reach kfake from the CLI.
// Its discard variant is the same drain to a sink that does nothing, the
// database's side of outbox bench's limit, so one run gives the ratio.
func BenchmarkKfakeRelayDrain(b *testing.B) {
	b.Run("discard", func(b *testing.B) {
		kfakeRelayDrain(b, outbox.SinkFunc(func(context.Context, []outbox.Event) []error { return nil }))
	})
	for _, query := range []string{"", "linger=0"} {
		b.Run(knobName(query), func(b *testing.B) { kfakeRelayDrain(b, kfakeSink(b, kfakeCluster(b), query)) })
	}
}

// kfakeRelayDrain drains knobEvents events through s, b.N times.
func kfakeRelayDrain(b *testing.B, s outbox.Sink) {
	pool, schema := testutil.Schema(b)
	table := pgx.Identifier{schema, "outbox_events"}.Sanitize()
	payload := knobBenchEvents(1)[0].Payload
	var rate eventRate
	b.ResetTimer()
	for b.Loop() {
		b.StopTimer()
		if _, err := pool.Exec(b.Context(), `INSERT INTO `+table+` (event_type, aggregate_type, aggregate_id, payload)
SELECT 'order.created', 'order', g::text, $2::jsonb FROM generate_series(1, $1::int) AS g`, knobEvents, string(payload)); err != nil {
			b.Fatal(err)
		}
		counter := &markCounter{}
		relay, err := outbox.NewRelay(outbox.Postgres(pool), outbox.RelayConfig{Sink: s, Schema: schema, BatchSize: knobBatch,
			Workers: 1, MaxInFlight: knobInFlight, PollInterval: 10 * time.Millisecond, Logger: quiet, Hooks: []outbox.Hook{counter}})
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		start := time.Now()
		if err := relay.Start(b.Context()); err != nil {
			b.Fatal(err)
		}
		testutil.WaitFor(b, 2*time.Minute, "the backlog drained", func() bool { return counter.n.Load() >= knobEvents })
		elapsed := time.Since(start)
		b.StopTimer()
		stopCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err = relay.Stop(stopCtx)
		cancel()
		if err != nil {
			b.Fatal(err)
		}
		if _, err := pool.Exec(b.Context(), `DELETE FROM `+table); err != nil {
			b.Fatal(err)
		}
		rate.add(knobEvents, elapsed)
		b.StartTimer()
	}
	rate.report(b)
}

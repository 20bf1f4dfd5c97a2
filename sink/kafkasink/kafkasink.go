package kafkasink

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/sinkurl"
)

// Sink produces events to Kafka. It is safe for concurrent use.
type Sink struct {
	cfg     Config
	client  *kgo.Client
	brokers string // for errors and String; never holds credentials
	log     *slog.Logger
	state   *brokerState // whether the brokers answer (health.go)

	closeOnce sync.Once
}

var _ outbox.Sink = (*Sink)(nil)

// maxRecordBytesMax is the largest MaxRecordBytes the client accepts.
const maxRecordBytesMax = 1 << 30

// New creates an idempotent producer (acks from all in-sync replicas)
// and checks that a broker answers within ConnectTimeout. It returns an
// *outbox.ConfigError naming the field when cfg is invalid, and a one-line
// error saying what to check when no broker answers or the brokers refuse
// the credentials. Errors never hold the password. Close the sink when
// done.
func New(ctx context.Context, cfg Config) (*Sink, error) {
	cfg = cfg.WithDefaults()
	brokers, err := cfg.validate()
	if err != nil {
		return nil, err
	}
	if cfg.MaxRecordBytes > maxRecordBytesMax {
		return nil, &outbox.ConfigError{Field: "MaxRecordBytes", Err: fmt.Errorf("is %d: use at most %d", cfg.MaxRecordBytes, maxRecordBytesMax)}
	}
	s := &Sink{
		state:   &brokerState{},
		cfg:     cfg,
		brokers: strings.Join(brokers, ","),
		log:     cfg.Logger.With(slog.String("component", "kafkasink")),
	}
	s.client, err = kgo.NewClient(s.options(brokers)...)
	if err != nil {
		return nil, fmt.Errorf("kafkasink: %s", s.scrub(err.Error()))
	}
	pingCtx, cancel := context.WithTimeout(ctx, cfg.ConnectTimeout)
	defer cancel()
	if err := s.client.Ping(pingCtx); err != nil {
		s.client.Close()
		return nil, s.connectError(err)
	}
	return s, nil
}

// ConnectOptions returns the client options that reach cfg's brokers as
// the sink does (seed brokers, client ID, SASL, TLS, dialer, logging), for
// a consumer that shares the sink's URL conventions (kafkainbox and outbox
// receive --from kafka:// do). The sink's producer settings come along and
// do not affect consuming. It returns an *outbox.ConfigError when cfg is
// invalid.
func ConnectOptions(cfg Config) ([]kgo.Opt, error) {
	cfg = cfg.WithDefaults()
	brokers, err := cfg.validate()
	if err != nil {
		return nil, err
	}
	s := &Sink{state: &brokerState{}, cfg: cfg, brokers: strings.Join(brokers, ","),
		log: cfg.Logger.With(slog.String("component", "kafkasink"))}
	return s.options(brokers), nil
}

// options are the client options for s.cfg.
func (s *Sink) options(brokers []string) []kgo.Opt {
	cfg := s.cfg
	opts := []kgo.Opt{
		kgo.SeedBrokers(brokers...),
		kgo.ClientID(cfg.ClientID),
		// Idempotent writes are the client's default; they need acks from
		// all in-sync replicas, which is also what makes a stored event
		// survive the loss of the partition leader.
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.ProducerBatchMaxBytes(int32(cfg.MaxRecordBytes)),
		kgo.ProducerBatchCompression(codec(cfg.Compression)),
		kgo.ProducerLinger(max(cfg.Linger, 0)), // NoLinger is 0 to the client
		kgo.WithLogger(kgoLogger{s.log}),
		kgo.WithHooks(s.state),
	}
	if cfg.AutoCreateTopics {
		opts = append(opts, kgo.AllowAutoTopicCreation())
	}
	if cfg.DeliveryTimeout > 0 {
		opts = append(opts, kgo.RecordDeliveryTimeout(cfg.DeliveryTimeout))
	}
	switch cfg.SASL {
	case SASLPlain:
		opts = append(opts, kgo.SASL(plain.Auth{User: cfg.User, Pass: cfg.Password}.AsMechanism()))
	case SASLScramSHA256:
		opts = append(opts, kgo.SASL(scram.Auth{User: cfg.User, Pass: cfg.Password}.AsSha256Mechanism()))
	case SASLScramSHA512:
		opts = append(opts, kgo.SASL(scram.Auth{User: cfg.User, Pass: cfg.Password}.AsSha512Mechanism()))
	}
	switch {
	case cfg.Dial != nil:
		opts = append(opts, kgo.Dialer(dialer(cfg.Dial, cfg.TLS)))
	case cfg.TLS != nil:
		opts = append(opts, kgo.DialTLSConfig(cfg.TLS))
	}
	return opts
}

// dialer runs TLS, when configured, over the connections dial returns.
func dialer(dial func(ctx context.Context, network, address string) (net.Conn, error), tlsCfg *tls.Config) func(ctx context.Context, network, address string) (net.Conn, error) {
	if tlsCfg == nil {
		return dial
	}
	return func(ctx context.Context, network, address string) (net.Conn, error) {
		conn, err := dial(ctx, network, address)
		if err != nil {
			return nil, err
		}
		c := tlsCfg.Clone()
		if c.ServerName == "" {
			if host, _, err := net.SplitHostPort(address); err == nil {
				c.ServerName = host
			}
		}
		tc := tls.Client(conn, c)
		if err := tc.HandshakeContext(ctx); err != nil {
			_ = conn.Close()
			return nil, err
		}
		return tc, nil
	}
}

func codec(name string) kgo.CompressionCodec {
	switch name {
	case "gzip":
		return kgo.GzipCompression()
	case "snappy":
		return kgo.SnappyCompression()
	case "lz4":
		return kgo.Lz4Compression()
	case "zstd":
		return kgo.ZstdCompression()
	}
	return kgo.NoCompression()
}

// Close closes the client. Records still waiting for acks fail,
// retryably. Close is idempotent.
func (s *Sink) Close() error {
	s.closeOnce.Do(s.client.Close)
	return nil
}

// String names the sink and its brokers, without credentials.
func (s *Sink) String() string { return "kafkasink(" + s.brokers + ")" }

// LogValue logs the sink's configuration without credentials.
func (s *Sink) LogValue() slog.Value { return s.cfg.LogValue() }

// result is one record's outcome.
type result struct {
	i         int
	partition int32
	err       error
}

// Publish produces every event, then waits for all of their acks, and
// returns one result per event (nil when all were stored). An event whose
// topic is illegal or missing, or whose record is too large, fails
// permanently; broker outages, timeouts and a context that ends are
// retryable.
//
// With outbox.KeyOrdered(ctx), an aggregate's records that go to one topic
// are produced together: they share a key, so a partition, and the
// idempotent producer appends them in order and fails every buffered
// record of the partition after one that fails (franz-go's
// failAllRecords; the broker refuses a later batch whose sequence skips a
// failed one). Their results then say outbox.ErrEarlierEventFailed. The
// two cases where a record fails alone are kept out of a shared pipeline:
// an aggregate's next record that goes to another topic, and the record
// after one that may be too large for a batch (which the client fails
// before buffering it), wait for the previous record's ack (see
// outbox.PublishKeyWaves). A record with no aggregate ID is keyed by its
// aggregate type, so it too has a fixed partition.
func (s *Sink) Publish(ctx context.Context, events []outbox.Event) []error {
	if len(events) == 0 {
		return nil
	}
	errs := make([]error, len(events))
	topics := make([]string, len(events))
	records := make([]*kgo.Record, len(events))
	idx := make([]int, 0, len(events))
	ordered := outbox.KeyOrdered(ctx)
	for i := range events {
		e := &events[i]
		topics[i] = s.cfg.Router.Route(e)
		if err := checkTopic(topics[i]); err != nil {
			errs[i] = outbox.Permanent(fmt.Errorf("kafkasink: event %d: topic %w", e.ID, err))
			continue
		}
		records[i] = newRecord(topics[i], s.cfg.Source, e)
		if ordered && records[i].Key == nil {
			records[i].Key = append([]byte{}, e.AggregateType...) // not nil: a nil key has no fixed partition
		}
		idx = append(idx, i)
	}
	switch {
	case ordered:
		together := func(earlier, later int) bool {
			return topics[earlier] == topics[later] && !s.mayBeTooLarge(records[earlier])
		}
		outbox.PublishKeyWaves(events, errs, together, func(wave []int) { s.produce(ctx, events, topics, records, wave, errs) })
	case len(idx) > 0:
		s.produce(ctx, events, topics, records, idx, errs)
	}
	for _, err := range errs {
		if err != nil {
			return errs
		}
	}
	return nil
}

// mayBeTooLarge reports whether r might not fit in a record batch of
// MaxRecordBytes, which the client fails alone, before buffering: an
// overestimate of its size in a batch of its own, with room to spare for
// the batch header of any protocol version.
func (s *Sink) mayBeTooLarge(r *kgo.Record) bool {
	n := len(r.Key) + len(r.Value) + 64
	for _, h := range r.Headers {
		n += len(h.Key) + len(h.Value) + 10
	}
	return n+4096 > s.cfg.MaxRecordBytes
}

// produce produces the records at idx, waits for their acks and sets their
// results in errs.
func (s *Sink) produce(ctx context.Context, events []outbox.Event, topics []string, records []*kgo.Record, idx []int, errs []error) {
	// Buffered for every record: a promise that runs after Publish
	// returned (its context ended) must not block the client's promise
	// goroutine.
	results := make(chan result, len(idx))
	waiting := make(map[int]bool, len(idx))
	for _, i := range idx {
		if ctx.Err() != nil {
			errs[i] = fmt.Errorf("kafkasink: event %d: not produced: %w", events[i].ID, context.Cause(ctx))
			continue
		}
		waiting[i] = true
		s.client.Produce(ctx, records[i], func(r *kgo.Record, err error) {
			results <- result{i: i, partition: r.Partition, err: err}
		})
	}
	// Failures are explained once all are in: the brokers fail a whole
	// record batch for one record's fault (see sharedFailure).
	var failed []result
	collect := func(r result) {
		delete(waiting, r.i)
		if r.err != nil {
			failed = append(failed, r)
		}
	}
	defer func() {
		shared := batchRefusals(failed, topics)
		for _, r := range failed {
			if n := shared[refusalOf(r, topics)]; n > 1 {
				errs[r.i] = fmt.Errorf("kafkasink: event %d to topic %q: the brokers refused the record batch it was in, with %d other records of partition %d: the fault may be another record's, so this one is retried (an event that fails alone is dead-lettered): %w",
					events[r.i].ID, topics[r.i], n-1, r.partition, r.err)
				continue
			}
			errs[r.i] = s.produceError(ctx, &events[r.i], topics[r.i], r.err)
		}
	}()
wait:
	for len(waiting) > 0 {
		select {
		case r := <-results:
			collect(r)
		case <-ctx.Done():
			break wait
		}
	}
	if len(waiting) > 0 {
		// Outcomes that arrived with the end of ctx still count.
		for drained := false; !drained; {
			select {
			case r := <-results:
				collect(r)
			default:
				drained = true
			}
		}
		for i := range waiting {
			errs[i] = s.produceError(ctx, &events[i], topics[i], errNoAck{cause: context.Cause(ctx)})
		}
	}
}

// kgoLogger passes the client's warnings and errors to slog.
type kgoLogger struct{ log *slog.Logger }

func (kgoLogger) Level() kgo.LogLevel { return kgo.LogLevelWarn }

func (l kgoLogger) Log(level kgo.LogLevel, msg string, keyvals ...any) {
	lvl := slog.LevelWarn
	if level == kgo.LogLevelError {
		lvl = slog.LevelError
	}
	l.log.Log(context.Background(), lvl, msg, keyvals...)
}

// scrub cuts the password out of text from the client library.
func (s *Sink) scrub(text string) string { return sinkurl.Scrub(text, s.cfg.Password) }

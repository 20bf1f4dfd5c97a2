// Package kafkainbox consumes Kafka topics through a consumer group into an
// inbox: each record is handed to a receive function (an inbox.Inbox's
// Handle or Store), and the group's offsets are committed only for records
// whose receive returned, that is whose inbox transaction committed.
//
//	cl, _ := kgo.NewClient(append(kafkainbox.Options("billing", "shop.order"),
//		kgo.SeedBrokers("127.0.0.1:9092"))...)
//	defer cl.Close()
//	in, _ := inbox.New(inbox.Config{Consumer: "billing"})
//	err := kafkainbox.Consume(ctx, cl, kafkainbox.Config{
//		Receive: func(ctx context.Context, m inbox.Message) (inbox.Result, error) {
//			return in.Handle(ctx, pool, m, apply)
//		},
//	})
//
// A record whose transaction failed is received again, after
// Config.RetryDelay, before any later record of its partition: Kafka keeps
// one offset per partition, so a later record is never committed past a
// failed one. A consumer that dies before committing leaves its records to
// the group's next owner of the partition, whose inbox finds the ones
// already stored. The message's key is the record's ce_id and ce_source
// headers, which kafkasink writes (the CloudEvents binary mode); the other
// ce_* headers become Message.Headers, ce_type the event type, ce_time the
// event time and the value the payload.
package kafkainbox

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/inbox"
	"github.com/outboxkit/outbox/sink/kafkasink"
)

// Defaults of Config.
const (
	BatchSizeDefault  = 100
	RetryDelayDefault = time.Second
)

// Config configures Consume.
type Config struct {
	// Receive stores one message and returns once it is committed.
	// Required.
	Receive func(ctx context.Context, msg inbox.Message) (inbox.Result, error)
	// Source is Message.Source for records without a ce_source header.
	// Defaults to "kafka:" and the record's topic.
	Source string
	// BatchSize is the most records one poll takes. Defaults to
	// BatchSizeDefault.
	BatchSize int
	// RetryDelay is the pause before a record whose receive failed is
	// received again. Defaults to RetryDelayDefault.
	RetryDelay time.Duration
	// Logger receives a warning for each record that failed. Defaults to
	// slog.Default().
	Logger *slog.Logger
}

// Options are the client options Consume needs: the consumer group and
// its topics, offsets committed by Consume alone (no autocommit), and no
// rebalance while a polled batch is being received, so a partition never
// moves between a record's commit in the database and the group's commit
// of its offset. Add the brokers and any connection options.
func Options(group string, topics ...string) []kgo.Opt {
	return []kgo.Opt{
		kgo.ConsumerGroup(group),
		kgo.ConsumeTopics(topics...),
		kgo.DisableAutoCommit(),
		kgo.BlockRebalanceOnPoll(),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
	}
}

// Consume polls cl, a client made with Options, and receives each record
// until ctx ends, then returns nil after committing what it received. An
// unrecoverable client error (the client was closed) is returned.
//
// A record that can never be stored (no ce_id, a value that is not JSON)
// is skipped and logged, and its offset committed: Kafka has no
// dead-letter queue of its own.
func Consume(ctx context.Context, cl *kgo.Client, cfg Config) error {
	if cfg.Receive == nil {
		return &outbox.ConfigError{Field: "Receive", Err: errors.New("is nil: pass the function that stores a message, such as an Inbox's Handle")}
	}
	cfg.BatchSize = cmp.Or(cfg.BatchSize, BatchSizeDefault)
	cfg.RetryDelay = cmp.Or(cfg.RetryDelay, RetryDelayDefault)
	log := cmp.Or(cfg.Logger, slog.Default()).With(slog.String("component", "kafkainbox"))
	for {
		fetches := cl.PollRecords(ctx, cfg.BatchSize)
		if fetches.IsClientClosed() {
			return errors.New("kafkainbox: the client was closed")
		}
		fetches.EachError(func(topic string, partition int32, err error) {
			if !errors.Is(err, context.Canceled) {
				log.Warn("fetch failed", "topic", topic, "partition", partition, "error", err.Error())
			}
		})
		var done []*kgo.Record
		fetches.EachRecord(func(r *kgo.Record) {
			if ctx.Err() == nil && receive(ctx, r, cfg, log) {
				done = append(done, r)
			}
		})
		if len(done) > 0 {
			// Not cancelled by a stop: what committed in the database is
			// committed in the group too, or received again as a duplicate.
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			if err := cl.CommitRecords(cctx, done...); err != nil {
				log.Warn("offset commit failed; the records will be received again as duplicates", "error", err.Error())
			}
			cancel()
		}
		cl.AllowRebalance()
		if ctx.Err() != nil {
			return nil //nolint:nilerr // a stop ends consumption cleanly
		}
	}
}

// receive stores r, retrying until it is stored or ctx ends; false when
// ctx ended first, so r and the records after it are not committed.
func receive(ctx context.Context, r *kgo.Record, cfg Config, log *slog.Logger) bool {
	m, err := Message(r, cfg.Source)
	if err != nil {
		log.Warn("record cannot be stored; skipped", "topic", r.Topic, "partition", r.Partition, "offset", r.Offset, "error", err.Error())
		return true
	}
	for {
		_, err := cfg.Receive(context.WithoutCancel(ctx), m)
		if err == nil {
			return true
		}
		var me *inbox.MessageError
		if errors.As(err, &me) {
			log.Warn("record cannot be stored; skipped", "message_id", m.ID, "error", err.Error())
			return true
		}
		log.Warn("record not stored; receiving it again", "message_id", m.ID, "error", err.Error())
		select {
		case <-ctx.Done():
			return false
		case <-time.After(cfg.RetryDelay):
		}
	}
}

// Message reads an inbox message from a record as kafkasink writes it.
// source is used when there is no ce_source header; it defaults to
// "kafka:" and the topic.
func Message(r *kgo.Record, source string) (inbox.Message, error) {
	m := inbox.Message{Headers: make(map[string]string, len(r.Headers)), Payload: r.Value}
	for _, h := range r.Headers {
		name := strings.ToLower(h.Key)
		if attr, ok := strings.CutPrefix(name, "ce_"); ok && attr != "" {
			v := string(h.Value)
			if dec, err := url.PathUnescape(v); err == nil {
				v = dec
			}
			m.Headers[attr] = v
		} else if name == outbox.HeaderTraceParent || name == outbox.HeaderTraceState {
			m.Headers[name] = string(h.Value)
		}
	}
	m.ID = m.Headers["id"]
	m.Source = cmp.Or(m.Headers["source"], source, "kafka:"+r.Topic)
	m.EventType = m.Headers["type"]
	if t, err := time.Parse(time.RFC3339Nano, m.Headers["time"]); err == nil {
		m.Time = t
	}
	if len(r.Value) == 0 {
		m.Payload = nil
	}
	return m, inbox.CheckMessage(m)
}

// Open returns a client for consuming with Consume from a kafka:// URL in
// kafkasink's form (brokers, SASL, TLS and connection options) plus
// topic=NAME (required, several separated by commas) and group=NAME (the
// consumer group, else group), after checking that a broker answers. The
// publishing options (route, source, compression, …) are refused.
func Open(ctx context.Context, rawURL, group string) (*kgo.Client, []string, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, nil, &outbox.ConfigError{Field: "URL", Err: errors.New("is not a URL: use kafka://host:9092?topic=NAME")}
	}
	q := u.Query()
	topics := strings.Split(q.Get("topic"), ",")
	if q.Get("topic") == "" {
		return nil, nil, &outbox.ConfigError{Field: "URL", Err: errors.New("names no topic: add ?topic=NAME, the topic the relay produces to")}
	}
	group = cmp.Or(q.Get("group"), group)
	if group == "" {
		return nil, nil, &outbox.ConfigError{Field: "URL", Err: errors.New("names no consumer group: add &group=NAME")}
	}
	for _, sinkOnly := range []string{"route", "source", "compression", "max_record_bytes", "auto_create_topics", "delivery_timeout"} {
		if q.Has(sinkOnly) {
			return nil, nil, &outbox.ConfigError{Field: "URL", Err: fmt.Errorf("option %s is for publishing: remove it", sinkOnly)}
		}
	}
	q.Del("topic")
	q.Del("group")
	u.RawQuery = q.Encode()
	cfg, err := kafkasink.ConfigFromURL(u.String())
	if err != nil {
		return nil, nil, err
	}
	cfg.ClientID = cmp.Or(cfg.ClientID, "outbox-kafkainbox")
	opts, err := kafkasink.ConnectOptions(cfg)
	if err != nil {
		return nil, nil, err
	}
	cl, err := kgo.NewClient(append(opts, Options(group, topics...)...)...)
	if err != nil {
		return nil, nil, fmt.Errorf("kafkainbox: %w", err)
	}
	pctx, cancel := context.WithTimeout(ctx, cmp.Or(cfg.ConnectTimeout, kafkasink.ConnectTimeoutDefault))
	defer cancel()
	if err := cl.Ping(pctx); err != nil {
		cl.Close()
		return nil, nil, fmt.Errorf("kafkainbox: no broker of %s answered: %w", strings.Join(cfg.Brokers, ","), err)
	}
	return cl, topics, nil
}

// Pending returns the group's lag: over every partition of the topics the
// group consumes, the end offset minus the group's committed offset (the
// partition's start when it committed none), as kadm computes it from one
// DescribeGroups, OffsetFetch and ListOffsets round. cl may be the client
// Consume uses. A group the brokers do not know (nothing joined or
// committed yet) is an error, not 0: its lag is not known.
func Pending(ctx context.Context, cl *kgo.Client, group string) (int64, error) {
	lags, err := kadm.NewClient(cl).Lag(ctx, group)
	if err != nil {
		return 0, fmt.Errorf("kafkainbox: group %s lag: %w", group, err)
	}
	l, ok := lags[group]
	if !ok {
		return 0, fmt.Errorf("kafkainbox: group %s lag: the brokers did not describe the group", group)
	}
	if err := l.Error(); err != nil {
		return 0, fmt.Errorf("kafkainbox: group %s lag: %w", group, err)
	}
	var total int64
	for _, ps := range l.Lag {
		for _, p := range ps {
			if p.Err != nil {
				return 0, fmt.Errorf("kafkainbox: group %s lag of %s[%d]: %w", group, p.Topic, p.Partition, p.Err)
			}
			total += max(p.Lag, 0)
		}
	}
	return total, nil
}

package outboxprom

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/outboxkit/outbox"
)

// BrokerPendingIntervalDefault is how often BrokerPending reads the broker
// when BrokerPendingConfig.Interval is zero.
const BrokerPendingIntervalDefault = 5 * time.Second

// BrokerPendingConfig configures BrokerPending.
type BrokerPendingConfig struct {
	// Registerer is where the gauges are registered. Defaults to a new
	// registry of their own.
	Registerer prometheus.Registerer
	// Consumer is the consumer label: the durable consumer or group name.
	Consumer string
	// Broker is the broker label, such as "nats" or "kafka".
	Broker string
	// Read returns the broker's pending count for the consumer, such as
	// natsinbox.Pending or kafkainbox.Pending. Required.
	Read func(ctx context.Context) (int64, error)
	// Interval is the time between reads. Defaults to
	// BrokerPendingIntervalDefault.
	Interval time.Duration
	// Timeout bounds one read. Defaults to SampleTimeoutDefault.
	Timeout time.Duration
	// Logger receives a warning when a read fails. Defaults to
	// slog.Default().
	Logger *slog.Logger
}

// BrokerPending polls a broker's own count of the messages a consumer has
// not finished and serves it:
//
//	outbox_consumer_broker_pending{consumer,broker}     messages the broker holds for the consumer
//	outbox_consumer_broker_pending_ok{consumer,broker}  1 when the last read succeeded, 0 when it failed
//
// The inbox's own lag (outbox_inbox_unprocessed) counts what was received
// and not processed; this counts what the broker has not had acknowledged
// yet, so a receiver that falls behind its broker shows here first. After
// a failed read the pending series is removed rather than left stale.
type BrokerPending struct {
	cfg BrokerPendingConfig
	ok  prometheus.Gauge
	vec *prometheus.GaugeVec
}

// NewBrokerPending returns a BrokerPending registered on cfg.Registerer.
// Run starts its reads.
func NewBrokerPending(cfg BrokerPendingConfig) (*BrokerPending, error) {
	if cfg.Read == nil {
		return nil, &outbox.ConfigError{Field: "Read", Err: errors.New("is nil: pass the broker's pending read, such as natsinbox.Pending")}
	}
	if cfg.Registerer == nil {
		cfg.Registerer = prometheus.NewRegistry()
	}
	cfg.Interval = cmp.Or(cfg.Interval, BrokerPendingIntervalDefault)
	cfg.Timeout = cmp.Or(cfg.Timeout, SampleTimeoutDefault)
	cfg.Logger = cmp.Or(cfg.Logger, slog.Default())
	if cfg.Interval < 0 || cfg.Timeout < 0 {
		return nil, &outbox.ConfigError{Field: "Interval", Err: fmt.Errorf("interval %v and timeout %v: use positive durations", cfg.Interval, cfg.Timeout)}
	}
	labels := prometheus.Labels{"consumer": cfg.Consumer, "broker": cfg.Broker}
	vec := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "outbox_consumer_broker_pending",
		Help: "Messages the broker holds for the consumer and has not had acknowledged: JetStream's NumPending + NumAckPending, Kafka's group lag (end offsets minus committed offsets)."},
		[]string{"consumer", "broker"})
	ok := prometheus.NewGauge(prometheus.GaugeOpts{Name: "outbox_consumer_broker_pending_ok",
		Help: "1 when the last read of the broker's pending count succeeded, 0 when it failed (outbox_consumer_broker_pending is then missing).", ConstLabels: labels})
	if err := cfg.Registerer.Register(vec); err != nil {
		return nil, fmt.Errorf("outboxprom: register broker pending: %w", err)
	}
	if err := cfg.Registerer.Register(ok); err != nil {
		cfg.Registerer.Unregister(vec)
		return nil, fmt.Errorf("outboxprom: register broker pending: %w", err)
	}
	return &BrokerPending{cfg: cfg, vec: vec, ok: ok}, nil
}

// Run reads the pending count at once and then every Interval until ctx
// ends.
func (p *BrokerPending) Run(ctx context.Context) {
	t := time.NewTicker(p.cfg.Interval)
	defer t.Stop()
	for {
		p.read(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (p *BrokerPending) read(ctx context.Context) {
	rctx, cancel := context.WithTimeout(ctx, p.cfg.Timeout)
	defer cancel()
	n, err := p.cfg.Read(rctx)
	if err != nil {
		if ctx.Err() != nil {
			return
		}
		p.cfg.Logger.Warn("outboxprom: broker pending read failed", slog.String("component", "outboxprom"),
			slog.String("broker", p.cfg.Broker), slog.String("consumer", p.cfg.Consumer), slog.String("error", err.Error()))
		p.vec.Reset()
		p.ok.Set(0)
		return
	}
	labels := prometheus.Labels{"consumer": p.cfg.Consumer, "broker": p.cfg.Broker}
	p.vec.With(labels).Set(float64(n))
	p.ok.Set(1)
}

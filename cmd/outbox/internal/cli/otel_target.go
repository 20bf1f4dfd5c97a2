package cli

import (
	"cmp"

	"github.com/outboxkit/outbox/outboxotel"
	"github.com/outboxkit/outbox/route"
	"github.com/outboxkit/outbox/sink/amqpsink"
	"github.com/outboxkit/outbox/sink/kafkasink"
	"github.com/outboxkit/outbox/sink/mqttsink"
	"github.com/outboxkit/outbox/sink/natssink"
	"github.com/outboxkit/outbox/sink/redissink"
)

// tracingTarget is what the relay's publish spans say about where events
// go: the messaging system and each event's destination, rendered by the
// router the sink uses.
type tracingTarget struct {
	system      string
	router      *route.Router
	destination string // RabbitMQ's exchange
}

// config returns the outboxotel configuration of t.
func (t tracingTarget) config() outboxotel.Config {
	return outboxotel.Config{System: t.system, Router: t.router, Destination: t.destination}
}

// sinkTracingTarget returns the tracing target of the --sink URL raw, whose
// route the --route and --route-rule flags (flagRouter, nil when unset) may
// set. A webhook or stdout sink has no messaging system and no
// destination. raw has been opened as a sink already, so it parses.
func sinkTracingTarget(raw string, flagRouter *route.Router) tracingTarget {
	var t tracingTarget
	var urlRouter *route.Router
	switch sinkSchemeOf(raw) {
	case natssink.Scheme:
		t.system = outboxotel.SystemNATS
		cfg, _ := natssink.ConfigFromURL(raw)
		urlRouter = cfg.Router
	case kafkasink.Scheme:
		t.system = outboxotel.SystemKafka
		cfg, _ := kafkasink.ConfigFromURL(raw)
		urlRouter = cfg.Router
	case "amqp", "amqps":
		t.system = outboxotel.SystemRabbitMQ
		cfg, _ := amqpsink.ConfigFromURL(raw)
		urlRouter, t.destination = cfg.Router, cfg.Exchange
	case "redis", "rediss":
		t.system = outboxotel.SystemRedis
		cfg, _ := redissink.ConfigFromURL(raw)
		urlRouter = cfg.Router
	case "mqtt", "mqtts":
		t.system = outboxotel.SystemMQTT
		cfg, _ := mqttsink.ConfigFromURL(raw)
		urlRouter = cfg.Router
	default:
		return t
	}
	t.router = cmp.Or(flagRouter, urlRouter)
	if t.router == nil {
		t.router, _ = route.New("") // every broker sink's default; it always parses
	}
	return t
}

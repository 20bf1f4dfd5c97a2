// Package redisinbox consumes a Redis stream through a consumer group into
// an inbox: each entry is handed to a receive function (an inbox.Inbox's
// Handle or Store) and acknowledged (XACK) only after that function
// returned, that is after the inbox transaction committed.
//
//	in, _ := inbox.New(inbox.Config{Consumer: "billing"})
//	err := redisinbox.Consume(ctx, redisinbox.Config{
//		Client: rdb, Stream: "order", Group: "billing",
//		Receive: func(ctx context.Context, m inbox.Message) (inbox.Result, error) {
//			return in.Handle(ctx, pool, m, apply)
//		},
//	})
//
// An entry whose transaction failed stays pending and is read again after
// Config.RetryDelay; an entry left pending by a consumer that died is
// claimed (XAUTOCLAIM) once it has been idle for Config.ClaimIdle. The
// message's key is the entry's id and source fields, which redissink
// writes (the outbox event's ID and the CloudEvents source), so an event
// the relay appended twice under two entry IDs is recognized. Its other
// fields become Message.Headers, type the event type, time the event time
// and data the payload.
package redisinbox

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/inbox"
	"github.com/outboxkit/outbox/sink/redissink"
)

// Defaults of Config.
const (
	BatchSizeDefault  = 100
	BlockDefault      = 5 * time.Second
	ClaimIdleDefault  = time.Minute
	RetryDelayDefault = time.Second
)

// Config configures Consume.
type Config struct {
	// Client is the Redis client. Required.
	Client redis.UniversalClient
	// Stream is the stream's key. Required.
	Stream string
	// Group is the consumer group, created (from the stream's start, and
	// the stream with it) when missing. Required.
	Group string
	// Name is this consumer's name in the group. Defaults to the host name
	// and process ID. Give each process its own: a name's pending entries
	// are read again by the next process with that name.
	Name string
	// Receive stores one message and returns once it is committed.
	// Required.
	Receive func(ctx context.Context, msg inbox.Message) (inbox.Result, error)
	// Source is Message.Source for entries without a source field.
	// Defaults to "redis:" and the stream's key.
	Source string
	// BatchSize is the most entries one read takes. Defaults to
	// BatchSizeDefault.
	BatchSize int
	// Block bounds how long one read waits for new entries. Defaults to
	// BlockDefault.
	Block time.Duration
	// ClaimIdle is how long an entry another consumer of the group read
	// and did not acknowledge stays idle before this one claims it (the
	// other one died). Defaults to ClaimIdleDefault.
	ClaimIdle time.Duration
	// RetryDelay is the pause after a failed receive, before the entry is
	// read again. Defaults to RetryDelayDefault.
	RetryDelay time.Duration
	// Logger receives a warning for each entry that failed. Defaults to
	// slog.Default().
	Logger *slog.Logger
}

// Consume reads cfg.Stream as cfg.Name of cfg.Group and receives each
// entry until ctx ends, then returns nil. It first reads again the entries
// this name left pending, then claims the group's entries idle for longer
// than ClaimIdle, then reads new ones, in a loop. An entry that can never
// be stored (no id field, data that is not JSON) is acknowledged and
// logged, since a stream has no dead-letter queue.
func Consume(ctx context.Context, cfg Config) error {
	switch {
	case cfg.Client == nil:
		return &outbox.ConfigError{Field: "Client", Err: errors.New("is nil")}
	case cfg.Stream == "":
		return &outbox.ConfigError{Field: "Stream", Err: errors.New("is empty: name the stream the relay appends to")}
	case cfg.Group == "":
		return &outbox.ConfigError{Field: "Group", Err: errors.New("is empty: name the consumer group, such as the consumer's name")}
	case cfg.Receive == nil:
		return &outbox.ConfigError{Field: "Receive", Err: errors.New("is nil: pass the function that stores a message, such as an Inbox's Handle")}
	}
	if cfg.Name == "" {
		host, _ := os.Hostname()
		cfg.Name = host + "-" + strconv.Itoa(os.Getpid())
	}
	cfg.Source = cmp.Or(cfg.Source, "redis:"+cfg.Stream)
	cfg.BatchSize = cmp.Or(cfg.BatchSize, BatchSizeDefault)
	cfg.Block = cmp.Or(cfg.Block, BlockDefault)
	cfg.ClaimIdle = cmp.Or(cfg.ClaimIdle, ClaimIdleDefault)
	cfg.RetryDelay = cmp.Or(cfg.RetryDelay, RetryDelayDefault)
	log := cmp.Or(cfg.Logger, slog.Default()).With(slog.String("component", "redisinbox"))
	c := &consumer{cfg: cfg, log: log}

	err := cfg.Client.XGroupCreateMkStream(ctx, cfg.Stream, cfg.Group, "0").Err()
	if err != nil && !strings.HasPrefix(err.Error(), "BUSYGROUP") {
		return fmt.Errorf("redisinbox: create group %s on %s: %w", cfg.Group, cfg.Stream, err)
	}
	ownPending := true // after a start and after a failure: read this name's pending entries first
	for ctx.Err() == nil {
		var (
			entries []redis.XMessage
			err     error
		)
		if ownPending {
			entries, err = c.read(ctx, "0")
			if err == nil && len(entries) == 0 {
				ownPending = false
				entries, err = c.claim(ctx)
			}
		} else if entries, err = c.claim(ctx); err == nil && len(entries) == 0 {
			entries, err = c.read(ctx, ">")
		}
		if err != nil {
			if ctx.Err() == nil {
				log.Warn("read failed; trying again", "error", err.Error())
				c.pause(ctx)
			}
			continue
		}
		for _, e := range entries {
			if !c.receive(ctx, e) {
				ownPending = true // read it again, after a pause
				c.pause(ctx)
				break
			}
		}
	}
	return nil
}

type consumer struct {
	cfg Config
	log *slog.Logger
}

func (c *consumer) pause(ctx context.Context) {
	select {
	case <-ctx.Done():
	case <-time.After(c.cfg.RetryDelay):
	}
}

// read reads entries from id: "0" for this name's pending ones, ">" for
// new ones (blocking up to Block).
func (c *consumer) read(ctx context.Context, id string) ([]redis.XMessage, error) {
	args := &redis.XReadGroupArgs{Group: c.cfg.Group, Consumer: c.cfg.Name, Streams: []string{c.cfg.Stream, id}, Count: int64(c.cfg.BatchSize)}
	if id == ">" {
		args.Block = c.cfg.Block
	}
	res, err := c.cfg.Client.XReadGroup(ctx, args).Result()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	if err != nil || len(res) == 0 {
		return nil, err
	}
	return res[0].Messages, nil
}

// claim takes over entries other consumers left idle for ClaimIdle.
func (c *consumer) claim(ctx context.Context) ([]redis.XMessage, error) {
	msgs, _, err := c.cfg.Client.XAutoClaim(ctx, &redis.XAutoClaimArgs{Stream: c.cfg.Stream, Group: c.cfg.Group,
		Consumer: c.cfg.Name, MinIdle: c.cfg.ClaimIdle, Start: "0-0", Count: int64(c.cfg.BatchSize)}).Result()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	return msgs, err
}

// receive stores one entry and acknowledges it; false when it stays
// pending to be read again.
func (c *consumer) receive(ctx context.Context, e redis.XMessage) bool {
	m, err := Message(e.Values, c.cfg.Source)
	if err == nil {
		// Not cancelled by a stop: a commit is not cut half way, and the
		// ack follows it.
		_, err = c.cfg.Receive(context.WithoutCancel(ctx), m)
	}
	if err != nil {
		var me *inbox.MessageError
		if !errors.As(err, &me) {
			c.log.Warn("entry not stored; it will be read again", "entry", e.ID, "error", err.Error())
			return false
		}
		c.log.Warn("entry cannot be stored; acknowledged without effect", "entry", e.ID, "error", err.Error())
	}
	ackCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := c.cfg.Client.XAck(ackCtx, c.cfg.Stream, c.cfg.Group, e.ID).Err(); err != nil {
		c.log.Warn("XACK failed; the entry will be read again as a duplicate", "entry", e.ID, "error", err.Error())
	}
	return true
}

// Message reads an inbox message from a stream entry's fields as
// redissink writes them. source is used when there is no source field.
func Message(values map[string]any, source string) (inbox.Message, error) {
	m := inbox.Message{Headers: make(map[string]string, len(values))}
	for k, v := range values {
		s, ok := v.(string)
		if !ok {
			continue
		}
		if k == "data" {
			m.Payload = []byte(s)
			continue
		}
		m.Headers[k] = s
	}
	m.ID = m.Headers["id"]
	m.Source = cmp.Or(m.Headers["source"], source)
	m.EventType = m.Headers["type"]
	if t, err := time.Parse(time.RFC3339Nano, m.Headers["time"]); err == nil {
		m.Time = t
	}
	return m, inbox.CheckMessage(m)
}

// Source is a Redis connection and stream opened from a redis:// URL.
type Source struct {
	// Client is the connected client.
	Client redis.UniversalClient
	// Stream is the stream's key.
	Stream string
	sink   *redissink.Sink
}

// Close closes the connection.
func (s *Source) Close() error { return s.sink.Close() }

// Open connects with a redis:// or rediss:// URL in redissink's form
// (credentials, database, tls_* options) plus stream=KEY, the stream to
// read, which is required. The sink-only options (route, maxlen,
// maxlen_exact, source) are refused.
func Open(ctx context.Context, rawURL string) (*Source, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, &outbox.ConfigError{Field: "URL", Err: errors.New("is not a URL: use redis://host:6379/0?stream=KEY")}
	}
	q := u.Query()
	stream := q.Get("stream")
	if stream == "" {
		return nil, &outbox.ConfigError{Field: "URL", Err: errors.New("names no stream: add ?stream=KEY, the stream the relay appends to")}
	}
	for _, sinkOnly := range []string{"route", "maxlen", "maxlen_exact", "source"} {
		if q.Has(sinkOnly) {
			return nil, &outbox.ConfigError{Field: "URL", Err: fmt.Errorf("option %s is for publishing: remove it", sinkOnly)}
		}
	}
	q.Del("stream")
	u.RawQuery = q.Encode()
	cfg, err := redissink.ConfigFromURL(u.String())
	if err != nil {
		return nil, err
	}
	sink, err := redissink.New(ctx, cfg)
	if err != nil {
		return nil, err
	}
	return &Source{Client: sink.Client(), Stream: stream, sink: sink}, nil
}

package cli

import (
	"cmp"
	"context"
	"crypto/tls"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/spf13/cobra"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/cmd/outbox/internal/dburl"
	"github.com/outboxkit/outbox/inbox"
	"github.com/outboxkit/outbox/inbox/amqpinbox"
	"github.com/outboxkit/outbox/inbox/kafkainbox"
	"github.com/outboxkit/outbox/inbox/mqttinbox"
	"github.com/outboxkit/outbox/inbox/natsinbox"
	"github.com/outboxkit/outbox/inbox/redisinbox"
	"github.com/outboxkit/outbox/outboxmigrate"
	"github.com/outboxkit/outbox/outboxprom"
)

// receiveAddrDefault keeps the receiver on the local machine unless told.
const receiveAddrDefault = "127.0.0.1:8090"

// Timeouts of the receiver: a request's store is bounded so a database
// that hangs answers 503 (the sender retries) instead of holding the
// request; SIGTERM lets requests in flight finish for receiveDrainTimeout.
const (
	receiveStoreTimeout = 15 * time.Second
	receiveDrainTimeout = 30 * time.Second
)

type receiveFlags struct {
	addr        string
	consumer    string
	secret      string
	source      string
	maxBody     int64
	tolerance   time.Duration
	tlsCert     string
	tlsKey      string
	metricsAddr string
	from        string
}

func (a *app) receiveCommand() *cobra.Command {
	var rf receiveFlags
	cmd := &cobra.Command{
		Use:   "receive --addr ADDR [--consumer NAME] [--webhook-secret S]",
		Short: "Receive webhooks into the inbox, each message once",
		Long: `receive is the consumer side's mirror of outbox relay: an HTTP endpoint (any
path) for the webhook sink of another service's relay. It stores each message
once per consumer in inbox_messages (create it with outbox migrate --inbox)
and answers 2xx only after the row committed, so a message the relay saw
acknowledged is stored; a repeated message (the same webhook-id or ce-id from
the same ce-source) answers 200 and stores nothing.

The application, in any language, takes the rows with plain SQL (see
docs/consumers.md):

  BEGIN;
  SELECT source, message_id, event_type, payload FROM inbox_messages
  WHERE consumer = 'billing' AND processed_at IS NULL
  ORDER BY received_at LIMIT 100 FOR UPDATE SKIP LOCKED;
  -- apply each message's effect, then (IDs repeat across sources):
  UPDATE inbox_messages SET processed_at = now()
  WHERE consumer = 'billing' AND (source, message_id) IN (...);
  COMMIT;

With --webhook-secret (or $` + EnvWebhookSecret + `), the relay's own secret,
every request must carry a valid Standard Webhooks signature whose timestamp
lies within --tolerance of now; others get 401. Without a secret it listens
on loopback only. Bodies over --max-body-bytes get 413, bodies that are not
JSON 400; when the database fails the request gets 503 and nothing is stored,
and the relay retries it.

With --from nats://host:4222?stream=NAME it consumes that JetStream stream
through a durable pull consumer (named by consumer= in the URL, else
--consumer; created when missing) instead of serving webhooks, and acks each
message only after its row committed; the URL takes natssink's connection
options (credentials, tls_*, creds). With --from redis://host:6379/0?stream=KEY
it reads that Redis stream through the consumer group --consumer (created
from the stream's start when missing) under the host's name, acks (XACK)
after the commit, and claims entries a receiver on another host left pending
for a minute. With --from amqp://host:5672/?queue=NAME it consumes that
RabbitMQ queue with manual acks, with --from kafka://host:9092?topic=NAME it
joins the consumer group --consumer and commits offsets after the commit, and
with --from mqtt://host:1883?topic=FILTER it subscribes at QoS 1 and sends
each PUBACK after the commit. From NATS and Kafka it reads the broker's own
pending count for the consumer every 5s and records it in inbox_consumers
(inbox migration 002), where outbox stats and the dashboard show it; on an
inbox migrated before that it warns once and keeps receiving.

It serves TLS with --tls-cert and --tls-key, and Prometheus metrics with
--metrics-addr. It stops gracefully on SIGINT or SIGTERM: it stops accepting,
lets requests in flight commit and answer, and exits 0.`,
		Example: "  outbox migrate --inbox\n  OUTBOX_WEBHOOK_SECRET=whsec_… outbox receive --addr :8090 --consumer billing\n  outbox receive --from 'nats://127.0.0.1:4222?stream=ORDERS' --consumer billing",
		Args:    cobra.NoArgs,
		RunE: run(func(cmd *cobra.Command, _ []string) error {
			if rf.from != "" {
				for _, name := range []string{"addr", "webhook-secret", "tolerance", "max-body-bytes", "source", "tls-cert", "tls-key"} {
					if cmd.Flags().Changed(name) {
						return usagef("--%s is for webhooks: with --from, outbox receive consumes the broker and serves no endpoint", name)
					}
				}
				return a.receiveFrom(cmd.Context(), rf)
			}
			return a.receive(cmd.Context(), rf)
		}),
	}
	f := cmd.Flags()
	f.StringVar(&rf.addr, "addr", receiveAddrDefault, "address to listen on; other than loopback, --webhook-secret is required")
	f.StringVar(&rf.consumer, "consumer", inbox.ConsumerDefault, "consumer name the messages are stored under; each consumer gets every message once")
	f.StringVar(&rf.secret, "webhook-secret", "", "Standard Webhooks secret the sender signs with, as given to outbox relay (default $"+EnvWebhookSecret+")")
	f.StringVar(&rf.source, "source", inbox.WebhookSourceDefault, "source stored for requests without a ce-source header; with the message ID it is the dedup key")
	f.Int64Var(&rf.maxBody, "max-body-bytes", inbox.MaxBodyBytesDefault, "largest request body accepted; larger ones get 413")
	f.DurationVar(&rf.tolerance, "tolerance", inbox.ToleranceDefault, "how far a signed request's webhook-timestamp may lie from now; older ones are refused as replays")
	f.StringVar(&rf.tlsCert, "tls-cert", "", "serve HTTPS with this PEM certificate (chain) file; needs --tls-key")
	f.StringVar(&rf.tlsKey, "tls-key", "", "PEM private key file of --tls-cert")
	f.StringVar(&rf.from, "from", "", "consume a broker instead of serving webhooks: nats://host:4222?stream=NAME[&consumer=DURABLE], redis://host:6379/0?stream=KEY, amqp://host:5672/?queue=NAME, kafka://host:9092?topic=NAME or mqtt://host:1883?topic=FILTER, with the sinks' URL options (the durable consumer or the consumer group defaults to --consumer)")
	f.StringVar(&rf.metricsAddr, "metrics-addr", "", "serve Prometheus metrics on /metrics, liveness on /healthz and readiness on /readyz at this host:port, such as :9465")
	return cmd
}

func (a *app) inboxCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "inbox",
		Short: "Maintain the consumer side's inbox_messages table",
		Args:  groupArgs,
		RunE:  groupRun,
	}
	cmd.AddCommand(a.inboxPurgeCommand())
	return cmd
}

func (a *app) inboxPurgeCommand() *cobra.Command {
	var (
		olderThan string
		consumer  string
		batchSize int
	)
	cmd := &cobra.Command{
		Use:   "purge --older-than DURATION",
		Short: "Delete inbox messages processed longer ago than a duration",
		Long: `purge deletes processed inbox messages (processed_at set) older than
--older-than, in batches; unprocessed messages are never deleted.

The age is the dedup window: a message delivered again after its row was
purged is no longer known and is stored (and handled) again. Keep it longer
than any sender may redeliver: the relay's retries and backoff, a broker's
retention, a replay an operator may start.

DURATION is a Go duration (36h, 90m) or a number of days (7d, 1.5d).`,
		Example: "  outbox inbox purge --older-than 14d\n  outbox inbox purge --older-than 30d --consumer billing",
		Args:    cobra.NoArgs,
		RunE: run(func(cmd *cobra.Command, _ []string) error {
			if olderThan == "" {
				return usagef("missing --older-than: say how long ago the messages to delete must have been processed, such as 14d")
			}
			age, err := parseDuration(olderThan)
			if err != nil || age <= 0 {
				return usagef("invalid --older-than %q: use a positive duration such as 14d, 36h or 90m", olderThan)
			}
			if batchSize < 1 {
				return usagef("invalid --batch-size %d: use a positive number", batchSize)
			}
			db, closer, _, err := a.openDatabase(cmd.Context())
			if err != nil {
				return err
			}
			defer func() { _ = closer.Close() }()
			n, err := inbox.Purge(cmd.Context(), db, inbox.PurgeConfig{Schema: a.schema, Consumer: consumer, OlderThan: age, BatchSize: batchSize})
			if err != nil {
				return fmt.Errorf("purge the inbox (%d messages deleted before the error): %w", n, err)
			}
			who := "every consumer"
			if consumer != "" {
				who = "consumer " + consumer
			}
			a.stdout.printf("purged %d inbox messages of %s processed more than %s ago\n", n, who, olderThan)
			return nil
		}),
	}
	f := cmd.Flags()
	f.StringVar(&olderThan, "older-than", "", "delete messages processed longer ago than this, such as 14d (required)")
	f.StringVar(&consumer, "consumer", "", "purge only this consumer's messages (default every consumer)")
	f.IntVar(&batchSize, "batch-size", inbox.PurgeBatchSizeDefault, "rows deleted per batch")
	return cmd
}

// check validates the flags before anything connects.
func (rf *receiveFlags) check(a *app) error {
	host, port, err := net.SplitHostPort(rf.addr)
	if err != nil || port == "" {
		return usagef("invalid --addr %q: use host:port, such as 127.0.0.1:8090 or :8090", rf.addr)
	}
	rf.secret = envDefault(rf.secret, EnvWebhookSecret)
	a.redact.add(rf.secret)
	if rf.secret == "" && !isLoopback(host) {
		where := host
		if where == "" {
			where = "every interface"
		}
		return usagef("refusing to receive unsigned webhooks on %s: pass --webhook-secret (or $%s), the secret the sending relay signs with, or listen on 127.0.0.1", where, EnvWebhookSecret)
	}
	if rf.consumer == "" || len(rf.consumer) > inbox.MaxConsumerLen {
		return usagef("invalid --consumer %q: give a name of 1 to %d bytes, such as billing", clip(rf.consumer), inbox.MaxConsumerLen)
	}
	if rf.maxBody < 1 {
		return usagef("invalid --max-body-bytes %d: use a positive number of bytes", rf.maxBody)
	}
	if rf.tolerance <= 0 {
		return usagef("invalid --tolerance %s: use a positive duration such as 5m", rf.tolerance)
	}
	if (rf.tlsCert == "") != (rf.tlsKey == "") {
		return usagef("--tls-cert and --tls-key go together: pass both files, or neither for plain HTTP")
	}
	if _, err := inbox.SecretKey(rf.secret); err != nil {
		return usagef("invalid --webhook-secret: %v", err)
	}
	o := observability{metricsAddr: rf.metricsAddr}
	return o.check(a.redact, true)
}

// receive serves the webhook endpoint until ctx ends.
func (a *app) receive(ctx context.Context, rf receiveFlags) error {
	if err := rf.check(a); err != nil {
		return err
	}
	var tlsCfg *tls.Config
	if rf.tlsCert != "" {
		cert, err := tls.LoadX509KeyPair(rf.tlsCert, rf.tlsKey)
		if err != nil {
			return usagef("invalid --tls-cert/--tls-key: %v", err)
		}
		tlsCfg = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	}
	st, _, done, err := a.receiveStore(ctx, rf)
	if err != nil {
		return err
	}
	defer done()
	h, err := inbox.NewWebhookHandler(inbox.WebhookConfig{
		Secret: rf.secret, Tolerance: rf.tolerance, MaxBodyBytes: rf.maxBody, Source: rf.source, Logger: a.logger,
		Receive: st.one, ReceiveBatch: st.batch,
	})
	if err != nil {
		return usagef("%v", err)
	}
	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", rf.addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w (is another process serving it?)", rf.addr, err)
	}
	srv := &http.Server{
		Handler:           h,
		TLSConfig:         tlsCfg,
		ReadHeaderTimeout: adminReadHeaderTimeout,
		ReadTimeout:       adminReadTimeout,
		WriteTimeout:      receiveStoreTimeout + adminReadTimeout,
		IdleTimeout:       adminIdleTimeout,
		ErrorLog:          slog.NewLogLogger(a.logger.Handler(), slog.LevelWarn),
		// Stores in flight finish after SIGTERM: the server's Shutdown
		// waits for them, and their context must not end before.
		BaseContext: func(net.Listener) context.Context { return context.WithoutCancel(ctx) },
	}
	served := make(chan error, 1)
	scheme := "http"
	if tlsCfg != nil {
		scheme = "https"
		go func() { served <- srv.ServeTLS(ln, "", "") }()
	} else {
		go func() { served <- srv.Serve(ln) }()
	}
	a.logger.Info("receiving webhooks", "url", scheme+"://"+ln.Addr().String()+"/", "consumer", rf.consumer,
		"schema", a.schema, "signed", rf.secret != "")

	var serveErr error
	select {
	case serveErr = <-served:
	case <-ctx.Done():
		a.logger.Info("receiver stopping: finishing requests in flight")
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), receiveDrainTimeout)
		defer cancel()
		if err := srv.Shutdown(sctx); err != nil {
			a.logger.Warn("requests still running at shutdown were cut; their senders retry them", "error", err.Error())
		}
		serveErr = <-served
	}
	if errors.Is(serveErr, http.ErrServerClosed) {
		a.logger.Info("receiver stopped")
		return nil
	}
	return serveErr
}

// dialectOf is the inbox dialect of the database kind the URL named.
func dialectOf(kind dburl.Kind) outbox.Dialect {
	switch kind {
	case dburl.KindSQLite:
		return outbox.DialectSQLite
	case dburl.KindMySQL, dburl.KindMariaDB:
		return outbox.DialectMySQL
	}
	return outbox.DialectPostgres
}

// receiveStores store messages unprocessed, committed when they return,
// each call bounded by receiveStoreTimeout: one message, or several all
// or none in one round trip (PostgreSQL) or one transaction.
type receiveStores struct {
	one   func(context.Context, inbox.Message) (inbox.Result, error)
	batch func(context.Context, []inbox.Message) ([]inbox.Result, error)
	// report records the broker's pending count for outbox stats.
	report func(ctx context.Context, broker string, pending int64, interval time.Duration)
}

// receiveStore opens the database, checks it has the inbox, starts the
// metrics server when --metrics-addr is set, and returns the functions that
// store messages, the metrics server
// (nil without --metrics-addr) and done, which stops the metrics server and
// then closes the database. Call done once, after the last store returned;
// on an error, what was opened is already closed.
func (a *app) receiveStore(ctx context.Context, rf receiveFlags) (st receiveStores, metrics *receiveMetrics, done func(), err error) {
	db, closer, kind, err := a.openDatabase(ctx)
	if err != nil {
		return receiveStores{}, nil, nil, err
	}
	// A local, not the result done: a failing return sets done to nil
	// before the deferred cleanup runs.
	closeAll := func() {
		metrics.stop()
		_ = closer.Close()
	}
	defer func() {
		if err != nil {
			closeAll()
		}
	}()
	if err = a.checkInbox(ctx, db); err != nil {
		return receiveStores{}, nil, nil, err
	}
	cfg := inbox.Config{Schema: a.schema, Consumer: rf.consumer, Dialect: dialectOf(kind)}
	if rf.metricsAddr != "" {
		if metrics, err = a.serveReceiveMetrics(ctx, rf, db); err != nil {
			return receiveStores{}, nil, nil, err
		}
		cfg.Hooks = append(cfg.Hooks, metrics.m)
	}
	in, err := inbox.New(cfg)
	if err != nil {
		return receiveStores{}, nil, nil, err
	}
	store, err := storeFuncs(in, closer)
	if err != nil {
		return receiveStores{}, nil, nil, err
	}
	debug := func(ctx context.Context, m inbox.Message, res inbox.Result) {
		if a.logger.Enabled(ctx, slog.LevelDebug) {
			a.logger.Debug("message received", "message_id", m.ID, "source", m.Source, "duplicate", res.Duplicate)
		}
	}
	st.one = func(ctx context.Context, m inbox.Message) (inbox.Result, error) {
		ctx, cancel := context.WithTimeout(ctx, receiveStoreTimeout)
		defer cancel()
		res, err := store.one(ctx, m)
		if err == nil {
			debug(ctx, m, res)
		}
		return res, err
	}
	st.batch = func(ctx context.Context, ms []inbox.Message) ([]inbox.Result, error) {
		ctx, cancel := context.WithTimeout(ctx, receiveStoreTimeout)
		defer cancel()
		results, err := store.batch(ctx, ms)
		for i := range results {
			debug(ctx, ms[i], results[i])
		}
		return results, err
	}
	st.report = a.brokerReporter(db, rf.consumer)
	return st, metrics, closeAll, nil
}

// storeFuncs store messages unprocessed, committed when they return, on
// the pool openDatabase returned.
func storeFuncs(in *inbox.Inbox, closer any) (receiveStores, error) {
	switch c := closer.(type) {
	case dburl.PgPool:
		return receiveStores{
			one: func(ctx context.Context, m inbox.Message) (inbox.Result, error) { return in.Store(ctx, c.Pool, m) },
			batch: func(ctx context.Context, ms []inbox.Message) ([]inbox.Result, error) {
				return in.StoreBatch(ctx, c.Pool, ms)
			},
		}, nil
	case *sql.DB:
		return receiveStores{
			one: func(ctx context.Context, m inbox.Message) (inbox.Result, error) { return in.StoreSQL(ctx, c, m) },
			batch: func(ctx context.Context, ms []inbox.Message) ([]inbox.Result, error) {
				return in.StoreBatchSQL(ctx, c, ms)
			},
		}, nil
	}
	return receiveStores{}, fmt.Errorf("receive: unexpected database handle %T", closer)
}

// receiveMetrics is the receiver's metrics server.
type receiveMetrics struct {
	m      *outboxprom.InboxMetrics
	reg    *prometheus.Registry
	server *http.Server
	served chan struct{}
}

func (a *app) serveReceiveMetrics(ctx context.Context, rf receiveFlags, db outbox.Database) (*receiveMetrics, error) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m, err := outboxprom.NewInbox(outboxprom.InboxConfig{Registerer: reg, Database: db, Schema: a.schema,
		Consumers: []string{rf.consumer}, Logger: a.logger})
	if err != nil {
		return nil, err
	}
	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", rf.metricsAddr)
	if err != nil {
		return nil, fmt.Errorf("--metrics-addr %s: %w (is another process serving it?)", rf.metricsAddr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorLog: slog.NewLogLogger(a.logger.Handler(), slog.LevelWarn)}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("ok\n"))
	})
	ready := &readiness{redact: a.redact}
	ready.add("database", func(ctx context.Context) error {
		_, err := inbox.Lag(ctx, db, a.schema)
		return err
	})
	mux.Handle("GET /readyz", ready)
	rm := &receiveMetrics{m: m, reg: reg, served: make(chan struct{}),
		server: &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, ErrorLog: slog.NewLogLogger(a.logger.Handler(), slog.LevelWarn)}}
	go func() {
		defer close(rm.served)
		if err := rm.server.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			a.logger.Error("the metrics server stopped", "error", err.Error())
		}
	}()
	a.logger.Info("serving metrics", "addr", ln.Addr().String(), "path", "/metrics")
	return rm, nil
}

// brokerPending reads the broker's pending count with read at once and
// then every outboxprom.BrokerPendingIntervalDefault, until the returned
// stop is called (before the broker's client closes). Each count read is
// recorded in the database (st.report, for outbox stats and the dashboard)
// and, with a metrics server, served as outbox_consumer_broker_pending.
func (a *app) brokerPending(ctx context.Context, metrics *receiveMetrics, st receiveStores, consumer, broker string, read func(context.Context) (int64, error)) (func(), error) {
	cfg := outboxprom.BrokerPendingConfig{Consumer: consumer, Broker: broker, Logger: a.logger,
		Interval: outboxprom.BrokerPendingIntervalDefault,
		Read: func(ctx context.Context) (int64, error) {
			n, err := read(ctx)
			if err == nil {
				st.report(ctx, broker, n, outboxprom.BrokerPendingIntervalDefault)
			}
			return n, err
		}}
	if metrics != nil {
		cfg.Registerer = metrics.reg
	}
	p, err := outboxprom.NewBrokerPending(cfg)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); p.Run(ctx) }()
	return func() { cancel(); <-done }, nil
}

// brokerReporter returns the receiver's st.report: it records the broker's
// pending count in inbox_consumers in one statement. Without the table (an
// inbox migrated before it) it warns once and records nothing more; a
// failed write is logged when writes start failing, not on every read.
func (a *app) brokerReporter(db outbox.Database, consumer string) func(ctx context.Context, broker string, pending int64, interval time.Duration) {
	var off, failing bool // only Run's goroutine calls it
	return func(ctx context.Context, broker string, pending int64, interval time.Duration) {
		if off {
			return
		}
		err := inbox.ReportBroker(ctx, db, a.schema, inbox.BrokerReport{Consumer: consumer, Broker: broker, Pending: pending, Interval: interval})
		switch {
		case err == nil:
			failing = false
		case errors.Is(err, inbox.ErrNoTable):
			off = true
			a.logger.Warn("the inbox has no inbox_consumers table: outbox stats and the dashboard will not show the broker's pending count; run outbox migrate --inbox", "consumer", consumer)
		case ctx.Err() == nil && !failing:
			failing = true
			a.logger.Warn("could not record the broker's pending count", "consumer", consumer, "error", a.redact.String(err.Error()))
		}
	}
}

// stop shuts the metrics server down; on a nil server it does nothing.
func (rm *receiveMetrics) stop() {
	if rm == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := rm.server.Shutdown(ctx); err != nil {
		_ = rm.server.Close()
	}
	<-rm.served
}

// receiveFrom consumes a broker into the inbox until ctx ends.
func (a *app) receiveFrom(ctx context.Context, rf receiveFlags) error {
	registerURLSecrets(a.redact, rf.from)
	scheme, _, _ := strings.Cut(rf.from, "://")
	scheme = strings.ToLower(scheme)
	switch scheme {
	case "nats", "redis", "rediss", "amqp", "amqps", "kafka", "mqtt", "mqtts", "tcp", "ssl":
	default:
		return usagef("invalid --from: %s:// is not supported; use nats://host:4222?stream=NAME (JetStream), redis://host:6379/0?stream=KEY (Redis Streams), amqp://host:5672/?queue=NAME (RabbitMQ), kafka://host:9092?topic=NAME or mqtt://host:1883?topic=FILTER, or receive webhooks without --from", clip(scheme))
	}
	if rf.consumer == "" || len(rf.consumer) > inbox.MaxConsumerLen {
		return usagef("invalid --consumer %q: give a name of 1 to %d bytes, such as billing", clip(rf.consumer), inbox.MaxConsumerLen)
	}
	if err := (&observability{metricsAddr: rf.metricsAddr}).check(a.redact, true); err != nil {
		return err
	}
	// done runs after the broker's client closed (deferred before it):
	// nothing is stored after the database closes.
	st, metrics, done, err := a.receiveStore(ctx, rf)
	if err != nil {
		return err
	}
	defer done()
	receive := st.one
	fromError := func(err error) error {
		var ce *outbox.ConfigError
		if errors.As(err, &ce) {
			return usagef("invalid --from: %v", ce.Err)
		}
		return err
	}
	switch scheme {
	case "nats":
		src, err := natsinbox.Open(ctx, rf.from, rf.consumer)
		if err != nil {
			return fromError(err)
		}
		defer func() { _ = src.Close() }()
		info := src.Consumer.CachedInfo()
		a.logger.Info("receiving from NATS JetStream", "stream", info.Stream, "durable", info.Name, "consumer", rf.consumer, "schema", a.schema)
		stopPending, err := a.brokerPending(ctx, metrics, st, rf.consumer, "nats", func(ctx context.Context) (int64, error) {
			return natsinbox.Pending(ctx, src.Consumer)
		})
		if err != nil {
			return err
		}
		defer stopPending()
		err = natsinbox.Consume(ctx, src.Consumer, natsinbox.Config{Logger: a.logger, Receive: receive})
		if err != nil {
			return err
		}
	case "mqtt", "mqtts", "tcp", "ssl":
		client, topic, err := mqttinbox.Open(rf.from, "outbox-receive-"+rf.consumer)
		if err != nil {
			return fromError(err)
		}
		defer client.Disconnect(250)
		err = mqttinbox.Consume(ctx, client, topic, mqttinbox.Config{Logger: a.logger, Receive: receive,
			OnSubscribed: func() {
				a.logger.Info("receiving from MQTT", "topic", topic, "consumer", rf.consumer, "schema", a.schema)
			}})
		if err != nil {
			return err
		}
	case "kafka":
		cl, topics, err := kafkainbox.Open(ctx, rf.from, rf.consumer)
		if err != nil {
			return fromError(err)
		}
		defer cl.Close()
		a.logger.Info("receiving from Kafka", "topics", strings.Join(topics, ","), "group", rf.consumer, "consumer", rf.consumer, "schema", a.schema)
		stopPending, err := a.brokerPending(ctx, metrics, st, rf.consumer, "kafka", func(ctx context.Context) (int64, error) {
			return kafkainbox.Pending(ctx, cl, rf.consumer)
		})
		if err != nil {
			return err
		}
		defer stopPending()
		if err := kafkainbox.Consume(ctx, cl, kafkainbox.Config{Logger: a.logger, Receive: receive}); err != nil {
			return err
		}
	case "amqp", "amqps":
		if err := a.receiveAMQP(ctx, rf, receive, fromError); err != nil {
			return err
		}
	default:
		src, err := redisinbox.Open(ctx, rf.from)
		if err != nil {
			return fromError(err)
		}
		defer func() { _ = src.Close() }()
		a.logger.Info("receiving from Redis Streams", "stream", src.Stream, "group", rf.consumer, "consumer", rf.consumer, "schema", a.schema)
		// The host name, the same after a restart: a receiver that was
		// killed reads its own pending entries again at once. Two receivers
		// on one host share the name, which the inbox makes safe.
		name, _ := os.Hostname()
		err = redisinbox.Consume(ctx, redisinbox.Config{Client: src.Client, Stream: src.Stream, Group: rf.consumer,
			Name: cmp.Or(name, "outbox-receive"), Logger: a.logger, Receive: receive})
		if err != nil {
			return err
		}
	}
	a.logger.Info("receiver stopped")
	return nil
}

// checkInbox fails when the schema has no inbox_messages.
func (a *app) checkInbox(ctx context.Context, db outbox.Database) error {
	v, err := outboxmigrate.InboxVersion(ctx, db, outboxmigrate.Config{Schema: a.schema})
	if err != nil {
		return fmt.Errorf("read the inbox's version: %w", err)
	}
	if v == 0 {
		hint := "outbox migrate --inbox"
		if a.schema != outbox.SchemaDefault {
			hint += " --schema " + a.schema
		}
		return fmt.Errorf("%w: inbox_messages in schema %q: run %s", outbox.ErrNoTable, a.schema, hint)
	}
	return nil
}

// receiveAMQP consumes the queue --from names, reconnecting after a lost
// connection: the broker requeued what was not acknowledged.
func (a *app) receiveAMQP(ctx context.Context, rf receiveFlags, receive func(context.Context, inbox.Message) (inbox.Result, error), fromError func(error) error) error {
	for first := true; ; first = false {
		src, err := amqpinbox.Open(ctx, rf.from)
		if err != nil {
			if first || ctx.Err() != nil {
				return fromError(err)
			}
			a.logger.Warn("reconnecting to RabbitMQ failed; trying again", "error", err.Error())
		} else {
			if first {
				a.logger.Info("receiving from RabbitMQ", "queue", src.Queue, "consumer", rf.consumer, "schema", a.schema)
			}
			var ch *amqp.Channel
			if ch, err = src.Conn.Channel(); err == nil {
				err = amqpinbox.Consume(ctx, ch, src.Queue, amqpinbox.Config{Logger: a.logger, Receive: receive})
			}
			_ = src.Close()
			if err == nil {
				return nil // ctx ended
			}
			a.logger.Warn("RabbitMQ connection lost; reconnecting", "error", err.Error())
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(time.Second):
		}
	}
}

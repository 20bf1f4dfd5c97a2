package mqttsink

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"
	"github.com/eclipse/paho.mqtt.golang/packets"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/route"
)

// Timeouts the sink sets on paho.
const (
	// writeTimeout bounds one write to the socket; a longer one counts as
	// a lost connection.
	writeTimeout = 10 * time.Second
	// disconnectQuiesce is how long Close lets the DISCONNECT packet go
	// out.
	disconnectQuiesce = 250 // milliseconds
)

// qos is the quality of service of every message: at least once, one
// PUBACK per message. QoS 2 would add a round trip per message for
// exactly-once between the sink and the broker only (a relay may still
// publish an event twice), and brokers bound the QoS 2 messages in flight
// per client: the Eclipse broker drops what an MQTT 3.1.1 client sends beyond its
// max_inflight_messages while still completing the handshake.
const qos = 1

// Sink publishes events to an MQTT broker with QoS 1. It is safe for
// concurrent use.
type Sink struct {
	cfg      Config
	router   *route.Router
	log      *slog.Logger
	endpoint string
	client   mqtt.Client

	lostCh chan error // connection losses reported by paho, for the supervisor

	mu     sync.Mutex
	up     chan struct{} // closed while connected; replaced when the connection is lost
	lost   error         // why the sink is not connected
	closed bool

	stop chan struct{}  // closed by Close
	wg   sync.WaitGroup // the supervisor and every publishing goroutine
}

var _ outbox.Sink = (*Sink)(nil)

// New connects to the broker and returns a sink for cfg, with defaults
// filled in. It returns an *outbox.ConfigError naming the field when cfg is
// invalid, and a one-line error naming the broker (never the password) when
// the broker cannot be reached. Close the sink when done.
func New(ctx context.Context, cfg Config) (*Sink, error) {
	cfg = cfg.WithDefaults()
	broker, err := cfg.validate()
	if err != nil {
		return nil, err
	}
	router := cfg.Router
	if router == nil {
		if router, err = route.New(""); err != nil {
			return nil, err
		}
	}
	s := &Sink{
		cfg:      cfg,
		router:   router,
		endpoint: endpoint(cfg.URL),
		lostCh:   make(chan error, 1),
		up:       make(chan struct{}),
		stop:     make(chan struct{}),
	}
	s.log = cfg.Logger.With(slog.String("component", "mqttsink"), slog.String("broker", s.endpoint))
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("mqttsink: connect to %s: gave up: %w", s.endpoint, context.Cause(ctx))
	}

	opts := mqtt.NewClientOptions().
		SetClientID(cfg.ClientID).
		// The relay retries failed events itself; a persistent session
		// would only replay messages the relay already counts as failed.
		SetCleanSession(true).
		// Reconnects are the supervisor's, so a lost connection fails the
		// messages in flight at once instead of holding them until the
		// next connection.
		SetAutoReconnect(false).
		SetConnectRetry(false).
		SetConnectTimeout(cfg.DialTimeout).
		SetKeepAlive(cfg.KeepAlive).
		SetPingTimeout(min(cfg.KeepAlive, 10*time.Second)).
		SetWriteTimeout(writeTimeout).
		SetOrderMatters(false).
		SetCustomOpenConnectionFn(openConn).
		SetConnectionLostHandler(func(_ mqtt.Client, err error) {
			select {
			case s.lostCh <- err:
			default: // a loss is already waiting for the supervisor
			}
		})
	if u := broker.User; u != nil {
		opts.SetUsername(u.Username())
		if pw, ok := u.Password(); ok {
			opts.SetPassword(pw)
		}
		broker.User = nil
	}
	opts.AddBroker(broker.String())
	if cfg.TLS != nil {
		opts.SetTLSConfig(cfg.TLS.Clone())
	}
	s.client = mqtt.NewClient(opts)
	if err := s.connect(ctx); err != nil {
		return nil, fmt.Errorf("mqttsink: connect to %s: %w", s.endpoint, err)
	}
	close(s.up)
	s.wg.Add(1)
	go s.supervise()
	return s, nil
}

// ConsumerOptions returns client options that reach cfg's broker as the
// sink does (credentials, TLS, timeouts, keepalive) for a QoS 1 consumer
// that shares the sink's URL conventions (mqttinbox and outbox receive
// --from mqtt:// do): a persistent session under cfg.ClientID, which must
// be set and stay the same across restarts, manual acks, and automatic
// reconnects that resume the session. It returns an *outbox.ConfigError
// when cfg is invalid.
func ConsumerOptions(cfg Config) (*mqtt.ClientOptions, error) {
	if cfg.ClientID == "" {
		return nil, &outbox.ConfigError{Field: "ClientID", Err: errors.New("is empty: a consumer's persistent session needs a fixed client ID")}
	}
	cfg = cfg.WithDefaults()
	broker, err := cfg.validate()
	if err != nil {
		return nil, err
	}
	opts := mqtt.NewClientOptions().
		SetClientID(cfg.ClientID).
		SetCleanSession(false).
		SetAutoAckDisabled(true).
		SetAutoReconnect(true).
		SetResumeSubs(true).
		SetConnectTimeout(cfg.DialTimeout).
		SetKeepAlive(cfg.KeepAlive).
		SetPingTimeout(min(cfg.KeepAlive, 10*time.Second)).
		SetWriteTimeout(writeTimeout).
		SetOrderMatters(false)
	if u := broker.User; u != nil {
		opts.SetUsername(u.Username())
		if pw, ok := u.Password(); ok {
			opts.SetPassword(pw)
		}
		broker.User = nil
	}
	opts.AddBroker(broker.String())
	if cfg.TLS != nil {
		opts.SetTLSConfig(cfg.TLS.Clone())
	}
	return opts, nil
}

// connect makes one connection attempt, bounded by DialTimeout. When ctx
// ends first it still waits for paho to finish the attempt (paho's dial
// takes no context) and disconnects, so no goroutine outlives a failed
// New.
func (s *Sink) connect(ctx context.Context) error {
	tok := s.client.Connect()
	select {
	case <-tok.Done():
	case <-ctx.Done():
		<-tok.Done()
		if tok.Error() == nil {
			s.client.Disconnect(0)
		}
		return fmt.Errorf("gave up: %w", context.Cause(ctx))
	}
	if err := tok.Error(); err != nil {
		return connectError(err)
	}
	return nil
}

// connectError explains a failed connection attempt.
func connectError(err error) error {
	switch {
	case errors.Is(err, packets.ErrorRefusedBadUsernameOrPassword) || errors.Is(err, packets.ErrorRefusedNotAuthorised):
		return fmt.Errorf("the broker refused the login (%w): check the user and password in the URL", err)
	case errors.Is(err, packets.ErrorRefusedIDRejected):
		return fmt.Errorf("the broker rejected the client ID (%w): set a client ID it accepts", err)
	case errors.As(err, new(*tls.CertificateVerificationError)):
		return fmt.Errorf("%w (set tls_ca in the URL, or Config.TLS.RootCAs, to the CA that signed the broker's certificate, and tls_server_name if the certificate names another host)", err)
	case tlsRefused(err):
		return fmt.Errorf("%w (the broker ended the TLS handshake: if it requires a client certificate, set tls_cert and tls_key in the URL, or Config.TLS.Certificates, to one signed by a CA it trusts)", err)
	}
	return fmt.Errorf("%w (is the MQTT broker running and reachable?)", err)
}

// tlsRefused reports whether the broker ended the TLS handshake with an
// alert, as one that requires a client certificate does.
func tlsRefused(err error) bool {
	var oe *net.OpError
	return errors.As(err, &oe) && oe.Op == "remote error"
}

// String names the sink and its broker, without credentials.
func (s *Sink) String() string { return "mqttsink(" + s.endpoint + ")" }

// LogValue logs the sink's configuration without credentials.
func (s *Sink) LogValue() slog.Value { return s.cfg.LogValue() }

// Close disconnects and waits for the sink's goroutines. Publish calls
// still running fail with a retryable error. Close is idempotent.
func (s *Sink) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	close(s.stop)
	s.mu.Unlock()
	// The supervisor finishes a connection attempt in progress before it
	// returns, so Disconnect finds no half-open connection.
	s.wg.Wait()
	s.client.Disconnect(disconnectQuiesce)
	return nil
}

// Publish publishes each event with QoS 1 and returns one
// result per event, nil when all were acknowledged. All messages of the
// batch are sent before any acknowledgement is awaited, so a batch costs
// about one round trip. A message unacknowledged when the connection is
// lost or ctx ends gets a retryable error; an event whose topic MQTT
// cannot carry (empty, with a wildcard, starting with $) gets a permanent
// one, and the others are still published.
//
// With outbox.KeyOrdered(ctx), the batch goes in waves (see
// outbox.PublishKeyWaves) with at most one message per aggregate in flight:
// the broker keeps one connection's messages in order, but a publish that
// fails does not stop the ones behind it (a lost connection leaves paho
// with some delivered and some not), so an aggregate's next event is
// published only once the previous one was acknowledged. A batch of
// distinct aggregates is a single wave.
func (s *Sink) Publish(ctx context.Context, events []outbox.Event) []error {
	if len(events) == 0 {
		return nil
	}
	errs := make([]error, len(events))
	msgs := make([]message, len(events))
	idx := make([]int, 0, len(events))
	for i := range events {
		topic, payload, err := s.newPayload(&events[i])
		if err != nil {
			errs[i] = err
			continue
		}
		msgs[i] = message{topic, payload}
		idx = append(idx, i)
	}
	switch {
	case outbox.KeyOrdered(ctx):
		outbox.PublishKeyWaves(events, errs, nil, func(wave []int) { s.publish(ctx, events, msgs, wave, errs) })
	case len(idx) > 0:
		s.publish(ctx, events, msgs, idx, errs)
	}
	for _, err := range errs {
		if err != nil {
			return errs
		}
	}
	return nil
}

// message is one event's MQTT message.
type message struct {
	topic   string
	payload []byte
}

// publish publishes the events at idx, waits for their acknowledgements
// and sets their results in errs.
func (s *Sink) publish(ctx context.Context, events []outbox.Event, msgs []message, idx []int, errs []error) {
	if err := s.connected(ctx); err != nil {
		for _, i := range idx {
			errs[i] = fmt.Errorf("mqttsink: event %d: not sent: %w", events[i].ID, err)
			if !errors.Is(err, errSinkClosed) {
				errs[i] = outbox.Unavailable(errs[i])
			}
		}
		return
	}
	// paho's Publish blocks while its outgoing queue is full (a broker
	// that stopped reading), so the messages are handed over on a
	// goroutine and Publish can return when ctx ends.
	tokens := make(chan mqtt.Token, len(idx))
	if !s.goTracked(func() {
		defer close(tokens)
		for _, i := range idx {
			if ctx.Err() != nil {
				return
			}
			tokens <- s.client.Publish(msgs[i].topic, qos, false, msgs[i].payload)
		}
	}) {
		for _, i := range idx {
			errs[i] = fmt.Errorf("mqttsink: event %d: not sent: %w", events[i].ID, errSinkClosed)
		}
		return
	}
	for _, i := range idx {
		errs[i] = s.await(ctx, &events[i], msgs[i].topic, tokens)
	}
}

// await waits for the next message's acknowledgement.
func (s *Sink) await(ctx context.Context, e *outbox.Event, topic string, tokens <-chan mqtt.Token) error {
	var tok mqtt.Token
	notSent := func() error {
		err := fmt.Errorf("mqttsink: event %d: not sent: %w", e.ID, context.Cause(ctx))
		if !s.isUp() {
			return outbox.Unavailable(err)
		}
		return err
	}
	select {
	case t, ok := <-tokens:
		if !ok { // the publishing goroutine stopped because ctx ended
			return notSent()
		}
		tok = t
	case <-ctx.Done():
		return notSent()
	}
	select {
	case <-tok.Done():
	case <-ctx.Done():
		err := fmt.Errorf("mqttsink: event %d: gave up before the broker acknowledged it: %w", e.ID, context.Cause(ctx))
		if !s.isUp() {
			// The connection is down: the ack waits for it, not for the
			// event.
			return outbox.Unavailable(err)
		}
		return err
	}
	if err := tok.Error(); err != nil {
		// paho fails the tokens of a lost connection with an error of
		// its own text, no sentinel.
		if errors.Is(err, mqtt.ErrNotConnected) || strings.HasPrefix(err.Error(), "connection lost") || !s.isUp() {
			return outbox.Unavailable(fmt.Errorf("mqttsink: event %d: not sent: the connection to %s is down: %w", e.ID, s.endpoint, err))
		}
		return fmt.Errorf("mqttsink: event %d: publish to %q on %s: %w", e.ID, topic, s.endpoint, err)
	}
	return nil
}

// isUp reports whether the sink is connected now.
func (s *Sink) isUp() bool {
	s.mu.Lock()
	up := s.up
	s.mu.Unlock()
	select {
	case <-up:
		// paho knows of a lost connection before the sink's supervisor.
		return s.client.IsConnectionOpen()
	default:
		return false
	}
}

// Health reports whether the sink is connected to the broker, waiting up
// to ReconnectWait (or ctx) for a lost connection to come back; the relay
// probes with it while the sink's circuit is open. It implements
// outbox.HealthChecker.
func (s *Sink) Health(ctx context.Context) error {
	if err := s.connected(ctx); err != nil {
		return outbox.Unavailable(fmt.Errorf("mqttsink: %w", err))
	}
	if !s.client.IsConnectionOpen() {
		return outbox.Unavailable(fmt.Errorf("mqttsink: not connected to %s: the connection was lost; reconnecting in the background", s.endpoint))
	}
	return nil
}

var _ outbox.HealthChecker = (*Sink)(nil)

var errSinkClosed = errors.New("the sink is closed")

// goTracked runs f on a goroutine that Close waits for, unless the sink is
// closed; it reports whether f runs.
func (s *Sink) goTracked(f func()) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.wg.Go(f)
	return true
}

// Package brokertest holds what the sinks' tests share about their real
// brokers: where the broker is (an environment variable or the local one),
// addresses to reach it through a proxy, names no other test uses, opening
// a sink that is closed when the test ends, the checks every broker sink's
// connection errors and Close pass, and an event with every field a
// message carries.
package brokertest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"net"
	"net/url"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/route"
	"github.com/outboxkit/outbox/sinktest"
)

// Broker is a broker the tests run against, given by URL.
type Broker struct {
	// Name names the broker in the message of a test that cannot reach
	// it, such as RabbitMQ.
	Name string
	// Env is the environment variable that holds the broker's URL, such
	// as TEST_AMQP_URL.
	Env string
	// Default is the URL without Env: the local broker.
	Default string
	// Port is the port of a URL without one.
	Port string
}

// URL is Env, or Default.
func (b Broker) URL() string {
	if u := os.Getenv(b.Env); u != "" {
		return u
	}
	return b.Default
}

// Addr is the broker's host:port.
func (b Broker) Addr(t testing.TB) string {
	u, err := url.Parse(b.URL())
	require.NoError(t, err)
	if u.Port() == "" {
		return net.JoinHostPort(u.Hostname(), b.Port)
	}
	return u.Host
}

// URLVia is the broker URL with its host replaced by addr, such as a
// proxy's.
func (b Broker) URLVia(t testing.TB, addr string) string {
	u, err := url.Parse(b.URL())
	require.NoError(t, err)
	u.Host = addr
	return u.String()
}

// Unreachable fails t with a message saying how to start the broker or
// where to point the tests; the tests never skip a missing broker.
func (b Broker) Unreachable(t testing.TB, err error) {
	t.Helper()
	t.Fatalf("%s is not reachable at %s (default %s): %v; start it (scripts/test starts every service; DEVELOPERS.md has the commands) or set %s", b.Name, b.Env, b.Default, err, b.Env)
}

var unsafeChars = regexp.MustCompile(`[^a-z0-9]+`)

// UniqueName is prefix, the test's name in lower-case letters, digits and
// dashes, sep and random hex digits: a broker object name no other test
// or run uses.
func UniqueName(t testing.TB, prefix, sep string) string {
	base := unsafeChars.ReplaceAllString(strings.ToLower(t.Name()), "-")
	if len(base) > 60 {
		base = base[:60]
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	return prefix + base + sep + hex.EncodeToString(b[:])
}

// RandomName is ten random lower-case hex digits.
func RandomName() string {
	var b [5]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Open opens a sink with a context bounded to 10s, failing t on an error,
// and closes it when t ends.
func Open[S interface{ Close() error }](t *testing.T, open func(ctx context.Context) (S, error)) S {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	s, err := open(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.Close()) })
	return s
}

// RequireConnectError checks an error of a New that could not connect: a
// single line that holds every text of want and not the password.
func RequireConnectError(t testing.TB, err error, password string, want ...string) {
	t.Helper()
	require.Error(t, err)
	require.NotContains(t, err.Error(), password)
	require.NotContains(t, err.Error(), "\n")
	for _, w := range want {
		require.Contains(t, err.Error(), w)
	}
}

// PublishAfterClose closes s twice, which must succeed both times, and
// returns the error of publishing one event after that: retryable, since
// another relay may still deliver it, and saying the sink is closed.
func PublishAfterClose(t testing.TB, s interface {
	outbox.Sink
	Close() error
}) error {
	t.Helper()
	require.NoError(t, s.Close())
	require.NoError(t, s.Close(), "Close is idempotent")
	errs := s.Publish(t.Context(), []outbox.Event{sinktest.NewEvent("late", `{}`)})
	require.Len(t, errs, 1)
	require.False(t, outbox.IsPermanent(errs[0]))
	require.ErrorContains(t, errs[0], "closed")
	return errs[0]
}

// FullEvent is an event with every field a broker message carries: ID
// id, and besides the correlation, causation, schema version and trace
// context headers one more header, name: value, that becomes an
// extension attribute.
func FullEvent(id int64, name, value string) outbox.Event {
	return outbox.Event{
		ID: id, EventType: "order.created", AggregateType: "order", AggregateID: "o-42",
		Payload: json.RawMessage(`{"total": 12.50, "items":[1,2]}`),
		Headers: map[string]string{
			outbox.HeaderCorrelationID: "corr-1",
			outbox.HeaderCausationID:   "cause-1",
			outbox.HeaderSchemaVersion: "2",
			outbox.HeaderTraceParent:   "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
			outbox.HeaderTraceState:    "vendor=abc",
			name:                       value,
		},
		CreatedAt: time.Date(2024, 5, 6, 7, 8, 9, 123456789, time.FixedZone("CEST", 2*3600)),
	}
}

// EmptyRoute is a router that routes every event to "", as a template
// does whose header the event lacks.
func EmptyRoute(t testing.TB) *route.Router {
	t.Helper()
	r, err := route.New("{header.nothing}")
	require.NoError(t, err)
	return r
}

// RequirePermanent publishes one event with s and requires its result to
// be a permanent error holding text.
func RequirePermanent(t testing.TB, s outbox.Sink, text string) {
	t.Helper()
	errs := s.Publish(t.Context(), []outbox.Event{sinktest.NewEvent("x", `{}`)})
	require.Len(t, errs, 1)
	require.True(t, outbox.IsPermanent(errs[0]), "%v", errs[0])
	require.ErrorContains(t, errs[0], text)
}

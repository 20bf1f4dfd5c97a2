package main_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/testutil"
)

// getWithHost fetches u naming host in the Host header.
func getWithHost(t *testing.T, u, host string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, u, nil)
	require.NoError(t, err)
	req.Host = host
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	return res.StatusCode, string(body)
}

// A tokenless dashboard on loopback answers the operator's browser and
// scripts (localhost, 127.0.0.1, --allowed-hosts) but not a page whose
// domain was rebound to 127.0.0.1.
func TestAdminRefusesOtherHostsWithoutToken(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.writeN(t, 1)
	_, base := startAdmin(t, testutil.DatabaseURL(), b.schema, nil, "--addr", "127.0.0.1:0", "--allowed-hosts", "outbox.test,ops.test:9999")
	u, err := url.Parse(base)
	require.NoError(t, err)
	port := u.Port()

	for _, host := range []string{"127.0.0.1:" + port, "localhost:" + port, "outbox.test:" + port, "ops.test:9999"} {
		code, body := getWithHost(t, base+"api/stats", host)
		require.Equal(t, http.StatusOK, code, "Host %s: %s", host, body)
	}
	for _, host := range []string{"rebind.evil.example:" + port, "ops.test:" + port} {
		code, body := getWithHost(t, base+"api/events", host)
		require.Equal(t, http.StatusForbidden, code, "Host %s: %s", host, body)
		require.Contains(t, body, "is not allowed")
		code, _ = getWithHost(t, base, host)
		require.Equal(t, http.StatusForbidden, code)
	}
	code, body := getWithHost(t, base+"api/events?type=a%00b", "127.0.0.1:"+port)
	require.Equal(t, http.StatusBadRequest, code, body)
}

func TestSecurityUsageErrors(t *testing.T) {
	t.Parallel()
	db := []string{"--database-url", testutil.DatabaseURL()}
	for _, tt := range []struct {
		name string
		args []string
		want string
	}{
		{"bad allowed host", []string{"admin", "--addr", "127.0.0.1:0", "--allowed-hosts", "http://x/"}, "invalid --allowed-hosts: entry \"http://x/\" is not a host name"},
		{"huge list limit", []string{"events", "list", "--limit", "9223372036854775807"}, "invalid --limit 9223372036854775807: use 1 to 10000, and page with --before-id"},
		{"list limit past the cap", []string{"events", "list", "--limit", "10001"}, "invalid --limit 10001: use 1 to 10000"},
		{"huge bench events", []string{"bench", "--events", "9223372036854775807"}, "invalid --events: is 9223372036854775807: use 1 to 10000000"},
		{"huge bench payload", []string{"bench", "--payload-size", "1099511627776"}, "invalid --payload-size: is 1099511627776: use at most 16777216 bytes"},
		{"huge relay workers", []string{"relay", "--sink", "stdout:", "--workers", "100000000"}, "invalid --workers: is 100000000: use 1 to 1000"},
		{"invalid UTF-8 in list type", []string{"events", "list", "--type", "order\xff"}, `invalid --type "order\xff": it holds a NUL byte or invalid UTF-8`},
		{"blank replay type", []string{"events", "replay", "--status", "processed", "--type", " "}, "invalid --type: it is blank"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			res := run(t, nil, append(db, tt.args...)...)
			requireFail(t, res, 2, tt.want)
			require.NotContains(t, strings.ToLower(res.stderr), "panic")
		})
	}
}

// Stored text printed in a table cannot drive the terminal: escape
// sequences (retitle, clear the screen), C1 controls and newlines that
// would split a row are shown escaped; JSON output escapes them itself.
func TestEventsTextEscapesControlCharacters(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ids := b.write(t, outbox.Message{EventType: "order\x1b]0;pwned\x07", AggregateType: "order", AggregateID: "A\x1b[2J\x1b[H",
		Headers: map[string]string{"tenant": "acme\u009b2J"}, Payload: json.RawMessage(`{"note":"\u009b31m"}`)})
	b.setFailed(t, ids[0], "boom\nID 999 pending fake.row\r\x1b[31m")
	id := fmt.Sprint(ids[0])

	for _, args := range [][]string{{"events", "list"}, {"events", "show", id}} {
		res := outboxCmd(t, b.schema, args...)
		requireOK(t, res)
		for _, bad := range []string{"\x1b", "\x07", "\r", "\u009b"} {
			require.NotContains(t, res.stdout, bad, "%v: %q", args, res.stdout)
		}
		require.Contains(t, res.stdout, `order\x1b]0;pwned\x07`, args)
		require.Contains(t, res.stdout, `A\x1b[2J\x1b[H`, args)
	}
	res := outboxCmd(t, b.schema, "events", "list")
	require.Len(t, strings.Split(strings.TrimSuffix(res.stdout, "\n"), "\n"), 2, "one header and one row: %q", res.stdout)
	res = outboxCmd(t, b.schema, "events", "show", id)
	require.Contains(t, res.stdout, `acme\u009b2J`)

	res = outboxCmd(t, b.schema, "events", "show", "--json", id)
	requireOK(t, res)
	var doc struct {
		EventType string `json:"event_type"`
	}
	require.NoError(t, json.Unmarshal([]byte(res.stdout), &doc))
	require.Equal(t, "order\x1b]0;pwned\x07", doc.EventType, "JSON keeps the stored text, escaped by JSON")
}

// With --webhook-deny-private a webhook URL that leads to the relay's own
// network is never reached: each event is dead-lettered at once with the
// reason; --webhook-allow-network lets a network through.
func TestRelayWebhookDenyPrivate(t *testing.T) {
	t.Parallel()
	b := setup(t)
	srv := newWebhookServer(t)
	ids := b.writeN(t, 3)
	p := start(t, nil, "--database-url", testutil.DatabaseURL(), "--schema", b.schema, "relay", "--poll-interval", "50ms",
		"--sink", srv.URL+"/hooks", "--webhook-deny-private")
	testutil.WaitFor(t, 60*time.Second, "3 events dead-lettered", func() bool {
		require.False(t, p.exited(), "relay exited early; stderr:\n%s", p.stderr.String())
		return b.stats(t).Failed == 3
	})
	require.Equal(t, 0, p.stop(t, syscall.SIGTERM), p.stderr.String())
	require.Zero(t, srv.count(), "the private endpoint was reached")
	e := b.event(t, ids[0])
	require.Equal(t, 1, e.Attempts, "a refused address is not retried")
	require.Contains(t, e.LastError, "refused: it is a loopback address")

	b2 := setup(t)
	b2.writeN(t, 2)
	b2.relayUntilProcessed(t, 2, "", "--sink", srv.URL+"/hooks", "--source", "/cli-test", "--webhook-secret", "whsec_c2VjcmV0LWtleQ==",
		"--webhook-deny-private", "--webhook-allow-network", "127.0.0.0/8,::1")
	require.Equal(t, 2, srv.count())
}

func TestWebhookEgressUsageErrors(t *testing.T) {
	t.Parallel()
	db := []string{"--database-url", testutil.DatabaseURL(), "relay"}
	for _, tt := range []struct {
		name string
		args []string
		want string
	}{
		{"bad network", []string{"--sink", "https://hooks.example.com/", "--webhook-deny-private", "--webhook-allow-network", "10.0.0.1/8"},
			`invalid --webhook-allow-network: "10.0.0.1/8" has host bits set: write the network, 10.0.0.0/8`},
		{"not a network", []string{"--sink", "https://hooks.example.com/", "--webhook-deny-private", "--webhook-allow-network", "intranet"},
			`invalid --webhook-allow-network: "intranet" is not a network`},
		{"allow without deny", []string{"--sink", "https://hooks.example.com/", "--webhook-allow-network", "10.0.0.0/8"},
			"invalid --webhook-allow-network: is set without DenyPrivateNetworks"},
		{"broker sink", []string{"--sink", "nats://127.0.0.1:4222?stream=X", "--webhook-deny-private"},
			"--webhook-deny-private does not apply to the nats sink"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			requireFail(t, run(t, nil, append(db, tt.args...)...), 2, tt.want)
		})
	}
}

package main_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/testutil"
)

// writeMixed commits order.created and user.created events interleaved in
// one transaction, and returns the IDs of each type.
func (b eventsBundle) writeMixed(t *testing.T, orders, users int) (orderIDs, userIDs []int64) {
	t.Helper()
	var msgs []outbox.Message
	for i := range max(orders, users) {
		if i < orders {
			msgs = append(msgs, outbox.Message{EventType: "order.created", AggregateType: "order", AggregateID: fmt.Sprint("o-", i), Payload: map[string]int{"order": i}})
		}
		if i < users {
			msgs = append(msgs, outbox.Message{EventType: "user.created", AggregateType: "user", AggregateID: fmt.Sprint("u-", i), Payload: map[string]int{"user": i}})
		}
	}
	for _, id := range b.write(t, msgs...) {
		if b.event(t, id).EventType == "order.created" {
			orderIDs = append(orderIDs, id)
		} else {
			userIDs = append(userIDs, id)
		}
	}
	return orderIDs, userIDs
}

// stdoutTypes returns the event type of each JSON line the stdout sink
// printed.
func stdoutTypes(t *testing.T, out string) []string {
	t.Helper()
	var types []string
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if line == "" {
			continue
		}
		var ev struct {
			EventType string `json:"event_type"`
		}
		require.NoError(t, json.Unmarshal([]byte(line), &ev), line)
		types = append(types, ev.EventType)
	}
	return types
}

// runUntil starts `outbox relay` with args, waits until cond holds, and
// stops it with SIGTERM.
func runUntil(t *testing.T, env []string, what string, cond func() bool, args ...string) *process {
	t.Helper()
	p := start(t, env, args...)
	testutil.WaitFor(t, 60*time.Second, what, func() bool {
		require.False(t, p.exited(), "relay exited early; stderr:\n%s", p.stderr.String())
		return cond()
	})
	require.Equal(t, 0, p.stop(t, syscall.SIGTERM), "stderr:\n%s", p.stderr.String())
	return p
}

func TestRelayEventTypesLeaveOtherTypesPending(t *testing.T) {
	t.Parallel()
	b := setup(t)
	orders, users := b.writeMixed(t, 3, 2)
	// One claim could take all five events: only the filter in the claim
	// keeps the users out of it.
	p := runUntil(t, nil, "the order events processed", func() bool { return b.stats(t).Processed >= int64(len(orders)) },
		"--database-url", testutil.DatabaseURL(), "--schema", b.schema, "relay", "--sink", "stdout:",
		"--event-types", "order.*, invoice.paid", "--batch-size", "100", "--poll-interval", "50ms")
	s := b.stats(t)
	require.EqualValues(t, len(orders), s.Processed)
	require.EqualValues(t, len(users), s.Pending)
	for _, id := range users {
		e := b.event(t, id)
		require.Equal(t, outbox.StatusPending, e.Status)
		require.Empty(t, e.LockedBy, "never claimed")
	}
	require.Equal(t, []string{"order.created", "order.created", "order.created"}, stdoutTypes(t, p.stdout.String()))
	require.Contains(t, p.stderr.String(), `event_types="[order.* invoice.paid]"`)
}

func TestRelayListenWakesOnWrite(t *testing.T) {
	t.Parallel()
	b := setup(t)
	relayID := "listen-" + b.schema[len(b.schema)-8:]
	// An hour between polls: only a NOTIFY can wake the relay in time.
	p := start(t, nil, "--database-url", testutil.DatabaseURL(), "--schema", b.schema, "relay", "--sink", "stdout:",
		"--listen", "--poll-interval", "1h", "--relay-id", relayID)
	testutil.WaitFor(t, 30*time.Second, "the relay listening", func() bool {
		require.False(t, p.exited(), "relay exited early; stderr:\n%s", p.stderr.String())
		var n int
		require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE application_name = $1 AND query ILIKE 'listen %'`, "outbox-relay:"+relayID).Scan(&n))
		return n > 0
	})
	tx, err := b.pool.Begin(b.ctx)
	require.NoError(t, err)
	w := outbox.NewWriter(outbox.WriterConfig{Schema: b.schema, NotifyInterval: outbox.NotifyIntervalDefault})
	_, err = w.Write(b.ctx, tx, outbox.Message{EventType: "order.created", Payload: map[string]int{"n": 1}})
	require.NoError(t, err)
	require.NoError(t, tx.Commit(b.ctx))
	testutil.WaitFor(t, 30*time.Second, "the event processed after the NOTIFY", func() bool {
		require.False(t, p.exited(), "relay exited early; stderr:\n%s", p.stderr.String())
		return b.stats(t).Processed == 1
	})
	require.Equal(t, 0, p.stop(t, syscall.SIGTERM), "stderr:\n%s", p.stderr.String())
	require.Contains(t, p.stderr.String(), "listen=true")
}

// configFile writes a config file into a temporary directory.
func configFile(t *testing.T, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "relay.yaml")
	require.NoError(t, os.WriteFile(path, []byte(text), 0o600))
	return path
}

func TestRelayConfigFileAndOverrides(t *testing.T) {
	t.Parallel()
	b := setup(t)
	orders, users := b.writeMixed(t, 3, 2)
	relayID := "cfg-" + b.schema[len(b.schema)-8:]
	path := configFile(t, `# a relay for user events
database:
  url: ${CLI_TEST_DATABASE_URL}
  schema: `+b.schema+`
sink:
  url: stdout
relay:
  id: `+relayID+`
  event_types: ["user.*"]
  batch_size: 10
  poll_interval: 50ms
  lease: 5s
  retention: delete
`)
	dbEnv := "CLI_TEST_DATABASE_URL=" + testutil.DatabaseURL()

	// The file alone: user events, deleted once delivered.
	p := runUntil(t, []string{dbEnv}, "the user events delivered and deleted", func() bool {
		var n int
		require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT count(*) FROM `+testutil.Table(b.schema)).Scan(&n))
		return n == len(orders)
	}, "relay", "--config", path)
	require.Equal(t, []string{"user.created", "user.created"}, stdoutTypes(t, p.stdout.String()))
	require.Contains(t, p.stderr.String(), "retention=delete")
	s := b.stats(t)
	require.EqualValues(t, len(orders), s.Pending)
	require.Zero(t, s.Processed)
	require.Len(t, users, 2)

	// Flags win over the file, and $OUTBOX_DATABASE_URL over the file's
	// database, which is unreachable this time.
	bad := configFile(t, strings.Replace(mustRead(t, path), "${CLI_TEST_DATABASE_URL}", "postgres://nobody@127.0.0.1:1/none", 1))
	p = runUntil(t, []string{"OUTBOX_DATABASE_URL=" + testutil.DatabaseURL()}, "the order events processed", func() bool {
		return b.stats(t).Processed == int64(len(orders))
	}, "relay", "--config", bad, "--event-types", "order.*", "--retention", "processed")
	require.Equal(t, []string{"order.created", "order.created", "order.created"}, stdoutTypes(t, p.stdout.String()))
	for _, id := range orders {
		require.Equal(t, relayID, b.event(t, id).LockedBy, "relay.id from the file")
	}
}

func TestRelayConfigFileErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, text string
		args       []string
		want       string
	}{
		{"unknown key", "sink:\n  url: stdout\nrelay:\n  batch_size: 5\n  lease_time: 30s\n", nil,
			`:5: relay: unknown key "lease_time": use one of id, event_types,`},
		{"bad duration", "relay:\n  poll_interval: 10 seconds\n", nil,
			`:2: relay.poll_interval: "10 seconds" is not a positive duration: use a Go duration such as 500ms, 30s or 5m`},
		{"bad template", "sink:\n  url: nats://127.0.0.1:4222\nrouting:\n  default: \"{aggregate}.{event_type}\"\n", nil,
			`:4: routing.default: route template "{aggregate}.{event_type}": at byte 0: unknown placeholder "{aggregate}"`},
		{"bad rule", "routing:\n  rules:\n    - event_type: \"order.*\"\n      topic: \"orders.{event_type\"\n", nil,
			`:4: routing.rules: rule 1: route template "orders.{event_type": unclosed {`},
		{"unset secret", "sink:\n  url: https://hooks.example.com/x\n  webhook_secret: ${CLI_TEST_UNSET_SECRET}\n", nil,
			`:3: sink.webhook_secret: environment variable CLI_TEST_UNSET_SECRET is not set`},
		{"sink timeout from the file", "sink:\n  url: \"stdout:\"\nrelay:\n  lease: 5s\n  sink_timeout: 5s\n", nil,
			`invalid relay.sink_timeout (`},
		{"route for stdout", "sink:\n  url: stdout\nrouting:\n  default: x\n", nil,
			`routing.default (`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			path := configFile(t, tt.text)
			res := run(t, nil, append([]string{"--database-url", testutil.DatabaseURL(), "relay", "--config", path}, tt.args...)...)
			want := path + tt.want
			if strings.HasPrefix(tt.want, "invalid") || strings.HasPrefix(tt.want, "routing") {
				want = tt.want
			}
			requireFail(t, res, 2, want)
			require.Empty(t, res.stdout)
		})
	}
	res := run(t, nil, "--database-url", testutil.DatabaseURL(), "relay", "--config", "/nonexistent/relay.yaml")
	requireFail(t, res, 2, "--config /nonexistent/relay.yaml: no such file or directory")
}

func mustRead(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	return string(data)
}

func TestRelayRoutingUsageErrors(t *testing.T) {
	t.Parallel()
	db := []string{"--database-url", testutil.DatabaseURL(), "relay"}
	tests := []struct {
		name string
		args []string
		want []string
	}{
		{"bad route", []string{"--sink", "nats://127.0.0.1:4222", "--route", "{nope}"}, []string{`invalid --route: route template "{nope}"`}},
		{"rule without =", []string{"--sink", "nats://127.0.0.1:4222", "--route-rule", "order.*"}, []string{`invalid --route-rule "order.*": use PATTERN=TEMPLATE`}},
		{"bad rule template", []string{"--sink", "nats://127.0.0.1:4222", "--route-rule", "order.*={x"}, []string{`invalid --route-rule: route rule 1 (order.*)`, "unclosed {"}},
		{"route for webhook", []string{"--sink", "https://hooks.example.com/x", "--route", "x"}, []string{"--route does not apply to the https sink"}},
		{"secret for broker", []string{"--sink", "redis://127.0.0.1:6379/0", "--webhook-secret", "Sup3rS3cret"}, []string{"--webhook-secret does not apply to the redis sink"}},
		{"route twice", []string{"--sink", "redis://127.0.0.1:6379/0?route=x", "--route", "y"}, []string{"--route and the --sink URL's route option both set the route"}},
		{"empty event type", []string{"--sink", "stdout:", "--event-types", "order.*,,user.*"}, []string{"invalid --event-types: entry 1 is empty"}},
		{"bad retention", []string{"--sink", "stdout:", "--retention", "forever"}, []string{`invalid --retention "forever": use processed, delete or archive`}},
		{"negative byte budget", []string{"--sink", "stdout:", "--max-batch-bytes", "-1"}, []string{"invalid --max-batch-bytes: is -1: use a positive number of bytes, or 0 for no bound"}},
		{"probe cap below the first probe", []string{"--sink", "stdout:", "--probe-interval", "10s", "--probe-interval-max", "5s"}, []string{"invalid --probe-interval-max: is 5s, less than ProbeInterval (10s)"}},
		{"zero probe interval", []string{"--sink", "stdout:", "--probe-interval", "0s"}, []string{"invalid --probe-interval 0s: use a positive value"}},
		{"negative summary interval", []string{"--sink", "stdout:", "--summary-interval", "-1s"}, []string{"invalid --summary-interval -1s: use a positive duration, or 0 for no summary"}},
		{"bad broker option", []string{"--sink", "amqp://guest:Sup3rS3cret@127.0.0.1:5672/?exchang=x"}, []string{`invalid --sink: amqp://127.0.0.1:5672/: unknown option "exchang"`}},
		{"sink from env", []string{}, []string{`unknown sink scheme "bogus"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var env []string
			if tt.name == "sink from env" {
				env = []string{"OUTBOX_SINK=bogus://x:Sup3rS3cret@h"}
			}
			res := run(t, env, append(db, tt.args...)...)
			requireFail(t, res, 2, tt.want...)
			require.NotContains(t, res.stderr, "Sup3rS3cret")
		})
	}
}

func TestRelayBrokerDownExitsOne(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const pw = "BrokerPassw0rd"
	for _, sink := range []string{
		"nats://u:" + pw + "@127.0.0.1:1?connect_timeout=1s",
		"amqp://u:" + pw + "@127.0.0.1:1/",
		"redis://:" + pw + "@127.0.0.1:1/0",
		"mqtt://u:" + pw + "@127.0.0.1:1?connect_timeout=1s",
		"kafka://u:" + pw + "@127.0.0.1:1?sasl=plain&connect_timeout=1s",
	} {
		scheme, _, _ := strings.Cut(sink, ":")
		t.Run(scheme, func(t *testing.T) {
			t.Parallel()
			res := outboxCmd(t, b.schema, "--log-level", "error", "relay", "--sink", sink)
			requireFail(t, res, 1, "sink "+scheme+"://127.0.0.1:1")
			require.NotContains(t, res.stderr, pw)
		})
	}
}

func TestRelayHelpListsSinksAndFlags(t *testing.T) {
	t.Parallel()
	res := run(t, nil, "relay", "--help")
	requireOK(t, res)
	for _, s := range []string{"--config", "--route ", "--route-rule", "--event-types", "--retention", "--listen",
		"nats://", "kafka://", "amqp[s]://", "redis[s]://", "mqtt[s]://", "outbox_topic", `(default "{aggregate_type|events}.{event_type}")`,
		`(default "processed")`, "$OUTBOX_SINK"} {
		require.Contains(t, res.stdout, s)
	}
}

package cli

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/route"
)

// env is a fixed environment for ${NAME} references.
func env(vars map[string]string) func(string) (string, bool) {
	return func(name string) (string, bool) {
		v, ok := vars[name]
		return v, ok
	}
}

// fullConfig sets every key the file may hold.
const fullConfig = `# every key
database:
  url: postgres://relay:${DB_PASSWORD}@db:5432/app
  schema: orders
  pgbouncer: true
  urls: [postgres://db1/app, postgres://db2/app]
sink:
  url: nats://127.0.0.1:4222?stream=ORDERS
  source: /orders
  webhook_secret: ${WEBHOOK_SECRET}
  webhook_ca: /etc/outbox/ca.pem
  webhook_cert: /etc/outbox/client.pem
  webhook_key: ${KEY_DIR}/client-key.pem
  concurrency: 4
  webhook_batch: 10
  webhook_deny_private: true
  webhook_allow_networks: [10.1.0.0/16, 192.168.7.7]
routing:
  default: "app.{event_type}"
  rules:
    - event_type: "order.*"
      topic: "orders.{aggregate_id}"
    - {event_type: "*", topic: "rest"}
relay:
  id: relay-1
  event_types: ["order.*", "user.created"]
  batch_size: 50
  workers: 2
  poll_interval: 250ms
  lease: 20s
  sink_timeout: 5s
  shutdown_timeout: 8s
  db_timeout: 4s
  max_attempts: 7
  backoff_base: 2s
  backoff_max: 1m
  retention: archive
  listen: true
  max_batch_bytes: 67108864
  max_in_flight: 3
  max_in_flight_bytes: 1048576
  purge_after: 7d
  purge_failed_after: 30d
  purge_interval: 30m
  dead_letter_retry: 1h
  dead_letter_retries: 2
  schedule_lease: 20s
  probe_interval: 2s
  probe_interval_max: 1m
  summary_interval: 0s
  heartbeat_interval: 5s
  ordering: aggregate
  ordered_failure: skip
  leases: partitions
  capture: logical
  capture_group: blue
  max_slot_lag: 536870912
observability:
  metrics_addr: ":9464"
  alert_webhook: https://alerts.example.com/hook
  otel: false
  log_level: debug
  log_format: json
tenants:
  schemas: s_*
  query: SELECT schema_name FROM public.tenants
  refresh: 1m
  metrics: aggregate
`

func TestParseConfigFileEveryKey(t *testing.T) {
	t.Parallel()
	cfg, err := parseConfig("relay.yaml", []byte(fullConfig), env(map[string]string{"DB_PASSWORD": "pw$1", "WEBHOOK_SECRET": "whsec", "KEY_DIR": "/run/keys"}), nil)
	require.NoError(t, err)
	require.Len(t, cfg.values, len(fileKeys), "the example sets every key")

	get := func(flag string) fileValue {
		v, ok := cfg.get(flag)
		require.True(t, ok, flag)
		return v
	}
	require.Equal(t, "postgres://relay:pw$1@db:5432/app", get("database-url").str)
	require.Equal(t, "database.url (relay.yaml:3)", get("database-url").origin())
	require.Equal(t, "orders", get("schema").str)
	require.Equal(t, []string{"postgres://db1/app", "postgres://db2/app"}, get("database-urls").list)
	require.Equal(t, "s_*", get("tenant-schemas").str)
	require.Equal(t, time.Minute, get("tenant-refresh").dur)
	require.Equal(t, "whsec", get("webhook-secret").str)
	require.Equal(t, "/etc/outbox/ca.pem", get("webhook-ca").str)
	require.Equal(t, "/etc/outbox/client.pem", get("webhook-cert").str)
	require.Equal(t, "/run/keys/client-key.pem", get("webhook-key").str)
	require.Equal(t, "sink.webhook_key (relay.yaml:13)", get("webhook-key").origin())
	require.Equal(t, 4, get("sink-concurrency").num)
	require.Equal(t, "app.{event_type}", get("route").str)
	require.Equal(t, []route.Rule{{EventType: "order.*", Topic: "orders.{aggregate_id}"}, {EventType: "*", Topic: "rest"}}, get("route-rule").rules)
	require.Equal(t, []string{"order.*", "user.created"}, get("event-types").list)
	require.Equal(t, 50, get("batch-size").num)
	require.Equal(t, 64<<20, get("max-batch-bytes").num)
	require.Equal(t, 3, get("max-in-flight").num)
	require.Equal(t, 1<<20, get("max-in-flight-bytes").num)
	require.Equal(t, 10, get("webhook-batch").num)
	require.Equal(t, 250*time.Millisecond, get("poll-interval").dur)
	require.Equal(t, time.Minute, get("backoff-max").dur)
	require.Equal(t, 4*time.Second, get("db-timeout").dur)
	require.True(t, get("pgbouncer").flag)
	require.Equal(t, "archive", get("retention").str)
	require.True(t, get("listen").flag)
	require.Equal(t, "aggregate", get("ordering").str)
	require.Equal(t, "skip", get("ordered-failure").str)
	require.Equal(t, "partitions", get("leases").str)
	require.Equal(t, "logical", get("capture").str)
	require.Equal(t, "blue", get("capture-group").str)
	require.Equal(t, 536870912, get("max-slot-lag").num)
	require.False(t, get("otel").flag)
	require.Equal(t, "relay.lease (relay.yaml:30)", get("lease").origin())
	require.Equal(t, 7*24*time.Hour, get("purge-after").dur, "days are allowed")
	require.Equal(t, 30*24*time.Hour, get("purge-failed-after").dur)
	require.Equal(t, 30*time.Minute, get("purge-interval").dur)
	require.Equal(t, time.Hour, get("dead-letter-retry").dur)
	require.Equal(t, 2, get("dead-letter-retries").num)
	require.Equal(t, 20*time.Second, get("schedule-lease").dur)
	require.Equal(t, 5*time.Second, get("heartbeat-interval").dur)
	require.True(t, get("webhook-deny-private").flag)
	require.Equal(t, []string{"10.1.0.0/16", "192.168.7.7"}, get("webhook-allow-network").list)
}

func TestParseConfigFileEmpty(t *testing.T) {
	t.Parallel()
	for _, data := range []string{"", "# nothing\n", "---\n", "~\n", "relay:\n"} {
		cfg, err := parseConfig("c.yaml", []byte(data), env(nil), nil)
		require.NoError(t, err, "%q", data)
		require.Empty(t, cfg.values, "%q", data)
	}
	var none *fileConfig
	_, ok := none.get("lease")
	require.False(t, ok)
}

func TestParseConfigFileErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, data string
		want       string // the whole message after "c.yaml:"
	}{
		{"unknown section", "relay:\n  lease: 1s\nrelays:\n  x: 1\n",
			`3: unknown section "relays": use one of database, sink, routing, relay, tenants, observability`},
		{"unknown key", "relay:\n  lease: 30s\n  leese: 1s\n",
			`3: relay: unknown key "leese": use one of id, event_types, batch_size, workers, poll_interval, lease, sink_timeout, shutdown_timeout, db_timeout, max_attempts, backoff_base, backoff_max, retention, listen`},
		{"bad duration", "relay:\n  lease: long\n", `2: relay.lease: "long" is not a positive duration: use a Go duration such as 500ms, 30s or 5m`},
		{"negative duration", "relay:\n  poll_interval: -1s\n", `2: relay.poll_interval: "-1s" is not a positive duration`},
		{"negative summary interval", "relay:\n  summary_interval: -1s\n", `2: relay.summary_interval: "-1s" is not a duration: use a Go duration such as 30s or 5m, or 0 for off`},
		{"zero count", "relay:\n\n  batch_size: 0\n", `3: relay.batch_size: "0" is not a positive whole number`},
		{"bad bool", "relay:\n  listen: sometimes\n", `2: relay.listen: "sometimes" is not a boolean: use true or false`},
		{"bad retention", "relay:\n  retention: forever\n", `2: relay.retention: unknown mode "forever": use processed, delete or archive`},
		{"bad template", "routing:\n  default: \"{nope}.x\"\n", `2: routing.default: route template "{nope}.x": at byte 0: unknown placeholder "{nope}"`},
		{"bad rule template", "routing:\n  rules:\n    - event_type: a\n      topic: \"{x\"\n", `4: routing.rules: rule 1: route template "{x": unclosed {`},
		{"rule without pattern", "routing:\n  rules:\n    - topic: t\n", `3: routing.rules: rule 1 has no event_type`},
		{"rule without topic", "routing:\n  rules:\n    - event_type: a\n", `3: routing.rules: rule 1 has no topic`},
		{"rule unknown key", "routing:\n  rules:\n    - event_type: a\n      topics: t\n", `4: routing.rules: rule 1: unknown key "topics": use event_type and topic`},
		{"rules not a list", "routing:\n  rules: x\n", `2: routing.rules: must be a list of rules`},
		{"empty event type", "relay:\n  event_types: [a, \"\"]\n", `2: relay.event_types: holds an empty pattern: use * to match every type`},
		{"no value", "sink:\n  url:\n", `2: sink.url: has no value: give one, or remove the key to keep the default`},
		{"empty string", "sink:\n  url: \"\"\n", `2: sink.url: is empty`},
		{"list for a scalar", "relay:\n  lease: [1s]\n", `2: relay.lease: must be a single value, not a list`},
		{"section not a mapping", "relay: 5\n", `1: relay: must be a mapping of keys, such as relay.id`},
		{"top level list", "- a\n", `1: the file must be a mapping of sections`},
		{"duplicate key", "relay:\n  lease: 1s\n  lease: 2s\n", `3: relay.lease: given twice (first at line 2): keep one`},
		{"duplicate section", "relay:\n  lease: 1s\nrelay:\n  workers: 2\n", `3: section relay is given twice (first at line 1): merge them`},
		{"unset variable", "sink:\n  webhook_secret: ${NOT_SET}\n", `2: sink.webhook_secret: environment variable NOT_SET is not set: export it, or remove the reference`},
		{"bad variable name", "sink:\n  url: ${1X}\n", `2: sink.url: ${1X} is not a variable name`},
		{"unclosed reference", "sink:\n  url: ab${X\n", `2: sink.url: unclosed ${`},
		{"bad metrics addr", "observability:\n  metrics_addr: nine\n", `2: observability.metrics_addr: "nine" is not host:port`},
		{"bad alert webhook", "observability:\n  alert_webhook: ftp://x\n", `2: observability.alert_webhook:`},
		{"syntax", "relay:\n  lease: 1s\n   workers: 2\n", `3: not valid YAML: mapping values are not allowed in this context`},
		{"two documents", "relay:\n  lease: 1s\n---\nrelay:\n  lease: 2s\n", `3: a second YAML document`},
		{"unclosed flow sequence", "relay:\n  event_types: [a\n", `2: not valid YAML: did not find expected ',' or ']'`},
		{"unclosed flow mapping", "relay:\n  lease: 1s\n  sink: {a: b\n", `3: not valid YAML: did not find expected ',' or '}'`},
		{"tab indent", "relay:\n\tlease: 1s\n", `2: not valid YAML: found character that cannot start any token`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := parseConfig("c.yaml", []byte(tt.data), env(map[string]string{}), nil)
			require.Error(t, err)
			var ue *usageError
			require.True(t, errors.As(err, &ue), "a usage error: exit 2")
			require.True(t, strings.HasPrefix(err.Error(), "c.yaml:"+tt.want), "got %q\nwant prefix %q", err.Error(), "c.yaml:"+tt.want)
			require.NotContains(t, err.Error(), "\n")
		})
	}
}

func TestParseConfigFileNeverQuotesSecrets(t *testing.T) {
	t.Parallel()
	const secret = "S3cr3tValue"
	for _, data := range []string{
		"sink:\n  url: [" + secret + "]\n",
		"database:\n  url: {a: " + secret + "}\n",
		"sink:\n  webhook_secret: " + secret + "${\n",
		"observability:\n  alert_webhook: ftp://u:" + secret + "@h/p?token=" + secret + "\n",
	} {
		_, err := parseConfig("c.yaml", []byte(data), env(nil), nil)
		require.Error(t, err, data)
		require.NotContains(t, err.Error(), secret)
	}
}

func TestExpandEnv(t *testing.T) {
	t.Parallel()
	vars := env(map[string]string{"A": "x", "EMPTY": "", "B_2": "y"})
	for in, want := range map[string]string{
		"plain":           "plain",
		"${A}":            "x",
		"a${A}b${B_2}c":   "axbyc",
		"${EMPTY}":        "",
		"$$":              "$",
		"$${A}":           "${A}",
		"pa$word":         "pa$word",
		"end$":            "end$",
		"$A stays":        "$A stays",
		"${A}${A}$$${A}$": "xx$x$",
	} {
		got, err := expandEnv(in, vars)
		require.NoError(t, err, in)
		require.Equal(t, want, got, in)
	}
}

func TestLoadConfigFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	_, err := readConfigFile(filepath.Join(dir, "missing.yaml"), nil)
	require.ErrorContains(t, err, "missing.yaml: no such file or directory: name a readable YAML file")

	big := filepath.Join(dir, "big.yaml")
	require.NoError(t, os.WriteFile(big, []byte(strings.Repeat("#", configFileMax+1)), 0o600))
	_, err = readConfigFile(big, nil)
	require.ErrorContains(t, err, "larger than")

	ok := filepath.Join(dir, "ok.yaml")
	require.NoError(t, os.WriteFile(ok, []byte("relay:\n  workers: 3\n"), 0o600))
	cfg, err := readConfigFile(ok, nil)
	require.NoError(t, err)
	v, found := cfg.get("workers")
	require.True(t, found)
	require.Equal(t, 3, v.num)
	require.Equal(t, ok+":2", v.where)
}

// TestConfigKeysMatchFlags keeps the file and the flags in step: every key
// stands for a relay (or global) flag.
func TestConfigKeysMatchFlags(t *testing.T) {
	t.Parallel()
	a := &app{stdout: &output{}, redact: &redactor{}}
	root := a.rootCommand()
	relay, _, err := root.Find([]string{"relay"})
	require.NoError(t, err)
	for _, k := range fileKeys {
		if k.flag == "database-urls" {
			// database.urls is --database-url given several times.
			k.flag = "database-url"
		}
		f := relay.Flags().Lookup(k.flag)
		if f == nil {
			f = root.PersistentFlags().Lookup(k.flag)
		}
		require.NotNil(t, f, "config key %s names flag --%s, which does not exist", k.path(), k.flag)
	}
}

func FuzzParseConfigFile(f *testing.F) {
	for _, seed := range []string{
		fullConfig, "", "relay:\n  lease: 1s\n", "a: &x {b: *x}\n", "relay: &r\n  lease: 1s\nsink: *r\n",
		"routing:\n  rules:\n    - {event_type: a, topic: b}\n", "relay:\n  event_types: a,b\n", "sink:\n  url: ${X}$$\n",
		"--- !!map\n? relay\n: lease: 1s\n", "relay:\n  lease: \"\\u0000\"\n",
	} {
		f.Add([]byte(seed))
	}
	lookup := env(map[string]string{"X": "x"})
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := parseConfig("f.yaml", data, lookup, nil)
		if err != nil {
			msg := err.Error()
			var ue *usageError
			if !errors.As(err, &ue) {
				t.Fatalf("not a usage error: %v", err)
			}
			if !strings.HasPrefix(msg, "f.yaml:") || strings.ContainsAny(msg, "\n\r") {
				t.Fatalf("error must be one line starting with the file name: %q", msg)
			}
			return
		}
		for flag, v := range cfg.values {
			if v.key.flag != flag || !strings.HasPrefix(v.where, "f.yaml:") {
				t.Fatalf("value for --%s is filed under %s at %s", flag, v.key.flag, v.where)
			}
			switch v.key.kind {
			case kindPositive:
				if v.num <= 0 {
					t.Fatalf("%s accepted %d", v.key.path(), v.num)
				}
			case kindDuration:
				if v.dur <= 0 {
					t.Fatalf("%s accepted %v", v.key.path(), v.dur)
				}
			case kindDurationOff:
				if v.dur < 0 {
					t.Fatalf("%s accepted %v", v.key.path(), v.dur)
				}
			case kindTemplate:
				if _, err := route.Parse(v.str); err != nil {
					t.Fatalf("%s accepted a bad template: %v", v.key.path(), err)
				}
			case kindRules:
				if _, err := route.New("", v.rules...); err != nil {
					t.Fatalf("%s accepted bad rules: %v", v.key.path(), err)
				}
			}
		}
	})
}

// TestDocsConfigExample parses the complete example of docs/brokers.md, so
// the documentation never shows a file the relay refuses.
func TestDocsConfigExample(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile(filepath.Join("..", "..", "..", "..", "docs", "brokers.md"))
	require.NoError(t, err)
	_, rest, found := strings.Cut(string(doc), "A complete file with every key")
	require.True(t, found, "docs/brokers.md lost its complete config example")
	_, rest, found = strings.Cut(rest, "```yaml\n")
	require.True(t, found)
	example, _, found := strings.Cut(rest, "```")
	require.True(t, found)
	anything := func(name string) (string, bool) {
		if strings.HasSuffix(name, "_URL") {
			return "https://alerts.example.com/outbox", true
		}
		return "x", true
	}
	cfg, err := parseConfig("brokers.md", []byte(example), anything, nil)
	require.NoError(t, err)
	require.NotEmpty(t, cfg.values)
	for _, k := range fileKeys {
		require.Contains(t, example, " "+k.name+":", "the example shows %s", k.path())
		if _, set := cfg.get(k.flag); !set {
			require.Contains(t, example, "# "+k.name+":", "%s is shown commented out", k.path())
		}
	}
}

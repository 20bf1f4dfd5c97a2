package main_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
)

// update rewrites the golden files instead of comparing with them:
//
//	go test ./cmd/outbox -run 'TestHelpGolden|TestJSONGolden' -update
var update = flag.Bool("update", false, "rewrite the golden files under testdata/golden")

// golden compares got with testdata/golden/name, or writes it there with
// -update.
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", "golden", name)
	if *update {
		require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
		require.NoError(t, os.WriteFile(path, []byte(got), 0o644))
		return
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err, "no golden file: run go test ./cmd/outbox -run %s -update", t.Name())
	require.Equal(t, string(want), got, "%s changed: if the change is meant, run go test ./cmd/outbox -run '%s' -update and review the diff", path, t.Name())
}

// availableCommands lists the subcommands a --help output offers, help
// aside.
func availableCommands(help string) []string {
	_, rest, found := strings.Cut(help, "\nAvailable Commands:\n")
	if !found {
		return nil
	}
	block, _, _ := strings.Cut(rest, "\n\n")
	var names []string
	for line := range strings.Lines(block) {
		if f := strings.Fields(line); len(f) > 0 && f[0] != "help" {
			names = append(names, f[0])
		}
	}
	return names
}

// TestHelpGolden keeps the --help of every command, found by walking the
// commands each help lists, in testdata/golden/help.
func TestHelpGolden(t *testing.T) {
	t.Parallel()
	seen := 0
	var walk func(path []string)
	walk = func(path []string) {
		res := run(t, nil, append(path, "--help")...)
		requireOK(t, res)
		name := strings.Join(append([]string{"outbox"}, path...), "_") + ".txt"
		t.Run(name, func(t *testing.T) { golden(t, filepath.Join("help", name), res.stdout) })
		seen++
		for _, sub := range availableCommands(res.stdout) {
			walk(append(slices.Clone(path), sub))
		}
	}
	walk(nil)
	require.Greater(t, seen, 15, "the walk found the commands")
	if !*update {
		// A golden file of a command that no longer exists fails too.
		files, err := filepath.Glob(filepath.Join("testdata", "golden", "help", "*.txt"))
		require.NoError(t, err)
		require.Len(t, files, seen, "testdata/golden/help holds files of removed commands: run -update after deleting them")
	}
}

// object is a decoded JSON object that keeps its keys in the order the
// command printed them.
type object struct {
	keys []string
	vals []any
}

// MarshalJSON prints the keys in their order, without HTML escaping.
func (o *object) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, k := range o.keys {
		if i > 0 {
			b.WriteByte(',')
		}
		if err := encodeRaw(&b, k); err != nil {
			return nil, err
		}
		b.WriteByte(':')
		if err := encodeRaw(&b, o.vals[i]); err != nil {
			return nil, err
		}
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

func encodeRaw(b *bytes.Buffer, v any) error {
	enc := json.NewEncoder(b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return err
	}
	b.Truncate(b.Len() - 1) // Encode's newline
	return nil
}

// decodeOrdered decodes the next JSON value of dec, objects as *object.
func decodeOrdered(dec *json.Decoder) (any, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	d, ok := tok.(json.Delim)
	if !ok {
		return tok, nil
	}
	var o *object
	var a []any
	for dec.More() {
		if d == '{' {
			k, err := dec.Token()
			if err != nil {
				return nil, err
			}
			v, err := decodeOrdered(dec)
			if err != nil {
				return nil, err
			}
			if o == nil {
				o = &object{}
			}
			o.keys, o.vals = append(o.keys, k.(string)), append(o.vals, v)
			continue
		}
		v, err := decodeOrdered(dec)
		if err != nil {
			return nil, err
		}
		a = append(a, v)
	}
	if _, err := dec.Token(); err != nil { // the closing delimiter
		return nil, err
	}
	if d == '{' {
		if o == nil {
			o = &object{}
		}
		return o, nil
	}
	if a == nil {
		a = []any{}
	}
	return a, nil
}

// volatile is the placeholder of a normalized value.
const volatile = "<volatile>"

// normalize replaces the values of a decoded JSON document that differ
// between runs: every leaf (and every value of a key in opaque) unless its
// key is in keep.
func normalize(v any, key string, keep, opaque map[string]bool) any {
	if opaque[key] {
		return volatile
	}
	switch x := v.(type) {
	case *object:
		for i, k := range x.keys {
			x.vals[i] = normalize(x.vals[i], k, keep, opaque)
		}
		return x
	case []any:
		for i, e := range x {
			x[i] = normalize(e, key, keep, opaque)
		}
		return x
	}
	if keep[key] {
		return v
	}
	return volatile
}

// normalizedJSON decodes out, normalizes it and prints it again, indented,
// its keys in their order.
func normalizedJSON(t *testing.T, out string, keep, opaque map[string]bool) string {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(out))
	dec.UseNumber()
	doc, err := decodeOrdered(dec)
	require.NoError(t, err, "not JSON: %q", out)
	require.False(t, dec.More(), "one JSON document: %q", out)
	var b bytes.Buffer
	require.NoError(t, encodeRaw(&b, normalize(doc, "", keep, opaque)))
	var indented bytes.Buffer
	require.NoError(t, json.Indent(&indented, b.Bytes(), "", "  "))
	return indented.String() + "\n"
}

func set(keys ...string) map[string]bool {
	m := map[string]bool{}
	for _, k := range keys {
		m[k] = true
	}
	return m
}

// eventKeep are the event fields the golden event documents keep: what the
// test wrote, not the IDs and times the database chose.
var eventKeep = set("event_type", "aggregate_type", "aggregate_id", "status", "attempts", "max_attempts",
	"lease_expiries", "last_error", "idempotency_key", "tenant", "n", "locked_by")

// TestJSONGolden keeps the shape of the --json outputs in
// testdata/golden/json: every key, and the values that do not change
// between runs.
func TestJSONGolden(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ids := b.write(t,
		outbox.Message{EventType: "order.created", AggregateType: "order", AggregateID: "1", Payload: map[string]int{"n": 1},
			Headers: map[string]string{"tenant": "acme"}, IdempotencyKey: "order-1"},
		outbox.Message{EventType: "order.paid", AggregateType: "order", AggregateID: "1", Payload: map[string]int{"n": 2}})
	b.setFailed(t, ids[1], "sink said 500")

	// Counts are the data; sizes, ages, vacuum times and the horizon's
	// holder are the server's.
	res := outboxCmd(t, b.schema, "stats", "--json")
	requireOK(t, res)
	golden(t, "json/stats.json", normalizedJSON(t, res.stdout,
		set("pending", "processing", "processed", "failed", "dead_letter_retry_waiting", "dead_letter_retry_next_due", "table",
			"innodb_history_length", "sqlite_file"), set("holder")))

	res = outboxCmd(t, b.schema, "events", "show", "--json", strconv.FormatInt(ids[0], 10))
	requireOK(t, res)
	golden(t, "json/events_show.json", normalizedJSON(t, res.stdout, eventKeep, nil))

	res = outboxCmd(t, b.schema, "events", "list", "--json", "--status", "failed")
	requireOK(t, res)
	golden(t, "json/events_list_failed.json", normalizedJSON(t, res.stdout, eventKeep, nil))

	res = run(t, nil, "version")
	requireOK(t, res)
	golden(t, "version.txt", normalizeVersion(res.stdout))
	flagRes := run(t, nil, "--version")
	requireOK(t, flagRes)
	require.Equal(t, res.stdout, flagRes.stdout, "outbox --version prints what outbox version does")
}

// versionLines match the lines of outbox version whose values change with
// the build: the release, the commit, the toolchain, the newest migration.
var versionLines = []struct {
	re   *regexp.Regexp
	repl string
}{
	{regexp.MustCompile(`(?m)^outbox .+$`), "outbox <version>"},
	{regexp.MustCompile(`(?m)^revision .+\n`), ""},
	{regexp.MustCompile(`(?m)^built with .+$`), "built with <go version>"},
	{regexp.MustCompile(`(?m)^schema version \d+ \(\d{3}_\w+\)$`), "schema version <n> (<nnn_name>)"},
}

func normalizeVersion(out string) string {
	for _, l := range versionLines {
		out = l.re.ReplaceAllString(out, l.repl)
	}
	return out
}

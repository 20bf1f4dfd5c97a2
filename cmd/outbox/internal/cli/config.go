package cli

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/outboxalert"
	"github.com/outboxkit/outbox/route"
)

// configFileMax bounds the size of a --config file: a relay's settings fit
// in a few kilobytes, and a bound keeps a wrong path (a log, a binary) from
// being read whole.
const configFileMax = 1 << 20

// valueKind is how a config file key's value is read.
type valueKind int

const (
	kindString         valueKind = iota // any scalar, as text
	kindTemplate                        // a route template
	kindPositive                        // an integer > 0
	kindDuration                        // a Go duration > 0
	kindDurationOff                     // a Go duration ≥ 0, 0 meaning off
	kindBool                            // true or false
	kindList                            // a sequence of non-empty strings, or one comma-separated string
	kindRules                           // a sequence of {event_type, topic}
	kindRetention                       // processed, delete or archive
	kindOrdering                        // none or aggregate
	kindOrderedFailure                  // block or skip
	kindLeases                          // auto, rows or partitions
	kindAddr                            // host:port
	kindHTTPURL                         // an http(s) URL, checked like --alert-webhook
	kindLogLevel                        // debug, info, warn or error
	kindLogFormat                       // text or json
)

// fileKey is one key of the config file and the relay flag it stands for.
type fileKey struct {
	section, name string
	flag          string
	kind          valueKind
}

// path is the key as the operator reads it in errors: relay.lease.
func (k fileKey) path() string { return k.section + "." + k.name }

// fileKeys is every key a config file may hold, in the order the
// documentation lists them. A relay flag that should be settable from the
// file adds one entry here.
var fileKeys = []fileKey{
	{"database", "url", "database-url", kindString},
	{"database", "schema", "schema", kindString},
	{"database", "pgbouncer", "pgbouncer", kindBool},
	{"database", "urls", "database-urls", kindList},

	{"sink", "url", "sink", kindString},
	{"sink", "source", "source", kindString},
	{"sink", "webhook_secret", "webhook-secret", kindString},
	{"sink", "webhook_ca", "webhook-ca", kindString},
	{"sink", "webhook_cert", "webhook-cert", kindString},
	{"sink", "webhook_key", "webhook-key", kindString},
	{"sink", "concurrency", "sink-concurrency", kindPositive},
	{"sink", "webhook_batch", "webhook-batch", kindPositive},
	{"sink", "webhook_deny_private", "webhook-deny-private", kindBool},
	{"sink", "webhook_allow_networks", "webhook-allow-network", kindList},

	{"routing", "default", "route", kindTemplate},
	{"routing", "rules", "route-rule", kindRules},

	{"relay", "id", "relay-id", kindString},
	{"relay", "event_types", "event-types", kindList},
	{"relay", "batch_size", "batch-size", kindPositive},
	{"relay", "workers", "workers", kindPositive},
	{"relay", "poll_interval", "poll-interval", kindDuration},
	{"relay", "lease", "lease", kindDuration},
	{"relay", "sink_timeout", "sink-timeout", kindDuration},
	{"relay", "shutdown_timeout", "shutdown-timeout", kindDuration},
	{"relay", "db_timeout", "db-timeout", kindDuration},
	{"relay", "max_attempts", "max-attempts", kindPositive},
	{"relay", "backoff_base", "backoff-base", kindDuration},
	{"relay", "backoff_max", "backoff-max", kindDuration},
	{"relay", "retention", "retention", kindRetention},
	{"relay", "listen", "listen", kindBool},
	{"relay", "max_batch_bytes", "max-batch-bytes", kindPositive},
	{"relay", "max_in_flight", "max-in-flight", kindPositive},
	{"relay", "max_in_flight_bytes", "max-in-flight-bytes", kindPositive},
	{"relay", "purge_after", "purge-after", kindDuration},
	{"relay", "purge_failed_after", "purge-failed-after", kindDuration},
	{"relay", "purge_interval", "purge-interval", kindDuration},
	{"relay", "dead_letter_retry", "dead-letter-retry", kindDuration},
	{"relay", "dead_letter_retries", "dead-letter-retries", kindPositive},
	{"relay", "schedule_lease", "schedule-lease", kindDuration},
	{"relay", "probe_interval", "probe-interval", kindDuration},
	{"relay", "probe_interval_max", "probe-interval-max", kindDuration},
	{"relay", "summary_interval", "summary-interval", kindDurationOff},
	{"relay", "heartbeat_interval", "heartbeat-interval", kindDurationOff},
	{"relay", "ordering", "ordering", kindOrdering},
	{"relay", "ordered_failure", "ordered-failure", kindOrderedFailure},
	{"relay", "leases", "leases", kindLeases},
	{"relay", "capture", "capture", kindString},
	{"relay", "capture_group", "capture-group", kindString},
	{"relay", "max_slot_lag", "max-slot-lag", kindPositive},

	{"tenants", "schemas", "tenant-schemas", kindString},
	{"tenants", "query", "tenant-query", kindString},
	{"tenants", "refresh", "tenant-refresh", kindDuration},
	{"tenants", "metrics", "tenant-metrics", kindString},

	{"observability", "metrics_addr", "metrics-addr", kindAddr},
	{"observability", "alert_webhook", "alert-webhook", kindHTTPURL},
	{"observability", "otel", "otel", kindBool},
	{"observability", "log_level", "log-level", kindLogLevel},
	{"observability", "log_format", "log-format", kindLogFormat},
}

// fileValue is one setting read from the config file, already checked.
type fileValue struct {
	key   fileKey
	where string // file:line
	str   string
	num   int
	dur   time.Duration
	flag  bool
	list  []string
	rules []route.Rule
}

// origin names where the value came from, for errors about it.
func (v fileValue) origin() string { return v.key.path() + " (" + v.where + ")" }

// fileConfig is a parsed --config file: the settings it holds, by the flag
// each stands for.
type fileConfig struct {
	path   string
	values map[string]fileValue
	// read, when set, picks the keys whose values are read and checked;
	// the others are only checked to be known keys, so a command ignores
	// the settings of another (the relay's sink, say, whose ${SECRET} the
	// operator's shell need not hold).
	read func(fileKey) bool
}

// get returns the file's setting for flag, if it has one. A nil fileConfig
// (no --config) has none.
func (c *fileConfig) get(flag string) (fileValue, bool) {
	if c == nil {
		return fileValue{}, false
	}
	v, ok := c.values[flag]
	return v, ok
}

// readConfigFile reads and parses path, reading the values of only the
// keys read picks (every key when read is nil). Its errors are usage
// errors that name the file, the line and the key.
func readConfigFile(path string, read func(fileKey) bool) (*fileConfig, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, usagef("--config %s: %v: name a readable YAML file", path, pathErrorCause(err))
	}
	defer func() { _ = f.Close() }() // read-only: nothing to lose
	data, err := io.ReadAll(io.LimitReader(f, configFileMax+1))
	if err != nil {
		return nil, usagef("--config %s: %v", path, pathErrorCause(err))
	}
	if len(data) > configFileMax {
		return nil, usagef("--config %s: larger than %d bytes: is it the right file?", path, configFileMax)
	}
	return parseConfig(path, data, os.LookupEnv, read)
}

// pathErrorCause drops the path from an *os.PathError: the message names
// the file already.
func pathErrorCause(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// configError is a config file error at a line.
func configError(path string, line int, format string, args ...any) error {
	return &usageError{err: fmt.Errorf("%s:%d: %s", path, max(line, 1), fmt.Sprintf(format, args...))}
}

// yamlLine finds the line number in a yaml.v3 error message.
var yamlLine = regexp.MustCompile(`^yaml: (?:line (\d+): )?`)

// parseConfig parses the YAML config file data, read from path, with
// ${NAME} references resolved by lookup, reading the values of only the
// keys read picks (every key when read is nil).
func parseConfig(path string, data []byte, lookup func(string) (string, bool), read func(fileKey) bool) (*fileConfig, error) {
	cfg := &fileConfig{path: path, values: map[string]fileValue{}, read: read}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return cfg, nil // an empty file sets nothing
		}
		return nil, yamlError(path, err)
	}
	var next yaml.Node
	if err := dec.Decode(&next); err == nil {
		return nil, configError(path, next.Line, "a second YAML document: keep the settings in one")
	} else if !errors.Is(err, io.EOF) {
		return nil, yamlError(path, err)
	}
	root := &doc
	if root.Kind == yaml.DocumentNode {
		if len(root.Content) == 0 {
			return cfg, nil
		}
		root = root.Content[0]
	}
	if isNull(root) {
		return cfg, nil
	}
	if root.Kind != yaml.MappingNode {
		return nil, configError(path, root.Line, "the file must be a mapping of sections (database, sink, routing, relay, observability)")
	}
	sections := sectionNames()
	seen := map[string]int{}
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], resolve(root.Content[i+1])
		if !slices.Contains(sections, k.Value) || k.Kind != yaml.ScalarNode {
			return nil, configError(path, k.Line, "unknown section %q: use one of %s", clip(k.Value), strings.Join(sections, ", "))
		}
		if line, dup := seen[k.Value]; dup {
			return nil, configError(path, k.Line, "section %s is given twice (first at line %d): merge them", k.Value, line)
		}
		seen[k.Value] = k.Line
		if isNull(v) {
			continue
		}
		if v.Kind != yaml.MappingNode {
			return nil, configError(path, v.Line, "%s: must be a mapping of keys, such as %s", k.Value, exampleKey(k.Value))
		}
		if err := cfg.parseSection(k.Value, v, lookup); err != nil {
			return nil, err
		}
	}
	return cfg, nil
}

func (c *fileConfig) parseSection(section string, m *yaml.Node, lookup func(string) (string, bool)) error {
	keys := sectionKeys(section)
	seen := map[string]int{}
	for i := 0; i+1 < len(m.Content); i += 2 {
		k, v := m.Content[i], resolve(m.Content[i+1])
		idx := slices.IndexFunc(keys, func(fk fileKey) bool { return fk.name == k.Value })
		if idx < 0 || k.Kind != yaml.ScalarNode {
			names := make([]string, len(keys))
			for j, fk := range keys {
				names[j] = fk.name
			}
			return configError(c.path, k.Line, "%s: unknown key %q: use one of %s", section, clip(k.Value), strings.Join(names, ", "))
		}
		key := keys[idx]
		if line, dup := seen[key.name]; dup {
			return configError(c.path, k.Line, "%s: given twice (first at line %d): keep one", key.path(), line)
		}
		seen[key.name] = k.Line
		if c.read != nil && !c.read(key) {
			continue
		}
		val, err := c.parseValue(key, v, lookup)
		if err != nil {
			return err
		}
		c.values[key.flag] = val
	}
	return nil
}

// parseValue reads and checks one value. Errors quote a value only for
// keys that never hold secrets (numbers, durations, templates).
func (c *fileConfig) parseValue(key fileKey, n *yaml.Node, lookup func(string) (string, bool)) (fileValue, error) {
	val := fileValue{key: key, where: fmt.Sprintf("%s:%d", c.path, n.Line)}
	fail := func(line int, format string, args ...any) (fileValue, error) {
		return fileValue{}, configError(c.path, line, "%s: %s", key.path(), fmt.Sprintf(format, args...))
	}
	if isNull(n) {
		return fail(n.Line, "has no value: give one, or remove the key to keep the default")
	}
	scalar := func(n *yaml.Node) (string, error) {
		if n.Kind != yaml.ScalarNode {
			_, err := fail(n.Line, "must be a single value, not a %s", nodeKind(n))
			return "", err
		}
		s, err := expandEnv(n.Value, lookup)
		if err != nil {
			_, err = fail(n.Line, "%v", err)
			return "", err
		}
		return s, nil
	}
	switch key.kind {
	case kindRules:
		return c.parseRules(val, n, lookup)
	case kindList:
		var items []*yaml.Node
		switch n.Kind {
		case yaml.SequenceNode:
			items = n.Content
		case yaml.ScalarNode:
			items = []*yaml.Node{n}
		default:
			return fail(n.Line, "must be a list of event type patterns, such as [\"order.*\", user.created]")
		}
		for _, item := range items {
			s, err := scalar(resolve(item))
			if err != nil {
				return fileValue{}, err
			}
			for p := range strings.SplitSeq(s, ",") {
				if p = strings.TrimSpace(p); p == "" {
					return fail(item.Line, "holds an empty pattern: use * to match every type")
				}
				val.list = append(val.list, p)
			}
		}
		if len(val.list) == 0 {
			return fail(n.Line, "is empty: list at least one pattern, or remove the key to relay every type")
		}
		return val, nil
	}
	s, err := scalar(n)
	if err != nil {
		return fileValue{}, err
	}
	val.str = s
	switch key.kind {
	case kindString:
		if s == "" {
			return fail(n.Line, "is empty: give a value, or remove the key to keep the default")
		}
	case kindTemplate:
		if _, err := route.Parse(s); err != nil {
			return fail(n.Line, "%v", err)
		}
	case kindPositive:
		if val.num, err = strconv.Atoi(s); err != nil || val.num <= 0 {
			return fail(n.Line, "%q is not a positive whole number", clip(s))
		}
	case kindDuration:
		if val.dur, err = parseDuration(s); err != nil || val.dur <= 0 {
			return fail(n.Line, "%q is not a positive duration: use a Go duration such as 500ms, 30s or 5m, or days such as 7d", clip(s))
		}
	case kindDurationOff:
		if val.dur, err = time.ParseDuration(s); err != nil || val.dur < 0 {
			return fail(n.Line, "%q is not a duration: use a Go duration such as 30s or 5m, or 0 for off", clip(s))
		}
	case kindBool:
		if val.flag, err = strconv.ParseBool(s); err != nil {
			return fail(n.Line, "%q is not a boolean: use true or false", clip(s))
		}
	case kindRetention:
		if _, err := outbox.ParseRetention(s); err != nil {
			return fail(n.Line, "unknown mode %q: use processed, delete or archive", clip(s))
		}
	case kindOrdering:
		if _, err := outbox.ParseOrdering(s); err != nil {
			return fail(n.Line, "unknown mode %q: use none or aggregate", clip(s))
		}
	case kindOrderedFailure:
		if _, err := outbox.ParseOrderedFailure(s); err != nil {
			return fail(n.Line, "unknown policy %q: use block or skip", clip(s))
		}
	case kindLeases:
		if _, err := outbox.ParseLeases(s); err != nil {
			return fail(n.Line, "unknown mode %q: use auto, rows or partitions", clip(s))
		}
	case kindAddr:
		if !validAddr(s) {
			return fail(n.Line, "%q is not host:port: use :9464 or 127.0.0.1:9464", clip(s))
		}
	case kindLogLevel:
		if !slices.Contains(logLevels, s) {
			return fail(n.Line, "unknown level %q: use %s", clip(s), strings.Join(logLevels, ", "))
		}
	case kindLogFormat:
		if !slices.Contains(logFormats, s) {
			return fail(n.Line, "unknown format %q: use %s", clip(s), strings.Join(logFormats, ", "))
		}
	case kindHTTPURL:
		if err := (outboxalert.Config{URL: s}).Validate(); err != nil {
			var ce *outbox.ConfigError
			if errors.As(err, &ce) {
				err = ce.Err
			}
			return fail(n.Line, "%v", err)
		}
	}
	return val, nil
}

// parseRules reads routing.rules: a list of {event_type, topic} mappings.
func (c *fileConfig) parseRules(val fileValue, n *yaml.Node, lookup func(string) (string, bool)) (fileValue, error) {
	fail := func(line int, format string, args ...any) (fileValue, error) {
		return fileValue{}, configError(c.path, line, "%s: %s", val.key.path(), fmt.Sprintf(format, args...))
	}
	if n.Kind != yaml.SequenceNode {
		return fail(n.Line, "must be a list of rules, each with event_type and topic")
	}
	for i, item := range n.Content {
		item = resolve(item)
		if item.Kind != yaml.MappingNode {
			return fail(item.Line, "rule %d must be a mapping with event_type and topic, such as {event_type: \"order.*\", topic: orders}", i+1)
		}
		var rule route.Rule
		seen := map[string]bool{}
		for j := 0; j+1 < len(item.Content); j += 2 {
			k, v := item.Content[j], resolve(item.Content[j+1])
			var dst *string
			switch k.Value {
			case "event_type":
				dst = &rule.EventType
			case "topic":
				dst = &rule.Topic
			default:
				return fail(k.Line, "rule %d: unknown key %q: use event_type and topic", i+1, clip(k.Value))
			}
			if seen[k.Value] {
				return fail(k.Line, "rule %d: %s is given twice: keep one", i+1, k.Value)
			}
			seen[k.Value] = true
			if v.Kind != yaml.ScalarNode || isNull(v) {
				return fail(v.Line, "rule %d: %s must be a single value", i+1, k.Value)
			}
			s, err := expandEnv(v.Value, lookup)
			if err != nil {
				return fail(v.Line, "rule %d: %v", i+1, err)
			}
			*dst = s
			if k.Value == "topic" {
				if _, err := route.Parse(s); err != nil {
					return fail(v.Line, "rule %d: %v", i+1, err)
				}
			}
		}
		switch {
		case rule.EventType == "":
			return fail(item.Line, "rule %d has no event_type: give a pattern such as order.* (or * for every type)", i+1)
		case !seen["topic"]:
			return fail(item.Line, "rule %d has no topic: give a template such as orders.{event_type}", i+1)
		}
		val.rules = append(val.rules, rule)
	}
	if len(val.rules) == 0 {
		return fail(n.Line, "is empty: list at least one rule, or remove the key")
	}
	return val, nil
}

// expandEnv replaces each ${NAME} in s with the environment variable NAME,
// and $$ with a single $; any other $ stays as it is. A reference to an
// unset variable is an error, so a missing secret never becomes an empty
// one. Errors name the variable, never its value.
func expandEnv(s string, lookup func(string) (string, bool)) (string, error) {
	if !strings.Contains(s, "$") {
		return s, nil
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '$' || i+1 == len(s) {
			b.WriteByte(c)
			continue
		}
		switch s[i+1] {
		case '$':
			b.WriteByte('$')
			i++
		case '{':
			end := strings.IndexByte(s[i+2:], '}')
			if end < 0 {
				return "", errors.New("unclosed ${: write ${NAME}, or $$ for a literal $")
			}
			name := s[i+2 : i+2+end]
			if !validEnvName(name) {
				return "", fmt.Errorf("${%s} is not a variable name: use letters, digits and _, or $$ for a literal $", clip(name))
			}
			v, ok := lookup(name)
			if !ok {
				return "", fmt.Errorf("environment variable %s is not set: export it, or remove the reference", name)
			}
			b.WriteString(v)
			i += 2 + end
		default:
			b.WriteByte(c)
		}
	}
	return b.String(), nil
}

func validEnvName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '_' || c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || i > 0 && c >= '0' && c <= '9' {
			continue
		}
		return false
	}
	return true
}

// validAddr reports whether s is host:port or :port with a port number.
func validAddr(s string) bool {
	host, port, err := net.SplitHostPort(s)
	n, perr := strconv.Atoi(port)
	return err == nil && perr == nil && n >= 0 && n <= 65535 && !strings.ContainsAny(host, "/ ")
}

// yamlError turns a yaml.v3 syntax error into one line naming the file and
// line.
func yamlError(path string, err error) error {
	msg := oneLine(err.Error())
	line := 1
	if m := yamlLine.FindStringSubmatch(msg); m != nil {
		msg = msg[len(m[0]):]
		if m[1] != "" {
			line, _ = strconv.Atoi(m[1])
			if yamlParserProblem(msg) {
				line++
			}
		}
	}
	return configError(path, line, "not valid YAML: %s", msg)
}

// yamlParserProblems start the messages of yaml.v3's parser (as opposed to
// its scanner) errors, whose line numbers it reports counting from 0.
var yamlParserProblems = []string{
	"did not find expected ',' or",
	"did not find expected '-' indicator",
	"did not find expected <document start>",
	"did not find expected key",
	"did not find expected node content",
	"found duplicate %",
	"found incompatible YAML document",
	"found undefined tag handle",
}

// yamlParserProblem reports whether msg is a yaml.v3 parser error.
func yamlParserProblem(msg string) bool {
	for _, p := range yamlParserProblems {
		if strings.HasPrefix(msg, p) {
			return true
		}
	}
	return false
}

// resolve follows an alias to the node it names.
func resolve(n *yaml.Node) *yaml.Node {
	for n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	return n
}

func isNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.Tag == "!!null"
}

func nodeKind(n *yaml.Node) string {
	switch n.Kind {
	case yaml.SequenceNode:
		return "list"
	case yaml.MappingNode:
		return "mapping"
	default:
		return "value"
	}
}

// clip shortens what an error quotes from the file.
func clip(s string) string {
	const most = 64
	if len(s) <= most {
		return s
	}
	return s[:most] + "…"
}

func sectionNames() []string {
	var names []string
	for _, k := range fileKeys {
		if !slices.Contains(names, k.section) {
			names = append(names, k.section)
		}
	}
	return names
}

func sectionKeys(section string) []fileKey {
	var keys []fileKey
	for _, k := range fileKeys {
		if k.section == section {
			keys = append(keys, k)
		}
	}
	return keys
}

func exampleKey(section string) string {
	keys := sectionKeys(section)
	return section + "." + keys[0].name
}

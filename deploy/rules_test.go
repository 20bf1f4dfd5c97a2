package deploy_test

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"
)

var update = flag.Bool("update", false, "rewrite the copies of deploy/prometheus/outbox-rules.yaml (docs/observability.md, deploy/kubernetes/prometheusrule.yaml)")

const (
	rulesFile     = "prometheus/outbox-rules.yaml"
	rulesTestFile = "prometheus/outbox-rules_test.yaml"
	ruleCRFile    = "kubernetes/prometheusrule.yaml"
	rulesDocFile  = "../docs/observability.md"
	// rulesDocMarker precedes the generated yaml block in the docs.
	rulesDocMarker = "<!-- generated from deploy/prometheus/outbox-rules.yaml: edit that file, then run go test ./deploy -run TestRulesCopies -update -->\n"
)

// rulesBody is the rules file without its leading comment.
func rulesBody(t *testing.T) string {
	t.Helper()
	raw, err := os.ReadFile(rulesFile)
	require.NoError(t, err)
	lines := strings.SplitAfter(string(raw), "\n")
	for len(lines) > 0 && strings.HasPrefix(lines[0], "#") {
		lines = lines[1:]
	}
	return strings.Join(lines, "")
}

// prometheusRule is the PrometheusRule resource for the rules.
func prometheusRule(body string) string {
	var b strings.Builder
	b.WriteString(`# Generated from deploy/prometheus/outbox-rules.yaml by
# go test ./deploy -run TestRulesCopies -update: edit that file, not this one.
# The Prometheus Operator loads it when its ruleSelector matches these
# labels (kube-prometheus-stack selects release: <its release name>).
apiVersion: monitoring.coreos.com/v1
kind: PrometheusRule
metadata:
  name: outbox
  labels:
    app.kubernetes.io/name: outbox-relay
    app.kubernetes.io/part-of: outbox
    release: prometheus
spec:
`)
	for _, line := range strings.SplitAfter(body, "\n") {
		if strings.TrimSpace(line) != "" {
			b.WriteString("  ")
		}
		b.WriteString(line)
	}
	return b.String()
}

// withDocBlock returns the docs with the yaml block after the marker
// replaced by body.
func withDocBlock(t *testing.T, doc, body string) string {
	t.Helper()
	_, after, found := strings.Cut(doc, rulesDocMarker)
	require.True(t, found, "%s has no line %q before the rules block", rulesDocFile, rulesDocMarker)
	require.True(t, strings.HasPrefix(after, "```yaml\n"), "%s: the rules block must follow the marker line", rulesDocFile)
	end := strings.Index(after, "\n```\n")
	require.NotEqual(t, -1, end, "%s: the rules block is not closed", rulesDocFile)
	start := len(doc) - len(after) + len("```yaml\n")
	return doc[:start] + body + doc[len(doc)-len(after)+end+1:]
}

// TestRulesCopies fails when the docs' rules block or the PrometheusRule
// differ from deploy/prometheus/outbox-rules.yaml; -update rewrites them.
func TestRulesCopies(t *testing.T) {
	t.Parallel()
	body := rulesBody(t)
	rawDoc, err := os.ReadFile(rulesDocFile)
	require.NoError(t, err)
	rawCR, _ := os.ReadFile(ruleCRFile)
	want := map[string]string{
		rulesDocFile: withDocBlock(t, string(rawDoc), body),
		ruleCRFile:   prometheusRule(body),
	}
	got := map[string]string{rulesDocFile: string(rawDoc), ruleCRFile: string(rawCR)}
	for _, file := range []string{rulesDocFile, ruleCRFile} {
		if *update {
			require.NoError(t, os.WriteFile(file, []byte(want[file]), 0o644))
			continue
		}
		if d := firstDiff(want[file], got[file]); d != "" {
			t.Errorf("%s differs from %s (%s): edit the rules file only, then run go test ./deploy -run TestRulesCopies -update", file, rulesFile, d)
		}
	}

	// The PrometheusRule's spec is the rules file, as YAML and not only as
	// text.
	var cr struct {
		Kind string    `yaml:"kind"`
		Spec yaml.Node `yaml:"spec"`
	}
	require.NoError(t, yaml.Unmarshal([]byte(want[ruleCRFile]), &cr))
	require.Equal(t, "PrometheusRule", cr.Kind)
	var spec, rules any
	require.NoError(t, cr.Spec.Decode(&spec))
	require.NoError(t, yaml.Unmarshal([]byte(body), &rules))
	require.Equal(t, rules, spec)
}

// firstDiff names the first line where got differs from want; "" when
// they are equal.
func firstDiff(want, got string) string {
	if want == got {
		return ""
	}
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	for i := range max(len(w), len(g)) {
		var wl, gl string
		if i < len(w) {
			wl = w[i]
		}
		if i < len(g) {
			gl = g[i]
		}
		if wl != gl || i >= len(w) || i >= len(g) {
			return fmt.Sprintf("line %d is %q, want %q", i+1, gl, wl)
		}
	}
	return "they differ"
}

// promtool is Debian's prometheus package's rule checker; the suite fails,
// never skips, without it (scripts/test installs it).
func promtool(t *testing.T) string {
	t.Helper()
	path, err := exec.LookPath("promtool")
	require.NoError(t, err, "promtool is missing: install Debian's prometheus package (apt-get install prometheus); scripts/test does")
	return path
}

// ruleFile is the part of a Prometheus rules file the tests read.
type ruleFile struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []struct {
			Alert string `yaml:"alert"`
			Expr  string `yaml:"expr"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

// ruleTests is the part of a promtool test file the tests read.
type ruleTests struct {
	RuleFiles []string `yaml:"rule_files"`
	Tests     []struct {
		Name          string `yaml:"name"`
		AlertRuleTest []struct {
			AlertName string `yaml:"alertname"`
			ExpAlerts []any  `yaml:"exp_alerts"`
		} `yaml:"alert_rule_test"`
	} `yaml:"tests"`
}

func readYAML(t *testing.T, file string, v any) {
	t.Helper()
	raw, err := os.ReadFile(file)
	require.NoError(t, err)
	require.NoError(t, yaml.Unmarshal(raw, v), file)
}

// TestPromtoolRules runs promtool check rules and promtool test rules, and
// checks that the tests cover every alert both firing and not firing.
func TestPromtoolRules(t *testing.T) {
	t.Parallel()
	bin := promtool(t)
	for _, args := range [][]string{{"check", "rules", rulesFile}, {"test", "rules", rulesTestFile}} {
		out, err := exec.Command(bin, args...).CombinedOutput()
		require.NoError(t, err, "promtool %s:\n%s", strings.Join(args, " "), out)
		t.Logf("promtool %s:\n%s", strings.Join(args, " "), out)
	}

	var rules ruleFile
	readYAML(t, rulesFile, &rules)
	var tests ruleTests
	readYAML(t, rulesTestFile, &tests)
	require.Equal(t, []string{filepath.Base(rulesFile)}, tests.RuleFiles)
	fires, quiet := map[string]bool{}, map[string]bool{}
	for _, tc := range tests.Tests {
		for _, a := range tc.AlertRuleTest {
			if len(a.ExpAlerts) > 0 {
				fires[a.AlertName] = true
			} else {
				quiet[a.AlertName] = true
			}
		}
	}
	var alerts int
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			alerts++
			require.True(t, fires[r.Alert], "%s has no promtool case where it fires: add one to %s", r.Alert, rulesTestFile)
			require.True(t, quiet[r.Alert], "%s has no promtool case where it stays quiet (exp_alerts: []): add one to %s", r.Alert, rulesTestFile)
		}
	}
	require.NotZero(t, alerts, "no alerts in %s", rulesFile)
	t.Logf("%d alerts, each tested firing and quiet", alerts)
}

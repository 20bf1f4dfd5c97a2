package deploy_test

import (
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/outboxkit/outbox"
)

const (
	manifestDir = "kubernetes"
	// handlersFile is where the relay command serves its HTTP endpoints.
	handlersFile = "../cmd/outbox/internal/cli/observability.go"
	// readyCheckTimeout bounds one /readyz check
	// (cmd/outbox/internal/cli/readiness.go).
	readyCheckTimeout = 2 * time.Second
	// measuredPeakRSS is the highest peak RSS of outbox relay draining a
	// backlog (docs/deploy.md, "Sizing"): 39 MB.
	measuredPeakRSS = 39 << 20
)

// manifest is one Kubernetes object, with the fields the test reads.
type manifest struct {
	file       string
	APIVersion string `yaml:"apiVersion"`
	Kind       string `yaml:"kind"`
	Metadata   struct {
		Name   string            `yaml:"name"`
		Labels map[string]string `yaml:"labels"`
	} `yaml:"metadata"`
	Spec      yaml.Node         `yaml:"spec"`
	Resources []string          `yaml:"resources"`  // Kustomization
	Data      map[string]string `yaml:"stringData"` // Secret
}

type probe struct {
	HTTPGet struct {
		Path string `yaml:"path"`
		Port any    `yaml:"port"`
	} `yaml:"httpGet"`
	TimeoutSeconds int `yaml:"timeoutSeconds"`
}

type deploymentSpec struct {
	Replicas int `yaml:"replicas"`
	Selector struct {
		MatchLabels map[string]string `yaml:"matchLabels"`
	} `yaml:"selector"`
	Template struct {
		Metadata struct {
			Labels map[string]string `yaml:"labels"`
		} `yaml:"metadata"`
		Spec struct {
			TerminationGracePeriodSeconds int `yaml:"terminationGracePeriodSeconds"`
			SecurityContext               struct {
				RunAsNonRoot bool `yaml:"runAsNonRoot"`
				RunAsUser    int  `yaml:"runAsUser"`
			} `yaml:"securityContext"`
			Containers []struct {
				Name    string   `yaml:"name"`
				Args    []string `yaml:"args"`
				EnvFrom []struct {
					SecretRef struct {
						Name string `yaml:"name"`
					} `yaml:"secretRef"`
				} `yaml:"envFrom"`
				Env []struct {
					Name  string `yaml:"name"`
					Value string `yaml:"value"`
				} `yaml:"env"`
				Ports []struct {
					Name          string `yaml:"name"`
					ContainerPort int    `yaml:"containerPort"`
				} `yaml:"ports"`
				LivenessProbe  probe `yaml:"livenessProbe"`
				ReadinessProbe probe `yaml:"readinessProbe"`
				Resources      struct {
					Requests map[string]string `yaml:"requests"`
					Limits   map[string]string `yaml:"limits"`
				} `yaml:"resources"`
				SecurityContext struct {
					ReadOnlyRootFilesystem   bool `yaml:"readOnlyRootFilesystem"`
					AllowPrivilegeEscalation bool `yaml:"allowPrivilegeEscalation"`
				} `yaml:"securityContext"`
			} `yaml:"containers"`
		} `yaml:"spec"`
	} `yaml:"template"`
}

type serviceSpec struct {
	Selector map[string]string `yaml:"selector"`
	Ports    []struct {
		Name       string `yaml:"name"`
		Port       int    `yaml:"port"`
		TargetPort any    `yaml:"targetPort"`
	} `yaml:"ports"`
}

type serviceMonitorSpec struct {
	Selector struct {
		MatchLabels map[string]string `yaml:"matchLabels"`
	} `yaml:"selector"`
	Endpoints []struct {
		Port string `yaml:"port"`
		Path string `yaml:"path"`
	} `yaml:"endpoints"`
}

// readManifests parses every YAML document under deploy/kubernetes, strictly:
// a misspelt field of the test's structs is not the point here, so unknown
// fields are allowed, but every document must be an object with a kind and
// a name.
func readManifests(t *testing.T) map[string]manifest {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(manifestDir, "*.yaml"))
	require.NoError(t, err)
	require.NotEmpty(t, files)
	byKind := map[string]manifest{}
	for _, file := range files {
		raw, err := os.ReadFile(file)
		require.NoError(t, err)
		dec := yaml.NewDecoder(bytes.NewReader(raw))
		for {
			var m manifest
			err := dec.Decode(&m)
			if errors.Is(err, io.EOF) {
				break
			}
			require.NoError(t, err, file)
			m.file = filepath.Base(file)
			require.NotEmpty(t, m.APIVersion, "%s: apiVersion", file)
			require.NotEmpty(t, m.Kind, "%s: kind", file)
			if m.Kind != "Kustomization" {
				require.NotEmpty(t, m.Metadata.Name, "%s: metadata.name", file)
			}
			_, dup := byKind[m.Kind]
			require.False(t, dup, "two %s objects; the test expects one of each", m.Kind)
			byKind[m.Kind] = m
		}
	}
	return byKind
}

func decodeSpec(t *testing.T, m manifest, v any) {
	t.Helper()
	require.NoError(t, m.Spec.Decode(v), "%s: spec", m.file)
}

func subset(small, big map[string]string) bool {
	for k, v := range small {
		if big[k] != v {
			return false
		}
	}
	return len(small) > 0
}

// TestKubernetesManifests parses every manifest under deploy/kubernetes and
// checks that they fit together and fit the relay: kustomization lists the
// rest; the Deployment's flags are ones the binary accepts; its probe paths
// are served by the relay command, on the port --metrics-addr names;
// terminationGracePeriodSeconds covers the bounded stop; the Service selects
// the pods and is named after the alert rules' job; the ServiceMonitor
// selects the Service's port; the Secret example has the keys the relay
// reads.
func TestKubernetesManifests(t *testing.T) {
	t.Parallel()
	ms := readManifests(t)
	for _, kind := range []string{"Kustomization", "Deployment", "Service", "ServiceMonitor", "PrometheusRule", "Secret"} {
		require.Contains(t, ms, kind)
	}

	// kustomization.yaml applies every manifest but the Secret example.
	var want []string
	for kind, m := range ms {
		if kind != "Kustomization" && kind != "Secret" {
			want = append(want, m.file)
		}
	}
	require.ElementsMatch(t, want, ms["Kustomization"].Resources)

	var dep deploymentSpec
	decodeSpec(t, ms["Deployment"], &dep)
	pod := dep.Template.Spec
	require.Len(t, pod.Containers, 1)
	c := pod.Containers[0]
	require.True(t, subset(dep.Selector.MatchLabels, dep.Template.Metadata.Labels), "the Deployment's selector must match its pods")
	require.GreaterOrEqual(t, dep.Replicas, 2, "two relays, so one can stop while the other works")
	require.True(t, pod.SecurityContext.RunAsNonRoot)
	require.Equal(t, 65532, pod.SecurityContext.RunAsUser, "the Containerfile's user")
	require.True(t, c.SecurityContext.ReadOnlyRootFilesystem)
	require.False(t, c.SecurityContext.AllowPrivilegeEscalation)

	// The flags: the binary accepts them, no URL (it may hold a password)
	// on the command line.
	require.Equal(t, "relay", c.Args[0])
	for _, a := range c.Args {
		require.NotContains(t, a, "://", "no URL in args: it may hold a password; use the Secret")
	}
	binary := releaseBinary(t)
	out, err := exec.CommandContext(t.Context(), binary, append(slices.Clone(c.Args), "--help")...).CombinedOutput()
	require.NoError(t, err, "outbox %s --help:\n%s", strings.Join(c.Args, " "), out)

	// The metrics port.
	addr, ok := flagValue(c.Args, "metrics-addr")
	require.True(t, ok, "the probes need --metrics-addr")
	_, portText, found := strings.Cut(addr, ":")
	require.True(t, found)
	port, err := strconv.Atoi(portText)
	require.NoError(t, err)
	require.Len(t, c.Ports, 1)
	require.Equal(t, port, c.Ports[0].ContainerPort, "containerPort must be --metrics-addr's port")
	portName := c.Ports[0].Name

	// The probes: paths the relay serves, on that port.
	handlers, err := os.ReadFile(handlersFile)
	require.NoError(t, err)
	for name, p := range map[string]probe{"liveness": c.LivenessProbe, "readiness": c.ReadinessProbe} {
		require.Contains(t, []any{portName, port}, p.HTTPGet.Port, "%s probe port", name)
		require.True(t, strings.Contains(string(handlers), `"GET `+p.HTTPGet.Path+`"`),
			"%s probe path %s is not served by the relay (%s)", name, p.HTTPGet.Path, handlersFile)
	}
	require.Equal(t, "/healthz", c.LivenessProbe.HTTPGet.Path)
	require.Equal(t, "/readyz", c.ReadinessProbe.HTTPGet.Path)
	require.Greater(t, time.Duration(c.ReadinessProbe.TimeoutSeconds)*time.Second, readyCheckTimeout,
		"the readiness probe must wait longer than /readyz's database check may take")

	// Graceful termination.
	shutdown, ok := flagValue(c.Args, "shutdown-timeout")
	require.True(t, ok, "set --shutdown-timeout, which terminationGracePeriodSeconds is sized from")
	shutdownTimeout, err := time.ParseDuration(shutdown)
	require.NoError(t, err)
	grace := time.Duration(pod.TerminationGracePeriodSeconds) * time.Second
	require.GreaterOrEqual(t, grace, shutdownTimeout+outbox.StopGrace+observersStopBound,
		"terminationGracePeriodSeconds must cover --shutdown-timeout, StopGrace and the observers' stop")

	// Resources: above the measured peak with headroom, GOMEMLIMIT below
	// the limit.
	limit := parseQuantity(t, c.Resources.Limits["memory"])
	require.GreaterOrEqual(t, limit, int64(3*measuredPeakRSS), "memory limit: at least 3× the measured peak RSS")
	require.GreaterOrEqual(t, parseQuantity(t, c.Resources.Requests["memory"]), int64(measuredPeakRSS))
	var memLimit string
	for _, e := range c.Env {
		if e.Name == "GOMEMLIMIT" {
			memLimit = e.Value
		}
	}
	require.NotEmpty(t, memLimit, "set GOMEMLIMIT below the memory limit")
	require.Less(t, parseQuantity(t, memLimit), limit)

	// The Secret the pods read has the keys the relay needs.
	require.Len(t, c.EnvFrom, 1)
	require.Equal(t, ms["Secret"].Metadata.Name, c.EnvFrom[0].SecretRef.Name)
	require.Contains(t, ms["Secret"].Data, "OUTBOX_DATABASE_URL")
	require.Contains(t, ms["Secret"].Data, "OUTBOX_SINK")

	// The Service selects the pods, targets the metrics port, and is named
	// after the job the alert rules expect.
	var svc serviceSpec
	decodeSpec(t, ms["Service"], &svc)
	require.True(t, subset(svc.Selector, dep.Template.Metadata.Labels), "the Service must select the relay pods")
	require.Len(t, svc.Ports, 1)
	require.Contains(t, []any{portName, port}, svc.Ports[0].TargetPort)
	rules, err := os.ReadFile(rulesFile)
	require.NoError(t, err)
	job := regexp.MustCompile(`up\{job="([^"]+)"\}`).FindSubmatch(rules)
	require.NotNil(t, job, "the rules' up{job=…}")
	require.Equal(t, string(job[1]), ms["Service"].Metadata.Name, "the Prometheus Operator names the job after the Service")

	// The ServiceMonitor scrapes that Service's port.
	var sm serviceMonitorSpec
	decodeSpec(t, ms["ServiceMonitor"], &sm)
	require.True(t, subset(sm.Selector.MatchLabels, ms["Service"].Metadata.Labels), "the ServiceMonitor must select the Service")
	require.Len(t, sm.Endpoints, 1)
	require.Equal(t, svc.Ports[0].Name, sm.Endpoints[0].Port)
	require.Equal(t, "/metrics", sm.Endpoints[0].Path)
	require.True(t, strings.Contains(string(handlers), `"GET /metrics"`), "/metrics is not served by the relay (%s)", handlersFile)
	require.Equal(t, ms["ServiceMonitor"].Metadata.Labels["release"], ms["PrometheusRule"].Metadata.Labels["release"],
		"the ServiceMonitor and the PrometheusRule are selected by the same Prometheus")
}

// parseQuantity reads a Kubernetes memory quantity in Ki, Mi or Gi, or a
// GOMEMLIMIT in KiB, MiB or GiB.
func parseQuantity(t *testing.T, q string) int64 {
	t.Helper()
	for i, suffix := range []string{"Ki", "Mi", "Gi"} {
		n, ok := strings.CutSuffix(strings.TrimSuffix(q, "B"), suffix)
		if ok {
			shift := 10 * (i + 1)
			v, err := strconv.ParseInt(n, 10, 64)
			require.NoError(t, err, "quantity %q", q)
			return v << shift
		}
	}
	t.Fatalf("quantity %q: use Ki, Mi or Gi (KiB, MiB or GiB for GOMEMLIMIT)", q)
	return 0
}

package servers

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
)

// RedisTLS starts a redis-server of the test's own with a TLS port and no
// plain one, serving certs' server certificate and requiring password.
// authClients is its tls-auth-clients: optional, or yes to require a
// client certificate signed by the CA. The sink package's tests and the
// command's share it.
func RedisTLS(t testing.TB, certs *Certs, password, authClients string) *Server {
	t.Helper()
	SkipIfDisabled(t)
	dir := t.TempDir()
	return Start(t, Spec{
		Name: "redis-server", Binary: "/usr/bin/redis-server",
		Args: func(port int) []string {
			return []string{
				"--port", "0", "--bind", "127.0.0.1", "--tls-port", strconv.Itoa(port),
				"--tls-cert-file", certs.ServerCert, "--tls-key-file", certs.ServerKey,
				"--tls-ca-cert-file", certs.CA, "--tls-auth-clients", authClients,
				"--requirepass", password, "--dir", dir, "--save", "", "--appendonly", "no",
			}
		},
		// A handshake that verifies the test's own CA: the port is ours.
		Ready: TLSReady(certs.ClientTLS(true)),
	})
}

// MQTTBrokerTLS starts an Eclipse MQTT broker of the test's own whose one
// listener speaks only TLS, with certs' server certificate, and allows
// anonymous clients (so any user and password log in); with requireCert
// it requires a client certificate signed by the CA.
func MQTTBrokerTLS(t testing.TB, certs *Certs, requireCert bool) *Server {
	t.Helper()
	SkipIfDisabled(t)
	conf := filepath.Join(t.TempDir(), "broker.conf")
	return Start(t, Spec{
		Name: "the Eclipse MQTT broker", Binary: "/usr/sbin/mosquitto", //nolint:misspell // the broker program's name
		Args: func(port int) []string {
			text := fmt.Sprintf("listener %d 127.0.0.1\ncafile %s\ncertfile %s\nkeyfile %s\nrequire_certificate %t\n"+
				"allow_anonymous true\npersistence false\nlog_dest stderr\n",
				port, certs.CA, certs.ServerCert, certs.ServerKey, requireCert)
			if os.Geteuid() == 0 {
				// Run as root, the broker would switch to an
				// unprivileged user that cannot read the test's files.
				text += "user root\n"
			}
			require.NoError(t, os.WriteFile(conf, []byte(text), 0o600))
			return []string{"-c", conf}
		},
		// A handshake that verifies the test's own CA: the port is ours.
		Ready: TLSReady(certs.ClientTLS(true)),
	})
}

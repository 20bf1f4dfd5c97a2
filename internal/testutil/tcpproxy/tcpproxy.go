// Package tcpproxy is internal/faultproxy for tests: a proxy that is
// closed when the test ends.
package tcpproxy

import (
	"context"
	"testing"

	"github.com/outboxkit/outbox/internal/faultproxy"
)

// Proxy forwards connections from Addr to a target; see faultproxy.Proxy.
type Proxy = faultproxy.Proxy

// Start listens on a free loopback port and forwards to target; the proxy
// is closed when t ends.
func Start(t testing.TB, target string) *Proxy {
	t.Helper()
	p, err := faultproxy.Listen(context.Background(), target)
	if err != nil {
		t.Fatalf("tcpproxy: %v", err)
	}
	t.Cleanup(p.Close)
	return p
}

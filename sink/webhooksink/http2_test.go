package webhooksink_test

import (
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/testutil/servers"
	"github.com/outboxkit/outbox/sink/webhooksink"
	"github.com/outboxkit/outbox/sinktest"
)

// newHTTPSServer is newServer serving https with the server certificate of
// certs, offering HTTP/2 by ALPN when h2 is set and HTTP/1.1 only
// otherwise.
func newHTTPSServer(t testing.TB, certs *servers.Certs, h2 bool) *server {
	t.Helper()
	s := &server{}
	s.Server = httptest.NewUnstartedServer(http.HandlerFunc(s.serveHTTP))
	s.EnableHTTP2 = h2
	s.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			s.conns.Add(1)
		}
	}
	s.TLS = certs.ServerTLS(0)
	s.StartTLS()
	t.Cleanup(s.Close)
	return s
}

// TestHTTP2WhenOffered checks the sink's own transport (Config.TLS, and the
// egress guard's dialer with DenyPrivateNetworks) speaks HTTP/2 to an
// endpoint that offers it, and HTTP/1.1 to one that does not, on at most
// Concurrency kept-alive connections either way, none opened again for
// the next batch.
func TestHTTP2WhenOffered(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		h2    bool
		guard bool // DenyPrivateNetworks, loopback allowed: a custom dialer
	}{
		{"HTTP2", true, false},
		{"HTTP2GuardedDialer", true, true},
		{"HTTP1KeepAlive", false, false},
		{"HTTP1GuardedDialer", false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			certs := servers.NewCerts(t)
			srv := newHTTPSServer(t, certs, tc.h2)
			const concurrency = 4
			cfg := webhooksink.Config{TLS: certs.ClientTLS(false), Concurrency: concurrency}
			if tc.guard {
				cfg.DenyPrivateNetworks = true
				cfg.AllowNetworks = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")}
			}
			s := newSink(t, srv, cfg)
			const n = 40
			// Two batches: the second must reuse the first's connections.
			require.Nil(t, s.Publish(t.Context(), events(n)))
			first := srv.conns.Load()
			require.Nil(t, s.Publish(t.Context(), events(n)))

			got := srv.received()
			require.Len(t, got, 2*n)
			want := 1
			if tc.h2 {
				want = 2
			}
			for _, r := range got {
				require.Equal(t, want, r.Proto, "HTTP major version")
			}
			// HTTP/2 too: the first burst's requests may each dial before
			// ALPN tells them the connection multiplexes.
			require.LessOrEqual(t, first, int32(concurrency), "at most Concurrency connections")
			require.Equal(t, first, srv.conns.Load(), "the second batch reuses the first's connections")
		})
	}
}

// BenchmarkHTTPSProtocols publishes batches of 1,000 events, Concurrency
// 16 (the default) requests in flight, to a local https endpoint that
// answers at once, over HTTP/1.1 (kept-alive connections) and over HTTP/2
// (one multiplexed connection), one request per event and with batched
// requests of 100 (Config.Batch):
//
//	go test -run '^$' -bench HTTPSProtocols -benchtime 5x -count 2 ./sink/webhooksink
func BenchmarkHTTPSProtocols(b *testing.B) {
	const perRun = 10_000
	certs := servers.NewCerts(b)
	// outbox bench's events: 325-byte JSON payloads.
	batch := make([]outbox.Event, 1000)
	for i := range batch {
		batch[i] = sinktest.NewEvent("order.created", `{"order":"`+strings.Repeat("x", 313)+`"}`)
	}
	for _, v := range []struct {
		name      string
		h2        bool
		batchSize int
	}{
		{"http1", false, 1}, {"http2", true, 1},
		{"http1/batch=100", false, 100}, {"http2/batch=100", true, 100},
	} {
		b.Run(v.name, func(b *testing.B) {
			srv := newHTTPSServer(b, certs, v.h2)
			srv.setRespond(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) })
			s, err := webhooksink.New(webhooksink.Config{URL: srv.URL + "/hook", TLS: certs.ClientTLS(false), Batch: v.batchSize})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = s.Close() })
			var (
				elapsed time.Duration // over every iteration, not the last one
				runs    int
			)
			b.ResetTimer()
			for b.Loop() {
				srv.forget()
				start := time.Now()
				for range perRun / len(batch) {
					for _, err := range s.Publish(b.Context(), batch) {
						if err != nil {
							b.Fatal(err)
						}
					}
				}
				elapsed += time.Since(start)
				runs++
			}
			b.ReportMetric(float64(runs*perRun)/elapsed.Seconds(), "events/s")
		})
	}
}

package webhooksink_test

import (
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/sink/webhooksink"
)

// listenAndDrop accepts connections and closes each at once, before any
// answer: the endpoint resets or drops the connection.
func listenAndDrop(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			if tc, ok := c.(*net.TCPConn); ok {
				_ = tc.SetLinger(0) // RST instead of FIN
			}
			_ = c.Close()
		}
	}()
	t.Cleanup(func() {
		_ = l.Close()
		<-done
	})
	return l.Addr().String()
}

func TestUnreachableEndpointIsUnavailable(t *testing.T) {
	t.Parallel()
	closed := func() string {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		addr := l.Addr().String()
		require.NoError(t, l.Close())
		return addr
	}()
	untrusted := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	t.Cleanup(untrusted.Close)
	failing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusInternalServerError) }))
	t.Cleanup(failing.Close)
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-time.After(time.Second):
		}
	}))
	t.Cleanup(slow.Close)

	for _, tc := range []struct {
		name, url   string
		unavailable bool
	}{
		{"connection refused", "http://" + closed + "/hook", true},
		{"name does not resolve", "http://outbox-test.invalid/hook", true},
		{"TLS handshake fails", untrusted.URL + "/hook", true},
		{"connection dropped before an answer", "http://" + listenAndDrop(t) + "/hook", true},
		{"HTTP 500 is an answer", failing.URL + "/hook", false},
		{"a slow answer may be the event's", slow.URL + "/hook", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			timeout := 5 * time.Second // a TLS handshake under -race is slow
			if !tc.unavailable {
				timeout = 200 * time.Millisecond
			}
			s, err := webhooksink.New(webhooksink.Config{URL: tc.url, Timeout: timeout})
			require.NoError(t, err)
			t.Cleanup(func() { _ = s.Close() })
			errs := s.Publish(t.Context(), []outbox.Event{{ID: 1, EventType: "x", Payload: []byte(`{}`)}})
			require.Len(t, errs, 1)
			require.Error(t, errs[0])
			require.False(t, outbox.IsPermanent(errs[0]), "%v", errs[0])
			require.Equal(t, tc.unavailable, outbox.IsUnavailable(errs[0]), "%v", errs[0])
		})
	}
}

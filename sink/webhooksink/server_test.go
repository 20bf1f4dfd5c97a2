package webhooksink_test

import (
	"bytes"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/outboxkit/outbox/sink/webhooksink"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// received is one request as the test server saw it.
type received struct {
	Method string
	Path   string
	Query  string
	Header http.Header
	Body   []byte
	Proto  int // the request's HTTP major version
}

// request rebuilds an *http.Request carrying what was received, for
// parsers such as the CloudEvents SDK.
func (r received) request() *http.Request {
	req := httptest.NewRequest(r.Method, r.Path, bytes.NewReader(r.Body))
	req.Header = r.Header.Clone()
	return req
}

// server is a real HTTP server on loopback that records every request
// before answering it with respond (204 No Content by default).
type server struct {
	*httptest.Server
	mu       sync.Mutex
	got      []received
	respond  atomic.Pointer[http.HandlerFunc]
	conns    atomic.Int32 // connections opened
	inFlight atomic.Int32
	maxIn    atomic.Int32
}

func newServer(t *testing.T) *server {
	t.Helper()
	s := &server{}
	s.Server = httptest.NewUnstartedServer(http.HandlerFunc(s.serveHTTP))
	s.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			s.conns.Add(1)
		}
	}
	s.Start()
	t.Cleanup(s.Close)
	return s
}

func (s *server) serveHTTP(w http.ResponseWriter, r *http.Request) {
	n := s.inFlight.Add(1)
	defer s.inFlight.Add(-1)
	for {
		m := s.maxIn.Load()
		if n <= m || s.maxIn.CompareAndSwap(m, n) {
			break
		}
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	s.mu.Lock()
	s.got = append(s.got, received{Method: r.Method, Path: r.URL.Path, Query: r.URL.RawQuery, Header: r.Header.Clone(), Body: body, Proto: r.ProtoMajor})
	s.mu.Unlock()
	if respond := s.respond.Load(); respond != nil {
		r.Body = io.NopCloser(bytes.NewReader(body)) // for respond to read again
		(*respond)(w, r)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// setRespond makes the server answer every request from now on with fn.
func (s *server) setRespond(fn http.HandlerFunc) { s.respond.Store(&fn) }

// answer makes the server answer with code and body.
func (s *server) answer(code int, body string) {
	s.setRespond(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(code)
		_, _ = io.WriteString(w, body)
	})
}

func (s *server) received() []received {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]received(nil), s.got...)
}

// forget drops the requests received so far.
func (s *server) forget() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.got = nil
}

// only returns the single request the server received.
func (s *server) only(t *testing.T) received {
	t.Helper()
	got := s.received()
	require.Len(t, got, 1)
	return got[0]
}

// newSink returns a sink for cfg that POSTs to srv unless cfg.URL is set,
// closed when the test ends.
func newSink(t *testing.T, srv *server, cfg webhooksink.Config) *webhooksink.Sink {
	t.Helper()
	if cfg.URL == "" {
		cfg.URL = srv.URL + "/hooks/outbox"
	}
	s, err := webhooksink.New(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.Close()) })
	return s
}

func itoa(id int64) string { return strconv.FormatInt(id, 10) }

// newFuzzServer returns a server that hands every request's headers to got.
func newFuzzServer(f *testing.F, got chan<- http.Header) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- r.Header.Clone()
		w.WriteHeader(http.StatusNoContent)
	}))
	f.Cleanup(srv.Close)
	return srv
}

func newFuzzSink(f *testing.F, srv *httptest.Server) *webhooksink.Sink {
	s, err := webhooksink.New(webhooksink.Config{URL: srv.URL, Concurrency: 1})
	require.NoError(f, err)
	f.Cleanup(func() { _ = s.Close() })
	return s
}

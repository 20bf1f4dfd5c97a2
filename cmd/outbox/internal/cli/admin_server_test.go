package cli

import (
	"context"
	"log/slog"
	"net/http"
	"testing"
)

func TestAdminServerTimeouts(t *testing.T) {
	t.Parallel()
	srv := newAdminServer(context.Background(), http.NotFoundHandler(), slog.Default())
	// A client that trickles its request or idles on a kept-alive
	// connection must not hold it for ever.
	if srv.ReadHeaderTimeout <= 0 || srv.ReadTimeout <= 0 || srv.IdleTimeout <= 0 {
		t.Fatalf("ReadHeaderTimeout %v, ReadTimeout %v, IdleTimeout %v: want all positive",
			srv.ReadHeaderTimeout, srv.ReadTimeout, srv.IdleTimeout)
	}
	if srv.ReadTimeout < srv.ReadHeaderTimeout {
		t.Fatalf("ReadTimeout %v is shorter than ReadHeaderTimeout %v", srv.ReadTimeout, srv.ReadHeaderTimeout)
	}
}

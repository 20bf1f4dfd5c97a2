package webhooksink_test

import (
	"net/http"
	"net/netip"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/sink/webhooksink"
)

// With DenyPrivateNetworks a URL that leads to the relay's own network
// (here loopback, by address and by a name that resolves to it, as a
// rebound name would) is refused when dialed, permanently, and the endpoint
// never sees a request.
func TestDenyPrivateNetworks(t *testing.T) {
	t.Parallel()
	srv := newServer(t)
	port := srv.URL[strings.LastIndexByte(srv.URL, ':')+1:]
	for _, u := range []string{srv.URL + "/hooks", "http://localhost:" + port + "/hooks"} {
		s := newSink(t, srv, webhooksink.Config{URL: u, DenyPrivateNetworks: true})
		errs := s.Publish(t.Context(), []outbox.Event{fullEvent()})
		require.Len(t, errs, 1, u)
		require.True(t, outbox.IsPermanent(errs[0]), "%s: %v", u, errs[0])
		require.Contains(t, errs[0].Error(), "refused: it is a loopback address", u)
		require.Contains(t, errs[0].Error(), "--webhook-allow-network")
	}
	require.Empty(t, srv.received())

	// An allowed network is reached.
	s := newSink(t, srv, webhooksink.Config{DenyPrivateNetworks: true,
		AllowNetworks: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")}})
	require.Nil(t, s.Publish(t.Context(), []outbox.Event{fullEvent()}))
	require.Len(t, srv.received(), 1)
	require.Contains(t, s.LogValue().String(), "deny_private_networks=true")
}

func TestDenyPrivateNetworksConfig(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		cfg   webhooksink.Config
		field string
	}{
		{webhooksink.Config{URL: "https://hooks.example.com/", DenyPrivateNetworks: true, Client: newClientForTest()}, "DenyPrivateNetworks"},
		{webhooksink.Config{URL: "https://hooks.example.com/", AllowNetworks: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}}, "AllowNetworks"},
	} {
		_, err := webhooksink.New(c.cfg)
		var ce *outbox.ConfigError
		require.ErrorAs(t, err, &ce)
		require.Equal(t, c.field, ce.Field)
	}
}

func newClientForTest() *http.Client { return &http.Client{} }

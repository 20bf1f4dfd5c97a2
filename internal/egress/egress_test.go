package egress

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestCheck(t *testing.T) {
	t.Parallel()
	deny := Policy{DenyPrivate: true}
	for _, c := range []struct {
		addr, reason string // reason "" means allowed
	}{
		{"8.8.8.8", ""},
		{"2001:4860:4860::8888", ""},
		{"93.184.216.34", ""},
		{"10.1.2.3", "a private address"},
		{"172.16.0.1", "a private address"},
		{"172.31.255.255", "a private address"},
		{"172.32.0.1", ""},
		{"192.168.1.1", "a private address"},
		{"127.0.0.1", "a loopback address"},
		{"127.9.9.9", "a loopback address"},
		{"::1", "a loopback address"},
		{"::ffff:127.0.0.1", "a loopback address"},
		{"::ffff:10.0.0.1", "a private address"},
		{"169.254.169.254", "the cloud metadata address"},
		{"169.254.1.1", "a link-local address"},
		{"fe80::1", "a link-local address"},
		{"fe80::1%eth0", "a link-local address"},
		{"fd00:ec2::254", "the cloud metadata address"},
		{"fd12:3456::1", "a private (unique local) address"},
		{"100.64.0.1", "a carrier-grade NAT (shared) address"},
		{"100.100.100.200", "a carrier-grade NAT (shared) address"},
		{"0.0.0.0", "an unspecified (this-network) address"},
		{"::", "an unspecified address"},
		{"224.0.0.1", "a multicast address"},
		{"ff02::1", "a multicast address"},
		{"64:ff9b::a9fe:a9fe", "the cloud metadata address behind NAT64"},
		{"64:ff9b::808:808", ""},
	} {
		err := deny.Check(netip.MustParseAddr(c.addr))
		switch {
		case c.reason == "" && err != nil:
			t.Errorf("Check(%s) = %v, want allowed", c.addr, err)
		case c.reason != "" && (err == nil || !strings.Contains(err.Error(), "it is "+c.reason) || !errors.Is(err, ErrDenied)):
			t.Errorf("Check(%s) = %v, want refused as %s", c.addr, err, c.reason)
		}
		if err := (Policy{}).Check(netip.MustParseAddr(c.addr)); err != nil {
			t.Errorf("the zero Policy refused %s: %v", c.addr, err)
		}
	}
	allow := Policy{DenyPrivate: true, Allow: []netip.Prefix{netip.MustParsePrefix("10.1.0.0/16"), netip.MustParsePrefix("::1/128")}}
	for addr, ok := range map[string]bool{"10.1.9.9": true, "10.2.0.1": false, "::1": true, "127.0.0.1": false, "::ffff:10.1.0.5": true} {
		if err := allow.Check(netip.MustParseAddr(addr)); (err == nil) != ok {
			t.Errorf("with Allow, Check(%s) = %v, want allowed %t", addr, err, ok)
		}
	}
}

// The check runs on the address dialed, after resolution: a name that
// resolves to loopback (as a rebound name would) is refused, and an HTTP
// client with the guarded dialer never reaches the server.
func TestGuardRefusesAtDialTime(t *testing.T) {
	t.Parallel()
	var hits int
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { hits++ }))
	t.Cleanup(srv.Close)
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())

	client := func(p Policy) *http.Client {
		d := p.Guard(&net.Dialer{Timeout: 5 * time.Second})
		return &http.Client{Transport: &http.Transport{DialContext: d.DialContext}}
	}
	for _, u := range []string{srv.URL, "http://localhost:" + port} {
		resp, err := client(Policy{DenyPrivate: true}).Get(u)
		if err == nil {
			_ = resp.Body.Close()
			t.Fatalf("GET %s through the guard succeeded", u)
		}
		if !errors.Is(err, ErrDenied) || !strings.Contains(err.Error(), "it is a loopback address") {
			t.Fatalf("GET %s: %v, want a refused egress", u, err)
		}
	}
	if hits != 0 {
		t.Fatalf("the server got %d requests through the guard", hits)
	}
	resp, err := client(Policy{DenyPrivate: true, Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")}}).Get(srv.URL)
	if err != nil {
		t.Fatalf("GET with loopback allowed: %v", err)
	}
	_ = resp.Body.Close()

	// A Control the dialer had keeps running after the guard.
	called := false
	d := Policy{}.Guard(&net.Dialer{ControlContext: func(context.Context, string, string, syscall.RawConn) error { called = true; return nil }})
	conn, err := d.DialContext(context.Background(), "tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	_ = conn.Close()
	if !called {
		t.Fatal("the dialer's own ControlContext was dropped")
	}
}

func TestParsePrefix(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{"10.1.0.0/16": "10.1.0.0/16", "10.1.2.3": "10.1.2.3/32", "fd12::/64": "fd12::/64", "::1": "::1/128"} {
		p, err := ParsePrefix(in)
		if err != nil || p.String() != want {
			t.Errorf("ParsePrefix(%q) = %v, %v; want %s", in, p, err, want)
		}
	}
	for _, in := range []string{"", "10.1.2.3/16", "example.com", "10.0.0.0/33", "10.0.0.0/8,"} {
		if _, err := ParsePrefix(in); err == nil {
			t.Errorf("ParsePrefix(%q) succeeded", in)
		}
	}
}

func FuzzCheck(f *testing.F) {
	for _, s := range []string{"8.8.8.8", "127.0.0.1", "::ffff:169.254.169.254", "64:ff9b::7f00:1", "fe80::1%eth0", "10.0.0.0/8", "::", "2002::1"} {
		f.Add(s, "10.1.0.0/16")
	}
	f.Fuzz(func(t *testing.T, addr, allow string) {
		p := Policy{DenyPrivate: true}
		if pre, err := ParsePrefix(allow); err == nil {
			p.Allow = []netip.Prefix{pre}
			if !pre.IsValid() || pre != pre.Masked() {
				t.Fatalf("ParsePrefix(%q) = %v, not a masked network", allow, pre)
			}
		}
		a, err := netip.ParseAddr(addr)
		if err != nil {
			if err := p.Control(context.Background(), "tcp", addr, nil); err == nil {
				t.Fatalf("Control(%q) accepted an address it cannot parse", addr)
			}
			return
		}
		err = p.Check(a)
		u := a.Unmap().WithZone("")
		if u.IsLoopback() || u.IsPrivate() || u.IsLinkLocalUnicast() || u.IsUnspecified() || u.IsMulticast() {
			allowed := len(p.Allow) > 0 && p.Allow[0].Contains(u)
			if err == nil && !allowed {
				t.Fatalf("Check(%s) allowed a non-public address", a)
			}
		}
		if err != nil && !errors.Is(err, ErrDenied) {
			t.Fatalf("Check(%s) = %v: not an ErrDenied", a, err)
		}
		if cerr := p.Control(context.Background(), "tcp", netip.AddrPortFrom(a, 443).String(), nil); (cerr == nil) != (err == nil) {
			t.Fatalf("Control and Check disagree on %s: %v, %v", a, cerr, err)
		}
	})
}

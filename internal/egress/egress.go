// Package egress guards outbound connections to addresses a caller does not
// control: a webhook URL a tenant typed must not reach the relay's own
// network (private ranges, loopback, link-local, CGNAT, cloud metadata).
//
// The guard runs in net.Dialer's ControlContext, on the IP address about to
// be dialed after name resolution, for every connection attempt: a name
// that resolves to a public address when checked and to 127.0.0.1 when
// dialed (DNS rebinding) is still refused, and so is each address a
// happy-eyeballs dial tries.
package egress

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"syscall"
)

// Policy says which addresses outbound connections may reach. The zero
// Policy allows everything.
type Policy struct {
	// DenyPrivate refuses every address in DeniedNetworks.
	DenyPrivate bool
	// Allow lists networks that are reached even so, such as an internal
	// webhook receiver's 10.1.2.0/24.
	Allow []netip.Prefix
}

// denied is each network DenyPrivate refuses, with why.
var denied = []struct {
	prefix netip.Prefix
	reason string
}{
	{netip.MustParsePrefix("0.0.0.0/8"), "an unspecified (this-network) address"},
	{netip.MustParsePrefix("10.0.0.0/8"), "a private address"},
	{netip.MustParsePrefix("100.64.0.0/10"), "a carrier-grade NAT (shared) address"},
	{netip.MustParsePrefix("127.0.0.0/8"), "a loopback address"},
	{netip.MustParsePrefix("169.254.169.254/32"), "the cloud metadata address"},
	{netip.MustParsePrefix("169.254.0.0/16"), "a link-local address"},
	{netip.MustParsePrefix("172.16.0.0/12"), "a private address"},
	{netip.MustParsePrefix("192.0.0.0/24"), "an IETF protocol address"},
	{netip.MustParsePrefix("192.168.0.0/16"), "a private address"},
	{netip.MustParsePrefix("198.18.0.0/15"), "a benchmarking address"},
	{netip.MustParsePrefix("224.0.0.0/4"), "a multicast address"},
	{netip.MustParsePrefix("240.0.0.0/4"), "a reserved address"},
	{netip.MustParsePrefix("::/128"), "an unspecified address"},
	{netip.MustParsePrefix("::1/128"), "a loopback address"},
	{netip.MustParsePrefix("fd00:ec2::254/128"), "the cloud metadata address"},
	{netip.MustParsePrefix("fc00::/7"), "a private (unique local) address"},
	{netip.MustParsePrefix("fe80::/10"), "a link-local address"},
	{netip.MustParsePrefix("ff00::/8"), "a multicast address"},
}

// DeniedNetworks returns the networks DenyPrivate refuses.
func DeniedNetworks() []netip.Prefix {
	out := make([]netip.Prefix, len(denied))
	for i, d := range denied {
		out[i] = d.prefix
	}
	return out
}

// nat64 is the well-known NAT64 prefix: its addresses embed an IPv4
// address, which is what is really reached.
var nat64 = netip.MustParsePrefix("64:ff9b::/96")

// DeniedError is a connection the policy refused.
type DeniedError struct {
	Addr   netip.Addr
	Reason string
}

// Error says which address was refused and how to allow it.
func (e *DeniedError) Error() string {
	return fmt.Sprintf("egress to %s refused: it is %s; allow its network explicitly if it is meant to be reached", e.Addr, e.Reason)
}

// ErrDenied is what every *DeniedError matches with errors.Is.
var ErrDenied = errors.New("egress refused")

// Is makes errors.Is(err, ErrDenied) true for a *DeniedError.
func (e *DeniedError) Is(target error) bool { return target == ErrDenied }

// Check returns a *DeniedError when p refuses addr.
func (p Policy) Check(addr netip.Addr) error {
	if !p.DenyPrivate {
		return nil
	}
	addr = addr.Unmap().WithZone("")
	for _, a := range p.Allow {
		if a.Contains(addr) {
			return nil
		}
	}
	for _, d := range denied {
		if d.prefix.Contains(addr) {
			return &DeniedError{Addr: addr, Reason: d.reason}
		}
	}
	if nat64.Contains(addr) {
		b := addr.As16()
		var inner *DeniedError
		if err := p.Check(netip.AddrFrom4([4]byte{b[12], b[13], b[14], b[15]})); errors.As(err, &inner) {
			return &DeniedError{Addr: addr, Reason: inner.Reason + " behind NAT64"}
		}
	}
	return nil
}

// Control checks the address a dialer is about to connect to; it has the
// signature of net.Dialer.ControlContext.
func (p Policy) Control(_ context.Context, _, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		// The dialer passes a resolved IP and port; anything else cannot
		// be checked, so it is refused.
		return fmt.Errorf("egress: cannot check address %q: %w", address, err)
	}
	return p.Check(ap.Addr())
}

// Guard sets d to check every connection against p, keeping a Control
// function d already has. It returns d.
func (p Policy) Guard(d *net.Dialer) *net.Dialer {
	prev, prevCtx := d.Control, d.ControlContext
	d.Control = nil
	d.ControlContext = func(ctx context.Context, network, address string, c syscall.RawConn) error {
		if err := p.Control(ctx, network, address, c); err != nil {
			return err
		}
		switch {
		case prevCtx != nil:
			return prevCtx(ctx, network, address, c)
		case prev != nil:
			return prev(network, address, c)
		}
		return nil
	}
	return d
}

// ParsePrefix parses an allowed network: a CIDR (10.1.0.0/16, fd12::/64) or
// a single address. Its error says what to write.
func ParsePrefix(s string) (netip.Prefix, error) {
	if p, err := netip.ParsePrefix(s); err == nil {
		if p != p.Masked() {
			return netip.Prefix{}, fmt.Errorf("%q has host bits set: write the network, %s", s, p.Masked())
		}
		return p, nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("%q is not a network: use CIDR notation such as 10.1.0.0/16, or one IP address", s)
	}
	return netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()), nil
}

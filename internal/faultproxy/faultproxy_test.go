package faultproxy_test

import (
	"bufio"
	"context"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/outboxkit/outbox/internal/faultproxy"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// echo starts a line echo server.
func echo(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					if _, err := c.Write([]byte(line)); err != nil {
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().String()
}

// start starts a proxy to target, closed when t ends.
func start(t *testing.T, target string) *faultproxy.Proxy {
	t.Helper()
	p, err := faultproxy.Listen(context.Background(), target)
	require.NoError(t, err)
	t.Cleanup(p.Close)
	return p
}

func roundTrip(t *testing.T, c net.Conn) error {
	t.Helper()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Write([]byte("ping\n")); err != nil {
		return err
	}
	_, err := bufio.NewReader(c).ReadString('\n')
	return err
}

func TestProxyCutRefuseAllow(t *testing.T) {
	p := start(t, echo(t))
	c, err := net.Dial("tcp", p.Addr())
	require.NoError(t, err)
	defer c.Close()
	require.NoError(t, roundTrip(t, c))

	p.Cut()
	require.Error(t, roundTrip(t, c), "a cut connection fails")

	p.Refuse()
	c2, err := net.Dial("tcp", p.Addr())
	require.NoError(t, err) // the listener accepts, then hangs up
	require.Error(t, roundTrip(t, c2))
	_ = c2.Close()

	p.Allow()
	c3, err := net.Dial("tcp", p.Addr())
	require.NoError(t, err)
	defer c3.Close()
	require.NoError(t, roundTrip(t, c3))
	p.Close()
}

func TestProxyStall(t *testing.T) {
	p := start(t, echo(t))
	c, err := net.Dial("tcp", p.Addr())
	require.NoError(t, err)
	defer c.Close()
	require.NoError(t, roundTrip(t, c))

	arrived, release := p.Stall()
	done := make(chan error, 1)
	go func() { done <- roundTrip(t, c) }()
	<-arrived
	select {
	case err := <-done:
		t.Fatalf("a stalled round trip returned: %v", err)
	default:
	}
	release()
	require.NoError(t, <-done)
	release() // idempotent
}

func TestProxyBlackholeHeal(t *testing.T) {
	p := start(t, echo(t))
	c, err := net.Dial("tcp", p.Addr())
	require.NoError(t, err)
	defer c.Close()
	require.NoError(t, roundTrip(t, c))

	p.Blackhole()
	err = roundTrip(t, c)
	var netErr net.Error
	require.ErrorAs(t, err, &netErr, "a blackholed connection stays open and silent")
	require.True(t, netErr.Timeout(), "%v", err)
	c2, err := net.Dial("tcp", p.Addr())
	require.NoError(t, err, "a new connection opens")
	defer c2.Close()
	err = roundTrip(t, c2)
	require.ErrorAs(t, err, &netErr, "and nothing answers on it")
	require.True(t, netErr.Timeout(), "%v", err)

	p.Heal()
	err = roundTrip(t, c)
	require.ErrorAs(t, err, &netErr, "an old connection stays dead after the heal")
	require.True(t, netErr.Timeout(), "%v", err)
	c3, err := net.Dial("tcp", p.Addr())
	require.NoError(t, err)
	defer c3.Close()
	require.NoError(t, roundTrip(t, c3), "a new connection works after the heal")
	p.Close()
}

// Package faultproxy is a TCP proxy that injects network faults: put it
// between a client and a real server, then cut every connection, refuse new
// ones, stall what clients send, or blackhole the network (connections stay
// open and silent), to see the client lose its broker or database mid-run or
// find it hanging. outbox check runs its relays through one; the fault
// tests use it through internal/testutil/tcpproxy.
package faultproxy

import (
	"context"
	"fmt"
	"net"
	"sync"
	"time"
)

// dialTimeout bounds the proxy's dial to its target, so a target that is
// down refuses the client instead of holding it.
const dialTimeout = 10 * time.Second

// Proxy forwards connections from Addr to a target.
type Proxy struct {
	ln     net.Listener
	target string

	mu        sync.Mutex
	cond      *sync.Cond // signalled when stalled turns false
	conns     map[net.Conn]*link
	refuse    bool
	closed    bool
	stalled   bool
	blackhole bool
	arrived   chan struct{} // told once held client data arrives
	wg        sync.WaitGroup
	accepts   int
}

// link is one proxied connection: both of its sockets map to it.
type link struct {
	// dead is set when the link was blackholed: it forwards nothing, in
	// either direction, until it is closed.
	dead bool // guarded by Proxy.mu
}

// Listen listens on a free loopback port and forwards each connection to
// target (host:port) until Close.
func Listen(ctx context.Context, target string) (*Proxy, error) {
	ln, err := new(net.ListenConfig).Listen(ctx, "tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("fault proxy: %w", err)
	}
	p := &Proxy{ln: ln, target: target, conns: map[net.Conn]*link{}}
	p.cond = sync.NewCond(&p.mu)
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Accepted returns how many connections the proxy has forwarded.
func (p *Proxy) Accepted() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.accepts
}

// Addr is the host:port clients connect to.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		if p.refuse || p.closed {
			p.mu.Unlock()
			_ = client.Close()
			continue
		}
		p.accepts++
		if p.blackhole {
			// The connection opens, and nothing ever answers on it.
			l := &link{dead: true}
			p.conns[client] = l
			p.wg.Add(1)
			p.mu.Unlock()
			go p.pipe(client, client, l, false)
			continue
		}
		p.mu.Unlock()
		server, err := (&net.Dialer{Timeout: dialTimeout}).DialContext(context.Background(), "tcp", p.target)
		if err != nil {
			_ = client.Close()
			continue
		}
		l := &link{}
		p.mu.Lock()
		if p.refuse || p.closed {
			// Refuse or Close came while the server was dialled: their
			// Cut did not see this connection, so it must not outlive
			// them.
			p.mu.Unlock()
			_ = client.Close()
			_ = server.Close()
			continue
		}
		// Likewise a Blackhole: the connection is as dead as the others.
		l.dead = p.blackhole
		p.conns[client], p.conns[server] = l, l
		p.mu.Unlock()
		p.wg.Add(2)
		go p.pipe(client, server, l, false)
		go p.pipe(server, client, l, true)
	}
}

// pipe copies src to dst; data from the client (upstream) waits while the
// proxy is stalled, and a dead link drops whatever it reads.
func (p *Proxy) pipe(dst, src net.Conn, l *link, upstream bool) {
	defer p.wg.Done()
	defer func() {
		_ = dst.Close()
		_ = src.Close()
		p.mu.Lock()
		delete(p.conns, dst)
		delete(p.conns, src)
		p.mu.Unlock()
	}()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && p.isDead(l) {
			n = 0
		}
		if n > 0 && upstream && !p.hold() {
			return
		}
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return // a cut connection ends the copy
		}
	}
}

func (p *Proxy) isDead(l *link) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return l.dead
}

// hold waits while the proxy is stalled; it reports false when the proxy
// closed meanwhile.
func (p *Proxy) hold() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stalled {
		select {
		case p.arrived <- struct{}{}:
		default:
		}
	}
	for p.stalled {
		p.cond.Wait()
	}
	return !p.closed
}

// Stall holds back what clients send from now on, as a server that stopped
// answering would, until release is called. arrived receives once held data
// has arrived, so a test knows the client is now waiting.
func (p *Proxy) Stall() (arrived <-chan struct{}, release func()) {
	ch := make(chan struct{}, 1)
	p.mu.Lock()
	p.stalled, p.arrived = true, ch
	p.mu.Unlock()
	var once sync.Once
	return ch, func() { once.Do(p.resume) }
}

func (p *Proxy) resume() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stalled = false
	p.cond.Broadcast()
}

// Blackhole makes the network silent, as a partition does: every open
// connection stays open but forwards nothing more in either direction, and
// new connections are accepted (as a load balancer would) but never
// answered. Neither side sees an error; only a timeout of its own tells
// a client. The connections open now stay dead for good, as after a
// partition during which a firewall or NAT dropped its state; Heal lets
// new connections through again.
func (p *Proxy) Blackhole() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.blackhole = true
	for _, l := range p.conns {
		l.dead = true
	}
}

// Heal ends Blackhole: new connections are forwarded again. The ones that
// were open during the blackhole stay dead until the client closes them.
func (p *Proxy) Heal() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.blackhole = false
}

// Cut closes every open connection; new connections are still accepted.
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		_ = c.Close()
	}
}

// Refuse closes every open connection and refuses new ones until Allow: the
// server looks down.
func (p *Proxy) Refuse() {
	p.mu.Lock()
	p.refuse = true
	p.mu.Unlock()
	p.Cut()
}

// Allow accepts connections again after Refuse.
func (p *Proxy) Allow() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.refuse = false
}

// Close stops the proxy and waits for its goroutines.
func (p *Proxy) Close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	p.stalled = false
	p.cond.Broadcast()
	p.mu.Unlock()
	_ = p.ln.Close()
	p.Cut()
	p.wg.Wait()
}

// Package tcpproxy is a TCP proxy for fault tests: put it between a client
// and a real server, then cut every connection, refuse new ones, or stall
// what clients send, to see the client lose its broker or database mid-run
// or find it hanging.
package tcpproxy

import (
	"context"
	"net"
	"sync"
	"testing"
)

// Proxy forwards connections from Addr to a target.
type Proxy struct {
	ln     net.Listener
	target string

	mu      sync.Mutex
	cond    *sync.Cond // signalled when stalled turns false
	conns   map[net.Conn]struct{}
	refuse  bool
	closed  bool
	stalled bool
	arrived chan struct{} // told once held client data arrives
	wg      sync.WaitGroup
	accepts int
}

// Start listens on a free loopback port and forwards to target; the proxy
// is closed when t ends.
func Start(t testing.TB, target string) *Proxy {
	t.Helper()
	ln, err := new(net.ListenConfig).Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("tcpproxy: %v", err)
	}
	p := &Proxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	p.cond = sync.NewCond(&p.mu)
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.Close)
	return p
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
		p.mu.Unlock()
		server, err := new(net.Dialer).DialContext(context.Background(), "tcp", p.target)
		if err != nil {
			_ = client.Close()
			continue
		}
		p.track(client, server)
		p.wg.Add(2)
		go p.pipe(client, server, false)
		go p.pipe(server, client, true)
	}
}

func (p *Proxy) track(conns ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range conns {
		p.conns[c] = struct{}{}
	}
}

// pipe copies src to dst; data from the client (upstream) waits while the
// proxy is stalled.
func (p *Proxy) pipe(dst, src net.Conn, upstream bool) {
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

package mqttsink_test

import (
	"context"
	"net"
	"sync"
	"testing"
)

// stallProxy forwards TCP connections to a broker and can hold back what
// clients send, so a publish hangs at the destination the way it does when
// a broker stops answering. (internal/testutil/tcpproxy cuts and refuses
// connections but cannot stall them.)
type stallProxy struct {
	ln     net.Listener
	target string

	mu      sync.Mutex
	cond    *sync.Cond
	stalled bool
	notify  chan struct{} // receives once when held data arrives
	conns   map[net.Conn]struct{}
	wg      sync.WaitGroup
}

func startStallProxy(t *testing.T, target string) *stallProxy {
	t.Helper()
	ln, err := new(net.ListenConfig).Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("stall proxy: %v", err)
	}
	p := &stallProxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	p.cond = sync.NewCond(&p.mu)
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.close)
	return p
}

func (p *stallProxy) Addr() string { return p.ln.Addr().String() }

func (p *stallProxy) accept() {
	defer p.wg.Done()
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		server, err := new(net.Dialer).DialContext(context.Background(), "tcp", p.target)
		if err != nil {
			_ = client.Close()
			continue
		}
		p.mu.Lock()
		if p.conns == nil { // closed meanwhile
			p.mu.Unlock()
			_ = client.Close()
			_ = server.Close()
			return
		}
		p.conns[client], p.conns[server] = struct{}{}, struct{}{}
		p.mu.Unlock()
		p.wg.Add(2)
		go p.pipe(server, client, true)
		go p.pipe(client, server, false)
	}
}

// pipe copies src to dst; the client-to-server direction waits while the
// proxy is stalled.
func (p *stallProxy) pipe(dst, src net.Conn, upstream bool) {
	defer p.wg.Done()
	defer func() {
		_ = dst.Close()
		_ = src.Close()
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
			return
		}
	}
}

// hold blocks while the proxy is stalled; it reports false when the proxy
// closed meanwhile.
func (p *stallProxy) hold() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stalled && p.notify != nil {
		select {
		case p.notify <- struct{}{}:
		default:
		}
	}
	for p.stalled {
		p.cond.Wait()
	}
	return p.conns != nil
}

// Stall holds back client data from now on, until release.
func (p *stallProxy) Stall() (stalled <-chan struct{}, release func()) {
	ch := make(chan struct{}, 1)
	p.mu.Lock()
	p.stalled, p.notify = true, ch
	p.mu.Unlock()
	var once sync.Once
	return ch, func() {
		once.Do(func() {
			p.mu.Lock()
			p.stalled = false
			p.cond.Broadcast()
			p.mu.Unlock()
		})
	}
}

func (p *stallProxy) close() {
	_ = p.ln.Close()
	p.mu.Lock()
	p.stalled = false
	for c := range p.conns {
		_ = c.Close()
	}
	p.conns = nil
	p.cond.Broadcast()
	p.mu.Unlock()
	p.wg.Wait()
}

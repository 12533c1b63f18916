package redistest

import (
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
)

// Proxy forwards a loopback port to a server and can black-hole the traffic: the
// sockets stay open and every byte, either way, on every connection (new ones
// too), is read and dropped, as in a partition where nothing answers and nothing
// resets.
type Proxy struct {
	Port     int
	listener net.Listener
	hole     atomic.Bool
	cutReply atomic.Bool

	mu    sync.Mutex
	conns []net.Conn
}

// StartProxy forwards a free port to upstream (host:port); stopped when the test
// ends.
func StartProxy(t testing.TB, upstream string) *Proxy {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &Proxy{Port: l.Addr().(*net.TCPAddr).Port, listener: l}
	go p.accept(upstream)
	t.Cleanup(p.close)
	return p
}

// Addr is the proxy's host:port.
func (p *Proxy) Addr() string { return p.listener.Addr().String() }

// BlackHole drops everything from now on.
func (p *Proxy) BlackHole() { p.hole.Store(true) }

// CutNextReply drops the next reply the server sends and closes its connection
// both ways, as a network that breaks after the server ran a command.
func (p *Proxy) CutNextReply() { p.cutReply.Store(true) }

func (p *Proxy) accept(upstream string) {
	for {
		client, err := p.listener.Accept()
		if err != nil {
			return
		}
		server, err := net.Dial("tcp", upstream)
		if err != nil {
			_ = client.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, client, server)
		p.mu.Unlock()
		go p.forward(client, server, false)
		go p.forward(server, client, true)
	}
}

func (p *Proxy) forward(from, to net.Conn, replies bool) {
	buf := make([]byte, 32*1024)
	for {
		n, err := from.Read(buf)
		if n > 0 && replies && p.cutReply.CompareAndSwap(true, false) {
			_ = from.Close()
			_ = to.Close()
			return
		}
		if n > 0 && !p.hole.Load() {
			if _, err := to.Write(buf[:n]); err != nil {
				return
			}
		}
		if err != nil {
			if err == io.EOF && !p.hole.Load() {
				if tcp, ok := to.(*net.TCPConn); ok {
					_ = tcp.CloseWrite()
				}
			}
			return
		}
	}
}

func (p *Proxy) close() {
	_ = p.listener.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		_ = c.Close()
	}
}

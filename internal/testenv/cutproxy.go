package testenv

import (
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

// CutProxy is a TCP proxy on loopback whose link can be cut the way a
// network partition cuts it: Cut stops forwarding in both directions and
// keeps both sockets of every connection open, so that neither end sees a
// FIN or an RST, only silence; Restore forwards again, first the bytes
// held meanwhile, then a close that came during the cut (a server that
// ended the session), as TCP's retransmissions deliver them once the link
// returns. A connection opened during the cut is accepted (the kernel
// completes the handshake whatever the proxy does) and joined to the
// upstream when the link returns, like a SYN retransmitted until then.
//
// One difference from a dropped link: the proxy's kernel acknowledges what
// each end sends until the socket buffers fill, so TCP keepalives and
// TCP_USER_TIMEOUT do not notice the cut. Only the application's own
// timeouts do (a read deadline, PostgreSQL's
// idle_in_transaction_session_timeout and wal_sender_timeout), which makes
// it a test of those. toxiproxy cannot do this: disabling a proxy closes
// its connections, and its timeout toxic drops the bytes it holds back,
// which leaves a protocol out of step when the link returns.
type CutProxy struct {
	upstream string
	ln       net.Listener

	mu    sync.Mutex
	up    chan struct{} // closed while the link is up
	conns map[net.Conn]struct{}
	// ups are the connections to the upstream, for UpstreamPorts.
	ups map[net.Conn]struct{}

	closed chan struct{}
	wg     sync.WaitGroup
}

// StartCutProxy starts a proxy to upstream (host:port) with its link up,
// and stops it, closing every connection, when t ends.
func StartCutProxy(t testing.TB, upstream string) *CutProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("testenv: cut proxy: %v", err)
	}
	p := &CutProxy{upstream: upstream, ln: ln, up: make(chan struct{}), conns: map[net.Conn]struct{}{}, ups: map[net.Conn]struct{}{}, closed: make(chan struct{})}
	close(p.up)
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.stop)
	return p
}

// Addr is the proxy's address (host:port).
func (p *CutProxy) Addr() string { return p.ln.Addr().String() }

// Cut stops forwarding; the connections stay open.
func (p *CutProxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.up:
		p.up = make(chan struct{})
	default: // already cut
	}
}

// Restore forwards again.
func (p *CutProxy) Restore() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.up:
	default:
		close(p.up)
	}
}

// UpstreamPorts returns the local ports of the proxy's open connections to
// the upstream: what the server sees as its clients' ports (PostgreSQL's
// pg_stat_activity.client_port), to tell the sessions behind the proxy
// from the others.
func (p *CutProxy) UpstreamPorts() []int {
	p.mu.Lock()
	defer p.mu.Unlock()
	ports := make([]int, 0, len(p.ups))
	for c := range p.ups {
		ports = append(ports, c.LocalAddr().(*net.TCPAddr).Port)
	}
	return ports
}

// linkUp waits until the link is up; false when the proxy stopped.
func (p *CutProxy) linkUp() bool {
	p.mu.Lock()
	up := p.up
	p.mu.Unlock()
	select {
	case <-up:
		select {
		case <-p.closed:
			return false
		default:
			return true
		}
	case <-p.closed:
		return false
	}
}

func (p *CutProxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return // the listener is closed
		}
		if !p.track(c) {
			return
		}
		p.wg.Add(1)
		go p.join(c.(*net.TCPConn))
	}
}

// track records c so that stop closes it; false when the proxy stopped.
func (p *CutProxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.closed:
		_ = c.Close()
		return false
	default:
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *CutProxy) untrack(cs ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range cs {
		delete(p.conns, c)
		delete(p.ups, c)
		_ = c.Close()
	}
}

// join connects client to the upstream once the link is up and forwards
// both ways until both directions have ended.
func (p *CutProxy) join(client *net.TCPConn) {
	defer p.wg.Done()
	if !p.linkUp() {
		p.untrack(client)
		return
	}
	uc, err := net.DialTimeout("tcp", p.upstream, 10*time.Second)
	if err != nil {
		// The upstream refused: pass that on as an abortive close.
		_ = client.SetLinger(0)
		p.untrack(client)
		return
	}
	server := uc.(*net.TCPConn)
	if !p.track(server) {
		p.untrack(client)
		return
	}
	p.mu.Lock()
	p.ups[server] = struct{}{}
	p.mu.Unlock()
	var both sync.WaitGroup
	both.Add(2)
	go func() { defer both.Done(); p.pump(server, client) }()
	go func() { defer both.Done(); p.pump(client, server) }()
	both.Wait()
	p.untrack(client, server)
}

// pump copies src to dst while the link is up. Bytes read just before a
// cut are held until it ends; src's end (FIN or RST) is passed on to dst
// once the link is up.
func (p *CutProxy) pump(dst, src *net.TCPConn) {
	buf := make([]byte, 32<<10)
	for {
		if !p.linkUp() {
			return
		}
		n, err := src.Read(buf)
		if n > 0 || err != nil {
			if !p.linkUp() {
				return
			}
		}
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		switch {
		case err == nil:
		case errors.Is(err, io.EOF):
			_ = dst.CloseWrite()
			return
		default:
			_ = dst.SetLinger(0) // src was reset: reset dst too
			_ = dst.Close()
			return
		}
	}
}

// stop closes the listener and every connection and waits for the
// proxy's goroutines.
func (p *CutProxy) stop() {
	p.mu.Lock()
	close(p.closed)
	for c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	_ = p.ln.Close()
	p.wg.Wait()
}

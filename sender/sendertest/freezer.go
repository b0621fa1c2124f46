package sendertest

import (
	"io"
	"net"
	"sync"
	"testing"
)

// Freezer is a TCP proxy that can stop moving bytes without closing
// anything: a hung broker, or a network that silently drops packets,
// which a refused or reset connection (see Proxy.Down) does not simulate.
// Senders must turn such a hang into a transient error within their
// timeouts instead of blocking Send forever.
type Freezer struct {
	ln       net.Listener
	upstream string

	mu     sync.Mutex
	frozen bool
	thaw   chan struct{} // closed on unfreeze
	conns  []net.Conn
	closed bool
	wg     sync.WaitGroup
}

// NewFreezer starts a Freezer on a loopback port in front of upstream
// (host:port). It is closed when t ends.
func NewFreezer(t testing.TB, upstream string) *Freezer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &Freezer{ln: ln, upstream: upstream, thaw: make(chan struct{})}
	close(f.thaw)
	f.wg.Add(1)
	go f.accept()
	t.Cleanup(f.close)
	return f
}

// Addr is the address clients connect to instead of upstream.
func (f *Freezer) Addr() string { return f.ln.Addr().String() }

// Freeze holds every byte in both directions, and every new connection's
// dial, until Unfreeze.
func (f *Freezer) Freeze() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.frozen {
		f.frozen = true
		f.thaw = make(chan struct{})
	}
}

// Unfreeze lets bytes and dials move again.
func (f *Freezer) Unfreeze() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.frozen {
		f.frozen = false
		close(f.thaw)
	}
}

// gate returns a channel that is closed when bytes may move.
func (f *Freezer) gate() <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.thaw
}

func (f *Freezer) track(c net.Conn) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		c.Close()
		return false
	}
	f.conns = append(f.conns, c)
	return true
}

func (f *Freezer) accept() {
	defer f.wg.Done()
	for {
		c, err := f.ln.Accept()
		if err != nil {
			return
		}
		if !f.track(c) {
			return
		}
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			<-f.gate() // a frozen network does not complete handshakes either
			u, err := net.Dial("tcp", f.upstream)
			if err != nil {
				c.Close()
				return
			}
			if !f.track(u) {
				c.Close()
				return
			}
			f.wg.Add(2)
			go f.pipe(u, c)
			go f.pipe(c, u)
		}()
	}
}

// pipe copies src to dst, holding every chunk while frozen.
func (f *Freezer) pipe(dst, src net.Conn) {
	defer f.wg.Done()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			<-f.gate()
			if _, werr := dst.Write(buf[:n]); werr != nil {
				src.Close()
				return
			}
		}
		if err != nil {
			if err != io.EOF {
				dst.Close()
			} else if tc, ok := dst.(*net.TCPConn); ok {
				_ = tc.CloseWrite()
			}
			return
		}
	}
}

func (f *Freezer) close() {
	f.mu.Lock()
	f.closed = true
	conns := f.conns
	f.conns = nil
	if f.frozen {
		f.frozen = false
		close(f.thaw)
	}
	f.mu.Unlock()
	f.ln.Close()
	for _, c := range conns {
		c.Close()
	}
	f.wg.Wait()
}

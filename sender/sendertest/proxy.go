package sendertest

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/rs/zerolog"

	"github.com/txbox/txbox/internal/testenv"
)

// Proxy is the default [Faults]: an in-process toxiproxy listening on a
// loopback port in front of a destination's address. It is exported so
// sender packages can use it in their own focused tests.
type Proxy struct {
	mu    sync.Mutex
	p     *toxiproxy.Proxy
	toxic bool // a latency toxic is installed
}

// NewProxy starts a proxy in front of upstream (host:port) and stops it
// when t ends.
func NewProxy(t *testing.T, upstream string) *Proxy {
	t.Helper()
	srv := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(nil), zerolog.Nop())
	p := &Proxy{p: toxiproxy.NewProxy(srv, testenv.UniqueName("sendertest_"), "127.0.0.1:0", upstream)}
	if err := p.p.Start(); err != nil {
		t.Fatalf("sendertest: start proxy to %s: %v", upstream, err)
	}
	t.Cleanup(func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		// Off the live links first: a latency toxic still holding data
		// when its connection closes blocks its goroutine forever.
		p.removeToxic(t)
		p.p.Stop()
	})
	return p
}

// Addr implements [Faults].
func (p *Proxy) Addr() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.p.Listen
}

// SetLatency implements [Faults] with a toxiproxy latency toxic on the
// downstream (destination to sender) direction. It stays across Down and
// Up.
func (p *Proxy) SetLatency(t *testing.T, d time.Duration) {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.removeToxic(t)
	if d <= 0 {
		return
	}
	js := fmt.Sprintf(`{"name":"latency","type":"latency","stream":"downstream","attributes":{"latency":%d}}`, d.Milliseconds())
	if _, err := p.p.Toxics.AddToxicJson(strings.NewReader(js)); err != nil {
		t.Fatalf("sendertest: add latency toxic: %v", err)
	}
	p.toxic = true
}

// Down implements [Faults]: the proxy stops listening and closes every
// connection it carries. Like a real cut, it loses the data a latency
// toxic was holding back (acks the sender then never sees). Toxiproxy
// v2.5 leaves the goroutine that held such data blocked; a package that
// checks for leaks with goleak ignores
// "github.com/Shopify/toxiproxy/v2/toxics.(*LatencyToxic).Pipe".
func (p *Proxy) Down(t *testing.T) {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.p.Stop()
}

// Up implements [Faults]: the proxy listens again on the same address,
// with the same latency.
func (p *Proxy) Up(t *testing.T) {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	var err error
	// The port was just released; another process may grab it in
	// between, which would make the test fail loudly, not pass wrongly.
	deadline := time.Now().Add(5 * time.Second)
	for {
		if err = p.p.Start(); err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond) // retrying a bind, not waiting for an effect
	}
	if err != nil {
		t.Fatalf("sendertest: restart proxy on %s: %v", p.p.Listen, err)
	}
}

func (p *Proxy) removeToxic(t *testing.T) {
	t.Helper()
	if !p.toxic {
		return
	}
	if err := p.p.Toxics.RemoveToxic(context.Background(), "latency"); err != nil {
		t.Errorf("sendertest: remove latency toxic: %v", err)
	}
	p.toxic = false
}

// ClosedAddr returns a loopback host:port on which nothing listens: a
// port that was just bound and released.
func ClosedAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("sendertest: listen: %v", err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

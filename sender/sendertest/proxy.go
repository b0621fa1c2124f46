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
	mu      sync.Mutex
	p       *toxiproxy.Proxy
	latency time.Duration // wanted latency, kept across Down and Up
	toxic   bool          // a latency toxic is installed
	down    bool
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
// downstream (destination to sender) direction.
func (p *Proxy) SetLatency(t *testing.T, d time.Duration) {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.removeToxic(t)
	p.latency = max(d, 0)
	if !p.down {
		p.addToxic(t)
	}
}

// Down implements [Faults]: the proxy stops listening and closes every
// connection it carries.
func (p *Proxy) Down(t *testing.T) {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	// A latency toxic still holding data when its connection is closed
	// blocks its goroutine forever (toxiproxy v2.5): take it off the live
	// links first; Up puts it back.
	p.removeToxic(t)
	p.p.Stop()
	p.down = true
}

// Up implements [Faults]: the proxy listens again on the same address.
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
	p.down = false
	p.addToxic(t)
}

func (p *Proxy) addToxic(t *testing.T) {
	t.Helper()
	if p.latency <= 0 || p.toxic {
		return
	}
	js := fmt.Sprintf(`{"name":"latency","type":"latency","stream":"downstream","attributes":{"latency":%d}}`, p.latency.Milliseconds())
	if _, err := p.p.Toxics.AddToxicJson(strings.NewReader(js)); err != nil {
		t.Fatalf("sendertest: add latency toxic: %v", err)
	}
	p.toxic = true
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

package main

import (
	"context"
	"sync"
)

// useGate keeps a tenant's relay and store open while admin requests use
// them (admin.TenantStatus.Hold): its unit's Stop closes the gate, waits
// for the requests inside to leave (within the stop's deadline), and only
// then stops the relay and closes the store. Without it a request that
// took the tenant's store just before the tenant was parked or removed
// failed on a closed pool: a 5xx for an operator's read.
type useGate struct {
	mu      sync.Mutex
	inUse   int
	closing bool
	// drained is closed when the last request leaves a closing gate.
	drained chan struct{}
	// onUse is called at each entry and exit: a request is activity, so
	// a tenant an operator is looking at is not parked under them.
	onUse func()
}

// enter lets a request in; false once the gate is closing.
func (g *useGate) enter() (release func(), ok bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closing {
		return nil, false
	}
	g.inUse++
	g.use()
	var once sync.Once
	return func() { once.Do(g.leave) }, true
}

func (g *useGate) leave() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.inUse--
	g.use()
	if g.closing && g.inUse == 0 && g.drained != nil {
		close(g.drained)
		g.drained = nil
	}
}

func (g *useGate) use() {
	if g.onUse != nil {
		g.onUse()
	}
}

// close refuses new requests and waits for those inside to leave, or for
// ctx to end; it reports whether they left.
func (g *useGate) close(ctx context.Context) bool {
	g.mu.Lock()
	g.closing = true
	if g.inUse == 0 {
		g.mu.Unlock()
		return true
	}
	if g.drained == nil {
		g.drained = make(chan struct{})
	}
	drained := g.drained
	g.mu.Unlock()
	select {
	case <-drained:
		return true
	case <-ctx.Done():
		return false
	}
}

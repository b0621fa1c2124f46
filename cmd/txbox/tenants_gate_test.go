package main

import (
	"context"
	"testing"
	"time"
)

// TestUseGate: a closing gate refuses new requests, waits for those
// inside (the tenant's store stays open for them), gives up at its
// context's end, and each entry and exit counts as activity.
func TestUseGate(t *testing.T) {
	t.Parallel()
	uses := 0
	g := &useGate{onUse: func() { uses++ }}
	release, ok := g.enter()
	if !ok {
		t.Fatal("an open gate refused a request")
	}
	short, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	if g.close(short) {
		t.Fatal("close returned true with a request inside")
	}
	if _, ok := g.enter(); ok {
		t.Fatal("a closing gate let a request in")
	}
	closed := make(chan bool)
	go func() { closed <- g.close(context.Background()) }()
	select {
	case <-closed:
		t.Fatal("close returned before the request left")
	case <-time.After(20 * time.Millisecond):
	}
	release()
	release() // twice: counted once
	if !<-closed {
		t.Fatal("close did not see the request leave")
	}
	if g.inUse != 0 || uses != 2 {
		t.Errorf("in use %d, activity %d times; want 0 and 2 (entry and exit)", g.inUse, uses)
	}
	if !(&useGate{}).close(context.Background()) {
		t.Error("closing an unused gate did not return at once")
	}
}

package sender_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/sender"
)

func TestGateAdmitsUntilShut(t *testing.T) {
	t.Parallel()
	var g sender.Gate
	if g.Closed() {
		t.Fatal("a zero Gate is closed")
	}
	if err := g.Enter(); err != nil {
		t.Fatalf("Enter on an open gate: %v", err)
	}
	g.Leave()
	if !g.Shut() {
		t.Fatal("first Shut reported not first")
	}
	if g.Shut() {
		t.Fatal("second Shut reported first")
	}
	if !g.Closed() {
		t.Fatal("Closed after Shut = false")
	}
	if err := g.Enter(); !errors.Is(err, txbox.ErrClosed) {
		t.Fatalf("Enter after Shut = %v, want txbox.ErrClosed", err)
	}
	if err := g.Wait(context.Background()); err != nil {
		t.Fatalf("Wait with nothing inside: %v", err)
	}
}

func TestGateWaitsForSendsInside(t *testing.T) {
	t.Parallel()
	var g sender.Gate
	if err := g.Enter(); err != nil {
		t.Fatal(err)
	}
	g.Shut()
	waited := make(chan error, 1)
	go func() { waited <- g.Wait(context.Background()) }()
	select {
	case err := <-waited:
		t.Fatalf("Wait returned (%v) while a Send was inside", err)
	case <-time.After(50 * time.Millisecond): // a negative check: Wait must still be blocked
	}
	g.Leave()
	select {
	case err := <-waited:
		if err != nil {
			t.Fatalf("Wait after the last Leave: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Wait did not return after the last Leave")
	}
}

func TestGateWaitEndsWithContext(t *testing.T) {
	t.Parallel()
	var g sender.Gate
	if err := g.Enter(); err != nil {
		t.Fatal(err)
	}
	defer g.Leave() // ends the Wait goroutine, which goleak would report
	g.Shut()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := g.Wait(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait with a Send inside and a cancelled ctx = %v, want context.Canceled", err)
	}
}

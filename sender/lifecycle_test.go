package sender_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/sender"
)

func TestLifecycleAdmitsUntilShut(t *testing.T) {
	t.Parallel()
	var g sender.Lifecycle
	if g.Closed() {
		t.Fatal("a zero Lifecycle is closed")
	}
	if err := g.Enter(); err != nil {
		t.Fatalf("Enter on an open lifecycle: %v", err)
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

func TestLifecycleWaitsForSendsInside(t *testing.T) {
	t.Parallel()
	var g sender.Lifecycle
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

func TestLifecycleWaitEndsWithContext(t *testing.T) {
	t.Parallel()
	var g sender.Lifecycle
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

func TestLifecycleSend(t *testing.T) {
	t.Parallel()
	var g sender.Lifecycle
	msgs := []*sender.Message{{ID: txbox.NewID()}}
	inside := make(chan struct{})
	release := make(chan struct{})
	sent := make(chan error, 1)
	go func() {
		sent <- g.Send(context.Background(), "test sender", msgs, func(_ context.Context, got []*sender.Message) error {
			if len(got) != 1 || got[0] != msgs[0] {
				t.Errorf("send got %v, want the batch", got)
			}
			close(inside)
			<-release
			return nil
		})
	}()
	<-inside
	g.Shut()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := g.Wait(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait while send runs = %v, want it to wait (context.Canceled)", err)
	}
	close(release)
	if err := <-sent; err != nil {
		t.Fatalf("Send = %v", err)
	}
	if err := g.Wait(context.Background()); err != nil {
		t.Fatalf("Wait after send returned: %v", err)
	}

	called := false
	noSend := func(context.Context, []*sender.Message) error { called = true; return nil }
	if err := g.Send(context.Background(), "test sender", nil, noSend); err != nil || called {
		t.Fatalf("empty batch after Shut = %v (send called: %v), want nil without a send", err, called)
	}
	err := g.Send(context.Background(), "test sender", msgs, noSend)
	if !errors.Is(err, txbox.ErrClosed) || txbox.Classify(err) != txbox.ClassTransient || called {
		t.Fatalf("Send after Shut = %v (send called: %v), want transient txbox.ErrClosed", err, called)
	}
	if want := "test sender: " + txbox.ErrClosed.Error(); err.Error() != want {
		t.Fatalf("Send after Shut = %q, want %q", err, want)
	}
}

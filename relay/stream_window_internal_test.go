package relay

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/txbox/txbox/internal/testenv"
)

func TestHoldWindowBoundsEventsAndBytes(t *testing.T) {
	w := newHoldWindow(3, 100)
	ctx := context.Background()
	for _, size := range []int64{40, 40} {
		if err := w.acquire(ctx, size); err != nil {
			t.Fatal(err)
		}
	}
	// 40+40+40 > 100: the third waits for a release.
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if err := w.acquire(short, 40); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("over the byte bound: %v, want to wait", err)
	}
	got := make(chan error, 1)
	go func() { got <- w.acquire(ctx, 40) }()
	waitForWaiters(t, w, 1)
	w.release(40)
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	if n, b := w.held(); n != 2 || b != 80 {
		t.Fatalf("held %d events, %d bytes; want 2, 80", n, b)
	}
	// The event bound: three small ones fill it.
	if err := w.acquire(ctx, 1); err != nil {
		t.Fatal(err)
	}
	short2, cancel2 := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel2()
	if err := w.acquire(short2, 1); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("over the event bound: %v, want to wait", err)
	}
	// An event larger than the byte bound passes alone.
	w.release(40)
	w.release(40)
	w.release(1)
	if err := w.acquire(ctx, 1000); err != nil {
		t.Fatalf("a large event in an empty window: %v", err)
	}
}

// TestHoldWindowWakesEveryWaiter: releases that find no waiter make no
// channel, and a release after several readers started waiting wakes
// them all (each then takes what fits or waits again).
func TestHoldWindowWakesEveryWaiter(t *testing.T) {
	w := newHoldWindow(2, 1<<20)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for range 2 {
		if err := w.acquire(ctx, 1); err != nil {
			t.Fatal(err)
		}
	}
	w.release(1)
	before := w.freed
	w.release(1)
	if w.freed != before {
		t.Fatal("a release with nobody waiting replaced the channel")
	}
	for range 2 {
		if err := w.acquire(ctx, 1); err != nil {
			t.Fatal(err)
		}
	}
	got := make(chan error, 2)
	for range 2 {
		go func() { got <- w.acquire(ctx, 1) }()
	}
	waitForWaiters(t, w, 2)
	w.release(1)
	w.release(1)
	for range 2 {
		if err := <-got; err != nil {
			t.Fatalf("a waiter was not woken: %v", err)
		}
	}
	if n, _ := w.held(); n != 2 {
		t.Fatalf("held %d events, want 2", n)
	}
}

// waitForWaiters waits until n acquires of w are waiting for a release.
func waitForWaiters(t *testing.T, w *holdWindow, n int) {
	t.Helper()
	testenv.WaitFor(t, 5*time.Second, fmt.Sprintf("%d waiters", n), func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		return w.waiters == n
	})
}

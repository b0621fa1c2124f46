package startstop

import (
	"context"
	"errors"
	"testing"
	"time"
)

func closed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// TestLifetimeOrderlyStop: End ends Run, waits for the goroutines, runs
// the clean-up once, then closes Stopped.
func TestLifetimeOrderlyStop(t *testing.T) {
	var l Lifetime
	if closed(l.Started()) || closed(l.Stopped()) {
		t.Fatal("a new lifetime is started or stopped")
	}
	if err := l.Begin(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !closed(l.Started()) {
		t.Fatal("Started is open after Begin")
	}
	exited := make(chan struct{})
	l.Go(func() {
		<-l.Run().Done()
		if l.Hard().Err() != nil {
			t.Error("Hard ended on an orderly stop before the goroutines did")
		}
		time.Sleep(20 * time.Millisecond) // finishing what is in flight
		close(exited)
	})
	cleanups := 0
	last := func() {
		if !closed(exited) {
			t.Error("the clean-up ran before the goroutines ended")
		}
		cleanups++
	}
	if err := l.End(context.Background(), last); err != nil {
		t.Fatal(err)
	}
	if !closed(l.Stopped()) || l.Hard().Err() == nil {
		t.Fatal("after End: Stopped open or Hard still running")
	}
	if err := l.End(context.Background(), last); err != nil || cleanups != 1 {
		t.Fatalf("second End: %v, clean-ups %d; want nil and 1", err, cleanups)
	}
	if l.Go(func() { t.Error("ran after End") }) {
		t.Fatal("Go after End accepted")
	}
	var nested Lifetime
	if err := nested.Begin(context.Background()); err != nil {
		t.Fatal(err)
	}
	// A goroutine of the lifetime starts another while End waits (a
	// poller dispatching the batch it claimed): that one runs and End
	// waits for it too.
	finished := make(chan struct{})
	nested.Go(func() {
		<-nested.Run().Done()
		if !nested.Go(func() { time.Sleep(20 * time.Millisecond); close(finished) }) {
			t.Error("Go from a goroutine of the lifetime refused while End waits")
		}
	})
	if err := nested.End(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	if !closed(finished) {
		t.Fatal("End returned before the goroutine started while it waited")
	}
	if err := l.Begin(context.Background()); !errors.Is(err, ErrStopped) {
		t.Fatalf("Begin after End: %v, want ErrStopped", err)
	}
}

// TestLifetimeHardStop: when End's context ends first, Hard ends and End
// still waits for the goroutines before it returns the context's error.
func TestLifetimeHardStop(t *testing.T) {
	var l Lifetime
	if err := l.Begin(context.Background()); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	l.Go(func() {
		<-l.Hard().Done() // a send that only a hard stop cuts short
		close(exited)
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	err := l.End(ctx, nil)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("End: %v, want DeadlineExceeded", err)
	}
	if !closed(exited) || !closed(l.Stopped()) {
		t.Fatal("End returned before the goroutine ended")
	}
	if err := l.End(context.Background(), nil); err != nil {
		t.Fatalf("a later End after a hard stop: %v, want nil (stopped)", err)
	}
}

// TestLifetimeMisuse: End before Begin and Begin twice are errors; a
// lifetime ended before it began never begins.
func TestLifetimeMisuse(t *testing.T) {
	var never Lifetime
	if err := never.End(context.Background(), nil); !errors.Is(err, ErrNotStarted) {
		t.Fatalf("End before Begin: %v", err)
	}
	if !closed(never.Stopped()) {
		t.Fatal("Stopped open after End before Begin")
	}
	if err := never.Begin(context.Background()); !errors.Is(err, ErrStopped) {
		t.Fatalf("Begin after End: %v, want ErrStopped", err)
	}
	var l Lifetime
	if l.Go(func() {}) {
		t.Fatal("Go before Begin accepted")
	}
	if err := l.Begin(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := l.Begin(context.Background()); !errors.Is(err, ErrAlreadyStarted) {
		t.Fatalf("Begin twice: %v", err)
	}
	_ = l.End(context.Background(), nil)
}

// TestLifetimeConcurrentEnd: a second End while the first waits returns
// the first's result once it is done, and times out on its own context.
func TestLifetimeConcurrentEnd(t *testing.T) {
	var l Lifetime
	if err := l.Begin(context.Background()); err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	l.Go(func() { <-release })
	first := make(chan error)
	go func() { first <- l.End(context.Background(), nil) }()
	for !func() bool { l.mu.Lock(); defer l.mu.Unlock(); return l.ending }() {
		time.Sleep(time.Millisecond)
	}
	short, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	if err := l.End(short, nil); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("second End while the first waits: %v, want its own deadline", err)
	}
	close(release)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if err := l.End(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
}

// TestLifetimeBaseEndsRunOnly: the end of Begin's base ends Run at once
// (a consumer's Run(ctx) stops taking work when ctx ends) but not Hard:
// only End's context cuts work short.
func TestLifetimeBaseEndsRunOnly(t *testing.T) {
	base, cancel := context.WithCancel(context.Background())
	var l Lifetime
	if err := l.Begin(base); err != nil {
		t.Fatal(err)
	}
	cancel()
	if l.Run().Err() == nil {
		t.Fatal("Run outlived its base")
	}
	if l.Hard().Err() != nil {
		t.Fatal("Hard ended with the base; only End's context may end it")
	}
	if err := l.End(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	if l.Hard().Err() == nil {
		t.Fatal("Hard outlived End")
	}
}

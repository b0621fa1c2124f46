package inboxtest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/inbox"
	"github.com/txbox/txbox/store"
)

func testCleanupBoundary(t *testing.T, h Harness) {
	e := newInboxEnv(t, h)
	ctx := context.Background()
	const ttl = time.Hour
	const consumer = "ttl"
	in := e.newInbox(t, inbox.Config{Consumer: consumer, TTL: ttl})
	old, young, fresh := txbox.NewID(), txbox.NewID(), txbox.NewID()
	extra := newIDs(4)
	for _, id := range append([]txbox.ID{old, young, fresh}, extra...) {
		if r, err := in.Handle(ctx, inbox.Message{ID: id}, e.handler(consumer)); err != nil || r != inbox.Processed {
			t.Fatalf("Handle: %v %v", r, err)
		}
	}
	// One second on either side of the edge: the database clock moves
	// during the test, so a closer margin would make the test flaky, not
	// stricter.
	e.h.AgeInbox(t, e.ns, consumer, old, ttl+time.Second)
	e.h.AgeInbox(t, e.ns, consumer, young, ttl-time.Second)
	for _, id := range extra {
		e.h.AgeInbox(t, e.ns, consumer, id, 2*ttl)
	}
	// Bounded: Limit caps one call.
	n, err := e.st.InboxCleanup(ctx, &store.CleanupParams{OlderThan: ttl, Limit: 3})
	if err != nil || n != 3 {
		t.Fatalf("InboxCleanup(limit 3) = %d, %v; want 3", n, err)
	}
	n, err = e.st.InboxCleanup(ctx, &store.CleanupParams{OlderThan: ttl, Limit: 100})
	if err != nil || n != 2 {
		t.Fatalf("second InboxCleanup = %d, %v; want the remaining 2", n, err)
	}
	if n := e.h.CountInbox(t, e.ns, consumer); n != 2 {
		t.Errorf("inbox rows left = %d, want 2 (young, fresh)", n)
	}
	// An expired id is processed again; a young one is still a duplicate.
	if r, err := in.Handle(ctx, inbox.Message{ID: old}, e.handler(consumer)); err != nil || r != inbox.Processed {
		t.Errorf("expired id: %v, %v; want processed", r, err)
	}
	if r, err := in.Handle(ctx, inbox.Message{ID: young}, e.handler(consumer)); err != nil || r != inbox.Duplicate {
		t.Errorf("young id: %v, %v; want duplicate", r, err)
	}
	if _, err := e.st.InboxCleanup(ctx, &store.CleanupParams{OlderThan: ttl, Limit: 0}); err == nil {
		t.Error("InboxCleanup with limit 0: want an error")
	}
}

func testCleanerLease(t *testing.T, h Harness) {
	e := newInboxEnv(t, h)
	ctx := context.Background()
	const consumer = "cleaner"
	in := e.newInbox(t, inbox.Config{Consumer: consumer})
	batch := newIDs(7)
	for _, id := range batch {
		if r, err := in.Handle(ctx, inbox.Message{ID: id}, e.handler(consumer)); err != nil || r != inbox.Processed {
			t.Fatalf("Handle: %v %v", r, err)
		}
		e.h.AgeInbox(t, e.ns, consumer, id, 48*time.Hour)
	}
	mk := func(holder string) *inbox.Cleaner {
		c, err := inbox.NewCleaner(e.st, e.st, inbox.CleanerConfig{Holder: holder, BatchSize: 2, LeaseName: "inboxtest-cleanup", MinDelay: time.Millisecond, MaxDelay: 20 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	a, b := mk("a"), mk("b")
	n, held, err := a.RunOnce(ctx)
	if err != nil || !held || n != 7 {
		t.Fatalf("a.RunOnce = %d, %v, %v; want 7 deleted in bounded batches under the lease", n, held, err)
	}
	// b cannot run while a holds the lease.
	n, held, err = b.RunOnce(ctx)
	if err != nil || held || n != 0 {
		t.Fatalf("b.RunOnce = %d, %v, %v; want lease not held", n, held, err)
	}
	// a runs in the background, deletes newly expired ids, and releases
	// the lease on Stop so b can take over.
	late := txbox.NewID()
	if _, err := in.Handle(ctx, inbox.Message{ID: late}, e.handler(consumer)); err != nil {
		t.Fatal(err)
	}
	e.h.AgeInbox(t, e.ns, consumer, late, 48*time.Hour)
	if err := a.Start(ctx); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for e.h.CountInbox(t, e.ns, consumer) != 0 {
		if time.Now().After(deadline) {
			t.Fatal("background cleaner did not delete the expired id within 30s")
		}
		time.Sleep(5 * time.Millisecond) // polling a condition, not waiting for luck
	}
	stopCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := a.Stop(stopCtx); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if err := a.Start(ctx); !errors.Is(err, txbox.ErrClosed) {
		t.Errorf("Start after Stop = %v, want ErrClosed", err)
	}
	if _, held, err := b.RunOnce(ctx); err != nil || !held {
		t.Errorf("b.RunOnce after a stopped = held %v, %v; want the lease", held, err)
	}
}

package relay_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/internal/testenv"
	"github.com/txbox/txbox/relay"
	"github.com/txbox/txbox/sender"
	"github.com/txbox/txbox/store"
	"github.com/txbox/txbox/store/postgres"
)

func TestDeliversConfiguredAndDiscoveredTypes(t *testing.T) {
	t.Parallel()
	b := setup(t)
	orders := b.publish(t, "orders", 450, func(i int, ev *txbox.Event) {
		ev.Key = "k1"
		ev.Headers = map[string]string{"x-own": "yes"}
	})
	unlisted := b.publish(t, "unlisted.type", 30, nil)
	var polls atomic.Int64
	hook := &recordingHook{}
	b.start(t, func(c *relay.Config) {
		c.Defaults.Route = &sender.Route{Subject: "ev.{event_type}"}
		c.Defaults.Retention = new(time.Duration(0))
		c.Events = map[string]relay.EventSettings{
			"orders": {BatchSize: new(100), Route: &sender.Route{Subject: "orders-subject"}},
		}
		c.Hooks = []txbox.RelayHook{hook, pollCounter{&polls}}
	})
	all := append(append([]txbox.ID{}, orders...), unlisted...)
	testenv.WaitFor(t, 20*time.Second, "every event delivered", func() bool { return containsAll(b.sender.ids(), all) })
	testenv.WaitFor(t, 10*time.Second, "outbox empty (deleted on ack)", func() bool { return b.count(t, "outbox", "true") == 0 })

	if ids, total := b.sender.distinct(); ids != len(all) || total != len(all) {
		t.Errorf("delivered %d distinct / %d total, want %d / %d (no duplicates without a crash)", ids, total, len(all), len(all))
	}
	m := b.sender.deliveries(orders[7])[0].msg
	if m.Route.Subject != "orders-subject" || m.Key != "k1" || m.Attempt != 1 || m.EventType != "orders" {
		t.Errorf("orders message = %+v", m)
	}
	if m.Headers["x-own"] != "yes" || m.Headers[txbox.HeaderEventID] != orders[7].String() || m.Headers[txbox.HeaderEventType] != "orders" {
		t.Errorf("headers = %v", m.Headers)
	}
	if ts, err := time.Parse(time.RFC3339Nano, m.Headers[txbox.HeaderCreatedAt]); err != nil || !ts.Equal(m.CreatedAt) {
		t.Errorf("created-at header %q (%v) does not match CreatedAt %v", m.Headers[txbox.HeaderCreatedAt], err, m.CreatedAt)
	}
	if string(m.Payload) != `{"n":7}` {
		t.Errorf("payload = %q", m.Payload)
	}
	u := b.sender.deliveries(unlisted[0])[0].msg
	if u.Route.Subject != "ev.unlisted.type" {
		t.Errorf("default route for an unlisted type = %+v", u.Route)
	}
	if polls.Load() == 0 {
		t.Error("OnPoll hook never called")
	}
	// A batch's hook runs after its finish committed: the outbox can be
	// empty before the last OnBatch ran.
	testenv.WaitFor(t, 10*time.Second, "OnBatch counting every event", func() bool { return hook.sent() >= len(all) })
	if sent := hook.sent(); sent != len(all) {
		t.Errorf("OnBatch counted %d sent, want %d", sent, len(all))
	}
}

func TestRollbackNeverDelivered(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	tx, err := b.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	rolledBack := &txbox.Event{ID: txbox.NewID(), Type: "orders", Payload: []byte("x")}
	if err := b.store.OutboxInsert(ctx, tx, &store.OutboxInsertParams{Events: []*txbox.Event{rolledBack}}); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	b.start(t, nil)
	// A committed event published after the rolled-back one is a marker:
	// once it arrived, the relay has polled past the rollback.
	marker := b.publish(t, "orders", 1, nil)
	testenv.WaitFor(t, 10*time.Second, "marker delivered", func() bool { return containsAll(b.sender.ids(), marker) })
	if n := len(b.sender.deliveries(rolledBack.ID)); n != 0 {
		t.Fatalf("rolled-back event delivered %d times", n)
	}
}

func TestDelayedEventNotBeforeItsTime(t *testing.T) {
	t.Parallel()
	b := setup(t)
	notBefore := time.Now().Add(1500 * time.Millisecond)
	delayed := b.publish(t, "orders", 1, func(_ int, ev *txbox.Event) { ev.NotBefore = notBefore })
	now := b.publish(t, "orders", 1, nil)
	b.start(t, nil)
	testenv.WaitFor(t, 10*time.Second, "delayed event delivered", func() bool { return containsAll(b.sender.ids(), delayed) })
	if at := b.sender.deliveries(delayed[0])[0].at; at.Before(notBefore) {
		t.Errorf("delayed event delivered at %v, %v before its time", at, notBefore.Sub(at))
	}
	if at := b.sender.deliveries(now[0]); len(at) != 1 || !at[0].at.Before(notBefore) {
		t.Errorf("the undelayed event waited for the delayed one: %v", at)
	}
}

func TestRetryScheduleThenDeadLetter(t *testing.T) {
	t.Parallel()
	eachClaim(t, func(t *testing.T, b *bundle) {
		ids := b.publish(t, "orders", 5, nil)
		poison := ids[2]
		b.sender.setBehave(func(_ context.Context, msgs []*sender.Message) error {
			errs := make([]error, len(msgs))
			for i, m := range msgs {
				if m.ID == poison {
					errs[i] = errors.New("422 unprocessable: bad schema")
				}
			}
			return &sender.BatchError{Errs: errs}
		})
		b.start(t, func(c *relay.Config) {
			c.Defaults.MaxAttempts = new(3)
			c.Defaults.Backoff = &relay.BackoffSettings{Delay: new(200 * time.Millisecond), Multiplier: new(2.0), Max: new(time.Minute)}
		})
		testenv.WaitFor(t, 20*time.Second, "poison dead-lettered", func() bool { return b.count(t, "dead_letter", "id = $1", poison) == 1 })

		tries := b.sender.deliveries(poison)
		if len(tries) != 3 {
			t.Fatalf("poison tried %d times, want max-attempts 3", len(tries))
		}
		for i, d := range tries {
			if d.msg.Attempt != i+1 {
				t.Errorf("try %d has Attempt %d", i+1, d.msg.Attempt)
			}
		}
		// Retry n waits 200ms×2^(n-1): ≥200ms, then ≥400ms. The upper bound
		// allows for polling and scheduling, not for a missed retry.
		for i, want := range []time.Duration{200 * time.Millisecond, 400 * time.Millisecond} {
			gap := tries[i+1].at.Sub(tries[i].at)
			if gap < want-20*time.Millisecond || gap > want+2*time.Second {
				t.Errorf("gap before retry %d = %v, want about %v", i+1, gap, want)
			}
		}
		dl, err := b.store.DeadLetterGet(context.Background(), poison)
		if err != nil {
			t.Fatal(err)
		}
		if dl.Attempts != 3 || !strings.Contains(dl.LastError, "422 unprocessable") {
			t.Errorf("dead letter = attempts %d, last error %q", dl.Attempts, dl.LastError)
		}
		for _, id := range ids {
			if id != poison && len(b.sender.deliveries(id)) != 1 {
				t.Errorf("healthy event %v delivered %d times", id, len(b.sender.deliveries(id)))
			}
		}
		if n := b.count(t, "dead_letter", "true"); n != 1 {
			t.Errorf("%d dead letters, want only the poison", n)
		}
	})
}

func TestPermanentErrorDeadLettersAtOnce(t *testing.T) {
	t.Parallel()
	eachClaim(t, func(t *testing.T, b *bundle) {
		ids := b.publish(t, "orders", 1, nil)
		b.sender.setBehave(func(context.Context, []*sender.Message) error {
			return txbox.Permanent(errors.New("message too large"))
		})
		b.start(t, nil)
		testenv.WaitFor(t, 10*time.Second, "dead-lettered", func() bool { return b.count(t, "dead_letter", "id = $1", ids[0]) == 1 })
		if n := len(b.sender.deliveries(ids[0])); n != 1 {
			t.Errorf("permanent failure tried %d times, want 1", n)
		}
	})
}

func TestOutageOpensCircuitWithoutBurningAttempts(t *testing.T) {
	t.Parallel()
	eachClaim(t, func(t *testing.T, b *bundle) {
		var down atomic.Bool
		down.Store(true)
		b.sender.setBehave(func(context.Context, []*sender.Message) error {
			if down.Load() {
				return txbox.Transient(errors.New("connection refused"))
			}
			return nil
		})
		hook := &recordingHook{}
		r := b.start(t, func(c *relay.Config) {
			c.Defaults.MaxAttempts = new(2)
			c.Events = map[string]relay.EventSettings{"a": {}, "b": {}}
			c.Hooks = []txbox.RelayHook{hook}
		})
		idsA := b.publish(t, "a", 300, nil)
		idsB := b.publish(t, "b", 300, nil)
		testenv.WaitFor(t, 10*time.Second, "circuit open", func() bool { return destCircuit(t, r.Health(), "test", "").State == txbox.CircuitOpen })
		// Let several cool-downs and probes pass while the destination is down.
		testenv.WaitFor(t, 10*time.Second, "three failed probes", func() bool { return hook.count(txbox.CircuitOpen) >= 4 })
		if h := r.Health(); !h.Degraded || !strings.Contains(destCircuit(t, h, "test", "").LastError, "connection refused") {
			t.Errorf("health during the outage = %+v", h)
		}
		if n := b.count(t, "outbox", "attempts > 0"); n != 0 {
			t.Errorf("%d rows had attempts burned by an outage", n)
		}
		if n := b.count(t, "dead_letter", "true") + b.count(t, "outbox", "status = 'FAILED'"); n != 0 {
			t.Errorf("%d rows failed during an outage", n)
		}
		// Pollers pause while the circuit is open: the sender sees probes, not
		// a flood. 600 rows in batches of 200 would be 3+ sends per round.
		b.sender.mu.Lock()
		sendsDuringOutage := b.sender.sends
		b.sender.mu.Unlock()
		opens := hook.count(txbox.CircuitOpen)
		if sendsDuringOutage > 2*(opens+1)*relay.DefaultInFlight {
			t.Errorf("%d sends for %d circuit openings: pollers did not pause", sendsDuringOutage, opens)
		}
		down.Store(false)
		all := append(idsA, idsB...)
		testenv.WaitFor(t, 20*time.Second, "backlog drained after the outage", func() bool { return containsAll(b.sender.ids(), all) })
		testenv.WaitFor(t, 10*time.Second, "circuit closed", func() bool { return destCircuit(t, r.Health(), "test", "").State == txbox.CircuitClosed })
		if hook.count(txbox.CircuitHalfOpen) == 0 || hook.count(txbox.CircuitClosed) == 0 {
			t.Errorf("circuit events: %v", hook.circuitStates())
		}
		for _, id := range all[:5] {
			ds := b.sender.deliveries(id)
			if last := ds[len(ds)-1].msg; last.Attempt != 1 {
				t.Errorf("after the outage %v is delivered as attempt %d, want 1", id, last.Attempt)
			}
		}
		if n := b.count(t, "dead_letter", "true"); n != 0 {
			t.Errorf("%d dead letters after an outage", n)
		}
	})
}

func TestPartialTransientReleasesOnlyThose(t *testing.T) {
	t.Parallel()
	eachClaim(t, func(t *testing.T, b *bundle) {
		ids := b.publish(t, "orders", 4, nil)
		var once sync.Once
		flaky := ids[1]
		b.sender.setBehave(func(_ context.Context, msgs []*sender.Message) error {
			errs := make([]error, len(msgs))
			failed := false
			for i, m := range msgs {
				if m.ID == flaky {
					once.Do(func() { errs[i] = txbox.Transient(errors.New("partition leader moved")); failed = true })
				}
			}
			if !failed {
				return nil
			}
			return &sender.BatchError{Errs: errs}
		})
		b.start(t, nil)
		testenv.WaitFor(t, 10*time.Second, "flaky event delivered", func() bool { return len(b.sender.deliveries(flaky)) == 2 })
		if a := b.sender.deliveries(flaky)[1].msg.Attempt; a != 1 {
			t.Errorf("released message came back as attempt %d, want 1", a)
		}
		for _, id := range ids {
			if id != flaky && len(b.sender.deliveries(id)) != 1 {
				t.Errorf("%v delivered %d times", id, len(b.sender.deliveries(id)))
			}
		}
	})
}

// TestLeaseCutCountsNoAttempt: a send the relay itself cuts short at the
// end of the lease says nothing about the messages it had not finished,
// even while the destination acks other batches: they are released
// without an attempt, never dead-lettered for it. Before, a batch larger
// than its lease could carry (a loaded machine, a slow consumer) had every
// message past the cut counted as failing, and dead-lettered after
// max-attempts. A message that hangs the destination is the sender's
// timeout's to judge, which counts.
func TestLeaseCutCountsNoAttempt(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var cuts atomic.Int32
	b.sender.setBehave(func(ctx context.Context, msgs []*sender.Message) error {
		if msgs[0].EventType == "fast" || cuts.Load() >= 4 {
			return nil // acked: the destination works
		}
		<-ctx.Done() // slow until the lease's deadline cuts the send
		cuts.Add(1)
		return txbox.Transient(ctx.Err())
	})
	slow := b.publish(t, "slow", 5, nil)
	b.start(t, func(c *relay.Config) {
		c.Defaults.LeaseDuration = new(time.Second)
		c.Defaults.MaxAttempts = new(2)
		c.Events = map[string]relay.EventSettings{"slow": {}, "fast": {}}
	})
	// Acks of other batches keep coming while the slow batch is cut.
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
				b.publish(t, "fast", 1, nil)
			}
		}
	}()
	testenv.WaitFor(t, 60*time.Second, "slow events settled", func() bool {
		return b.count(t, "outbox", "event_type = 'slow' AND status IN ('PROCESSED', 'FAILED')")+b.count(t, "dead_letter", "true") == len(slow)
	})
	close(stop)
	<-done
	if n := b.count(t, "dead_letter", "true") + b.count(t, "outbox", "status = 'FAILED'"); n != 0 {
		t.Errorf("%d rows dead-lettered for sends the lease cut short", n)
	}
	for _, id := range slow {
		ds := b.sender.deliveries(id)
		if last := ds[len(ds)-1].msg; last.Attempt != 1 {
			t.Errorf("%v delivered as attempt %d after %d lease cuts, want 1", id, last.Attempt, cuts.Load())
		}
	}
}

func TestStopReleasesInFlightBatch(t *testing.T) {
	t.Parallel()
	eachClaim(t, func(t *testing.T, b *bundle) {
		ids := b.publish(t, "orders", 20, nil)
		entered := make(chan struct{}, 1)
		b.sender.setBehave(func(ctx context.Context, msgs []*sender.Message) error {
			select {
			case entered <- struct{}{}:
			default:
			}
			<-ctx.Done() // a destination that never acks
			return txbox.Transient(ctx.Err())
		})
		r := b.start(t, nil)
		<-entered
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		start := time.Now()
		if err := r.Stop(ctx); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Stop = %v, want deadline exceeded", err)
		}
		if took := time.Since(start); took > 3*time.Second {
			t.Errorf("Stop took %v with a 300ms deadline", took)
		}
		if n := b.count(t, "outbox", "status = 'PENDING' AND attempts = 0"); n != len(ids) {
			t.Errorf("%d of %d rows released as PENDING with no attempt counted", n, len(ids))
		}
		if err := r.Stop(context.Background()); err != nil {
			t.Errorf("second Stop = %v", err)
		}
	})
}

func TestGracefulStopFinishesInFlight(t *testing.T) {
	t.Parallel()
	eachClaim(t, func(t *testing.T, b *bundle) {
		ids := b.publish(t, "orders", 20, nil)
		entered := make(chan struct{})
		release := make(chan struct{})
		var once sync.Once
		b.sender.setBehave(func(ctx context.Context, msgs []*sender.Message) error {
			once.Do(func() { close(entered) })
			<-release
			return nil
		})
		r := b.start(t, func(c *relay.Config) { c.Defaults.Retention = new(time.Duration(0)) })
		<-entered
		stopped := make(chan error, 1)
		go func() { stopped <- r.Stop(context.Background()) }()
		close(release)
		if err := <-stopped; err != nil {
			t.Fatal(err)
		}
		if n := b.count(t, "outbox", "true"); n != 0 {
			t.Errorf("%d rows left after a graceful stop with all sends acked", n)
		}
		if got, _ := b.sender.distinct(); got != len(ids) {
			t.Errorf("delivered %d, want %d", got, len(ids))
		}
	})
}

func TestWakeSkipsThePollingDelay(t *testing.T) {
	t.Parallel()
	b := setup(t)
	r := b.startWakeOnly(t)
	ids := b.publish(t, "orders", 1, nil)
	r.Wake("orders")
	testenv.WaitFor(t, 5*time.Second, "woken delivery", func() bool { return containsAll(b.sender.ids(), ids) })
	// A type without a poller gets one on a wake-up.
	other := b.publish(t, "fresh", 1, nil)
	r.Wake("fresh")
	testenv.WaitFor(t, 5*time.Second, "new type delivered on wake", func() bool { return containsAll(b.sender.ids(), other) })
}

// TestWakeBeforeCommit: an in-process publisher wakes the relay from
// inside its transaction (outbox.Config.OnPublish), before the commit. The
// follow-up polls after an empty woken poll pick the event up soon after
// the commit, not at the next regular poll an hour later.
func TestWakeBeforeCommit(t *testing.T) {
	t.Parallel()
	b := setup(t)
	r := b.startWakeOnly(t)
	ctx := context.Background()
	tx, err := b.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ev := &txbox.Event{ID: txbox.NewID(), Type: "orders", Payload: []byte("x")}
	if err := b.store.OutboxInsert(ctx, tx, &store.OutboxInsertParams{Events: []*txbox.Event{ev}}); err != nil {
		t.Fatal(err)
	}
	woken := time.Now()
	r.Wake("orders") // before the commit, as OnPublish does
	// The woken poll must have run, and found nothing, before the row
	// becomes visible: that is the case the follow-up polls are for.
	testenv.WaitFor(t, 5*time.Second, "the woken poll returned", func() bool {
		h := r.Health()
		return len(h.Types) == 1 && h.Types[0].LastPoll.After(woken)
	})
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	committed := time.Now()
	testenv.WaitFor(t, 5*time.Second, "delivery after a pre-commit wake", func() bool { return len(b.sender.deliveries(ev.ID)) == 1 })
	t.Logf("picked up %v after the commit", b.sender.deliveries(ev.ID)[0].at.Sub(committed))
}

func TestListenNotifyWakesRelay(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.startWakeOnly(t)
	// The listener connects asynchronously; keep publishing with NOTIFY
	// until one arrives (each publish is a fresh event).
	ctx := context.Background()
	testenv.WaitForEvery(t, 10*time.Second, 200*time.Millisecond, "a delivery through LISTEN/NOTIFY", func() bool {
		if len(b.sender.ids()) > 0 {
			return true
		}
		tx, err := b.pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		ev := &txbox.Event{ID: txbox.NewID(), Type: "orders", Payload: []byte("n")}
		if err := b.store.OutboxInsert(ctx, tx, &store.OutboxInsertParams{Events: []*txbox.Event{ev}, Notify: true}); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		return testenv.Within(200*time.Millisecond, 5*time.Millisecond, func() bool { return len(b.sender.ids()) > 0 })
	})
}

func TestExpiredLeaseIsRecoveredWithoutAttempt(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ids := b.publish(t, "orders", 3, nil)
	// A relay that claimed and crashed.
	rows, err := b.store.OutboxClaim(context.Background(), &store.OutboxClaimParams{EventType: "orders", Limit: 10, LeaseDuration: time.Second})
	if err != nil || len(rows) != 3 {
		t.Fatalf("claim: %d rows, %v", len(rows), err)
	}
	claimedAt := time.Now()
	b.start(t, nil)
	testenv.WaitFor(t, 10*time.Second, "recovered rows delivered", func() bool { return containsAll(b.sender.ids(), ids) })
	for _, id := range ids {
		d := b.sender.deliveries(id)[0]
		if d.at.Sub(claimedAt) < 900*time.Millisecond {
			t.Errorf("%v delivered %v after the claim, before its 1s lease expired", id, d.at.Sub(claimedAt))
		}
		if d.msg.Attempt != 1 {
			t.Errorf("recovered row delivered as attempt %d, want 1", d.msg.Attempt)
		}
	}
	// The crashed relay's late finish is fenced.
	res, err := b.store.OutboxFinish(context.Background(), &store.OutboxFinishParams{Items: []store.OutboxFinishItem{
		{ID: rows[0].ID, LeaseToken: rows[0].LeaseToken, Outcome: store.OutcomeRetry, Error: "late"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if res.Fenced != 1 || res.Finished != 0 {
		t.Errorf("stale finish = %+v, want fenced", res)
	}
}

func TestCleanupDeletesProcessedRows(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ids := b.publish(t, "orders", 10, nil)
	hook := &recordingHook{}
	b.start(t, func(c *relay.Config) {
		c.Defaults.Retention = new(time.Millisecond) // keep, then clean up
		c.Cleanup.OutboxTTL = new(time.Millisecond)
		c.Hooks = []txbox.RelayHook{hook}
	})
	testenv.WaitFor(t, 10*time.Second, "delivered", func() bool { return containsAll(b.sender.ids(), ids) })
	testenv.WaitFor(t, 10*time.Second, "processed rows cleaned up", func() bool { return b.count(t, "outbox", "true") == 0 })
	// The hook reports after the delete committed, so the rows can be gone
	// a moment before the count arrives.
	testenv.WaitFor(t, 10*time.Second, "cleanup hook counted every deletion", func() bool {
		return hook.maintenance(txbox.JobOutboxCleanup) >= len(ids)
	})
}

func TestCleanupDeletesResolvedDeadLetters(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ids := b.publish(t, "orders", 3, nil)
	b.sender.setBehave(func(context.Context, []*sender.Message) error {
		return txbox.Permanent(errors.New("bad message"))
	})
	hook := &recordingHook{}
	b.start(t, func(c *relay.Config) {
		c.Cleanup.DeadLetterTTL = new(time.Millisecond)
		c.Hooks = []txbox.RelayHook{hook}
	})
	testenv.WaitFor(t, 10*time.Second, "dead-lettered", func() bool { return b.count(t, "dead_letter", "true") == 3 })
	// Unresolved dead letters are kept whatever their age: let two more
	// cleanup rounds pass (they are older than the 1ms TTL by then).
	start := hook.rounds(txbox.JobDeadLetterCleanup)
	testenv.WaitFor(t, 10*time.Second, "two cleanup rounds", func() bool { return hook.rounds(txbox.JobDeadLetterCleanup) >= start+2 })
	if hook.maintenance(txbox.JobDeadLetterCleanup) != 0 || b.count(t, "dead_letter", "true") != 3 {
		t.Fatal("cleanup deleted unresolved dead letters")
	}
	if n, err := b.store.DeadLetterResolve(context.Background(), ids[:2]); err != nil || n != 2 {
		t.Fatalf("resolve: %d, %v", n, err)
	}
	testenv.WaitFor(t, 10*time.Second, "resolved dead letters cleaned up", func() bool { return b.count(t, "dead_letter", "true") == 1 })
	if b.count(t, "dead_letter", "id = $1", ids[2]) != 1 {
		t.Error("the unresolved dead letter was deleted")
	}
	if hook.maintenance(txbox.JobDeadLetterMove) != 3 {
		t.Errorf("dead-letter move hook counted %d, want 3", hook.maintenance(txbox.JobDeadLetterMove))
	}
}

func TestStartStopErrors(t *testing.T) {
	t.Parallel()
	b := setup(t)
	r, err := relay.New(fastConfig(b.store, map[string]sender.Sender{"test": b.sender}))
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	select {
	case <-r.Started():
	default:
		t.Error("Started is open after Start")
	}
	if err := r.Start(context.Background()); !errors.Is(err, relay.ErrAlreadyStarted) {
		t.Errorf("second Start = %v", err)
	}
	// Two Stops at once: both return once the relay stopped, and its
	// clean-up (the heartbeat row, the cleanup lease) runs once.
	errs := make(chan error, 2)
	for range 2 {
		go func() { errs <- r.Stop(context.Background()) }()
	}
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-r.Stopped():
	default:
		t.Error("Stopped is open after Stop returned")
	}
	if err := r.Start(context.Background()); !errors.Is(err, relay.ErrStopped) {
		t.Errorf("Start after Stop = %v, want ErrStopped", err)
	}
	r.Wake("orders") // after Stop: ignored, no goroutine started

	// Stop before Start: the relay will never run (a shutdown that won
	// the race with start-up must not be undone by a late Start).
	never, err := relay.New(fastConfig(b.store, map[string]sender.Sender{"test": b.sender}))
	if err != nil {
		t.Fatal(err)
	}
	if err := never.Stop(context.Background()); !errors.Is(err, relay.ErrNotStarted) {
		t.Errorf("Stop before Start = %v", err)
	}
	<-never.Stopped()
	if err := never.Start(context.Background()); !errors.Is(err, relay.ErrStopped) {
		t.Errorf("Start after a Stop before Start = %v, want ErrStopped", err)
	}
}

// destCircuit returns the circuit of destination dest on sender snd.
func destCircuit(t *testing.T, h relay.Health, snd, dest string) relay.CircuitHealth {
	t.Helper()
	for _, c := range h.Circuits {
		if c.Sender == snd && !c.Connection && c.Destination == dest {
			return c
		}
	}
	t.Fatalf("no circuit for destination %q of sender %q in %+v", dest, snd, h.Circuits)
	return relay.CircuitHealth{}
}

// connCircuit returns the connection circuit of sender snd.
func connCircuit(t *testing.T, h relay.Health, snd string) relay.CircuitHealth {
	t.Helper()
	for _, c := range h.Circuits {
		if c.Sender == snd && c.Connection {
			return c
		}
	}
	t.Fatalf("no connection circuit for sender %q in %+v", snd, h.Circuits)
	return relay.CircuitHealth{}
}

// recordingHook counts what the relay reports.
type recordingHook struct {
	txbox.NopRelayHook
	mu       sync.Mutex
	batches  []txbox.BatchEvent
	circuits []txbox.CircuitState
	maint    map[string]int
	nrounds  map[string]int
}

func (h *recordingHook) OnBatch(ev txbox.BatchEvent) {
	h.mu.Lock()
	h.batches = append(h.batches, ev)
	h.mu.Unlock()
}

func (h *recordingHook) OnCircuit(ev txbox.CircuitEvent) {
	h.mu.Lock()
	h.circuits = append(h.circuits, ev.State)
	h.mu.Unlock()
}

func (h *recordingHook) OnMaintenance(ev txbox.MaintenanceEvent) {
	h.mu.Lock()
	if h.maint == nil {
		h.maint = map[string]int{}
	}
	h.maint[ev.Job] += ev.Count
	if h.nrounds == nil {
		h.nrounds = map[string]int{}
	}
	h.nrounds[ev.Job]++
	h.mu.Unlock()
}

func (h *recordingHook) rounds(job string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.nrounds[job]
}

func (h *recordingHook) sent() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, b := range h.batches {
		n += b.Sent
	}
	return n
}

func (h *recordingHook) count(s txbox.CircuitState) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, c := range h.circuits {
		if c == s {
			n++
		}
	}
	return n
}

func (h *recordingHook) circuitStates() []txbox.CircuitState {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]txbox.CircuitState(nil), h.circuits...)
}

func (h *recordingHook) maintenance(job string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.maint[job]
}

type pollCounter struct{ n *atomic.Int64 }

func (p pollCounter) OnPoll(txbox.PollEvent)               { p.n.Add(1) }
func (p pollCounter) OnBatch(txbox.BatchEvent)             {}
func (p pollCounter) OnCircuit(txbox.CircuitEvent)         {}
func (p pollCounter) OnMaintenance(txbox.MaintenanceEvent) {}

// flakyFinishStore injects failures into the real store's OutboxFinish.
type flakyFinishStore struct {
	store.Driver
	mu       sync.Mutex
	failNext int  // fail this many finishes, then pass
	failAll  bool // fail every finish (the database is down) until cleared
	calls    int
}

func (f *flakyFinishStore) OutboxFinish(ctx context.Context, p *store.OutboxFinishParams) (*store.OutboxFinishResult, error) {
	f.mu.Lock()
	f.calls++
	fail := f.failNext > 0 || f.failAll
	if f.failNext > 0 {
		f.failNext--
	}
	f.mu.Unlock()
	if fail {
		return nil, errors.New("injected: connection reset")
	}
	return f.Driver.OutboxFinish(ctx, p)
}

// TestFinishRetriedThenRecovered: a finish that fails is retried (it is
// fenced, so repeating it is safe) and the batch is not delivered twice;
// when every retry fails, and every smaller part it then tries too (the
// database is down), the rows stay claimed until their lease expires and
// are then delivered again (at-least-once), as attempt 1.
func TestFinishRetriedThenRecovered(t *testing.T) {
	t.Parallel()
	b := setup(t)
	flaky := &flakyFinishStore{Driver: b.store, failNext: 2}
	ids := b.publish(t, "orders", 10, nil)
	hook := &recordingHook{}
	b.start(t, func(c *relay.Config) {
		c.Store = flaky
		c.Defaults.LeaseDuration = new(time.Second)
		c.Hooks = []txbox.RelayHook{hook}
	})
	testenv.WaitFor(t, 10*time.Second, "processed after two failed finishes", func() bool {
		return b.count(t, "outbox", "status = 'PROCESSED'") == len(ids)
	})
	if _, total := b.sender.distinct(); total != len(ids) {
		t.Errorf("%d deliveries for %d events: a retried finish caused a resend", total, len(ids))
	}
	hook.mu.Lock()
	for _, ev := range hook.batches {
		if ev.FinishErr != nil {
			t.Errorf("finish error reported although a retry succeeded: %v", ev.FinishErr)
		}
	}
	hook.mu.Unlock()

	// Now every finish fails until the next batch has given up.
	flaky.mu.Lock()
	flaky.failAll = true
	flaky.mu.Unlock()
	more := b.publish(t, "orders", 5, nil)
	testenv.WaitFor(t, 20*time.Second, "the batch's finish to give up", func() bool {
		hook.mu.Lock()
		defer hook.mu.Unlock()
		for _, ev := range hook.batches {
			if ev.FinishErr != nil {
				return true
			}
		}
		return false
	})
	flaky.mu.Lock()
	flaky.failAll = false
	flaky.mu.Unlock()
	testenv.WaitFor(t, 20*time.Second, "redelivered after the lease expired and finished", func() bool {
		return b.count(t, "outbox", "status = 'PROCESSED' AND id = ANY($1)", more) == len(more)
	})
	for _, id := range more {
		ds := b.sender.deliveries(id)
		if len(ds) != 2 || ds[1].msg.Attempt != 1 {
			t.Errorf("%v: %d deliveries (want 2: lost finish, then recovery), last attempt %d", id, len(ds), ds[len(ds)-1].msg.Attempt)
		}
	}
}

// claimGateStore holds the first claim of each type until open is
// closed, and counts the claims that start after late is set.
type claimGateStore struct {
	store.Driver
	open    chan struct{}
	blocked chan string // one entry per claim held at the gate
	late    atomic.Bool
	lateN   atomic.Int64
	mu      sync.Mutex
	held    map[string]bool
}

func (s *claimGateStore) OutboxClaim(ctx context.Context, p *store.OutboxClaimParams) ([]*store.OutboxRow, error) {
	if s.late.Load() {
		s.lateN.Add(1)
	}
	s.mu.Lock()
	first := !s.held[p.EventType]
	s.held[p.EventType] = true
	s.mu.Unlock()
	if first {
		s.blocked <- p.EventType
		<-s.open
	}
	return s.Driver.OutboxClaim(ctx, p)
}

// TestNoClaimAfterStop: once Stop has begun no claim
// starts. Each poller is held inside a claim when Stop begins; when the
// claims return full batches, the pollers and the helpers they start
// find both the stop signal and a free in-flight slot ready, which a
// select would pick between at random.
func TestNoClaimAfterStop(t *testing.T) {
	t.Parallel()
	b := setup(t)
	types := []string{"t1", "t2", "t3", "t4"}
	for _, typ := range types {
		b.publish(t, typ, 200, nil)
	}
	gs := &claimGateStore{Driver: b.store, open: make(chan struct{}), blocked: make(chan string, len(types)), held: map[string]bool{}}
	r := b.start(t, func(c *relay.Config) {
		c.Store = gs
		c.DiscoverInterval = -1
		c.Events = map[string]relay.EventSettings{}
		for _, typ := range types {
			c.Events[typ] = relay.EventSettings{}
		}
		c.Defaults.BatchSize = new(10)
		c.Defaults.Polling = &relay.PollingSettings{MinDelay: new(time.Nanosecond), MaxDelay: new(time.Millisecond)}
	})
	for range types {
		<-gs.blocked
	}
	stopped := make(chan error, 1)
	go func() { stopped <- r.Stop(context.Background()) }()
	testenv.WaitFor(t, 10*time.Second, "Stop begun", func() bool { return !r.Health().Running })
	gs.late.Store(true)
	close(gs.open)
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}
	if n := gs.lateN.Load(); n != 0 {
		t.Fatalf("%d claims started after Stop had begun", n)
	}
	// The claims that had started were delivered.
	if got, _ := b.sender.distinct(); got != 10*len(types) {
		t.Errorf("%d events delivered, want the %d of the claims held across Stop", got, 10*len(types))
	}
}

// TestRejectionsLogEventIDTypeAndReason: a message the destination
// rejects, and one that fails for good, are each logged at WARN with the
// event id, the type and the reason, so an operator can find them.
func TestRejectionsLogEventIDTypeAndReason(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ids := b.publish(t, "invoices", 2, nil)
	b.sender.setBehave(func(_ context.Context, msgs []*sender.Message) error {
		errs := make([]error, len(msgs))
		for i, m := range msgs {
			if m.ID == ids[0] {
				errs[i] = txbox.Permanent(errors.New("schema v3 expected"))
			} else {
				errs[i] = errors.New("429 slow down")
			}
		}
		return &sender.BatchError{Errs: errs}
	})
	logs := &testenv.LogBuffer{}
	b.start(t, func(c *relay.Config) {
		c.Defaults.MaxAttempts = new(2)
		c.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	})
	testenv.WaitFor(t, 20*time.Second, "both dead-lettered", func() bool { return b.count(t, "dead_letter", "true") == 2 })
	out := logs.String()
	for _, want := range []string{
		`level=WARN msg="message failed for good; moving to the dead-letter table" component=txbox.relay`,
		"event_type=invoices", "event_id=" + ids[0].String(), `reason="schema v3 expected"`,
		`msg="message rejected; will retry"`, "event_id=" + ids[1].String(), `reason="429 slow down"`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %s:\n%s", want, out)
		}
	}
}

// flakyHeartbeatStore fails the first heartbeat; the rest reach the real
// store.
type flakyHeartbeatStore struct {
	*postgres.Driver
	beats atomic.Int32
}

func (f *flakyHeartbeatStore) InstanceHeartbeat(ctx context.Context, p *store.InstanceHeartbeatParams) error {
	if f.beats.Add(1) == 1 {
		return errors.New("injected: connection reset")
	}
	return f.Driver.InstanceHeartbeat(ctx, p)
}

// TestFailedJobRetriedSoon: a background job whose round failed is
// retried within seconds, not after its interval: a heartbeat that failed
// once (a lost connection) does not leave the relay's health degraded
// for the heartbeat's whole interval.
func TestFailedJobRetriedSoon(t *testing.T) {
	t.Parallel()
	b := setup(t)
	flaky := &flakyHeartbeatStore{Driver: b.store}
	r := b.start(t, func(c *relay.Config) {
		c.Store = flaky
		c.HeartbeatInterval = time.Hour
	})
	testenv.WaitFor(t, 10*time.Second, "the failed heartbeat retried", func() bool { return flaky.beats.Load() >= 2 })
	testenv.WaitFor(t, 5*time.Second, "health no longer degraded", func() bool { return !r.Health().Degraded })
	if got := flaky.beats.Load(); got != 2 {
		t.Errorf("%d heartbeats, want 2 (the failed one and its retry; the next is an hour later)", got)
	}
}

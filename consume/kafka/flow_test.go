package kafka_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/consume/kafka"
	"github.com/txbox/txbox/inbox"
	"github.com/txbox/txbox/internal/consumetest"
	"github.com/txbox/txbox/internal/testenv"
)

// member runs a Consumer on a new client of group until the returned stop
// is called; stop also closes the client (leaving the group).
func member(t *testing.T, cl *kgo.Client, cfg kafka.Config) (stop func()) {
	t.Helper()
	cons, err := kafka.New(cl, cfg)
	if err != nil {
		t.Fatal(err)
	}
	stopRun := consumetest.Start(t, cons.Run)
	var once sync.Once
	stop = func() { once.Do(func() { stopRun(); cl.Close() }) }
	t.Cleanup(stop)
	return stop
}

func publishN(t *testing.T, n int) ([]txbox.ID, []*kgo.Record) {
	ids := make([]txbox.ID, n)
	recs := make([]*kgo.Record, n)
	for i := range ids {
		ids[i] = txbox.NewID()
		recs[i] = record(ids[i])
	}
	return ids, recs
}

// TestRebalanceRedeliversNothing: a second member joins the group while
// the first works through a backlog with a 20 ms handler. With
// kgo.BlockRebalanceOnPoll the rebalance waits until the first member has
// handled and committed its current poll (which BatchDuration keeps
// short), so no record is handed to both members: 0 redeliveries. Before
// this change the rebalance was never allowed: the first member was
// kicked out after the rebalance timeout (94 of 300 records handled
// twice) and closing its client hung.
func TestRebalanceRedeliversNothing(t *testing.T) {
	t.Parallel()
	c := cluster(t)
	p := consumetest.NewPipeline(t, "kafka-rebalance")
	const n = 300
	_, recs := publishN(t, n)
	produce(t, c, recs)
	cfg := kafka.Config{Inbox: p.Inbox, Concurrency: 3, BatchDuration: 200 * time.Millisecond, Handler: func(ctx context.Context, tx any, m inbox.Message) error {
		time.Sleep(20 * time.Millisecond) // a slow handler
		return p.Handler(ctx, tx, m)
	}}
	opts := []kgo.Opt{kgo.DisableAutoCommit(), kgo.BlockRebalanceOnPoll(), kgo.RebalanceTimeout(20 * time.Second)}
	stop1 := member(t, consumer(t, c, "g", opts...), cfg)
	testenv.WaitFor(t, time.Minute, "30 records handled by the first member", func() bool { return p.Results()[inbox.Processed] >= 30 })
	stop2 := member(t, consumer(t, c, "g", opts...), cfg)
	testenv.WaitFor(t, 2*time.Minute, "every effect", func() bool { return len(p.Effects(t)) == n })
	stop1()
	stop2()
	r := p.Results()
	if r[inbox.Duplicate] != 0 || r[inbox.Processed] != n {
		t.Errorf("results %v; want %d processed and no record handed to both members", r, n)
	}
	for id, k := range p.Effects(t) {
		if k != 1 {
			t.Errorf("%s: %d effects", id, k)
		}
	}
}

// TestCommitsFollowTheHandlersPace: with a slow handler the adapter polls
// few records at a time, so offsets are committed every BatchDuration or
// so, not once per 500-record poll: a crash or a rebalance hands little
// to another member again. Before this change the 150 records were one poll,
// committed only when all were handled.
func TestCommitsFollowTheHandlersPace(t *testing.T) {
	t.Parallel()
	c := cluster(t)
	env := consumetest.New(t, "kafka-pace")
	const n = 150
	ids, recs := publishN(t, n)
	produce(t, c, recs)
	cl := consumer(t, c, "g", kgo.DisableAutoCommit())
	stop := member(t, cl, kafka.Config{Inbox: env.Inbox, BatchDuration: 100 * time.Millisecond, Handler: func(ctx context.Context, tx any, m inbox.Message) error {
		time.Sleep(10 * time.Millisecond) // a slow handler
		return env.Handler(ctx, tx, m)
	}})
	testenv.WaitFor(t, time.Minute, "offsets committed part way through the backlog", func() bool {
		got := committedTotal(cl)
		return got > 0 && got < n/2
	})
	env.WaitEffects(t, ids, time.Minute)
	stop()
}

// TestStopDrainsInFlight: Run's context ends while handlers run (one per
// partition of the poll). Run starts no other record, waits for them to
// finish (they commit) and commits their offsets; the next member of the
// group gets none of them again. Before this change the running handlers were
// cancelled mid-transaction and handled again by the next member (3 of 3).
func TestStopDrainsInFlight(t *testing.T) {
	t.Parallel()
	c := cluster(t)
	p := consumetest.NewPipeline(t, "kafka-drain")
	const n = 60
	_, recs := publishN(t, n)
	produce(t, c, recs)
	hold := consumetest.NewHold(p.Handler, n)
	cl := consumer(t, c, "g", kgo.DisableAutoCommit())
	cons, err := kafka.New(cl, kafka.Config{Inbox: p.Inbox, Handler: hold.Handler, Concurrency: 3})
	if err != nil {
		t.Fatal(err)
	}
	_, cancel, done := consumetest.Run(cons.Run)
	<-hold.Started // at least one handler runs (up to one per partition of the first poll)
	cancel()
	hold.Release()
	if err := <-done; err != nil {
		t.Fatalf("Run = %v", err)
	}
	cl.Close()
	first := map[txbox.ID]bool{}
	for id, err := range hold.Finished() {
		first[id] = true
		if err != nil {
			t.Errorf("handler of %s was cancelled (%v); want it finished before Run returned", id, err)
		}
	}
	if len(first) == 0 || len(first) > 3 {
		t.Errorf("%d handlers ran, want 1 to 3 (no record starts after the stop)", len(first))
	}
	stop := member(t, consumer(t, c, "g", kgo.DisableAutoCommit()), kafka.Config{Inbox: p.Inbox, Handler: p.Handler, Concurrency: 3})
	testenv.WaitFor(t, time.Minute, "every effect", func() bool { return len(p.Effects(t)) == n })
	stop()
	for id := range first {
		if got := p.Seen(id); got != 1 {
			t.Errorf("started record %s reached the inbox %d times, want once", id, got)
		}
	}
	if r := p.Results(); r[inbox.Duplicate] != 0 || r[inbox.Processed] != n {
		t.Errorf("results %v; want %d processed, no duplicate", r, n)
	}
}

// TestLostEffectIsCommitted: in non-transactional mode a handler that
// fails after the id was recorded has lost its effect (inbox.Lost); the
// adapter moves on and commits the record instead of retrying it in
// place, which could only find a duplicate.
func TestLostEffectIsCommitted(t *testing.T) {
	t.Parallel()
	c := cluster(t)
	env := consumetest.New(t, "kafka-lost")
	hook := &resultHook{}
	in, err := inbox.New(env.Store, inbox.Config{Consumer: "kafka-lost", Mode: inbox.NonTransactional, Hook: hook})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	calls := 0
	_, recs := publishN(t, 1)
	produce(t, c, recs)
	cl := consumer(t, c, "g", kgo.DisableAutoCommit())
	stop := member(t, cl, kafka.Config{Inbox: in, Backoff: consumeBackoff, Handler: func(context.Context, any, inbox.Message) error {
		mu.Lock()
		defer mu.Unlock()
		calls++
		return errors.New("smtp down")
	}})
	testenv.WaitFor(t, 30*time.Second, "the record to be committed", func() bool { return committedTotal(cl) == 1 })
	stop()
	mu.Lock()
	defer mu.Unlock()
	if got := hook.get(); calls != 1 || len(got) != 1 || got[0] != inbox.Lost {
		t.Errorf("handler ran %d times, inbox results %v; want one call, one lost result and no retry", calls, got)
	}
}

// resultHook records the inbox's results in order.
type resultHook struct {
	inbox.NopHook
	mu      sync.Mutex
	results []inbox.Result
}

func (h *resultHook) OnHandled(e inbox.HandledEvent) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.results = append(h.results, e.Result)
}

func (h *resultHook) get() []inbox.Result {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]inbox.Result(nil), h.results...)
}

package nats_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/txbox/txbox"
	cnats "github.com/txbox/txbox/consume/nats"
	"github.com/txbox/txbox/inbox"
	"github.com/txbox/txbox/internal/consumetest"
	"github.com/txbox/txbox/internal/natstest"
	"github.com/txbox/txbox/internal/testenv"
	"github.com/txbox/txbox/store/postgres"
)

// durable adds a durable consumer named name with ackWait to the stream of
// subject.
func durable(t testing.TB, js jetstream.JetStream, subject, name string, ackWait time.Duration) jetstream.Consumer {
	t.Helper()
	s, err := js.Stream(context.Background(), strings.TrimSuffix(subject, ".events"))
	if err != nil {
		t.Fatal(err)
	}
	c, err := s.CreateOrUpdateConsumer(context.Background(), jetstream.ConsumerConfig{Durable: name, AckPolicy: jetstream.AckExplicitPolicy, AckWait: ackWait})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// settled waits until jc has nothing pending and nothing unacked.
func settled(t *testing.T, jc jetstream.Consumer) {
	t.Helper()
	testenv.WaitFor(t, time.Minute, "the consumer to have nothing pending or unacked", func() bool {
		info, err := jc.Info(context.Background())
		return err == nil && info.NumPending == 0 && info.NumAckPending == 0
	})
}

func run(t *testing.T, cons *cnats.Consumer) (stop func()) {
	t.Helper()
	return consumetest.Start(t, cons.Run)
}

// TestSlowHandlerIsNotRedelivered: 200 events, a handler of 20 ms, an
// AckWait of 1 s (5 s for the byte-sized stream, see below). Before this change the client buffered ~500 messages, so
// the ack-wait timer of most ran out in the buffer: 67 redeliveries
// (docs/inbox.md). Pulling on demand, or streaming with a buffer sized to
// the concurrency, none is redelivered: every delivery count is 1.
func TestSlowHandlerIsNotRedelivered(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		cfg     cnats.Config
		ackWait time.Duration
	}{
		{"on demand", cnats.Config{}, time.Second},
		{"stream of 1", cnats.Config{PullMaxMessages: 1}, time.Second},
		// 4 KiB holds about a dozen of these messages, each waiting its
		// turn behind the others with its ack-wait timer running: the
		// sizing rule of docs/inbox.md (AckWait > messages buffered per
		// handler × the longest handler) asks for more than 1 s once the
		// handler's transaction is slowed by a loaded machine.
		{"stream of 4 KiB", cnats.Config{PullMaxBytes: 4096}, 5 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			js, subject, _ := stream(t)
			jc := durable(t, js, subject, "slow", tc.ackWait)
			p := consumetest.NewPipeline(t, "nats-slow")
			const n = 200
			for i := 0; i < n; i++ {
				publish(t, js, subject, txbox.NewID(), false)
			}
			cfg := tc.cfg
			cfg.Inbox = p.Inbox
			cfg.Handler = func(ctx context.Context, tx any, m inbox.Message) error {
				time.Sleep(20 * time.Millisecond) // a slow handler
				return p.Handler(ctx, tx, m)
			}
			cons, err := cnats.New(jc, cfg)
			if err != nil {
				t.Fatal(err)
			}
			stop := run(t, cons)
			testenv.WaitFor(t, 2*time.Minute, "every effect", func() bool { return len(p.Effects(t)) == n })
			settled(t, jc)
			stop()
			r := p.Results()
			if r[inbox.Duplicate] != 0 || p.Redelivered() != 0 || r[inbox.Processed] != n {
				t.Errorf("results %v, %d redeliveries; want %d processed and no redelivery", r, p.Redelivered(), n)
			}
		})
	}
}

// TestLongHandlerKeptInProgress: handlers that run twice as long as
// AckWait are not redelivered: the adapter sends InProgress while they
// run.
func TestLongHandlerKeptInProgress(t *testing.T) {
	t.Parallel()
	js, subject, _ := stream(t)
	jc := durable(t, js, subject, "long", time.Second)
	p := consumetest.NewPipeline(t, "nats-long")
	const n = 3
	for i := 0; i < n; i++ {
		publish(t, js, subject, txbox.NewID(), false)
	}
	cons, err := cnats.New(jc, cnats.Config{Inbox: p.Inbox, Concurrency: n, Handler: func(ctx context.Context, tx any, m inbox.Message) error {
		time.Sleep(2 * time.Second) // twice AckWait
		return p.Handler(ctx, tx, m)
	}})
	if err != nil {
		t.Fatal(err)
	}
	stop := run(t, cons)
	testenv.WaitFor(t, time.Minute, "every effect", func() bool { return len(p.Effects(t)) == n })
	settled(t, jc)
	stop()
	if r := p.Results(); r[inbox.Processed] != n || r[inbox.Duplicate] != 0 || p.Redelivered() != 0 {
		t.Errorf("results %v, %d redeliveries; want %d processed, none redelivered", r, p.Redelivered(), n)
	}
}

// blockingHandler writes the effect, reports that it started, and waits
// for release (or its context) before it returns.
type blockingHandler struct {
	p        *consumetest.Pipeline
	started  chan txbox.ID
	release  chan struct{}
	mu       sync.Mutex
	finished map[txbox.ID]error
}

func newBlockingHandler(p *consumetest.Pipeline) *blockingHandler {
	return &blockingHandler{p: p, started: make(chan txbox.ID, 100), release: make(chan struct{}), finished: map[txbox.ID]error{}}
}

func (b *blockingHandler) handle(ctx context.Context, tx any, m inbox.Message) error {
	if err := b.p.Handler(ctx, tx, m); err != nil {
		return err
	}
	b.started <- m.ID
	var err error
	select {
	case <-b.release:
	case <-ctx.Done():
		err = context.Cause(ctx)
	}
	b.mu.Lock()
	b.finished[m.ID] = err
	b.mu.Unlock()
	return err
}

// TestStopDrainsInFlight: Run's context ends while 4 handlers run. Run
// takes nothing new, waits for the 4 to finish (they commit), acks them
// and returns; a second run handles the rest, and none of the 4 comes
// back. Before this change the 4 were cancelled mid-transaction and
// redelivered.
func TestStopDrainsInFlight(t *testing.T) {
	t.Parallel()
	js, subject, jc := stream(t)
	p := consumetest.NewPipeline(t, "nats-drain")
	const n, conc = 30, 4
	for i := 0; i < n; i++ {
		publish(t, js, subject, txbox.NewID(), false)
	}
	b := newBlockingHandler(p)
	cons, err := cnats.New(jc, cnats.Config{Inbox: p.Inbox, Handler: b.handle, Concurrency: conc})
	if err != nil {
		t.Fatal(err)
	}
	_, cancel, done := consumetest.Run(cons.Run)
	started := map[txbox.ID]bool{}
	for len(started) < conc {
		started[<-b.started] = true
	}
	cancel()
	close(b.release)
	if err := <-done; err != nil {
		t.Fatalf("Run = %v", err)
	}
	b.mu.Lock()
	for id := range started {
		if err, ok := b.finished[id]; !ok || err != nil {
			t.Errorf("handler of %s: finished %v, err %v; want finished without error before Run returned", id, ok, err)
		}
	}
	b.mu.Unlock()
	info, err := jc.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if info.NumAckPending != 0 {
		t.Errorf("%d messages still unacked after Run returned; want every started one acked", info.NumAckPending)
	}
	// A second run handles the rest; no started message is delivered again.
	cons2, err := cnats.New(jc, cnats.Config{Inbox: p.Inbox, Handler: p.Handler, Concurrency: conc})
	if err != nil {
		t.Fatal(err)
	}
	stop := run(t, cons2)
	testenv.WaitFor(t, time.Minute, "every effect", func() bool { return len(p.Effects(t)) == n })
	settled(t, jc)
	stop()
	for id := range started {
		if got := p.Seen(id); got != 1 {
			t.Errorf("started message %s reached the inbox %d times, want once", id, got)
		}
	}
	if r := p.Results(); r[inbox.Duplicate] != 0 {
		t.Errorf("results %v: a handled message came back", r)
	}
}

// TestDrainDeadlineCancels: a handler that does not finish within
// DrainTimeout after the stop gets its context cancelled; Run returns and
// the message is naked for a redelivery.
func TestDrainDeadlineCancels(t *testing.T) {
	t.Parallel()
	js, subject, jc := stream(t)
	p := consumetest.NewPipeline(t, "nats-deadline")
	id := txbox.NewID()
	publish(t, js, subject, id, false)
	b := newBlockingHandler(p)
	cons, err := cnats.New(jc, cnats.Config{Inbox: p.Inbox, Handler: b.handle, DrainTimeout: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	_, cancel, done := consumetest.Run(cons.Run)
	<-b.started
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run = %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return after the drain deadline")
	}
	b.mu.Lock()
	err = b.finished[id]
	b.mu.Unlock()
	if err == nil {
		t.Fatal("the handler's context was not cancelled at the drain deadline")
	}
	if r := p.Results(); r[inbox.Failed] != 1 || len(p.Effects(t)) != 0 {
		t.Errorf("results %v, effects %v; want the cancelled handler rolled back", r, p.Effects(t))
	}
}

// Environment of the consumer child process of TestSIGTERMDrains.
const (
	childEnv       = "TXBOX_NATS_CONSUMER_CHILD"
	childSchemaEnv = "TXBOX_NATS_CHILD_SCHEMA"
	childStreamEnv = "TXBOX_NATS_CHILD_STREAM"
)

// TestConsumerChild is the child process of TestSIGTERMDrains: a consumer
// process that stops on SIGTERM, as a service would. Its handler runs a
// 300 ms statement in the inbox transaction. In a normal run it returns at
// once.
func TestConsumerChild(t *testing.T) {
	if os.Getenv(childEnv) != "1" {
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	p := consumetest.AttachPipeline(t, os.Getenv(childSchemaEnv), "nats-sigterm")
	js := natstest.JetStream(t, testenv.NATSURL)
	jc, err := js.Consumer(context.Background(), os.Getenv(childStreamEnv), "inbox")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	h := func(ctx context.Context, tx any, m inbox.Message) error {
		if err := p.Handler(ctx, tx, m); err != nil {
			return err
		}
		mu.Lock()
		fmt.Println("started", m.ID)
		mu.Unlock()
		ptx, err := postgres.PgxTx(tx)
		if err != nil {
			return err
		}
		_, err = ptx.Exec(ctx, `SELECT pg_sleep(0.3)`)
		return err
	}
	cons, err := cnats.New(jc, cnats.Config{Inbox: p.Inbox, Handler: h, Concurrency: 4})
	if err != nil {
		t.Fatal(err)
	}
	fmt.Println("ready")
	if err := cons.Run(ctx); err != nil {
		t.Fatal(err)
	}
	fmt.Println("stopped")
}

// TestSIGTERMDrains: a consumer process gets SIGTERM while 4 handlers run
// in open inbox transactions. It drains: the 4 commit and are acked, and
// none of the messages whose handler had started is delivered again to the
// process that takes over. Before this change the 4 were cancelled and
// redelivered (4 of 4), and the ~30 buffered messages waited a full
// AckWait (30 s) before anyone else could have them.
func TestSIGTERMDrains(t *testing.T) {
	t.Parallel()
	js, subject, jc := stream(t)
	p := consumetest.NewPipeline(t, "nats-sigterm")
	const n = 40
	for i := 0; i < n; i++ {
		publish(t, js, subject, txbox.NewID(), false)
	}
	child := testenv.StartTestProcess(t, "TestConsumerChild",
		childEnv+"=1", childSchemaEnv+"="+p.Schema, childStreamEnv+"="+strings.TrimSuffix(subject, ".events"))
	cmd, out, stderr := child.Cmd, child.Stdout, child.Stderr
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	started := map[txbox.ID]bool{}
	stopped := false
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		line := sc.Text()
		if s, ok := strings.CutPrefix(line, "started "); ok {
			id, err := txbox.ParseID(s)
			if err != nil {
				t.Fatal(err)
			}
			started[id] = true
			// After 6 starts, 4 handlers are mid-transaction (the first
			// ones may be done).
			if len(started) == 6 {
				if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
					t.Fatal(err)
				}
			}
		}
		if line == "stopped" {
			stopped = true
		}
	}
	if err := cmd.Wait(); err != nil || !stopped {
		t.Fatalf("child: %v (stopped %v); stderr:\n%s", err, stopped, stderr.String())
	}
	if len(started) < 6 {
		t.Fatalf("only %d handlers started in the child; stderr:\n%s", len(started), stderr.String())
	}
	// Every started handler committed its effect before the child exited.
	effects := p.Effects(t)
	for id := range started {
		if effects[id] != 1 {
			t.Errorf("started message %s: %d effects after the drain, want 1", id, effects[id])
		}
	}
	cons, err := cnats.New(jc, cnats.Config{Inbox: p.Inbox, Handler: p.Handler, Concurrency: 4})
	if err != nil {
		t.Fatal(err)
	}
	stop := run(t, cons)
	// The messages the child took from its buffer were handed back (nak)
	// at once, so the rest usually arrives within seconds (logged). One
	// still on its way to the child when it stopped pulling is dropped by
	// the client and comes back only after AckWait (30 s): JetStream
	// cannot know it was never read. Every effect is waited for past
	// AckWait, so that only a lost message fails the test.
	begin := time.Now()
	testenv.WaitFor(t, 45*time.Second, "every effect", func() bool { return len(p.Effects(t)) == n })
	t.Logf("every effect %v after the second consumer started", time.Since(begin).Round(time.Millisecond))
	settled(t, jc)
	stop()
	back := 0
	for id := range started {
		if p.Seen(id) > 0 {
			back++
		}
	}
	if back != 0 {
		t.Errorf("%d of the %d messages whose handler had started were delivered again after SIGTERM, want 0", back, len(started))
	}
	for id, c := range p.Effects(t) {
		if c != 1 {
			t.Errorf("event %s has %d effects, want 1", id, c)
		}
	}
}

// TestLostEffectIsAcked: in non-transactional mode a handler that fails
// after the id was recorded has lost its effect (inbox.Lost); the adapter
// acks the message instead of asking for a redelivery that could only be
// a duplicate.
func TestLostEffectIsAcked(t *testing.T) {
	t.Parallel()
	js, subject, jc := stream(t)
	env := consumetest.New(t, "nats-lost")
	in, err := inbox.New(env.Store, inbox.Config{Consumer: "nats-lost", Mode: inbox.NonTransactional})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	calls := 0
	cons, err := cnats.New(jc, cnats.Config{Inbox: in, Handler: func(context.Context, any, inbox.Message) error {
		mu.Lock()
		defer mu.Unlock()
		calls++
		return errors.New("smtp down")
	}})
	if err != nil {
		t.Fatal(err)
	}
	publish(t, js, subject, txbox.NewID(), false)
	stop := run(t, cons)
	settled(t, jc)
	stop()
	info, err := jc.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if calls != 1 || info.NumRedelivered != 0 || info.AckFloor.Consumer != 1 {
		t.Errorf("handler calls %d, consumer %+v; want one call and the message acked", calls, info)
	}
}

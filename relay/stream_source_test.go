package relay

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/internal/startstop"
	"github.com/txbox/txbox/internal/testenv"
	"github.com/txbox/txbox/sender"
	"github.com/txbox/txbox/store"
)

// The WAL source's own tests: no database, no relay. The source runs on
// its environment (sourceEnv) against fakeStreamer, an in-memory stream
// that records what was confirmed and spilled, and a scripted sender.
// Every test ends with the source's promise: each event read is acked,
// spilled, or in a transaction not confirmed (the stream reads it again).
// The database-backed tests of the same paths are relay/stream_test.go
// and store/postgres's stream tests.

// fakeStreamer is an in-memory store.Streamer.
type fakeStreamer struct {
	// txs are the transactions every session's Next returns, in turn;
	// nextErr ends the current session's Next with an error (a lost
	// connection).
	txs     chan *store.StreamTx
	nextErr chan error
	// refuse says whether the database refuses an item: StreamSpill
	// then fails with store.ErrDataRefused for any group holding one.
	refuse func(it *store.StreamSpillItem) bool

	mu        sync.Mutex
	opens     int
	confirmed uint64
	// spilled are the written items, refusals the refused StreamSpill
	// calls.
	spilled   []store.StreamSpillItem
	refusals  int
	confirmID []txbox.ID
}

func newFakeStreamer() *fakeStreamer {
	return &fakeStreamer{txs: make(chan *store.StreamTx, 100), nextErr: make(chan error, 1)}
}

func (f *fakeStreamer) OpenStream(context.Context, *store.StreamOptions) (store.Stream, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.opens++
	return &fakeStream{f: f, pid: f.opens}, nil
}

func (f *fakeStreamer) StreamSpill(_ context.Context, items []*store.StreamSpillItem) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.refuse != nil && slices.ContainsFunc(items, f.refuse) {
		f.refusals++
		return fmt.Errorf("%w: invalid byte sequence", store.ErrDataRefused)
	}
	for _, it := range items {
		f.spilled = append(f.spilled, *it)
	}
	return nil
}

func (f *fakeStreamer) StreamSpilledKeys(_ context.Context, after *store.StreamKey, limit int) ([]store.StreamKey, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var keys []store.StreamKey
	for _, it := range f.spilled {
		k := store.StreamKey{EventType: it.Event.Row.EventType, Key: it.Event.Row.Key}
		if k.Key != "" && !slices.Contains(keys, k) {
			keys = append(keys, k)
		}
	}
	slices.SortFunc(keys, func(a, b store.StreamKey) int {
		return strings.Compare(a.EventType+"\x00"+a.Key, b.EventType+"\x00"+b.Key)
	})
	if after != nil {
		keys = slices.DeleteFunc(keys, func(k store.StreamKey) bool {
			return k.EventType+"\x00"+k.Key <= after.EventType+"\x00"+after.Key
		})
	}
	return keys[:min(limit, len(keys))], nil
}

func (f *fakeStreamer) StreamStatus(context.Context) (*store.StreamStatus, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return &store.StreamStatus{Slot: "fake", Active: true, ActivePID: f.opens}, nil
}

func (f *fakeStreamer) StreamRecreate(context.Context, time.Duration) (*store.StreamLoss, error) {
	return nil, nil
}

func (f *fakeStreamer) StreamSenderTimeout() time.Duration { return 10 * time.Second }

// state returns what was confirmed and spilled so far.
func (f *fakeStreamer) state() (confirmed uint64, spilled []store.StreamSpillItem, refusals int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.confirmed, slices.Clone(f.spilled), f.refusals
}

type fakeStream struct {
	f   *fakeStreamer
	pid int
}

func (s *fakeStream) Next(ctx context.Context) (*store.StreamTx, error) {
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case err := <-s.f.nextErr:
		return nil, err
	case tx := <-s.f.txs:
		return tx, nil
	}
}

func (s *fakeStream) Confirm(_ context.Context, end uint64, captured []txbox.ID) error {
	s.f.mu.Lock()
	defer s.f.mu.Unlock()
	if end < s.f.confirmed {
		return fmt.Errorf("confirm went back from %d to %d", s.f.confirmed, end)
	}
	s.f.confirmed = end
	s.f.confirmID = append(s.f.confirmID, captured...)
	return nil
}

func (s *fakeStream) Close(context.Context) error { return nil }
func (s *fakeStream) ServerPID() int              { return s.pid }

// scriptSender sends through its send func (nil: ack) and records the
// acked ids and every call.
type scriptSender struct {
	send  func(ctx context.Context, msgs []*sender.Message) error
	calls atomic.Int64
	mu    sync.Mutex
	acked map[txbox.ID]bool
	// sent counts how often each event was handed to Send.
	sent map[txbox.ID]int
}

func (s *scriptSender) Send(ctx context.Context, msgs []*sender.Message) error {
	s.calls.Add(1)
	var err error
	if s.send != nil {
		err = s.send(ctx, msgs)
	}
	res := sender.Results(err, len(msgs))
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.acked == nil {
		s.acked, s.sent = map[txbox.ID]bool{}, map[txbox.ID]int{}
	}
	for i, m := range msgs {
		s.sent[m.ID]++
		if res[i] == nil {
			s.acked[m.ID] = true
		}
	}
	return err
}

func (s *scriptSender) Close(context.Context) error { return nil }

func (s *scriptSender) sentCount(id txbox.ID) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sent[id]
}

func (s *scriptSender) ackedIDs() map[txbox.ID]bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.acked)
}

// walSource is one WAL source under test.
type walSource struct {
	src          *streamSource
	life         *startstop.Lifetime
	f            *fakeStreamer
	snd          *scriptSender
	deadLettered atomic.Int64
	fed          []*store.StreamTx
	stopped      bool
}

// startWALSource starts a WAL source on f with snd as the sender "test"
// of every type; events configures types (nil: defaults).
func startWALSource(t *testing.T, f *fakeStreamer, snd *scriptSender, events map[string]EventSettings) *walSource {
	t.Helper()
	return startWALSourceWith(t, f, snd, events, StreamConfig{})
}

// startWALSourceWith is startWALSource with the stream settings sc (its
// zero fields take the defaults, and a short confirm interval).
func startWALSourceWith(t *testing.T, f *fakeStreamer, snd *scriptSender, events map[string]EventSettings, sc StreamConfig) *walSource {
	t.Helper()
	cfg := Config{Senders: map[string]sender.Sender{"test": snd}, Events: events}.withDefaults()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	w := &walSource{life: &startstop.Lifetime{}, f: f, snd: snd}
	if err := w.life.Begin(context.Background()); err != nil {
		t.Fatal(err)
	}
	ld := laneDeps{log: log, hard: w.life.Hard(), life: w.life,
		circuits: newCircuitSet([]string{"test"}, cfg.Circuit, time.Now, func(txbox.CircuitEvent) {})}
	env := sourceEnv{
		life: w.life, run: w.life.Run(), hard: w.life.Hard(), log: log,
		settingsFor:  cfg.settingsFor,
		routesFor:    cfg.streamRoutes,
		newLane:      func(s *typeSettings) *lane { return newLane(ld, s) },
		deadLettered: func() { w.deadLettered.Add(1) },
	}
	sc.ConfirmInterval, sc.StandbyInterval = 5*time.Millisecond, 10*time.Millisecond
	sc = sc.withDefaults()
	w.src = newStreamSource(env, sc, f)
	w.src.start()
	t.Cleanup(func() {
		if !w.stopped {
			w.stop(t, 10*time.Second)
		}
		w.checkNothingLost(t)
	})
	return w
}

// stop stops the source, waiting at most d for its sends.
func (w *walSource) stop(t *testing.T, d time.Duration) error {
	t.Helper()
	w.stopped = true
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	return w.life.End(ctx, nil)
}

// feed hands the stream one transaction of events, at position end.
func (w *walSource) feed(end uint64, evs ...*store.StreamEvent) *store.StreamTx {
	tx := &store.StreamTx{End: end, Events: evs}
	w.fed = append(w.fed, tx)
	w.f.txs <- tx
	return tx
}

// checkNothingLost: every event fed is acked, spilled, or in a
// transaction past the confirmed position.
func (w *walSource) checkNothingLost(t *testing.T) {
	t.Helper()
	confirmed, spilled, _ := w.f.state()
	acked := w.snd.ackedIDs()
	inTable := map[txbox.ID]bool{}
	for _, it := range spilled {
		inTable[it.Event.Row.ID] = true
	}
	for _, tx := range w.fed {
		for _, ev := range tx.Events {
			if tx.End <= confirmed && !acked[ev.Row.ID] && !inTable[ev.Row.ID] {
				t.Errorf("event %s of the transaction at %d is lost: confirmed (up to %d), neither acked nor spilled", ev.Row.ID, tx.End, confirmed)
			}
		}
	}
}

func streamEvent(eventType, key string) *store.StreamEvent {
	return &store.StreamEvent{Row: store.OutboxRow{ID: txbox.NewID(), EventType: eventType, Key: key, Payload: []byte(`{}`), CreatedAt: time.Now()}}
}

func (f *fakeStreamer) waitConfirmed(t *testing.T, end uint64) {
	t.Helper()
	testenv.WaitFor(t, 10*time.Second, fmt.Sprintf("confirmed up to %d", end), func() bool {
		c, _, _ := f.state()
		return c >= end
	})
}

// TestWALSourceConfirmsTheSettledPrefix: a transaction is confirmed only
// when it and every one before it are settled; a slow event holds back
// the confirm of the transactions after it, not their delivery.
func TestWALSourceConfirmsTheSettledPrefix(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	snd := &scriptSender{send: func(ctx context.Context, msgs []*sender.Message) error {
		if msgs[0].EventType == "slow" {
			select {
			case <-release:
			case <-ctx.Done():
				return txbox.Transient(ctx.Err())
			}
		}
		return nil
	}}
	f := newFakeStreamer()
	w := startWALSource(t, f, snd, nil)
	first, slow, third := streamEvent("fast", ""), streamEvent("slow", ""), streamEvent("fast", "")
	w.feed(100, first)
	w.feed(200, slow)
	w.feed(300, third)
	testenv.WaitFor(t, 10*time.Second, "the fast events acked", func() bool {
		a := snd.ackedIDs()
		return a[first.Row.ID] && a[third.Row.ID]
	})
	f.waitConfirmed(t, 100)
	// Both fast events are settled; three full confirm rounds after this
	// point had every chance to confirm past the slow transaction.
	from := w.src.confirmRounds.Load()
	testenv.WaitFor(t, 10*time.Second, "three confirm rounds", func() bool {
		return w.src.confirmRounds.Load() >= from+3
	})
	if c, _, _ := f.state(); c != 100 {
		t.Fatalf("confirmed up to %d while the transaction at 200 is in flight, want 100", c)
	}
	close(release)
	f.waitConfirmed(t, 300)
	if _, spilled, _ := f.state(); len(spilled) != 0 {
		t.Errorf("%d events spilled, want none: every send was acked", len(spilled))
	}
}

// TestWALSourceUndecodableIsDeadLettered: an event the decoder could not
// read is never sent: it is written FAILED, as bytes under the undecodable
// type, the dead-letter mover is told, and the stream confirms past it.
func TestWALSourceUndecodableIsDeadLettered(t *testing.T) {
	t.Parallel()
	snd := &scriptSender{}
	f := newFakeStreamer()
	w := startWALSource(t, f, snd, nil)
	bad := &store.StreamEvent{Row: store.OutboxRow{ID: txbox.NewID(), Payload: []byte("not a txbox message"), Invalid: "unknown encoding version 9"}}
	good := streamEvent("orders", "")
	w.feed(100, bad, good)
	f.waitConfirmed(t, 100)
	_, spilled, _ := f.state()
	if len(spilled) != 1 {
		t.Fatalf("%d events spilled, want the undecodable one", len(spilled))
	}
	it := spilled[0]
	if it.Outcome != store.OutcomeFailed || it.Event.Row.EventType != store.UndecodableEventType || string(it.Event.Row.Payload) != "not a txbox message" {
		t.Errorf("spilled %v as %q with payload %q, want FAILED under %s with its raw bytes", it.Outcome, it.Event.Row.EventType, it.Event.Row.Payload, store.UndecodableEventType)
	}
	if !strings.Contains(it.Error, "unknown encoding version 9") {
		t.Errorf("its error %q does not say why it could not be decoded", it.Error)
	}
	if a := snd.ackedIDs(); a[bad.Row.ID] || !a[good.Row.ID] {
		t.Errorf("acked %v: want the good event only", a)
	}
	if w.deadLettered.Load() == 0 {
		t.Error("the dead-letter mover was not told of the FAILED row")
	}
}

// TestWALSourceRefusedSpillIsSplit: a spill group the database refuses is
// split until the refused event stands alone; that one is written in a
// form the table accepts, the others as they were, and the stream goes on.
func TestWALSourceRefusedSpillIsSplit(t *testing.T) {
	t.Parallel()
	snd := &scriptSender{send: func(_ context.Context, msgs []*sender.Message) error {
		return txbox.Permanent(errors.New("HTTP 422: unknown order"))
	}}
	f := newFakeStreamer()
	f.refuse = func(it *store.StreamSpillItem) bool {
		return strings.ContainsRune(it.Event.Row.Headers["note"], 0)
	}
	w := startWALSource(t, f, snd, nil)
	evs := make([]*store.StreamEvent, 10)
	for i := range evs {
		evs[i] = streamEvent("orders", "")
	}
	evs[6].Row.Headers = map[string]string{"note": "bad\x00byte"}
	w.feed(100, evs...)
	f.waitConfirmed(t, 100)
	_, spilled, refusals := f.state()
	if refusals == 0 {
		t.Fatal("the database refused nothing: the test did not exercise the split")
	}
	if len(spilled) != len(evs) {
		t.Fatalf("%d events spilled, want %d (each failed for good)", len(spilled), len(evs))
	}
	for _, it := range spilled {
		if it.Outcome != store.OutcomeFailed {
			t.Errorf("event %s spilled %v, want FAILED", it.Event.Row.ID, it.Outcome)
		}
		if it.Event.Row.ID != evs[6].Row.ID {
			if strings.Contains(it.Error, "refused") {
				t.Errorf("event %s was not refused but its error says %q", it.Event.Row.ID, it.Error)
			}
			continue
		}
		if got := it.Event.Row.Headers["note"]; got != "badbyte" || !strings.Contains(it.Error, "database refused") {
			t.Errorf("the refused event was written with note %q and error %q, want it sanitized and saying why", got, it.Error)
		}
	}
}

// TestWALSourceSpillsWhileTheCircuitIsOpen: once a destination is down
// its type's events go to the table without a send, and the stream
// confirms them once they are written.
func TestWALSourceSpillsWhileTheCircuitIsOpen(t *testing.T) {
	t.Parallel()
	snd := &scriptSender{send: func(context.Context, []*sender.Message) error {
		return sender.Disconnected(txbox.Transient(errors.New("connection refused")))
	}}
	f := newFakeStreamer()
	w := startWALSource(t, f, snd, nil)
	w.feed(100, streamEvent("orders", ""))
	f.waitConfirmed(t, 100)
	calls := snd.calls.Load()
	if calls != 1 {
		t.Fatalf("%d sends for the first event, want 1", calls)
	}
	var evs []*store.StreamEvent
	for range 5 {
		evs = append(evs, streamEvent("orders", ""))
	}
	w.feed(200, evs...)
	f.waitConfirmed(t, 200)
	if got := snd.calls.Load(); got != calls {
		t.Errorf("%d sends while the circuit was open, want none", got-calls)
	}
	_, spilled, _ := f.state()
	if len(spilled) != 6 {
		t.Fatalf("%d events spilled, want 6", len(spilled))
	}
	for _, it := range spilled {
		if it.Outcome != store.OutcomeReleased || it.Attempts != 0 || !it.DueAt.After(time.Now().Add(-time.Minute)) {
			t.Errorf("spilled %v with %d attempts due %v, want released, no attempt, due after the circuit's wait", it.Outcome, it.Attempts, it.DueAt)
		}
	}
}

// TestWALSourceLostSessionConfirmsNothingMore: when the stream breaks, the
// session's send in flight is cancelled, nothing of it is confirmed or
// spilled, and the next session delivers the transaction again.
func TestWALSourceLostSessionConfirmsNothingMore(t *testing.T) {
	t.Parallel()
	var first atomic.Bool
	first.Store(true)
	sending := make(chan struct{})
	var cancelled atomic.Bool
	snd := &scriptSender{send: func(ctx context.Context, _ []*sender.Message) error {
		if first.CompareAndSwap(true, false) {
			close(sending)
			<-ctx.Done()
			cancelled.Store(true)
			return txbox.Transient(ctx.Err())
		}
		return nil
	}}
	f := newFakeStreamer()
	w := startWALSource(t, f, snd, nil)
	ev := streamEvent("orders", "k")
	w.feed(100, ev)
	<-sending
	f.nextErr <- errors.New("unexpected EOF")
	testenv.WaitFor(t, 10*time.Second, "the send cancelled", cancelled.Load)
	testenv.WaitFor(t, 10*time.Second, "a second session", func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		return f.opens >= 2
	})
	if c, spilled, _ := f.state(); c != 0 || len(spilled) != 0 {
		t.Fatalf("after the loss: confirmed %d, %d spilled; want nothing of the lost session", c, len(spilled))
	}
	h := w.src.healthSnapshot()
	if h.Losses != 1 || h.Dropped != 1 {
		t.Errorf("health: %d losses, %d dropped; want 1 and 1", h.Losses, h.Dropped)
	}
	// The new session reads the transaction again.
	w.feed(100, ev)
	f.waitConfirmed(t, 100)
	if !snd.ackedIDs()[ev.Row.ID] {
		t.Error("the event was not delivered by the second session")
	}
}

// TestWALSourceStopConfirmsOnlyWhatSettled: a stop whose deadline passes
// with a send in flight cancels it; the event is then spilled or left
// unconfirmed, never confirmed unsent.
func TestWALSourceStopConfirmsOnlyWhatSettled(t *testing.T) {
	t.Parallel()
	sending := make(chan struct{})
	var once sync.Once
	snd := &scriptSender{send: func(ctx context.Context, msgs []*sender.Message) error {
		if msgs[0].EventType == "stuck" {
			once.Do(func() { close(sending) })
			<-ctx.Done()
			return txbox.Transient(ctx.Err())
		}
		return nil
	}}
	f := newFakeStreamer()
	w := startWALSource(t, f, snd, nil)
	w.feed(100, streamEvent("orders", ""))
	f.waitConfirmed(t, 100)
	w.feed(200, streamEvent("stuck", ""))
	<-sending
	start := time.Now()
	w.stop(t, 300*time.Millisecond)
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("stop took %v with a send stuck, want about its deadline", took)
	}
	// checkNothingLost (the cleanup) judges the confirm.
}

// TestWALSourceKeyFollowsItsSpill: on an ordered type, once a key's event
// goes to the table (its send was refused), the key's later events follow
// it there, in stream order, and none of them is sent past it; other keys
// are sent as usual.
func TestWALSourceKeyFollowsItsSpill(t *testing.T) {
	t.Parallel()
	snd := &scriptSender{send: func(_ context.Context, msgs []*sender.Message) error {
		errs := make([]error, len(msgs))
		for i, m := range msgs {
			if m.Key == "k1" {
				errs[i] = txbox.Rejected(errors.New("HTTP 409: try later"))
			}
		}
		return sender.Summarize(errs)
	}}
	f := newFakeStreamer()
	w := startWALSource(t, f, snd, map[string]EventSettings{"orders": {Ordering: new(txbox.OrderingKey)}})
	head := streamEvent("orders", "k1")
	w.feed(100, head, streamEvent("orders", "k2"))
	f.waitConfirmed(t, 100)
	later := []*store.StreamEvent{streamEvent("orders", "k1"), streamEvent("orders", "k2"), streamEvent("orders", "k1")}
	w.feed(200, later...)
	f.waitConfirmed(t, 200)
	_, spilled, _ := f.state()
	want := []txbox.ID{head.Row.ID, later[0].Row.ID, later[2].Row.ID}
	var got []txbox.ID
	for _, it := range spilled {
		got = append(got, it.Event.Row.ID)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("spilled %v, want k1's three events in stream order %v", got, want)
	}
	if spilled[0].Outcome != store.OutcomeRetry || spilled[0].Attempts != 1 {
		t.Errorf("k1's head spilled %v with %d attempts, want a retry after 1 attempt", spilled[0].Outcome, spilled[0].Attempts)
	}
	for _, it := range spilled[1:] {
		if it.Outcome != store.OutcomeReleased || it.Attempts != 0 {
			t.Errorf("k1's later event spilled %v with %d attempts, want released unsent", it.Outcome, it.Attempts)
		}
	}
	acked := snd.ackedIDs()
	if !acked[later[1].Row.ID] {
		t.Error("k2's second event was not sent: one key's spill held back another key")
	}
	// The lane may take the first transaction's two events in one batch
	// or two, so count what was sent, not the sends.
	for _, ev := range []*store.StreamEvent{head, later[0], later[2]} {
		want := 0
		if ev == head {
			want = 1
		}
		if n := snd.sentCount(ev.Row.ID); n != want {
			t.Errorf("k1's event %s sent %d times, want %d: only the head is tried, its later events follow it to the table unsent", ev.Row.ID, n, want)
		}
	}
}

// TestWALSourceOverflowGoesToTheTable: a lane whose destination is slower
// than the stream fills; after a short stall its events go to the table
// instead of holding back the stream, and the stream confirms them.
func TestWALSourceOverflowGoesToTheTable(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	snd := &scriptSender{send: func(ctx context.Context, _ []*sender.Message) error {
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return txbox.Transient(ctx.Err())
		}
	}}
	f := newFakeStreamer()
	w := startWALSourceWith(t, f, snd, nil, StreamConfig{LaneQueue: 4, BatchSize: 2})
	var evs []*store.StreamEvent
	for range 40 {
		evs = append(evs, streamEvent("orders", ""))
	}
	w.feed(100, evs...)
	testenv.WaitFor(t, 10*time.Second, "the overflow spilled", func() bool {
		_, spilled, _ := f.state()
		return len(spilled) >= 20 // the rest: in flight (InFlight batches of 2) or queued (4)
	})
	close(release)
	f.waitConfirmed(t, 100)
	_, spilled, _ := f.state()
	acked := snd.ackedIDs()
	if len(acked)+len(spilled) != len(evs) {
		t.Errorf("%d acked and %d spilled, want %d in all, each once", len(acked), len(spilled), len(evs))
	}
	for _, it := range spilled {
		if acked[it.Event.Row.ID] {
			t.Errorf("event %s was both sent and spilled", it.Event.Row.ID)
		}
	}
}

// sourceIs reports a store's source (store.SourceReporter).
type sourceIs string

func (s sourceIs) Source() string { return string(s) }

// TestWALModeIsTheStoresSwitch: a relay on a store that reports WAL mode
// streams without being told, and one told to stream a store that
// reports table mode is refused, naming the setting to change.
func TestWALModeIsTheStoresSwitch(t *testing.T) {
	t.Parallel()
	senders := map[string]sender.Sender{"test": &scriptSender{}}
	type reportingStore struct {
		store.Driver
		*fakeStreamer
		sourceIs
	}
	r, err := New(Config{Store: reportingStore{fakeStreamer: newFakeStreamer(), sourceIs: store.SourceWAL}, Senders: senders})
	if err != nil {
		t.Fatal(err)
	}
	if !r.cfg.Stream.Enabled || r.cfg.Stream.PauseLimit == 0 {
		t.Errorf("a relay on a WAL-mode store: stream %+v, want it on with its defaults", r.cfg.Stream)
	}
	table := reportingStore{fakeStreamer: newFakeStreamer(), sourceIs: store.SourceTable}
	_, err = New(Config{Store: table, Senders: senders, Stream: StreamConfig{Enabled: true}})
	var ce *ConfigError
	if !errors.As(err, &ce) || ce.Field != "Stream" || !strings.Contains(ce.Reason, "postgres.Config.Source") {
		t.Errorf("streaming a table-mode store: %v, want a ConfigError on Stream naming postgres.Config.Source", err)
	}
	r, err = New(Config{Store: table, Senders: senders})
	if err != nil || r.cfg.Stream.Enabled {
		t.Errorf("a relay on a table-mode store: %v, stream on %v; want it to poll only", err, r != nil && r.cfg.Stream.Enabled)
	}
}

// fanoutEvents is a type "orders" fanned out to the routes "a" and "b"
// (NATS-like subjects of the one test sender).
func fanoutEvents() map[string]EventSettings {
	return map[string]EventSettings{"orders": {Routes: []RouteSettings{
		{Name: "a", Route: sender.Route{Subject: "a"}},
		{Name: "b", Route: sender.Route{Subject: "b"}},
	}}}
}

// routeSends records, per route subject, the (event id, delivery id) of
// every message handed to the sender.
type routeSends struct {
	mu   sync.Mutex
	sent map[string][][2]txbox.ID
}

func (r *routeSends) add(msgs []*sender.Message) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.sent == nil {
		r.sent = map[string][][2]txbox.ID{}
	}
	for _, m := range msgs {
		r.sent[m.Route.Subject] = append(r.sent[m.Route.Subject], [2]txbox.ID{m.ID, m.Delivery()})
	}
}

func (r *routeSends) of(route string) [][2]txbox.ID {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.sent[route])
}

// TestWALSourceFanoutReachesEveryRoute: one event of a type with two
// routes reaches both routes' lanes, with the same event id and the
// routes' own delivery ids (store.RouteRowID), and its transaction is
// confirmed only once both routes acked it.
func TestWALSourceFanoutReachesEveryRoute(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	var rs routeSends
	snd := &scriptSender{send: func(ctx context.Context, msgs []*sender.Message) error {
		rs.add(msgs)
		if msgs[0].Route.Subject == "b" {
			select {
			case <-release:
			case <-ctx.Done():
				return txbox.Transient(ctx.Err())
			}
		}
		return nil
	}}
	f := newFakeStreamer()
	w := startWALSource(t, f, snd, fanoutEvents())
	ev := streamEvent("orders", "k1")
	w.feed(100, ev)
	testenv.WaitFor(t, 10*time.Second, "both routes sent the event", func() bool {
		return len(rs.of("a")) == 1 && len(rs.of("b")) == 1
	})
	from := w.src.confirmRounds.Load()
	testenv.WaitFor(t, 10*time.Second, "three confirm rounds", func() bool {
		return w.src.confirmRounds.Load() >= from+3
	})
	if c, _, _ := f.state(); c != 0 {
		t.Fatalf("confirmed up to %d while route b has not acked, want nothing confirmed", c)
	}
	close(release)
	f.waitConfirmed(t, 100)
	id := ev.Row.ID
	if got, want := rs.of("a"), [][2]txbox.ID{{id, id}}; !slices.Equal(got, want) {
		t.Errorf("route a got (event id, delivery id) %v, want %v", got, want)
	}
	if got, want := rs.of("b"), [][2]txbox.ID{{id, store.RouteRowID(id, 1)}}; !slices.Equal(got, want) {
		t.Errorf("route b got (event id, delivery id) %v, want %v", got, want)
	}
	if _, spilled, _ := f.state(); len(spilled) != 0 {
		t.Errorf("%d copies spilled, want none: every send was acked", len(spilled))
	}
	if held, _ := w.src.window.held(); held != 0 {
		t.Errorf("the window holds %d events after the confirm, want 0", held)
	}
	// One lane per route, each showing its route in the health.
	var routes []string
	for _, th := range w.src.laneHealth() {
		routes = append(routes, th.EventType+"/"+th.Route)
	}
	slices.Sort(routes)
	if want := []string{"orders/a", "orders/b"}; !slices.Equal(routes, want) {
		t.Errorf("lanes %v, want %v", routes, want)
	}
}

// TestWALSourceFanoutOneRouteDown: with route b's destination failing,
// route a acks every event, route b's copies are spilled as route b's
// rows (its route, its row id, the event id), and the transactions are
// confirmed once both are done.
func TestWALSourceFanoutOneRouteDown(t *testing.T) {
	t.Parallel()
	var rs routeSends
	snd := &scriptSender{send: func(_ context.Context, msgs []*sender.Message) error {
		rs.add(msgs)
		if msgs[0].Route.Subject == "b" {
			return txbox.Transient(errors.New("503 service unavailable"))
		}
		return nil
	}}
	f := newFakeStreamer()
	w := startWALSource(t, f, snd, fanoutEvents())
	var evs []*store.StreamEvent
	for i := range 8 {
		evs = append(evs, streamEvent("orders", fmt.Sprintf("k%d", i%2)))
	}
	// A captured row among them: its first route's copy is the row.
	evs[5].Captured = true
	w.feed(100, evs[:5]...)
	w.feed(200, evs[5:]...)
	f.waitConfirmed(t, 200)
	var want [][2]txbox.ID
	for _, ev := range evs {
		want = append(want, [2]txbox.ID{ev.Row.ID, ev.Row.ID})
	}
	byPair := func(x, y [2]txbox.ID) int {
		return strings.Compare(x[0].String()+x[1].String(), y[0].String()+y[1].String())
	}
	got := rs.of("a")
	slices.SortFunc(got, byPair)
	slices.SortFunc(want, byPair)
	if !slices.Equal(got, want) {
		t.Errorf("route a got (event id, delivery id) %v,\nwant each event once: %v", got, want)
	}
	_, spilled, _ := f.state()
	byID := map[txbox.ID]store.StreamSpillItem{}
	for _, it := range spilled {
		byID[it.Event.Row.ID] = it
	}
	if len(spilled) != len(evs) {
		t.Errorf("%d copies spilled, want %d (route b's)", len(spilled), len(evs))
	}
	for _, ev := range evs {
		rid := store.RouteRowID(ev.Row.ID, 1)
		it, ok := byID[rid]
		switch {
		case !ok:
			t.Errorf("route b's copy %s of event %s was not spilled", rid, ev.Row.ID)
		case it.Event.Row.Route != "b" || it.Event.Row.EventID != ev.Row.ID || it.Event.Captured:
			t.Errorf("route b's copy of %s spilled with route %q event id %s captured %v, want route b, event id %s, not captured",
				ev.Row.ID, it.Event.Row.Route, it.Event.Row.EventID, it.Event.Captured, ev.Row.ID)
		case it.Outcome == store.OutcomeAcked:
			t.Errorf("route b's copy of %s spilled as acked", ev.Row.ID)
		}
	}
	// The captured row's copy for route a was acked: Confirm deletes the
	// row, and only it (route b's copy is a row of its own).
	f.mu.Lock()
	ids := slices.Clone(f.confirmID)
	f.mu.Unlock()
	if !slices.Equal(ids, []txbox.ID{evs[5].Row.ID}) {
		t.Errorf("confirm deleted the captured ids %v, want only %s", ids, evs[5].Row.ID)
	}
	if held, _ := w.src.window.held(); held != 0 {
		t.Errorf("the window holds %d events after the confirm, want 0", held)
	}
}

// TestWALSourceFanoutDeferredAndInvalid: an event of a fanned-out type
// with a future not-before, and one that cannot be a message, go to the
// table once per route, each copy as its route's row (released until
// its time, or failed for the dead letters); an undecodable event, whose
// type is unknown, goes there once.
func TestWALSourceFanoutDeferredAndInvalid(t *testing.T) {
	t.Parallel()
	snd := &scriptSender{}
	f := newFakeStreamer()
	w := startWALSource(t, f, snd, fanoutEvents())
	later := streamEvent("orders", "k")
	later.NotBefore = time.Now().Add(time.Hour)
	bad := streamEvent("orders", "k")
	bad.Row.Invalid = "headers are not valid"
	poison := streamEvent("orders", "")
	poison.Row.EventType, poison.Row.Invalid = "", "cannot decode"
	w.feed(100, later, bad, poison)
	f.waitConfirmed(t, 100)
	if n := snd.calls.Load(); n != 0 {
		t.Errorf("%d sends, want none", n)
	}
	_, spilled, _ := f.state()
	type copyOf struct {
		event txbox.ID
		route string
	}
	got := map[copyOf]store.StreamSpillItem{}
	for _, it := range spilled {
		got[copyOf{it.Event.Row.Event(), it.Event.Row.Route}] = it
	}
	if len(spilled) != 5 {
		t.Errorf("%d spills, want 5 (two copies of two events, and the undecodable one)", len(spilled))
	}
	for i, r := range []string{"a", "b"} {
		for _, want := range []struct {
			ev *store.StreamEvent
			o  store.Outcome
		}{{later, store.OutcomeReleased}, {bad, store.OutcomeFailed}} {
			it, ok := got[copyOf{want.ev.Row.ID, r}]
			switch {
			case !ok:
				t.Errorf("no spill of event %s for route %s", want.ev.Row.ID, r)
			case it.Outcome != want.o || it.Event.Row.ID != store.RouteRowID(want.ev.Row.ID, i):
				t.Errorf("route %s's copy of %s spilled as %v with id %s, want %v with id %s", r, want.ev.Row.ID, it.Outcome, it.Event.Row.ID, want.o, store.RouteRowID(want.ev.Row.ID, i))
			case want.o == store.OutcomeReleased && !it.DueAt.Equal(later.NotBefore):
				t.Errorf("route %s's copy of the deferred event due %v, want %v", r, it.DueAt, later.NotBefore)
			}
		}
	}
	if it, ok := got[copyOf{poison.Row.ID, ""}]; !ok || it.Event.Row.EventType != store.UndecodableEventType || it.Outcome != store.OutcomeFailed {
		t.Errorf("the undecodable event spilled as %+v (found %v), want once, failed, under %s", it, ok, store.UndecodableEventType)
	}
}

// TestWALSourceFanoutKeyInTableOnAnyRoute: the keys with rows in the
// table are per type and key, not per route (docs/concepts.md, "WAL
// mode", Ordering): once route b's spill of key k is in the table, route
// a's later events of k go to the table too, as route a's rows, behind
// route a's earlier ones. Stricter than needed, never a reorder.
func TestWALSourceFanoutKeyInTableOnAnyRoute(t *testing.T) {
	t.Parallel()
	var rs routeSends
	snd := &scriptSender{send: func(_ context.Context, msgs []*sender.Message) error {
		rs.add(msgs)
		if msgs[0].Route.Subject == "b" {
			return txbox.Transient(errors.New("503 service unavailable"))
		}
		return nil
	}}
	events := fanoutEvents()
	ev := events["orders"]
	ev.Ordering = new(txbox.OrderingKey)
	events["orders"] = ev
	f := newFakeStreamer()
	w := startWALSourceWith(t, f, snd, events, StreamConfig{tableKeysReload: 10 * time.Millisecond})
	first := streamEvent("orders", "k")
	w.feed(100, first)
	f.waitConfirmed(t, 100)
	// A reload that began after route b's spill was durable.
	at := time.Now()
	testenv.WaitFor(t, 10*time.Second, "a reload of the table's keys", func() bool { return w.src.tableKeysAt().After(at) })
	second := streamEvent("orders", "k")
	w.feed(200, second)
	f.waitConfirmed(t, 200)
	if got := rs.of("a"); len(got) != 1 || got[0][0] != first.Row.ID {
		t.Errorf("route a sent %v, want only the first event: the key has rows in the table", got)
	}
	_, spilled, _ := f.state()
	var routeA []txbox.ID
	for _, it := range spilled {
		if it.Event.Row.Route == "a" {
			routeA = append(routeA, it.Event.Row.ID)
		}
	}
	if !slices.Equal(routeA, []txbox.ID{second.Row.ID}) {
		t.Errorf("route a's spills %v, want the second event's copy %s only", routeA, second.Row.ID)
	}
}

package relay_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
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

// The stream source of WAL mode (relay/stream.go, stream_lane.go,
// stream_spill.go) against the real PostgreSQL: a slot of
// the test's own, events emitted by the driver, and faults injected at the
// store seam (scriptedStreamer): a spill held or refused, the slot shown
// as streamed by another process, the stream held by another relay.

// scriptedStreamer is a WAL-mode driver whose stream seam a test can
// script; unscripted, every call goes to the driver.
type scriptedStreamer struct {
	*postgres.Driver

	mu sync.Mutex
	// spill, when set, is called instead of the driver's StreamSpill;
	// next is the driver's.
	spill func(ctx context.Context, items []*store.StreamSpillItem, next func() error) error
	// busy makes OpenStream answer as if another relay held the stream.
	busy bool
	// pid, when set, is what the open streams say their server process is.
	pid func(real int) int
	// opened counts the streams opened.
	opened int
}

func (s *scriptedStreamer) StreamSpill(ctx context.Context, items []*store.StreamSpillItem) error {
	s.mu.Lock()
	f := s.spill
	s.mu.Unlock()
	next := func() error { return s.Driver.StreamSpill(ctx, items) }
	if f == nil {
		return next()
	}
	return f(ctx, items, next)
}

func (s *scriptedStreamer) OpenStream(ctx context.Context, opts *store.StreamOptions) (store.Stream, error) {
	s.mu.Lock()
	busy := s.busy
	s.mu.Unlock()
	if busy {
		return nil, fmt.Errorf("scripted: %w", store.ErrStreamBusy)
	}
	st, err := s.Driver.OpenStream(ctx, opts)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.opened++
	s.mu.Unlock()
	return &scriptedStream{Stream: st, s: s}, nil
}

func (s *scriptedStreamer) set(f func(s *scriptedStreamer)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f(s)
}

type scriptedStream struct {
	store.Stream
	s *scriptedStreamer
}

func (x *scriptedStream) ServerPID() int {
	real := x.Stream.ServerPID()
	x.s.mu.Lock()
	f := x.s.pid
	x.s.mu.Unlock()
	if f == nil {
		return real
	}
	return f(real)
}

// walBundle is a bundle whose store is in WAL mode, with a slot.
type walBundle struct {
	*bundle
	streamer *scriptedStreamer
}

func setupWAL(t *testing.T) *walBundle {
	t.Helper()
	b := setup(t)
	d, err := postgres.New(b.pool, postgres.Config{Schema: b.schema, Logger: quietLogger(), Source: postgres.SourceWAL,
		WAL: postgres.WALConfig{SenderTimeout: 4 * time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := d.CreateStream(ctx, 50*time.Second); err != nil {
		t.Fatalf("create the stream: %v", err)
	}
	// Registered after the schema's drop, so it runs first.
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		if err := d.DropStream(ctx); err != nil {
			t.Errorf("drop the stream: %v", err)
		}
	})
	b.store = d
	return &walBundle{bundle: b, streamer: &scriptedStreamer{Driver: d}}
}

// startWAL runs a relay streaming b's slot, with fast stream settings,
// adjusted by mod.
func (b *walBundle) startWAL(t *testing.T, mod func(*relay.Config)) *relay.Relay {
	t.Helper()
	r := b.start(t, func(c *relay.Config) {
		c.Store = b.streamer
		c.Stream = relay.StreamConfig{Enabled: true, StandbyInterval: 50 * time.Millisecond, StatusPoll: 100 * time.Millisecond, PauseLimit: 2 * time.Second}
		if mod != nil {
			mod(c)
		}
	})
	// What the test emits next is read by the stream, not found in the
	// table when the session opens.
	testenv.WaitFor(t, 20*time.Second, "streaming", func() bool { return r.Health().Stream.State == relay.StreamStreaming })
	return r
}

// emitOne emits one event of typ and key, in a transaction of its own.
func (b *walBundle) emitOne(t *testing.T, typ, key string, mod func(ev *txbox.Event)) txbox.ID {
	t.Helper()
	return b.publish(t, typ, 1, func(_ int, ev *txbox.Event) {
		ev.Key = key
		if mod != nil {
			mod(ev)
		}
	})[0]
}

// confirmedFlush is the slot's confirmed_flush_lsn - pg_current_wal_lsn
// at the moment lsn was taken: ≥ 0 once the slot confirmed past lsn.
func (b *walBundle) confirmedPast(t *testing.T, lsn string) bool {
	t.Helper()
	var past bool
	err := b.pool.QueryRow(context.Background(), `SELECT confirmed_flush_lsn >= $2::pg_lsn FROM pg_replication_slots WHERE slot_name = $1`,
		b.streamer.WAL().Slot, lsn).Scan(&past)
	if err != nil {
		t.Fatal(err)
	}
	return past
}

func (b *walBundle) currentLSN(t *testing.T) string {
	t.Helper()
	var lsn string
	if err := b.pool.QueryRow(context.Background(), `SELECT pg_current_wal_lsn()::text`).Scan(&lsn); err != nil {
		t.Fatal(err)
	}
	return lsn
}

// firstOrder is the ids of want in the order of their first delivery.
func (s *testSender) firstOrder(want []txbox.ID) []txbox.ID {
	s.mu.Lock()
	defer s.mu.Unlock()
	in := map[txbox.ID]bool{}
	for _, id := range want {
		in[id] = true
	}
	var out []txbox.ID
	seen := map[txbox.ID]bool{}
	for _, d := range s.got {
		if in[d.msg.ID] && !seen[d.msg.ID] {
			seen[d.msg.ID] = true
			out = append(out, d.msg.ID)
		}
	}
	return out
}

// positions names ids by their place in want ("3 1 2").
func positions(want, got []txbox.ID) string {
	var out []string
	for _, id := range got {
		out = append(out, fmt.Sprint(slices.Index(want, id)+1))
	}
	return strings.Join(out, " ")
}

// TestStreamPoisonMessageIsDeadLettered: a message with txbox's prefix
// that does not decode is dead-lettered with its raw bytes and the reason
// (naming its WAL position), the slot confirms past it, and the events
// after it, an ordered key's included, are delivered. Before, its spill
// was refused for ever ("invalid event type"), which held the slot and
// every spill grouped with it.
func TestStreamPoisonMessageIsDeadLettered(t *testing.T) {
	t.Parallel()
	b := setupWAL(t)
	b.startWAL(t, func(c *relay.Config) {
		c.Events = map[string]relay.EventSettings{"acct": {Ordering: new(txbox.OrderingKey)}}
	})
	ctx := context.Background()
	raw := []byte("not a txbox message")
	if _, err := b.pool.Exec(ctx, fmt.Sprintf(`SELECT pg_logical_emit_message(true, %s.txbox_wal_check(), $1::bytea)`, b.schema), raw); err != nil {
		t.Fatal(err)
	}
	after := b.currentLSN(t)
	ids := []txbox.ID{b.emitOne(t, "acct", "k1", nil), b.emitOne(t, "acct", "k1", nil), b.emitOne(t, "orders", "", nil)}
	testenv.WaitFor(t, 20*time.Second, "the events after the poison delivered", func() bool { return containsAll(b.sender.ids(), ids) })
	testenv.WaitFor(t, 20*time.Second, "the poison dead-lettered", func() bool {
		return b.count(t, "dead_letter", "event_type = $1", store.UndecodableEventType) == 1
	})
	var payload []byte
	var lastErr string
	if err := b.pool.QueryRow(ctx, fmt.Sprintf(`SELECT payload, last_error FROM %s.txbox_dead_letter WHERE event_type = $1`, b.schema),
		store.UndecodableEventType).Scan(&payload, &lastErr); err != nil {
		t.Fatal(err)
	}
	if string(payload) != string(raw) {
		t.Errorf("dead letter payload %q, want the raw message %q", payload, raw)
	}
	if !strings.Contains(lastErr, "cannot be turned into a message") || !strings.Contains(lastErr, "WAL position") {
		t.Errorf("dead letter error %q does not say why or where", lastErr)
	}
	testenv.WaitFor(t, 20*time.Second, "the slot confirmed past the poison", func() bool { return b.confirmedPast(t, after) })
	if got := positions(ids[:2], b.sender.firstOrder(ids[:2])); got != "1 2" {
		t.Errorf("key k1 delivered in the order %s, want 1 2", got)
	}
}

// TestStreamSpillIsolatesRefusedEvent: the destination is down, so a
// transaction's ten events spill in one group; the database refuses one of
// them (a header with a NUL, which jsonb cannot store). The group is split
// until that event stands alone, it is dead-lettered in a form the table
// accepts, and the nine others land and are delivered once the destination
// is back. Before, the whole group was retried for ever.
func TestStreamSpillIsolatesRefusedEvent(t *testing.T) {
	t.Parallel()
	b := setupWAL(t)
	down := errors.New("destination down")
	var up atomic.Bool
	b.sender.setBehave(func(ctx context.Context, msgs []*sender.Message) error {
		if up.Load() {
			return nil
		}
		return txbox.Transient(down)
	})
	var refusals atomic.Int64
	b.streamer.spill = func(ctx context.Context, items []*store.StreamSpillItem, next func() error) error {
		err := next()
		if errors.Is(err, store.ErrDataRefused) {
			refusals.Add(1)
		}
		return err
	}
	b.startWAL(t, nil)
	var bad txbox.ID
	ids := b.publish(t, "orders", 10, func(i int, ev *txbox.Event) {
		if i == 4 {
			ev.Headers = map[string]string{"note": "a\x00b"}
			bad = ev.ID
		}
	})
	testenv.WaitFor(t, 30*time.Second, "the refused event dead-lettered", func() bool {
		return b.count(t, "dead_letter", "id = $1", bad) == 1
	})
	if refusals.Load() == 0 {
		t.Fatal("the database refused no spill: the test did not provoke the refusal")
	}
	var lastErr, note string
	if err := b.pool.QueryRow(context.Background(), fmt.Sprintf(`SELECT last_error, headers->>'note' FROM %s.txbox_dead_letter WHERE id = $1`, b.schema), bad).Scan(&lastErr, &note); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(lastErr, "refused") || note != "ab" {
		t.Errorf("dead letter: error %q, header %q; want the refusal and the header without its NUL", lastErr, note)
	}
	up.Store(true)
	good := slices.DeleteFunc(slices.Clone(ids), func(id txbox.ID) bool { return id == bad })
	testenv.WaitFor(t, 30*time.Second, "the nine others delivered", func() bool { return containsAll(b.sender.ids(), good) })
	if d := b.sender.deliveries(bad); len(d) > 1 {
		t.Errorf("the refused event was delivered %d times", len(d))
	}
}

// TestStreamReloadKeepsAKeyWhoseSpillIsPending: an ordered key's first
// event fails for good, and its dead-letter write is held (a slow spill)
// across many reloads of the table's keys; the key's next event must not
// be delivered meanwhile, nor while the dead letter is unresolved. Before,
// a reload replaced the spilled keys with what the table showed and forgot
// the key whose spill had not committed yet.
func TestStreamReloadKeepsAKeyWhoseSpillIsPending(t *testing.T) {
	t.Parallel()
	b := setupWAL(t)
	first := txbox.NewID()
	b.sender.setBehave(func(ctx context.Context, msgs []*sender.Message) error {
		errs := make([]error, len(msgs))
		for i, m := range msgs {
			if m.ID == first {
				errs[i] = txbox.Permanent(errors.New("rejected"))
			}
		}
		return sender.Summarize(errs)
	})
	release := make(chan struct{})
	var releaseOnce sync.Once
	t.Cleanup(func() { releaseOnce.Do(func() { close(release) }) })
	var held atomic.Bool
	b.streamer.spill = func(ctx context.Context, items []*store.StreamSpillItem, next func() error) error {
		for _, it := range items {
			if it.Event.Row.ID == first {
				held.Store(true)
				select {
				case <-release:
				case <-ctx.Done():
					return ctx.Err()
				}
			}
		}
		return next()
	}
	b.startWAL(t, func(c *relay.Config) {
		c.Events = map[string]relay.EventSettings{"acct": {Ordering: new(txbox.OrderingKey)}}
		relay.SetTableKeysReload(&c.Stream, 50*time.Millisecond)
	})
	b.emitOne(t, "acct", "k", func(ev *txbox.Event) { ev.ID = first })
	testenv.WaitFor(t, 20*time.Second, "the first event's spill held", held.Load)
	second := b.emitOne(t, "acct", "k", nil)
	other := b.emitOne(t, "acct", "other", nil)
	testenv.WaitFor(t, 20*time.Second, "another key delivered", func() bool { return len(b.sender.deliveries(other)) > 0 })
	// Twenty reloads while the spill is held.
	reloads := time.Now().Add(time.Second)
	testenv.WaitFor(t, 5*time.Second, "twenty reloads", func() bool {
		return time.Now().After(reloads) || len(b.sender.deliveries(second)) > 0
	})
	if n := len(b.sender.deliveries(second)); n > 0 {
		t.Fatalf("the key's second event was delivered while its first one's dead letter was being written")
	}
	releaseOnce.Do(func() { close(release) })
	testenv.WaitFor(t, 20*time.Second, "the first event dead-lettered", func() bool { return b.count(t, "dead_letter", "id = $1", first) == 1 })
	if n := len(b.sender.deliveries(second)); n > 0 {
		t.Fatalf("the key's second event was delivered while its first one was an unresolved dead letter")
	}
	if _, err := b.store.DeadLetterResolve(context.Background(), []txbox.ID{first}); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 20*time.Second, "the second event delivered once the dead letter is resolved", func() bool {
		return len(b.sender.deliveries(second)) > 0
	})
}

// TestStreamOverflowKeepsKeyOrder: one ordered key, 30 events, a lane that
// holds 4, and a destination that holds its first send for a while: the
// lane overflows into the table while the key's first event is in
// flight. The first deliveries stay in stream order. Before, the later
// events spilled at once and the table poller delivered them beside the
// first: 2 3 4 … 30 1.
func TestStreamOverflowKeepsKeyOrder(t *testing.T) {
	t.Parallel()
	b := setupWAL(t)
	release := make(chan struct{})
	var sends atomic.Int64
	b.sender.setBehave(func(ctx context.Context, msgs []*sender.Message) error {
		if sends.Add(1) == 1 {
			select {
			case <-release:
			case <-ctx.Done():
				return txbox.Transient(ctx.Err())
			}
		}
		return nil
	})
	r := b.startWAL(t, func(c *relay.Config) {
		c.Events = map[string]relay.EventSettings{"acct": {Ordering: new(txbox.OrderingKey)}}
		c.Stream.LaneQueue = 4
	})
	var ids []txbox.ID
	for range 30 {
		ids = append(ids, b.emitOne(t, "acct", "k", nil))
	}
	testenv.WaitFor(t, 20*time.Second, "the first send waiting", func() bool { return sends.Load() >= 1 })
	testenv.WaitFor(t, 20*time.Second, "the stream read all 30", func() bool { return r.Health().Stream.Held == 30 })
	// The lane stays full past its stall (100ms) and overflows. Give a
	// later event half a second to be delivered past the first: it must
	// not be.
	readAll := time.Now()
	testenv.WaitFor(t, 5*time.Second, "half a second with the first send held", func() bool {
		return time.Since(readAll) > 500*time.Millisecond || len(b.sender.firstOrder(ids[1:])) > 0
	})
	close(release)
	testenv.WaitFor(t, 30*time.Second, "all 30 delivered", func() bool { return containsAll(b.sender.ids(), ids) })
	want := make([]string, len(ids))
	for i := range ids {
		want[i] = fmt.Sprint(i + 1)
	}
	if got := positions(ids, b.sender.firstOrder(ids)); got != strings.Join(want, " ") {
		t.Errorf("first deliveries in the order %s, want stream order", got)
	}
}

// TestStreamDeferredHeadHoldsItsKey: an ordered key's first event has a
// not-before a moment away, its second none. The second waits for the
// first. Before, the deferred event went into the table at publish time,
// out of the stream's sight, and the second streamed past it: 2 1.
func TestStreamDeferredHeadHoldsItsKey(t *testing.T) {
	t.Parallel()
	b := setupWAL(t)
	b.startWAL(t, func(c *relay.Config) {
		c.Events = map[string]relay.EventSettings{"acct": {Ordering: new(txbox.OrderingKey)}}
	})
	notBefore := time.Now().Add(1500 * time.Millisecond)
	ids := []txbox.ID{
		b.emitOne(t, "acct", "kd", func(ev *txbox.Event) { ev.NotBefore = notBefore }),
		b.emitOne(t, "acct", "kd", nil),
	}
	testenv.WaitFor(t, 30*time.Second, "both delivered", func() bool { return containsAll(b.sender.ids(), ids) })
	if got := positions(ids, b.sender.firstOrder(ids)); got != "1 2" {
		t.Errorf("delivered in the order %s, want 1 2", got)
	}
	if at := b.sender.deliveries(ids[0])[0].at; at.Before(notBefore) {
		t.Errorf("the deferred event was delivered %s before its not-before", notBefore.Sub(at))
	}
}

// TestStreamFailedEventGoesBeforeALaterDeferredOne: an ordered key's event
// A fails while in flight (it is retried after a backoff), and the key's
// next event D, deferred a moment, was read meanwhile. A reaches the table
// before D, so A is delivered first. Before, D was in the table at publish
// time and A's spill, a later transaction, sorted behind it.
func TestStreamFailedEventGoesBeforeALaterDeferredOne(t *testing.T) {
	t.Parallel()
	b := setupWAL(t)
	a := txbox.NewID()
	var r atomic.Pointer[relay.Relay]
	var failed, sending atomic.Bool
	b.sender.setBehave(func(ctx context.Context, msgs []*sender.Message) error {
		if len(msgs) == 1 && msgs[0].ID == a && !failed.Load() {
			// A is in flight: fail it once D is read too.
			sending.Store(true)
			for r.Load().Health().Stream.Held < 2 {
				select {
				case <-ctx.Done():
					return txbox.Transient(ctx.Err())
				case <-time.After(5 * time.Millisecond):
				}
			}
			failed.Store(true)
			return &sender.BatchError{Errs: []error{errors.New("refused once")}}
		}
		return nil
	})
	r.Store(b.startWAL(t, func(c *relay.Config) {
		c.Events = map[string]relay.EventSettings{"acct": {Ordering: new(txbox.OrderingKey)}}
	}))
	ids := []txbox.ID{b.emitOne(t, "acct", "k", func(ev *txbox.Event) { ev.ID = a })}
	testenv.WaitFor(t, 20*time.Second, "A in flight", sending.Load)
	ids = append(ids, b.emitOne(t, "acct", "k", func(ev *txbox.Event) { ev.NotBefore = time.Now().Add(time.Second) }))
	testenv.WaitFor(t, 30*time.Second, "both delivered", func() bool { return containsAll(b.sender.ids(), ids) })
	if !failed.Load() {
		t.Fatal("A never failed: the test did not provoke the spill")
	}
	// A's successful delivery (its second) must come before D's.
	da, dd := b.sender.deliveries(a), b.sender.deliveries(ids[1])
	if len(da) < 2 || len(dd) < 1 || !da[len(da)-1].at.Before(dd[0].at) {
		t.Errorf("A delivered %d times (last at %v), D first at %v: want A's retry before D", len(da), lastAt(da), firstAt(dd))
	}
}

func lastAt(ds []delivery) time.Time {
	if len(ds) == 0 {
		return time.Time{}
	}
	return ds[len(ds)-1].at
}

func firstAt(ds []delivery) time.Time {
	if len(ds) == 0 {
		return time.Time{}
	}
	return ds[0].at
}

// sendCount is how many Send calls the sender has seen.
func (s *testSender) sendCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sends
}

// takeOver makes the slot look taken over by another relay: the status
// poll finds another process streaming it, and opening the stream finds
// it busy. give hands it back.
func (b *walBundle) takeOver(give bool) {
	b.streamer.set(func(s *scriptedStreamer) {
		s.busy = !give
		s.pid = nil
		if !give {
			s.pid = func(real int) int { return real + 100000 }
		}
	})
}

// TestStreamLostSessionSendsNothingMore: a relay sending a backlog in
// batches finds the slot streamed by another process (the status poll
// reads its active_pid). It loses the session: its state stops saying
// streaming, the batch in flight ends, and no further batch is sent while
// another holds the stream; once the stream is back, everything is
// delivered.
func TestStreamLostSessionSendsNothingMore(t *testing.T) {
	t.Parallel()
	b := setupWAL(t)
	b.sender.setBehave(func(ctx context.Context, msgs []*sender.Message) error {
		select {
		case <-time.After(100 * time.Millisecond):
			return nil
		case <-ctx.Done():
			return txbox.Transient(ctx.Err())
		}
	})
	r := b.startWAL(t, func(c *relay.Config) {
		c.Events = map[string]relay.EventSettings{"orders": {BatchSize: new(10)}}
	})
	ids := b.publish(t, "orders", 300, nil)
	testenv.WaitFor(t, 20*time.Second, "three batches sent", func() bool { return b.sender.sendCount() >= 3 })
	b.takeOver(false)
	testenv.WaitFor(t, 10*time.Second, "the session lost", func() bool { return r.Health().Stream.Losses >= 1 })
	h := r.Health().Stream
	if h.State == relay.StreamStreaming {
		t.Errorf("state %q after losing the session", h.State)
	}
	atLoss := b.sender.sendCount()
	lostAt := time.Now()
	testenv.WaitFor(t, 5*time.Second, "a second after the loss", func() bool {
		return time.Since(lostAt) > time.Second || b.sender.sendCount() > atLoss
	})
	if n := b.sender.sendCount() - atLoss; n > 0 {
		t.Errorf("%d batches sent after the session was lost", n)
	}
	if st := r.Health().Stream; st.Dropped == 0 || st.State == relay.StreamStreaming {
		t.Errorf("after the loss: dropped %d, state %q; want events dropped and not streaming", st.Dropped, st.State)
	}
	b.takeOver(true)
	testenv.WaitFor(t, 60*time.Second, "everything delivered once the stream is back", func() bool { return containsAll(b.sender.ids(), ids) })
}

// TestStreamLostSessionStopsOrderedWaves: an ordered batch of 200 events
// of one key is sent in 200 waves; the session is lost after a few. No
// wave after the loss is sent: the relay that holds the stream now may
// already send the key's later events. Before, the waves went on to the
// end of the batch (a SIGSTOPped relay resumed its waves after another
// relay had taken over).
func TestStreamLostSessionStopsOrderedWaves(t *testing.T) {
	t.Parallel()
	b := setupWAL(t)
	b.sender.setBehave(func(ctx context.Context, msgs []*sender.Message) error {
		select {
		case <-time.After(20 * time.Millisecond):
			return nil
		case <-ctx.Done():
			return txbox.Transient(ctx.Err())
		}
	})
	r := b.startWAL(t, func(c *relay.Config) {
		c.Events = map[string]relay.EventSettings{"acct": {Ordering: new(txbox.OrderingKey)}}
	})
	ids := b.publish(t, "acct", 200, func(_ int, ev *txbox.Event) { ev.Key = "k" })
	testenv.WaitFor(t, 20*time.Second, "ten waves sent", func() bool { return b.sender.sendCount() >= 10 })
	b.takeOver(false)
	testenv.WaitFor(t, 10*time.Second, "the session lost", func() bool { return r.Health().Stream.Losses >= 1 })
	atLoss := b.sender.sendCount()
	lostAt := time.Now()
	testenv.WaitFor(t, 5*time.Second, "half a second after the loss", func() bool {
		return time.Since(lostAt) > 500*time.Millisecond || b.sender.sendCount() > atLoss+1
	})
	if n := b.sender.sendCount() - atLoss; n > 1 {
		t.Errorf("%d waves sent after the session was lost, want at most the one in flight", n)
	}
	b.takeOver(true)
	testenv.WaitFor(t, 60*time.Second, "everything delivered once the stream is back", func() bool { return containsAll(b.sender.ids(), ids) })
	if got := b.sender.firstOrder(ids); !slices.Equal(got, ids) {
		t.Errorf("first deliveries out of stream order: %s", positions(ids, got))
	}
}

// dropSlotUnderRelay drops b's slot as a failover to a standby without it
// would lose it: the walsender ended, the slot gone, the state row kept.
func (b *walBundle) dropSlotUnderRelay(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	slot := b.streamer.WAL().Slot
	testenv.WaitFor(t, 20*time.Second, "the slot dropped", func() bool {
		_, _ = b.pool.Exec(ctx, `SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE slot_name = $1 AND active_pid IS NOT NULL`, slot)
		_, err := b.pool.Exec(ctx, `SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1 AND NOT active`, slot)
		var n int
		if err == nil {
			err = b.pool.QueryRow(ctx, `SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1`, slot).Scan(&n)
		}
		return err == nil && n == 0
	})
}

// TestStreamRecreatesALostSlot: the slot disappears under a streaming
// relay (as after a failover to a standby without it), while a producer
// keeps inserting rows into the table. The relay recreates the slot at
// once, says what it could not recover (the emits between its last confirm
// and the new slot: here none were made), delivers the rows inserted while
// the slot was missing (the new slot's snapshot hands them to the poller),
// and streams what is emitted after.
func TestStreamRecreatesALostSlot(t *testing.T) {
	t.Parallel()
	b := setupWAL(t)
	r := b.startWAL(t, nil)
	before := b.publish(t, "orders", 20, nil)
	testenv.WaitFor(t, 20*time.Second, "the first events delivered and confirmed", func() bool {
		return containsAll(b.sender.ids(), before) && r.Health().Stream.Transactions == 0 && !r.Health().Stream.LastConfirm.IsZero()
	})
	confirmed := r.Health().Stream.Confirmed
	b.dropSlotUnderRelay(t)
	// A producer on plain SQL keeps inserting into the table meanwhile.
	var inserted []txbox.ID
	for range 5 {
		id := txbox.NewID()
		if _, err := b.pool.Exec(context.Background(), fmt.Sprintf(`INSERT INTO %s.txbox_outbox (id, event_type, payload) VALUES ($1, 'orders', '{}')`, b.schema), id); err != nil {
			t.Fatal(err)
		}
		inserted = append(inserted, id)
	}
	testenv.WaitFor(t, 60*time.Second, "the slot recreated", func() bool { return r.Health().Stream.SlotRecreations == 1 })
	h := r.Health().Stream
	if h.LastLoss == nil || h.LastLoss.From != confirmed || h.LastLoss.To < h.LastLoss.From {
		t.Fatalf("loss %+v: want it to start at the last confirmed position %X", h.LastLoss, confirmed)
	}
	testenv.WaitFor(t, 30*time.Second, "the rows inserted while the slot was missing delivered", func() bool { return containsAll(b.sender.ids(), inserted) })
	after := b.publish(t, "orders", 20, nil)
	testenv.WaitFor(t, 30*time.Second, "the events emitted after delivered", func() bool { return containsAll(b.sender.ids(), after) })
	testenv.WaitFor(t, 20*time.Second, "the slot's state records the loss", func() bool {
		st := r.Health().Stream.Slot
		return st != nil && st.LastLoss != nil && st.LastLoss.From == confirmed
	})
}

// TestStreamSlotLostStop: with on-slot-lost stop, the relay does not make a
// new slot: it keeps failing, saying why, and emits keep failing too (an
// emit never vanishes).
func TestStreamSlotLostStop(t *testing.T) {
	t.Parallel()
	b := setupWAL(t)
	r := b.startWAL(t, func(c *relay.Config) { c.Stream.OnSlotLost = relay.SlotLostStop })
	b.dropSlotUnderRelay(t)
	testenv.WaitFor(t, 20*time.Second, "the stream failing on the lost slot", func() bool {
		h := r.Health().Stream
		return h.State == relay.StreamFailing && strings.Contains(h.LastError, "no longer exists")
	})
	ctx := context.Background()
	tx, err := b.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	err = b.store.OutboxInsert(ctx, tx, &store.OutboxInsertParams{Events: []*txbox.Event{{ID: txbox.NewID(), Type: "orders", Payload: []byte("{}")}}})
	if !errors.Is(err, postgres.ErrNoSlot) {
		t.Errorf("emit without a slot: %v, want ErrNoSlot", err)
	}
	if h := r.Health().Stream; h.SlotRecreations != 0 {
		t.Errorf("the relay recreated the slot %d times with on-slot-lost stop", h.SlotRecreations)
	}
}

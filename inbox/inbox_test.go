package inbox_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace"
	"go.uber.org/goleak"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/inbox"
	"github.com/txbox/txbox/internal/testenv"
	"github.com/txbox/txbox/store/sqlite"
)

func openStore(t *testing.T) *sqlite.Driver {
	t.Helper()
	d, err := sqlite.Open(filepath.Join(t.TempDir(), "inbox.db"), sqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close() })
	if err := d.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	return d
}

func TestNewValidatesConfig(t *testing.T) {
	t.Parallel()
	st := openStore(t)
	lru, err := inbox.NewLRU(10, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name  string
		cfg   inbox.Config
		field string
	}{
		{"no consumer", inbox.Config{}, "Consumer"},
		{"hostile consumer", inbox.Config{Consumer: "a'; DROP TABLE x;--"}, "Consumer"},
		{"bad mode", inbox.Config{Consumer: "c", Mode: inbox.Mode(7)}, "Mode"},
		{"negative TTL", inbox.Config{Consumer: "c", TTL: -time.Second}, "TTL"},
	}
	for _, c := range cases {
		_, err := inbox.New(st, c.cfg)
		var ce *inbox.ConfigError
		if !errors.As(err, &ce) || ce.Field != c.field {
			t.Errorf("%s: err = %v; want a *ConfigError for %s", c.name, err, c.field)
		}
	}
	if _, err := inbox.New(nil, inbox.Config{Consumer: "c"}); err == nil {
		t.Error("nil store accepted")
	}
	// The default inbox TTL is 24h: a 1h cache fits, a 25h one does not.
	if _, err := inbox.New(st, inbox.Config{Consumer: "c", Cache: lru}); err != nil {
		t.Errorf("1h cache under the default TTL: %v", err)
	}
	long, _ := inbox.NewLRU(10, 25*time.Hour)
	var te *inbox.CacheTTLError
	if _, err := inbox.New(st, inbox.Config{Consumer: "c", Cache: long}); !errors.As(err, &te) || te.InboxTTL != inbox.DefaultTTL {
		t.Errorf("25h cache: err = %v; want *CacheTTLError against the 24h default", err)
	}
	in, err := inbox.New(st, inbox.Config{Consumer: "c"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := in.Handle(context.Background(), inbox.Message{ID: txbox.NewID()}, nil); !errors.Is(err, inbox.ErrNilHandler) {
		t.Errorf("nil handler: %v", err)
	}
	if _, err := in.HandleBatch(context.Background(), []inbox.Message{{ID: txbox.NewID()}}, nil); !errors.Is(err, inbox.ErrNilHandler) {
		t.Errorf("nil batch handler: %v", err)
	}
	if in.Consumer() != "c" || in.Mode() != inbox.Transactional || in.Mode().String() != "transactional" || in.TTL() != inbox.DefaultTTL {
		t.Errorf("accessors: %q %v", in.Consumer(), in.Mode())
	}
}

func TestLRU(t *testing.T) {
	t.Parallel()
	if _, err := inbox.NewLRU(-1, time.Hour); err == nil {
		t.Error("negative size accepted")
	}
	if _, err := inbox.NewLRU(1, 0); err == nil {
		t.Error("zero TTL accepted")
	}
	c, err := inbox.NewLRU(3, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	ids := []txbox.ID{txbox.NewID(), txbox.NewID(), txbox.NewID(), txbox.NewID()}
	_ = c.Add(ctx, "a", ids[:3])
	// Touch ids[0] so ids[1] is the least recently used.
	if hit, _ := c.Contains(ctx, "a", ids[0]); !hit {
		t.Fatal("miss after Add")
	}
	_ = c.Add(ctx, "a", ids[3:])
	if hit, _ := c.Contains(ctx, "a", ids[1]); hit {
		t.Error("least recently used entry not evicted")
	}
	for _, id := range []txbox.ID{ids[0], ids[2], ids[3]} {
		if hit, _ := c.Contains(ctx, "a", id); !hit {
			t.Errorf("%s evicted", id)
		}
	}
	if hit, _ := c.Contains(ctx, "b", ids[0]); hit {
		t.Error("consumer b sees consumer a's entry")
	}
	if c.Len() != 3 {
		t.Errorf("Len = %d", c.Len())
	}
	c.Purge()
	if c.Len() != 0 {
		t.Errorf("Len after Purge = %d", c.Len())
	}
}

func TestLRUExpires(t *testing.T) {
	t.Parallel()
	c, err := inbox.NewLRU(10, 20*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	id := txbox.NewID()
	_ = c.Add(ctx, "a", []txbox.ID{id})
	if hit, _ := c.Contains(ctx, "a", id); !hit {
		t.Fatal("miss right after Add")
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		if hit, _ := c.Contains(ctx, "a", id); !hit {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("entry never expired")
		}
		time.Sleep(5 * time.Millisecond) // waiting for the TTL to pass is the point here
	}
}

func TestTyped(t *testing.T) {
	t.Parallel()
	st := openStore(t)
	in, err := inbox.New(st, inbox.Config{Consumer: "typed", Mode: inbox.NonTransactional})
	if err != nil {
		t.Fatal(err)
	}
	called := false
	// Non-transactional handlers get a nil tx, which is no *struct{}.
	_, err = in.Handle(context.Background(), inbox.Message{ID: txbox.NewID()}, inbox.Typed(func(ctx context.Context, tx *struct{}, m inbox.Message) error {
		called = true
		return nil
	}))
	if called || !errors.Is(err, txbox.ErrNoTransaction) || !strings.Contains(err.Error(), "*struct {}") {
		t.Errorf("called %v, err %v; want ErrNoTransaction naming the wanted type", called, err)
	}
}

// recordingHook embeds NopHook, as users are told to, and records what it
// is told.
type recordingHook struct {
	inbox.NopHook
	mu      sync.Mutex
	handled []inbox.HandledEvent
	cache   []inbox.CacheEvent
	cleanup []inbox.CleanupEvent
}

func (h *recordingHook) OnHandled(e inbox.HandledEvent) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.handled = append(h.handled, e)
}

func (h *recordingHook) OnCache(e inbox.CacheEvent) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.cache = append(h.cache, e)
}

func (h *recordingHook) OnCleanup(e inbox.CleanupEvent) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.cleanup = append(h.cleanup, e)
}

func (h *recordingHook) results() map[inbox.Result]int {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := map[inbox.Result]int{}
	for _, e := range h.handled {
		out[e.Result]++
	}
	return out
}

// TestHookEvents: every settled message is one OnHandled event carrying
// the message's id, type and delivery metadata, its result, the batch size
// and the error; every cache lookup is one OnCache event.
func TestHookEvents(t *testing.T) {
	t.Parallel()
	st := openStore(t)
	lru, _ := inbox.NewLRU(10, time.Hour)
	hook := &recordingHook{}
	in, err := inbox.New(st, inbox.Config{Consumer: "hook", Cache: lru, Hook: hook})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	ok := func(context.Context, any, inbox.Message) error { return nil }
	id := txbox.NewID()
	sentinel := errors.New("boom")
	d1 := inbox.Delivery{Broker: "nats", Source: "S", Count: 1, StreamSeq: 7, ConsumerSeq: 3}
	d2 := inbox.Delivery{Broker: "nats", Source: "S", Count: 2, Redelivered: true, StreamSeq: 7, ConsumerSeq: 4}
	if _, err := in.Handle(ctx, inbox.Message{ID: id, Type: "order", Delivery: d1}, func(context.Context, any, inbox.Message) error { panic(sentinel) }); !errors.Is(err, sentinel) {
		t.Errorf("panic(err) does not unwrap to err: %v", err)
	}
	_, _ = in.Handle(ctx, inbox.Message{ID: id, Type: "order", Delivery: d2}, ok)
	_, _ = in.Handle(ctx, inbox.Message{ID: id, Type: "order"}, ok)
	other := txbox.NewID()
	_, _ = in.HandleBatch(ctx, []inbox.Message{{ID: id}, {ID: other}}, func(context.Context, any, []inbox.Message) error { return nil })
	want := map[inbox.Result]int{inbox.Failed: 1, inbox.Processed: 2, inbox.Duplicate: 2}
	if got := hook.results(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("hook results %v, want %v", got, want)
	}
	hook.mu.Lock()
	defer hook.mu.Unlock()
	if len(hook.handled) != 5 {
		t.Fatalf("%d handled events, want 5", len(hook.handled))
	}
	first, second := hook.handled[0], hook.handled[1]
	var pe *inbox.PanicError
	if first.ID != id || first.Type != "order" || first.Consumer != "hook" || first.Delivery != d1 || first.Result != inbox.Failed || first.Batch != 1 || !errors.As(first.Err, &pe) {
		t.Errorf("failed event = %+v", first)
	}
	if second.Delivery != d2 || !second.Delivery.IsRedelivery() || second.Result != inbox.Processed || second.Err != nil || second.Duration <= 0 {
		t.Errorf("redelivery event = %+v", second)
	}
	if d1.IsRedelivery() {
		t.Error("a first delivery counts as a redelivery")
	}
	for _, e := range hook.handled[3:] {
		if e.Batch != 2 {
			t.Errorf("batch event %+v: Batch = %d, want 2", e, e.Batch)
		}
	}
	if hook.handled[3].ID != id || hook.handled[3].Result != inbox.Duplicate || hook.handled[4].ID != other || hook.handled[4].Result != inbox.Processed {
		t.Errorf("batch events = %+v", hook.handled[3:])
	}
	var hits, misses int
	for _, e := range hook.cache {
		if e.ID != id || e.Err != nil {
			t.Errorf("cache event %+v", e)
		}
		if e.Hit {
			hits++
		} else {
			misses++
		}
	}
	if hits != 1 || misses != 2 {
		t.Errorf("cache hits %d misses %d, want 1 and 2", hits, misses)
	}
}

// TestNonTransactionalFailureIsLost: in non-transactional mode a handler
// that fails after the id was committed loses its effect. Handle says so
// (Lost, which adapters acknowledge, with the handler's error), the hook
// gets a Lost event, an ERROR log names the event, and a redelivery is a
// Duplicate that does not run the handler again.
func TestNonTransactionalFailureIsLost(t *testing.T) {
	t.Parallel()
	st := openStore(t)
	hook := &recordingHook{}
	var logs testenv.LogBuffer
	in, err := inbox.New(st, inbox.Config{Consumer: "amo", Mode: inbox.NonTransactional, Hook: hook,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	id := txbox.NewID()
	sentinel := errors.New("smtp down")
	calls := 0
	fail := func(context.Context, any, inbox.Message) error { calls++; return sentinel }
	r, err := in.Handle(ctx, inbox.Message{ID: id, Type: "mail", Delivery: inbox.Delivery{Count: 1}}, fail)
	var he *inbox.HandlerError
	if r != inbox.Lost || !r.Acknowledge() || !errors.As(err, &he) || !errors.Is(err, sentinel) {
		t.Fatalf("Handle = %v, %v; want lost with the handler error", r, err)
	}
	out := logs.String()
	if !strings.Contains(out, "level=ERROR") || !strings.Contains(out, "effect lost") || !strings.Contains(out, id.String()) || !strings.Contains(out, "event_type=mail") {
		t.Errorf("log does not name the lost event at ERROR: %s", out)
	}
	if r, err := in.Handle(ctx, inbox.Message{ID: id}, fail); r != inbox.Duplicate || err != nil {
		t.Errorf("redelivery = %v, %v; want duplicate", r, err)
	}
	if calls != 1 {
		t.Errorf("handler ran %d times, want 1", calls)
	}
	// A panic is lost the same way, and so is every new message of a batch.
	if r, _ := in.Handle(ctx, inbox.Message{ID: txbox.NewID()}, func(context.Context, any, inbox.Message) error { panic("x") }); r != inbox.Lost {
		t.Errorf("panic: result %v, want lost", r)
	}
	results, err := in.HandleBatch(ctx, []inbox.Message{{ID: id}, {ID: txbox.NewID()}}, func(context.Context, any, []inbox.Message) error { return sentinel })
	if !errors.Is(err, sentinel) || fmt.Sprint(results) != "[duplicate lost]" {
		t.Errorf("batch = %v, %v; want [duplicate lost] and the handler error", results, err)
	}
	got := hook.results()
	if got[inbox.Lost] != 3 || got[inbox.Duplicate] != 2 {
		t.Errorf("hook results %v; want 3 lost, 2 duplicates", got)
	}
	for _, r := range []inbox.Result{inbox.Processed, inbox.Duplicate, inbox.Lost} {
		if !r.Acknowledge() {
			t.Errorf("%v is not acknowledged", r)
		}
	}
	if inbox.Failed.Acknowledge() {
		t.Error("failed is acknowledged")
	}
}

// TestCleanerHook: each run that held the lease is one OnCleanup event
// with the ids it deleted.
func TestCleanerHook(t *testing.T) {
	t.Parallel()
	st := openStore(t)
	in, err := inbox.New(st, inbox.Config{Consumer: "clean"})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		if _, err := in.Handle(context.Background(), inbox.Message{ID: txbox.NewID()}, func(context.Context, any, inbox.Message) error { return nil }); err != nil {
			t.Fatal(err)
		}
	}
	hook := &recordingHook{}
	c, err := inbox.NewCleaner(st, st, inbox.CleanerConfig{TTL: time.Nanosecond, Hook: hook})
	if err != nil {
		t.Fatal(err)
	}
	// The ids were stored within the same instant or a few apart: a run
	// deletes those already older than the TTL, so several runs may be
	// needed before all three are gone.
	deleted := 0
	testenv.WaitFor(t, 10*time.Second, "the three ids to be older than the TTL", func() bool {
		n, _, err := c.RunOnce(context.Background())
		if err == nil {
			deleted += n
		}
		return deleted >= 3
	})
	hook.mu.Lock()
	defer hook.mu.Unlock()
	total := 0
	for _, e := range hook.cleanup {
		if !e.Held || e.Err != nil {
			t.Errorf("cleanup event %+v", e)
		}
		total += e.Deleted
	}
	if total != 3 {
		t.Errorf("cleanup events deleted %d in all, want 3", total)
	}
}

func TestCleanerConfig(t *testing.T) {
	t.Parallel()
	st := openStore(t)
	bad := []inbox.CleanerConfig{
		{TTL: -1}, {BatchSize: -1}, {MinDelay: time.Minute, MaxDelay: time.Second}, {Multiplier: 0.5}, {LeaseName: strings.Repeat("x", 201)},
	}
	for _, cfg := range bad {
		var ce *inbox.ConfigError
		if _, err := inbox.NewCleaner(st, st, cfg); !errors.As(err, &ce) {
			t.Errorf("NewCleaner(%+v) = %v; want *ConfigError", cfg, err)
		}
	}
	if _, err := inbox.NewCleaner(st, nil, inbox.CleanerConfig{}); err == nil {
		t.Error("nil leases accepted")
	}
	c, err := inbox.NewCleaner(st, st, inbox.CleanerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	// Stop before Start is a no-op; Start after Stop is refused.
	if err := c.Stop(context.Background()); err != nil {
		t.Errorf("Stop before Start: %v", err)
	}
	if err := c.Start(context.Background()); !errors.Is(err, txbox.ErrClosed) {
		t.Errorf("Start after Stop: %v", err)
	}
}

// TestCleanerStopLeaksNothing is not parallel so that the goroutine
// snapshot sees only its own.
func TestCleanerStopLeaksNothing(t *testing.T) {
	st := openStore(t)
	opts := goleak.IgnoreCurrent()
	c, err := inbox.NewCleaner(st, st, inbox.CleanerConfig{MinDelay: time.Millisecond, MaxDelay: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := c.Start(context.Background()); err == nil {
		t.Error("second Start accepted")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	goleak.VerifyNone(t, opts)
}

func TestHandlerContinuesTrace(t *testing.T) {
	t.Parallel()
	st := openStore(t)
	in, err := inbox.New(st, inbox.Config{Consumer: "trace"})
	if err != nil {
		t.Fatal(err)
	}
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	var got trace.SpanContext
	_, err = in.Handle(context.Background(), inbox.Message{ID: txbox.NewID(), Headers: map[string]string{txbox.HeaderTraceParent: tp}},
		func(ctx context.Context, _ any, _ inbox.Message) error {
			got = trace.SpanContextFromContext(ctx)
			return nil
		})
	if err != nil {
		t.Fatal(err)
	}
	if got.TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" || !got.IsRemote() {
		t.Errorf("handler span context = %v; want the producer's trace", got)
	}
}

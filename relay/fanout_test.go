package relay_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/internal/testenv"
	"github.com/txbox/txbox/relay"
	"github.com/txbox/txbox/sender"
	"github.com/txbox/txbox/store"
)

// routeHook records the routes of the batches the relay reports.
type routeHook struct {
	txbox.NopRelayHook
	ch chan txbox.BatchEvent
}

func (h *routeHook) OnBatch(ev txbox.BatchEvent) {
	select {
	case h.ch <- ev:
	default:
	}
}

// TestFanoutDeadLetterPerRoute: a type fanned out to two routes; route b
// refuses one event for good. That event is a dead letter of route b
// only, with its event id; route a got every event; retrying the dead
// letter sends it to b again and not to a. Hook events and health name
// the routes.
func TestFanoutDeadLetterPerRoute(t *testing.T) {
	t.Parallel()
	eachClaim(t, func(t *testing.T, b *bundle) {
		other := newTestSender()
		ids := b.publish(t, "orders", 20, nil)
		poison := ids[7]
		var refuse atomic.Bool
		refuse.Store(true)
		other.setBehave(func(_ context.Context, msgs []*sender.Message) error {
			errs := make([]error, len(msgs))
			for i, m := range msgs {
				if m.ID == poison && refuse.Load() {
					errs[i] = errors.New("422 unprocessable: unknown order")
				}
			}
			return &sender.BatchError{Errs: errs}
		})
		hook := &routeHook{ch: make(chan txbox.BatchEvent, 100)}
		r := b.start(t, func(c *relay.Config) {
			c.Senders["b"] = other
			c.Defaults.Sender = new("test")
			c.Hooks = append(c.Hooks, hook)
			c.Events = map[string]relay.EventSettings{"orders": {Routes: []relay.RouteSettings{
				{Name: "a", Sender: new("test")},
				{Name: "b", Sender: new("b"), MaxAttempts: new(2)},
			}}}
		})
		testenv.WaitFor(t, 20*time.Second, "the poison dead-lettered on route b", func() bool {
			return b.count(t, "dead_letter", "event_id = $1 AND route = 'b'", poison) == 1
		})
		testenv.WaitFor(t, 20*time.Second, "route a has every event", func() bool { return containsAll(b.sender.ids(), ids) })
		if n := b.count(t, "dead_letter", "true"); n != 1 {
			t.Fatalf("%d dead letters, want the one of route b", n)
		}
		dls, err := b.store.DeadLetterList(context.Background(), &store.DeadLetterListParams{Limit: 10})
		if err != nil || len(dls) != 1 {
			t.Fatalf("dead letters: %v, %v", dls, err)
		}
		dl := dls[0]
		if dl.Route != "b" || dl.EventID != poison || dl.ID == poison {
			t.Fatalf("dead letter %+v: want route b, event %s, its own row id", dl, poison)
		}
		for _, id := range other.ids() {
			if !slices.Contains(ids, id) {
				t.Fatalf("route b got message id %s, not an event id", id)
			}
		}
		sentA := len(b.sender.deliveries(poison))
		refuse.Store(false)
		if n, err := b.store.DeadLetterRetry(context.Background(), []txbox.ID{dl.ID}); err != nil || n != 1 {
			t.Fatalf("retry: %d, %v", n, err)
		}
		r.Wake("orders")
		testenv.WaitFor(t, 20*time.Second, "the retried event acknowledged by b", func() bool {
			for _, d := range other.deliveries(poison) {
				if d.msg.Attempt == 1 && d.msg.DeliveryID == dl.ID {
					return true
				}
			}
			return false
		})
		if n := len(b.sender.deliveries(poison)); n != sentA {
			t.Errorf("the retry of b's dead letter reached route a too (%d deliveries, was %d)", n, sentA)
		}
		routes := map[string]bool{}
		for len(hook.ch) > 0 {
			routes[(<-hook.ch).Route] = true
		}
		if !routes["a"] || !routes["b"] || routes[""] {
			t.Errorf("batch events named routes %v, want a and b", routes)
		}
		var healthRoutes []string
		for _, th := range r.Health().Types {
			if th.EventType == "orders" {
				healthRoutes = append(healthRoutes, th.Route)
			}
		}
		if !slices.Equal(healthRoutes, []string{"a", "b"}) {
			t.Errorf("health of orders names routes %v, want [a b]", healthRoutes)
		}
	})
}

// TestFanoutRemovedRouteDeadLettered: rows of a route that left the
// configuration go to the dead letters with a reason naming the route;
// the remaining routes deliver.
func TestFanoutRemovedRouteDeadLettered(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ids := b.publish(t, "orders", 5, nil)
	if _, err := b.store.OutboxExpand(context.Background(), &store.OutboxExpandParams{EventType: "orders", Routes: []string{"a", "gone"}, Limit: 10}); err != nil {
		t.Fatal(err)
	}
	b.start(t, func(c *relay.Config) {
		c.Senders["b"] = newTestSender()
		c.Defaults.Sender = new("test")
		c.Events = map[string]relay.EventSettings{"orders": {Routes: []relay.RouteSettings{
			{Name: "a", Sender: new("test")},
			{Name: "b", Sender: new("b")},
		}}}
	})
	testenv.WaitFor(t, 20*time.Second, "the removed route's rows dead-lettered", func() bool {
		return b.count(t, "dead_letter", "route = 'gone' AND last_error LIKE '%route \"gone\"%removed%'") == len(ids)
	})
	testenv.WaitFor(t, 20*time.Second, "route a delivered", func() bool { return containsAll(b.sender.ids(), ids) })
}

// sharedPolls counts the rows claims of route "" took: the shared claim's
// (docs/concepts.md, "Fan-out").
type sharedPolls struct {
	txbox.NopRelayHook
	claimed atomic.Int64
}

func (h *sharedPolls) OnPoll(ev txbox.PollEvent) {
	if ev.Route == "" {
		h.claimed.Add(int64(ev.Claimed))
	}
}

// TestFanoutSharedClaimSplitsOnlyUnacked: a type with three unordered
// routes takes the shared claim: its events' rows are claimed once (by
// route ""), sent to every route with the route's delivery id. Route b
// refuses five events once; those get a row for route b only, which b's
// poller delivers. Routes a and c get every event exactly once, b every
// event, and the outbox ends empty.
func TestFanoutSharedClaimSplitsOnlyUnacked(t *testing.T) {
	t.Parallel()
	eachClaim(t, func(t *testing.T, b *bundle) {
		sb, sc := newTestSender(), newTestSender()
		ids := b.publish(t, "orders", 60, nil)
		refuse := map[txbox.ID]bool{}
		for _, id := range ids[10:15] {
			refuse[id] = true
		}
		var refused atomic.Int64
		var mu sync.Mutex
		sb.setBehave(func(_ context.Context, msgs []*sender.Message) error {
			errs := make([]error, len(msgs))
			mu.Lock()
			defer mu.Unlock()
			for i, m := range msgs {
				if refuse[m.ID] {
					delete(refuse, m.ID)
					refused.Add(1)
					errs[i] = errors.New("409 conflict: try later")
				}
			}
			return &sender.BatchError{Errs: errs}
		})
		polls := &sharedPolls{}
		b.start(t, func(c *relay.Config) {
			c.Senders["b"], c.Senders["c"] = sb, sc
			c.Defaults.Sender = new("test")
			c.Hooks = append(c.Hooks, polls)
			c.Events = map[string]relay.EventSettings{"orders": {Routes: []relay.RouteSettings{
				{Name: "a", Sender: new("test")},
				{Name: "b", Sender: new("b"), Backoff: &relay.BackoffSettings{Delay: new(10 * time.Millisecond), Max: new(50 * time.Millisecond)}},
				{Name: "c", Sender: new("c")},
			}}}
		})
		testenv.WaitFor(t, 30*time.Second, "every route has every event", func() bool {
			return containsAll(b.sender.ids(), ids) && containsAll(sb.ids(), ids) && containsAll(sc.ids(), ids)
		})
		testenv.WaitFor(t, 20*time.Second, "every row processed", func() bool { return b.count(t, "outbox", "status <> 'PROCESSED'") == 0 })
		if refused.Load() != 5 {
			t.Fatalf("route b refused %d events, want 5", refused.Load())
		}
		if n := polls.claimed.Load(); n < int64(len(ids)) {
			t.Errorf("the shared claim (route \"\") took %d rows, want all %d events", n, len(ids))
		}
		for i, s := range []*testSender{b.sender, sb, sc} {
			for _, id := range ids {
				ds := s.deliveries(id)
				want := 1
				if i == 1 && slices.Contains(ids[10:15], id) {
					want = 2
				}
				if len(ds) != want {
					t.Fatalf("route %d got event %s %d times, want %d", i, id, len(ds), want)
				}
				for _, d := range ds {
					if d.msg.DeliveryID != store.RouteRowID(id, i) {
						t.Fatalf("route %d got event %s with delivery id %s, want %s", i, id, d.msg.DeliveryID, store.RouteRowID(id, i))
					}
				}
			}
		}
		if n := b.count(t, "dead_letter", "true"); n != 0 {
			t.Errorf("%d dead letters, want none", n)
		}
	})
}

// TestFanoutSharedClaimCutsOffASlowRoute: in the shared claim, a route
// whose send takes far longer than the others' (over a second, and four
// times the fastest) is cut off from it for a while: the type's later
// events get rows of their own for that route, which its poller sends in
// batches of the route's own size, while the other route goes on from
// the shared claim. Every event reaches both routes.
func TestFanoutSharedClaimCutsOffASlowRoute(t *testing.T) {
	t.Parallel()
	b := setup(t)
	slow := newTestSender()
	var calls atomic.Int64
	var small atomic.Int64
	slow.setBehave(func(ctx context.Context, msgs []*sender.Message) error {
		if calls.Add(1) == 1 {
			select {
			case <-time.After(1500 * time.Millisecond):
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		if len(msgs) <= 3 {
			small.Add(1)
		}
		return nil
	})
	first := b.publish(t, "orders", 10, nil)
	b.start(t, func(c *relay.Config) {
		c.Senders["slow"] = slow
		c.Defaults.Sender = new("test")
		c.Events = map[string]relay.EventSettings{"orders": {BatchSize: new(10), Routes: []relay.RouteSettings{
			{Name: "a", Sender: new("test")},
			{Name: "s", Sender: new("slow"), BatchSize: new(3)},
		}}}
	})
	testenv.WaitFor(t, 20*time.Second, "the first batch finished on both routes", func() bool {
		return containsAll(b.sender.ids(), first) && containsAll(slow.ids(), first) && b.count(t, "outbox", "status <> 'PROCESSED'") == 0
	})
	if small.Load() != 0 {
		t.Fatalf("route s got %d batches of its own rows before it was slow", small.Load())
	}
	later := b.publish(t, "orders", 30, nil)
	testenv.WaitFor(t, 20*time.Second, "the later events on both routes", func() bool {
		return containsAll(b.sender.ids(), later) && containsAll(slow.ids(), later)
	})
	if small.Load() == 0 {
		t.Errorf("route s got no batch of its own rows (batch size 3): it was not cut off from the shared claim")
	}
	for _, id := range append(first, later...) {
		if n := len(b.sender.deliveries(id)); n != 1 {
			t.Fatalf("route a got event %s %d times, want once", id, n)
		}
	}
}

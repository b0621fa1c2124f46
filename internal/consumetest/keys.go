package consumetest

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/inbox"
	"github.com/txbox/txbox/sender"
)

// ConformanceKeys are the keys the key conformance scenario publishes
// with: a plain one, one with a space and a slash, one not in ASCII, and
// no key at all (which must arrive as "", not as a broker field such as
// the routing key).
var ConformanceKeys = []string{"order-1", "customer 7/b", "ключ-3", ""}

// KeyCheck wraps a Pipeline's Handler for the key conformance scenario:
// it records, per handled message, whether inbox.Message.Key is the key
// the event was published with (docs/inbox.md's handler stores it).
type KeyCheck struct {
	p *Pipeline

	mu      sync.Mutex
	want    map[txbox.ID]string
	handled int
	bad     []string
}

// Keys returns a key check on p.
func (p *Pipeline) Keys() *KeyCheck {
	return &KeyCheck{p: p, want: map[txbox.ID]string{}}
}

// Handler is the Pipeline's Handler, recording the key of each message.
func (k *KeyCheck) Handler(ctx context.Context, tx any, m inbox.Message) error {
	k.mu.Lock()
	want, known := k.want[m.ID]
	k.handled++
	if known && m.Key != want && len(k.bad) < 10 {
		k.bad = append(k.bad, fmt.Sprintf("%s: Key %q, published with %q", m.ID, m.Key, want))
	}
	k.mu.Unlock()
	return k.p.Handler(ctx, tx, m)
}

// Publish commits, per key of ConformanceKeys, three events of that key
// in one business transaction, and remembers each event's key.
func (k *KeyCheck) Publish(t testing.TB) {
	t.Helper()
	ctx := context.Background()
	for _, key := range ConformanceKeys {
		tx, err := k.p.pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		evs := make([]txbox.Event, 3)
		for j := range evs {
			evs[j] = txbox.Event{Type: "order-created", Key: key, Payload: []byte(fmt.Sprintf(`{"line":%d}`, j))}
		}
		ids, err := k.p.pub.Publish(ctx, tx, evs...)
		if err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		k.mu.Lock()
		for _, id := range ids {
			k.want[id] = key
		}
		k.mu.Unlock()
		k.p.mu.Lock()
		k.p.committed = append(k.p.committed, ids...)
		k.p.mu.Unlock()
	}
}

// Check fails t when a handled message's Key was not its event's key,
// or when not every published event was handled.
func (k *KeyCheck) Check(t testing.TB) {
	t.Helper()
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.handled < len(k.want) {
		t.Fatalf("%d messages handled, %d published", k.handled, len(k.want))
	}
	for _, b := range k.bad {
		t.Errorf("key conformance: %s", b)
	}
}

// RunKeyRoundTrip runs outbox → relay (s, route) → broker → adapter →
// inbox for events of every key of ConformanceKeys and checks that the
// handler saw each event's key in inbox.Message.Key. run is the
// adapter's Run, built on check.Handler; nil when the adapter serves
// already (a webhook handler behind a test server).
func (p *Pipeline) RunKeyRoundTrip(t testing.TB, s sender.Sender, route sender.Route, check *KeyCheck, run func(ctx context.Context) error) {
	t.Helper()
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	check.Publish(t)
	p.StartRelay(t, s, route, 2*time.Second)
	if run != nil {
		RunConsumer(t, run)
	}
	p.WaitDelivered(t, E2ETimeout())
	check.Check(t)
}

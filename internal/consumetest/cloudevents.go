package consumetest

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/inbox"
	"github.com/txbox/txbox/internal/testenv"
	"github.com/txbox/txbox/sender"
)

// CloudEventsCheck wraps a Pipeline's Handler for the round trips in the
// cloudevents format: it records, per handled message, whether the
// adapter took the event's identity from the CloudEvents attributes
// under prefix (the id attribute present and equal to the inbox id, the
// type the event type, the key the subject).
type CloudEventsCheck struct {
	p      *Pipeline
	prefix string

	mu      sync.Mutex
	handled int
	bad     []string
}

// CloudEvents returns a check of messages whose attributes carry prefix
// (ce-, ce_, cloudEvents:).
func (p *Pipeline) CloudEvents(prefix string) *CloudEventsCheck {
	return &CloudEventsCheck{p: p, prefix: prefix}
}

// Handler is the Pipeline's Handler, recording what each message says.
func (c *CloudEventsCheck) Handler(ctx context.Context, tx any, m inbox.Message) error {
	var bad []string
	if got := m.Headers[c.prefix+"id"]; got != m.ID.String() {
		bad = append(bad, fmt.Sprintf("%sid %q, inbox id %s", c.prefix, got, m.ID))
	}
	if sv := m.Headers[c.prefix+"specversion"]; sv != "1.0" {
		bad = append(bad, fmt.Sprintf("%sspecversion %q", c.prefix, sv))
	}
	if m.Type != m.Headers[c.prefix+"type"] || m.Type == "" {
		bad = append(bad, fmt.Sprintf("type %q, %stype %q", m.Type, c.prefix, m.Headers[c.prefix+"type"]))
	}
	if !strings.HasPrefix(m.Key, "order-") || m.Key != m.Headers[c.prefix+"subject"] {
		bad = append(bad, fmt.Sprintf("key %q, %ssubject %q", m.Key, c.prefix, m.Headers[c.prefix+"subject"]))
	}
	c.mu.Lock()
	c.handled++
	if len(bad) > 0 && len(c.bad) < 10 {
		c.bad = append(c.bad, m.ID.String()+": "+strings.Join(bad, "; "))
	}
	c.mu.Unlock()
	return c.p.Handler(ctx, tx, m)
}

// Check fails t when a handled message did not carry its identity as
// CloudEvents attributes, or when none was handled.
func (c *CloudEventsCheck) Check(t testing.TB) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.handled == 0 {
		t.Fatal("no message handled")
	}
	for _, b := range c.bad {
		t.Errorf("CloudEvents message: %s", b)
	}
}

// Copies sends, with send, a copy of ten of the committed events that
// carries only the CloudEvents attributes (no txbox header, no broker
// message id), waits until the inbox saw each as a duplicate, then
// applies the delivery oracle again and Check: the inbox deduplicates on
// the id attribute alone.
func (c *CloudEventsCheck) Copies(t testing.TB, send func(id txbox.ID)) {
	t.Helper()
	copies := c.p.Committed()
	copies = copies[:min(10, len(copies))]
	before := c.p.Results()[inbox.Duplicate]
	for _, id := range copies {
		send(id)
	}
	testenv.WaitFor(t, E2ETimeout(), "the copies to be seen as duplicates", func() bool {
		return c.p.Results()[inbox.Duplicate] >= before+len(copies)
	})
	c.p.WaitDelivered(t, E2ETimeout())
	c.Check(t)
}

// RunConsumer runs an adapter's Run in the background until t ends, then
// cancels it and waits for it to return.
func RunConsumer(t testing.TB, run func(ctx context.Context) error) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-done
	})
}

// CloudEventsRoundTrip is what one broker adapter brings to the
// CloudEvents round trip (Pipeline.RunCloudEventsRoundTrip).
type CloudEventsRoundTrip struct {
	// Sender and Route deliver in the cloudevents format (set by either);
	// the round trip closes Sender when the test ends.
	Sender sender.Sender
	Route  sender.Route
	// Prefix is how the broker's binding names the attributes (ce-, ce_,
	// cloudEvents:).
	Prefix string
	// Consumer returns the Run of the consumer under test, handling with
	// h. It runs on the test's goroutine and may fail the test.
	Consumer func(h inbox.Handler) func(ctx context.Context) error
	// Copy publishes, by hand, a copy of the event id that carries the
	// CloudEvents attributes only (no txbox header, no broker message id).
	Copy func(id txbox.ID)
}

// RunCloudEventsRoundTrip runs outbox → relay (format cloudevents) →
// broker → adapter → inbox: every committed event must have exactly one
// effect, its inbox id, type and key taken from the id, type and subject
// attributes; then copies carrying the attributes only must be recognised
// as duplicates (CloudEventsCheck.Copies).
func (p *Pipeline) RunCloudEventsRoundTrip(t testing.TB, rt CloudEventsRoundTrip) {
	t.Helper()
	p.Publish(t, "order-created", 20, 5, 4)
	t.Cleanup(func() { _ = rt.Sender.Close(context.Background()) })
	p.StartRelay(t, rt.Sender, rt.Route, 2*time.Second)
	check := p.CloudEvents(rt.Prefix)
	RunConsumer(t, rt.Consumer(check.Handler))
	p.WaitDelivered(t, E2ETimeout())
	check.Copies(t, rt.Copy)
}

package sendertest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/internal/testenv"
	"github.com/txbox/txbox/sender"
)

// EventType is the event type of every message the suite sends.
const EventType = "sendertest.event"

// Exercise runs the conformance suite against the sender h adapts. Each
// check runs as a parallel subtest with a destination of its own.
func Exercise(t *testing.T, h Harness) {
	t.Helper()
	if h.NewDestination == nil {
		t.Fatal("sendertest: Harness.NewDestination is required")
	}
	checks := []struct {
		name string
		run  func(t *testing.T, h Harness)
		on   bool
	}{
		{"DeliversBatch", testDeliversBatch, true},
		{"EmptyBatch", testEmptyBatch, true},
		{"ConcurrentSends", testConcurrentSends, true},
		{"Pipelined", testPipelined, true},
		{"RejectsOneMessage", testRejectsOneMessage, h.Features.SupportsPerMessageReject},
		{"BrokerDedup", testBrokerDedup, h.Features.BrokerDedup},
		{"Unreachable", testUnreachable, true},
		{"DestinationGoesDown", testDestinationGoesDown, true},
		{"Disconnected", testDisconnected, true},
		{"CancelStopsSend", testCancelStopsSend, true},
		{"CancelledBeforeSend", testCancelledBeforeSend, true},
		{"CloseFlushes", testCloseFlushes, true},
	}
	for _, c := range checks {
		t.Run(c.name, func(t *testing.T) {
			if !c.on {
				// A feature this destination does not have: nothing to
				// check, and saying so keeps the report honest.
				t.Logf("sendertest: %s not applicable (feature flag off)", c.name)
				return
			}
			t.Parallel()
			c.run(t, h)
		})
	}
}

// NewMessages returns n messages for route with unique ids, binary-safe
// payloads, keys, user headers and the txbox-* headers the relay adds.
func NewMessages(n int, route sender.Route) []*sender.Message {
	msgs := make([]*sender.Message, n)
	now := time.Now().UTC()
	for i := range msgs {
		id := txbox.NewID()
		msgs[i] = &sender.Message{
			ID:        id,
			EventType: EventType,
			Key:       fmt.Sprintf("key-%d", i%7),
			// A NUL byte, bytes that are not UTF-8, a non-ASCII rune and
			// the id: payloads must travel byte for byte.
			Payload: []byte(fmt.Sprintf("payload %d \x00\xff\xfe ✓ %s", i, id)),
			Headers: map[string]string{
				txbox.HeaderEventID:   id.String(),
				txbox.HeaderEventType: EventType,
				txbox.HeaderCreatedAt: now.Format(time.RFC3339Nano),
				"x-sendertest-index":  fmt.Sprint(i),
			},
			CreatedAt: now,
			Attempt:   1,
			Route:     route,
		}
	}
	return msgs
}

type fixture struct {
	h     Harness
	d     *Destination
	s     sender.Sender
	route sender.Route
}

func setup(t *testing.T, h Harness, addr func(d *Destination) string) *fixture {
	t.Helper()
	d := h.NewDestination(t)
	if d == nil || d.Connect == nil || d.Received == nil {
		t.Fatal("sendertest: Destination.Connect and Received are required")
	}
	a := d.Addr
	if addr != nil {
		a = addr(d)
	}
	return setupOn(t, h, d, a)
}

func faults(t *testing.T, d *Destination) Faults {
	t.Helper()
	if d.Faults != nil {
		return d.Faults(t)
	}
	if d.Addr == "" {
		t.Fatal("sendertest: Destination.Addr or Destination.Faults is required")
	}
	return NewProxy(t, d.Addr)
}

func send(t *testing.T, s sender.Sender, msgs []*sender.Message, timeout time.Duration) ([]error, time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	start := time.Now()
	err := s.Send(ctx, msgs)
	took := time.Since(start)
	checkShape(t, err, len(msgs))
	return sender.Results(err, len(msgs)), took
}

// checkShape fails when a *BatchError does not have one entry per message
// or reports no failure at all (Send must return nil then).
func checkShape(t *testing.T, err error, n int) {
	t.Helper()
	var be *sender.BatchError
	if errors.As(err, &be) {
		if len(be.Errs) != n {
			t.Fatalf("sendertest: BatchError has %d entries for %d messages", len(be.Errs), n)
		}
		for _, e := range be.Errs {
			if e != nil {
				return
			}
		}
		t.Fatalf("sendertest: Send returned a BatchError without failures; it must return nil when every message was acked")
	}
}

func requireAllAcked(t *testing.T, errs []error) {
	t.Helper()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("sendertest: message %d of %d not acked: %v", i, len(errs), err)
		}
	}
}

func requireAllTransient(t *testing.T, errs []error) {
	t.Helper()
	for i, err := range errs {
		if err == nil {
			t.Fatalf("sendertest: message %d of %d acked, want a transient error", i, len(errs))
		}
		if c := txbox.Classify(err); c != txbox.ClassTransient {
			t.Fatalf("sendertest: message %d: error classified %v, want transient: %v", i, c, err)
		}
	}
}

func header(h map[string]string, name string) (string, bool) {
	if v, ok := h[name]; ok {
		return v, true
	}
	for k, v := range h {
		if strings.EqualFold(k, name) {
			return v, true
		}
	}
	return "", false
}

// index groups deliveries by their txbox-event-id header.
func index(t *testing.T, ds []Delivery) map[string][]Delivery {
	t.Helper()
	out := make(map[string][]Delivery, len(ds))
	for _, d := range ds {
		id, ok := header(d.Headers, txbox.HeaderEventID)
		if !ok {
			t.Fatalf("sendertest: a delivery has no %s header (headers %v)", txbox.HeaderEventID, d.Headers)
		}
		out[id] = append(out[id], d)
	}
	return out
}

// waitDelivered polls the destination until every message in want has
// arrived, then returns everything that arrived, indexed by event id.
func waitDelivered(t *testing.T, h Harness, d *Destination, want []*sender.Message) map[string][]Delivery {
	t.Helper()
	var got map[string][]Delivery
	missing := 0
	defer func() {
		// Runs also when WaitFor fails the test: say how many are lost.
		if missing > 0 {
			t.Errorf("sendertest: %d of %d acked messages never arrived within %v", missing, len(want), h.deliveryTimeout())
		}
	}()
	testenv.WaitForEvery(t, h.deliveryTimeout(), 20*time.Millisecond, fmt.Sprintf("sendertest: all %d acked messages to arrive", len(want)), func() bool {
		got = index(t, d.Received(t))
		missing = 0
		for _, m := range want {
			if len(got[m.ID.String()]) == 0 {
				missing++
			}
		}
		return missing == 0
	})
	return got
}

// checkContent verifies each message in want arrived exactly once with its
// payload, headers, id and key.
func checkContent(t *testing.T, h Harness, got map[string][]Delivery, want []*sender.Message) {
	t.Helper()
	for i, m := range want {
		ds := got[m.ID.String()]
		if len(ds) != 1 {
			t.Fatalf("sendertest: message %d (%s) arrived %d times, want once", i, m.ID, len(ds))
		}
		d := ds[0]
		if !bytes.Equal(d.Payload, m.Payload) {
			t.Fatalf("sendertest: message %d payload = %q, want %q", i, d.Payload, m.Payload)
		}
		for k, v := range m.Headers {
			if gv, ok := header(d.Headers, k); !ok || gv != v {
				t.Fatalf("sendertest: message %d header %q = %q (present %v), want %q", i, k, gv, ok, v)
			}
		}
		if d.ID != "" && d.ID != m.ID.String() {
			t.Fatalf("sendertest: message %d native id = %q, want the event id %s", i, d.ID, m.ID)
		}
		// A sender may give a keyless message a key of its own (Kafka
		// uses the event id), so only a set key is compared.
		if h.Features.SupportsKey && m.Key != "" && d.Key != m.Key {
			t.Fatalf("sendertest: message %d key = %q, want %q", i, d.Key, m.Key)
		}
	}
}

// snapshot renders every field of msgs, to detect a Send that modifies
// them.
func snapshot(msgs []*sender.Message) string {
	var b strings.Builder
	for _, m := range msgs {
		keys := make([]string, 0, len(m.Headers))
		for k := range m.Headers {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		fmt.Fprintf(&b, "%s|%s|%q|%q|%v|%d|%+v|", m.ID, m.EventType, m.Key, m.Payload, m.CreatedAt.UnixNano(), m.Attempt, m.Route)
		for _, k := range keys {
			fmt.Fprintf(&b, "%q=%q,", k, m.Headers[k])
		}
		b.WriteByte('\n')
	}
	return b.String()
}

func checkNoStrangers(t *testing.T, got map[string][]Delivery, sent ...[]*sender.Message) {
	t.Helper()
	known := map[string]bool{}
	for _, ms := range sent {
		for _, m := range ms {
			known[m.ID.String()] = true
		}
	}
	for id := range got {
		if !known[id] {
			t.Fatalf("sendertest: unexpected delivery with event id %s", id)
		}
	}
}

func testDeliversBatch(t *testing.T, h Harness) {
	f := setup(t, h, nil)
	msgs := NewMessages(50, f.route)
	// The plainest event: no key, no header of its own, empty payload.
	msgs[0].Key = ""
	msgs[0].Payload = nil
	delete(msgs[0].Headers, "x-sendertest-index")
	before := snapshot(msgs)
	errs, _ := send(t, f.s, msgs, 30*time.Second)
	requireAllAcked(t, errs)
	// The relay may send the same messages again (a retry): Send must
	// leave them as it found them.
	if after := snapshot(msgs); after != before {
		t.Fatalf("sendertest: Send modified its messages:\nbefore %s\nafter  %s", before, after)
	}
	got := waitDelivered(t, h, f.d, msgs)
	checkContent(t, h, got, msgs)
	checkNoStrangers(t, got, msgs)
}

func testEmptyBatch(t *testing.T, h Harness) {
	f := setup(t, h, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := f.s.Send(ctx, nil); err != nil {
		t.Fatalf("sendertest: Send(nil) = %v, want nil", err)
	}
	if err := f.s.Send(ctx, []*sender.Message{}); err != nil {
		t.Fatalf("sendertest: Send(empty) = %v, want nil", err)
	}
	// The sender still works afterwards, and nothing was sent for the
	// empty batches.
	msgs := NewMessages(1, f.route)
	errs, _ := send(t, f.s, msgs, 30*time.Second)
	requireAllAcked(t, errs)
	got := waitDelivered(t, h, f.d, msgs)
	checkNoStrangers(t, got, msgs)
}

func testConcurrentSends(t *testing.T, h Harness) {
	f := setup(t, h, nil)
	const senders, per = 8, 25
	batches := make([][]*sender.Message, senders)
	results := make([][]error, senders)
	var wg sync.WaitGroup
	for i := range batches {
		batches[i] = NewMessages(per, f.route)
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			results[i] = sender.Results(f.s.Send(ctx, batches[i]), per)
		}()
	}
	wg.Wait()
	var all []*sender.Message
	for i := range batches {
		requireAllAcked(t, results[i])
		all = append(all, batches[i]...)
	}
	got := waitDelivered(t, h, f.d, all)
	checkContent(t, h, got, all)
	checkNoStrangers(t, got, all)
}

// testPipelined proves the sender keeps many messages in flight: with L of
// latency added to every ack, a sender that waits for each ack before the
// next send needs at least M×L for M messages, whatever the machine: a
// ratio of 1 or more by construction. The batch must finish in under half
// of that (on average at least 2 messages in flight). Real pipelining is
// far better (0.002–0.07 on a quiet machine) and the measured ratio is
// logged; the margin is for a loaded machine, where the senders' own CPU
// time, not the latency, is most of the batch (0.27 seen at load 33).
func testPipelined(t *testing.T, h Harness) {
	const (
		latency = 40 * time.Millisecond
		m       = 500
	)
	// Connect and warm up without latency, so connection set-up (several
	// round trips on some protocols) is not part of the measurement.
	f, fl, _ := behindFaults(t, h, 1)
	fl.SetLatency(t, latency)
	_, single := send(t, f.s, NewMessages(1, f.route), 30*time.Second)
	if single < latency {
		t.Fatalf("sendertest: a single send took %v with %v of injected latency: the latency is not on the ack path", single, latency)
	}
	msgs := NewMessages(m, f.route)
	errs, took := send(t, f.s, msgs, 60*time.Second)
	requireAllAcked(t, errs)
	serial := time.Duration(m) * latency
	ratio := float64(took) / float64(serial)
	t.Logf("sendertest: %d messages with %v ack latency took %v (single send %v); ratio to a serial sender %.3f", m, latency, took, single, ratio)
	if ratio >= 0.5 {
		t.Fatalf("sendertest: batch of %d took %v, ≥ 1/2 of the %v a one-at-a-time sender needs: messages are not kept in flight", m, took, serial)
	}
	got := waitDelivered(t, h, f.d, msgs)
	checkContent(t, h, got, msgs)
}

func first(errs []error, _ time.Duration) []error { return errs }

// behindFaults sets up a fixture on a fresh destination reached through
// its fault injector and sends warmup messages, all acked, before any
// fault is injected: the connection is up and out of the measurement.
func behindFaults(t *testing.T, h Harness, warmup int) (*fixture, Faults, []*sender.Message) {
	t.Helper()
	d := h.NewDestination(t)
	fl := faults(t, d)
	f := setupOn(t, h, d, fl.Addr())
	msgs := NewMessages(warmup, f.route)
	requireAllAcked(t, first(send(t, f.s, msgs, 30*time.Second)))
	return f, fl, msgs
}

func setupOn(t *testing.T, h Harness, d *Destination, addr string) *fixture {
	t.Helper()
	s, route := d.Connect(t, addr)
	if s == nil {
		t.Fatal("sendertest: Connect returned a nil sender")
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := s.Close(ctx); err != nil {
			t.Errorf("sendertest: Close: %v", err)
		}
	})
	return &fixture{h: h, d: d, s: s, route: route}
}

func testRejectsOneMessage(t *testing.T, h Harness) {
	f := setup(t, h, nil)
	if f.d.Poison == nil {
		t.Fatal("sendertest: SupportsPerMessageReject needs Destination.Poison")
	}
	msgs := NewMessages(20, f.route)
	poisoned := map[int]bool{7: true, 13: true}
	for i := range poisoned {
		f.d.Poison(t, msgs[i])
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := f.s.Send(ctx, msgs)
	var be *sender.BatchError
	if !errors.As(err, &be) {
		t.Fatalf("sendertest: Send with 2 refused messages = %v, want a *sender.BatchError", err)
	}
	checkShape(t, err, len(msgs))
	var good []*sender.Message
	for i, e := range be.Errs {
		if !poisoned[i] {
			if e != nil {
				t.Fatalf("sendertest: message %d failed with its batch's refused neighbours: %v", i, e)
			}
			good = append(good, msgs[i])
			continue
		}
		if e == nil {
			t.Fatalf("sendertest: refused message %d reported as acked", i)
		}
		if c := txbox.Classify(e); c != txbox.ClassRejected && c != txbox.ClassPermanent {
			t.Fatalf("sendertest: refused message %d classified %v, want rejected or permanent: %v", i, c, e)
		}
	}
	got := waitDelivered(t, h, f.d, good)
	checkContent(t, h, got, good)
	for i := range poisoned {
		if len(got[msgs[i].ID.String()]) != 0 {
			t.Fatalf("sendertest: refused message %d arrived at the destination", i)
		}
	}
	checkNoStrangers(t, got, good)
}

func testBrokerDedup(t *testing.T, h Harness) {
	f := setup(t, h, nil)
	msgs := NewMessages(10, f.route)
	requireAllAcked(t, first(send(t, f.s, msgs, 30*time.Second)))
	// The relay resends a batch whose outcome it did not learn; the
	// destination must absorb the copies.
	requireAllAcked(t, first(send(t, f.s, msgs, 30*time.Second)))
	marker := NewMessages(1, f.route)
	requireAllAcked(t, first(send(t, f.s, marker, 30*time.Second)))
	// Once the marker sent after the copies is readable, the copies
	// would be too.
	got := waitDelivered(t, h, f.d, append(msgs[:len(msgs):len(msgs)], marker...))
	checkContent(t, h, got, msgs)
}

func testUnreachable(t *testing.T, h Harness) {
	bound := h.unreachableBound()
	f := setup(t, h, func(d *Destination) string {
		if d.Faults != nil {
			fl := d.Faults(t)
			fl.Down(t)
			return fl.Addr()
		}
		return ClosedAddr(t)
	})
	msgs := NewMessages(10, f.route)
	errs, took := send(t, f.s, msgs, 2*bound)
	requireAllTransient(t, errs)
	if took > bound {
		t.Fatalf("sendertest: Send to an unreachable destination took %v, more than the bound %v", took, bound)
	}
	t.Logf("sendertest: unreachable destination reported in %v", took)
}

func testDestinationGoesDown(t *testing.T, h Harness) {
	bound := h.unreachableBound()
	f, fl, before := behindFaults(t, h, 5)

	fl.Down(t)
	during := NewMessages(10, f.route)
	errs, took := send(t, f.s, during, 2*bound)
	requireAllTransient(t, errs)
	if took > bound {
		t.Fatalf("sendertest: Send during an outage took %v, more than the bound %v", took, bound)
	}

	fl.Up(t)
	// The sender reconnects on its own; the relay probes with small
	// batches until one goes through.
	var after []*sender.Message
	WaitRecovered(t, 45*time.Second, func() error {
		probe := NewMessages(1, f.route)
		errs, _ := send(t, f.s, probe, bound)
		if errs[0] == nil {
			after = probe
		}
		return errs[0]
	})
	got := waitDelivered(t, h, f.d, append(before[:len(before):len(before)], after...))
	checkContent(t, h, got, before)
	checkContent(t, h, got, after)
}

// testDisconnected checks the connection-level mark: with the
// destination unreachable from the start, and after it goes down under a
// working sender, every error is transient and, exactly when the sender
// claims connection semantics (Features.MarksDisconnected), marked
// sender.Disconnected.
func testDisconnected(t *testing.T, h Harness) {
	bound := h.unreachableBound()
	check := func(when string, errs []error) {
		t.Helper()
		requireAllTransient(t, errs)
		for i, err := range errs {
			switch marked := sender.IsDisconnected(err); {
			case h.Features.MarksDisconnected && !marked:
				t.Fatalf("sendertest: %s, message %d: %v is not marked sender.Disconnected, though the sender claims connection semantics (Features.MarksDisconnected)", when, i, err)
			case !h.Features.MarksDisconnected && marked:
				t.Fatalf("sendertest: %s, message %d: %v is marked sender.Disconnected, but Features.MarksDisconnected is off", when, i, err)
			}
		}
	}

	never := setup(t, h, func(d *Destination) string {
		if d.Faults != nil {
			fl := d.Faults(t)
			fl.Down(t)
			return fl.Addr()
		}
		return ClosedAddr(t)
	})
	errs, _ := send(t, never.s, NewMessages(5, never.route), 2*bound)
	check("destination never reachable", errs)

	f, fl, _ := behindFaults(t, h, 3)
	fl.Down(t)
	errs, _ = send(t, f.s, NewMessages(5, f.route), 2*bound)
	check("destination down after a successful send", errs)
	fl.Up(t)
}

func testCancelStopsSend(t *testing.T, h Harness) {
	const latency = 5 * time.Second
	f, fl, _ := behindFaults(t, h, 1)
	fl.SetLatency(t, latency)

	msgs := NewMessages(50, f.route)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- f.s.Send(ctx, msgs) }()
	// Cancel once the destination has seen the batch, so Send is waiting
	// for acks that the latency holds back.
	// 2 = the warm-up message and at least one of the batch.
	testenv.WaitForEvery(t, h.deliveryTimeout(), 10*time.Millisecond, "sendertest: the batch to reach the destination", func() bool { return len(f.d.Received(t)) >= 2 })
	cancel()
	cancelled := time.Now()
	var err error
	select {
	case err = <-done:
	case <-time.After(latency):
		t.Fatalf("sendertest: Send did not return within %v of its context being cancelled", latency)
	}
	took := time.Since(cancelled)
	if took > 2*time.Second {
		t.Fatalf("sendertest: Send returned %v after cancel, want promptly (≤ 2s)", took)
	}
	checkShape(t, err, len(msgs))
	requireAllTransient(t, sender.Results(err, len(msgs)))
	fl.SetLatency(t, 0)
}

func testCancelledBeforeSend(t *testing.T, h Harness) {
	f := setup(t, h, nil)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	msgs := NewMessages(10, f.route)
	start := time.Now()
	err := f.s.Send(ctx, msgs)
	if took := time.Since(start); took > 2*time.Second {
		t.Fatalf("sendertest: Send with a cancelled context took %v", took)
	}
	checkShape(t, err, len(msgs))
	var acked []*sender.Message
	for i, e := range sender.Results(err, len(msgs)) {
		if e == nil {
			acked = append(acked, msgs[i])
			continue
		}
		if c := txbox.Classify(e); c != txbox.ClassTransient {
			t.Fatalf("sendertest: message %d with a cancelled context classified %v, want transient: %v", i, c, e)
		}
	}
	if len(acked) > 0 {
		// Acked despite the cancelled context: then it must really be there.
		waitDelivered(t, h, f.d, acked)
	}
}

func testCloseFlushes(t *testing.T, h Harness) {
	const latency = 300 * time.Millisecond
	f, fl, _ := behindFaults(t, h, 1)
	fl.SetLatency(t, latency)

	msgs := NewMessages(100, f.route)
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		done <- f.s.Send(ctx, msgs)
	}()
	// 2 = the warm-up message and at least one of the batch.
	testenv.WaitForEvery(t, h.deliveryTimeout(), 10*time.Millisecond, "sendertest: the batch to reach the destination", func() bool { return len(f.d.Received(t)) >= 2 })
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := f.s.Close(ctx); err != nil {
		t.Fatalf("sendertest: Close with a Send in flight: %v", err)
	}
	// A Close that tore the connection down under the Send would fail its
	// unacked messages; a flushing Close lets every one be acked.
	select {
	case err := <-done:
		checkShape(t, err, len(msgs))
		requireAllAcked(t, sender.Results(err, len(msgs)))
	case <-time.After(10 * time.Second):
		t.Fatal("sendertest: Send still running 10s after Close returned")
	}
	got := waitDelivered(t, h, f.d, msgs)
	checkContent(t, h, got, msgs)

	after := NewMessages(3, f.route)
	err := f.s.Send(ctx, after)
	if err == nil {
		t.Fatal("sendertest: Send after Close succeeded")
	}
	for i, e := range sender.Results(err, len(after)) {
		if !errors.Is(e, txbox.ErrClosed) {
			t.Fatalf("sendertest: Send after Close, message %d: %v, want txbox.ErrClosed", i, e)
		}
	}
	if err := f.s.Close(ctx); err != nil {
		t.Fatalf("sendertest: second Close = %v, want nil", err)
	}
}

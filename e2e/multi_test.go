package e2e

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/internal/testenv"
	"github.com/txbox/txbox/relay"
	"github.com/txbox/txbox/relay/relaytest"
	natssender "github.com/txbox/txbox/sender/nats"
)

// Sizes of the multi-relay runs: 10,000 committed events over two types,
// 100 per transaction, every fifth transaction followed by one that rolls
// back (2,000 events that must never arrive).
const (
	multiEvents   = 10_000
	multiRelays   = 3
	txSize        = 100
	rollbackEvery = 5
)

// TestThreeRelaysInOneProcess: three relays on one table, publishing
// while they run. The oracle reads the JetStream stream back: 0 lost, 0
// unexpected, 0 duplicated (nothing crashed), and the same from the
// relays' own ack records.
func TestThreeRelaysInOneProcess(t *testing.T) {
	t.Parallel()
	for _, kind := range withLockKindsInChaos() {
		t.Run(kind.name, func(t *testing.T) {
			ns := kind.newNamespace(t)
			st := newStream(t)
			var acks []*ackCounter
			var relays []*relay.Relay
			for i := range multiRelays {
				d := openStore(t, kind, ns, 8)
				s, err := natssender.New(natssender.Config{URL: testenv.NATSURL, Name: "e2e"})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = s.Close(context.Background()) })
				a := newAckCounter(s)
				cfg := relayConfig(d, a, st.prefix, 24*time.Hour)
				cfg.InstanceID = "relay-" + string(rune('a'+i))
				r := relaytest.Start(t, cfg)
				acks = append(acks, a)
				relays = append(relays, r)
			}
			o := runLoad(t, kind, ns, st)
			for _, r := range relays {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				if err := r.Stop(ctx); err != nil {
					t.Errorf("stop: %v", err)
				}
				cancel()
			}
			check(t, o, st, func(rel *oracle) {
				for i, a := range acks {
					ids := a.ids()
					t.Logf("relay %d acked %d", i, len(ids))
					if len(ids) == 0 && !kind.serialWriter {
						t.Errorf("relay %d delivered nothing: the load was not shared", i)
					}
					rel.receivedIDs(ids...)
				}
			})
		})
	}
}

// TestThreeRelayProcesses: the same with three OS processes (the test
// binary re-executed in relay mode), retention 0 (delete on ack).
func TestThreeRelayProcesses(t *testing.T) {
	t.Parallel()
	for _, kind := range withLockKindsInChaos() {
		t.Run(kind.name, func(t *testing.T) {
			ns := kind.newNamespace(t)
			st := newStream(t)
			var children []*child
			for range multiRelays {
				children = append(children, startChild(t, kind, ns, st.prefix, 0))
			}
			o := runLoad(t, kind, ns, st)
			for _, c := range children {
				c.stop(t)
			}
			check(t, o, st, func(rel *oracle) {
				for i, c := range children {
					ids := readAcks(t, c.acks)
					t.Logf("relay process %d acked %d", i, len(ids))
					if len(ids) == 0 && !kind.serialWriter {
						t.Errorf("relay process %d delivered nothing: the load was not shared", i)
					}
					rel.receivedIDs(ids...)
				}
			})
		})
	}
}

// runLoad publishes the multi-relay load while the relays run and waits
// until it has all arrived and the outbox is settled.
func runLoad(t *testing.T, kind storeKind, ns string, st *jsStream) *oracle {
	t.Helper()
	o := newOracle()
	d := openStore(t, kind, ns, 8)
	total := kind.events(multiEvents)
	start := time.Now()
	done := make(chan struct{})
	go func() {
		defer close(done)
		// "orders" is configured; "payments" is discovered.
		publisher{kind: kind, d: d, o: o, eventType: "payments", txSize: txSize, rollbackEvery: rollbackEvery}.run(t, total*3/10, 2)
	}()
	publisher{kind: kind, d: d, o: o, eventType: "orders", txSize: txSize, rollbackEvery: rollbackEvery}.run(t, total*7/10, 2)
	<-done
	if o.expected() != total {
		t.Fatalf("published %d, want %d", o.expected(), total)
	}
	testenv.WaitFor(t, 120*time.Second, "every event in the stream", func() bool { return st.count(t) >= uint64(total) })
	testenv.WaitFor(t, 30*time.Second, "outbox settled", func() bool { return outboxSettled(t, d) })
	el := time.Since(start)
	t.Logf("%d events published and delivered by %d relays in %v (%.0f events/s end to end)", total, multiRelays, el.Round(time.Millisecond), float64(total)/el.Seconds())
	return o
}

// check reads the stream back into o and asserts a clean report; relaySide
// fills a second oracle from the relays' ack records.
func check(t *testing.T, o *oracle, st *jsStream, relaySide func(*oracle)) {
	t.Helper()
	for _, m := range st.readAll(t) {
		o.receivedIDs(m.id)
	}
	r := o.report()
	t.Logf("broker side: %v", r)
	if !r.clean() || r.OK != r.Committed || r.Committed == 0 {
		t.Errorf("broker side not clean: %v; first lost %v", r, first(r.Lost))
	}
	rel := newOracle()
	o.mu.Lock()
	for id := range o.committed {
		rel.committed[id] = true
	}
	for id := range o.rolledBack {
		rel.rolledBack[id] = true
	}
	o.mu.Unlock()
	relaySide(rel)
	rr := rel.report()
	t.Logf("relay side: %v", rr)
	if !rr.clean() {
		t.Errorf("relay side not clean: %v", rr)
	}
}

func first(ids []txbox.ID) any {
	if len(ids) == 0 {
		return "none"
	}
	return ids[0]
}

func readAcks(t *testing.T, path string) []txbox.ID {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("acks of a child relay: %v", err)
	}
	var out []txbox.ID
	for _, line := range strings.Fields(string(b)) {
		id, err := txbox.ParseID(line)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, id)
	}
	return out
}

package e2e

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/internal/testenv"
	"github.com/txbox/txbox/relay"
	"github.com/txbox/txbox/sender"
	"github.com/txbox/txbox/sender/kafka"
	"github.com/txbox/txbox/sender/webhook"
)

// fanoutRoutes fans cfg's "orders" out to three routes (envFanout): the
// NATS subject the test stream reads, a webhook and a Kafka topic.
func fanoutRoutes(cfg *relay.Config, spec string) error {
	f := strings.Fields(spec)
	if len(f) != 3 {
		return fmt.Errorf("%s: want \"webhook-url kafka-addr kafka-topic\", have %q", envFanout, spec)
	}
	wh, err := webhook.New(webhook.Config{Timeout: 5 * time.Second})
	if err != nil {
		return err
	}
	ks, err := kafka.New(kafka.Config{Brokers: []string{f[1]}})
	if err != nil {
		return err
	}
	cfg.Senders["partner"], cfg.Senders["kafka"] = wh, ks
	cfg.Defaults.Sender = new("nats")
	cfg.Events["orders"] = relay.EventSettings{Routes: []relay.RouteSettings{
		{Sender: new("nats"), Route: sender.Route{Subject: cfg.Defaults.Route.Subject}},
		{Sender: new("partner"), Route: sender.Route{URL: f[0]}},
		{Sender: new("kafka"), Route: sender.Route{Topic: f[2]}},
	}}
	return nil
}

// idSink collects the event ids one destination received, repeats
// included.
type idSink struct {
	mu  sync.Mutex
	ids []txbox.ID
}

func (s *idSink) add(v string) {
	id, err := txbox.ParseID(v)
	if err != nil {
		return
	}
	s.mu.Lock()
	s.ids = append(s.ids, id)
	s.mu.Unlock()
}

func (s *idSink) unique() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	seen := map[txbox.ID]bool{}
	for _, id := range s.ids {
		seen[id] = true
	}
	return len(seen)
}

func (s *idSink) all() []txbox.ID {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]txbox.ID(nil), s.ids...)
}

// TestChaosFanout (scenarios 2, 5 and 32 together): three relay
// processes deliver a fanned-out type to three routes (NATS, a webhook,
// Kafka) while events are published; one relay is SIGKILLed and
// replaced, another SIGSTOPped past its lease and resumed. Each
// destination's oracle shows 0 lost and 0 unexpected, in the lease and
// the lock claim and in WAL mode (where one relay streams and the others
// stand by and deliver the spills).
func TestChaosFanout(t *testing.T) {
	if !testenv.Chaos(t, "long chaos run") {
		return
	}
	for _, kind := range append(withLockKinds(), walKind) {
		t.Run(kind.name, func(t *testing.T) {
			ns := kind.newNamespace(t)
			st := newStream(t)
			hook := &idSink{}
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				hook.add(r.Header.Get(txbox.HeaderEventID))
				w.WriteHeader(http.StatusOK)
			}))
			t.Cleanup(srv.Close)
			topic := testenv.UniqueName("e2e_") + "_orders"
			c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, topic))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(c.Close)
			kafkaSink := &idSink{}
			consumer, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			consumed := make(chan struct{})
			go func() {
				defer close(consumed)
				for ctx.Err() == nil {
					consumer.PollFetches(ctx).EachRecord(func(r *kgo.Record) {
						for _, h := range r.Headers {
							if h.Key == txbox.HeaderEventID {
								kafkaSink.add(string(h.Value))
							}
						}
					})
				}
			}()
			t.Cleanup(func() { cancel(); <-consumed; consumer.Close() })

			env := []string{envLease + "=3s", envFanout + "=" + srv.URL + "/hook " + c.ListenAddrs()[0] + " " + topic}
			var children []*child
			for range multiRelays {
				children = append(children, startChild(t, kind, ns, st.prefix, 0, env...))
			}
			d := openStore(t, kind, ns, 4)
			o := newOracle()
			done := make(chan struct{})
			go func() {
				defer close(done)
				publisher{kind: kind, d: d, o: o, eventType: "orders", txSize: txSize, rollbackEvery: rollbackEvery}.run(t, kind.events(15_000), 2)
			}()
			// A failure of this goroutine must not end the test first: its
			// publisher, still running, would then fail a finished test
			// (a panic that loses every test's output).
			t.Cleanup(func() { <-done })
			testenv.WaitFor(t, 60*time.Second, "deliveries under way", func() bool { return st.count(t) >= uint64(kind.events(2000)) })
			if err := children[0].cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			<-children[0].done
			t.Logf("SIGKILLed relay 0 at %d NATS, %d webhook, %d Kafka", st.count(t), hook.unique(), kafkaSink.unique())
			children[0] = startChild(t, kind, ns, st.prefix, 0, env...)
			if err := children[1].cmd.Process.Signal(syscall.SIGSTOP); err != nil {
				t.Fatal(err)
			}
			// Resumed only once its 3s lease has expired and the others
			// have delivered meanwhile: its batches are then recovered by
			// them, and its own late finishes are fenced.
			// On SQLite a relay stopped inside its claim transaction (BEGIN
			// IMMEDIATE) keeps the database's write lock until it resumes:
			// the others cannot claim meanwhile, and its rows are delayed,
			// never lost (as in TestChaos). The wait is then bounded and
			// the relay resumed; elsewhere the others must deliver.
			stopped, before := time.Now(), st.count(t)
			if !testenv.Within(60*time.Second, 20*time.Millisecond, func() bool {
				return time.Since(stopped) > 4*time.Second && (st.count(t) > before || st.count(t) >= uint64(o.expected()))
			}) {
				if kind.name != "sqlite" {
					t.Fatalf("the others delivered nothing in the 60s the stopped relay was paused (%s)", kind.name)
				}
				t.Logf("the stopped relay held SQLite's write lock: nothing delivered until it resumes")
			}
			if err := children[1].cmd.Process.Signal(syscall.SIGCONT); err != nil {
				t.Fatal(err)
			}
			t.Logf("SIGSTOPped relay 1 for %s", time.Since(stopped).Round(time.Millisecond))
			<-done
			want := o.expected()
			testenv.WaitFor(t, 5*time.Minute, "every destination has every event", func() bool {
				return st.count(t) >= uint64(want) && hook.unique() >= want && kafkaSink.unique() >= want
			})
			testenv.WaitFor(t, 60*time.Second, "outbox settled", func() bool { return outboxSettled(t, d) })
			for _, ch := range children {
				ch.stop(t)
			}
			var natsIDs []txbox.ID
			for _, m := range st.readAll(t) {
				natsIDs = append(natsIDs, m.id)
			}
			// Duplicates: the killed and the paused relay's batches come
			// again, on each route (bounded by both relays' in-flight
			// rows per route; SQLite's single writer can also delay a
			// live relay's finish past the lease).
			bound := 2 * relay.DefaultInFlight * relay.DefaultBatchSize
			if kind.serialWriter {
				bound *= multiRelays
			}
			if kind.name == walKind.name {
				// A standby that takes the stream over reads again what
				// the killed relay had not confirmed: at most the hold
				// window's events (docs/concepts.md, "WAL mode").
				bound = relay.DefaultStreamWindow
			}
			for _, dest := range []struct {
				name string
				ids  []txbox.ID
			}{{"nats", natsIDs}, {"webhook", hook.all()}, {"kafka", kafkaSink.all()}} {
				do := o.copy()
				do.receivedIDs(dest.ids...)
				rep := do.report()
				t.Logf("oracle (%s): %v", dest.name, rep)
				if len(rep.Lost) != 0 || len(rep.Unexpected) != 0 || rep.extra() > bound {
					t.Errorf("oracle (%s): %v (duplicate bound %d)", dest.name, rep, bound)
				}
			}
		})
	}
}

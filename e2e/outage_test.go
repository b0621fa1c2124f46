package e2e

import (
	"context"
	"fmt"
	"net"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/internal/amqptest"
	"github.com/txbox/txbox/internal/testenv"
	"github.com/txbox/txbox/relay"
	"github.com/txbox/txbox/relay/relaytest"
	"github.com/txbox/txbox/sender"
	"github.com/txbox/txbox/sender/kafka"
	"github.com/txbox/txbox/sender/rabbitmq"
	"github.com/txbox/txbox/sender/redisstream"
	"github.com/txbox/txbox/sender/sendertest"
	"github.com/txbox/txbox/store"
	"github.com/txbox/txbox/store/postgres"
)

// outageBroker is one broker behind a proxy that a test can take down,
// with a sender that goes through the proxy and a reader that does not.
type outageBroker struct {
	name   string
	proxy  *sendertest.Proxy
	sender sender.Sender
	route  sender.Route

	mu      sync.Mutex
	arrived []txbox.ID
}

func (b *outageBroker) add(id string) {
	parsed, err := txbox.ParseID(id)
	if err != nil {
		return // not ours; the oracle only counts known ids
	}
	b.mu.Lock()
	b.arrived = append(b.arrived, parsed)
	b.mu.Unlock()
}

// unique is the number of distinct ids that arrived.
func (b *outageBroker) unique() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	seen := make(map[txbox.ID]struct{}, len(b.arrived))
	for _, id := range b.arrived {
		seen[id] = struct{}{}
	}
	return len(seen)
}

func (b *outageBroker) all() []txbox.ID {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]txbox.ID(nil), b.arrived...)
}

// rabbitOutageBroker declares a topic exchange and a queue bound for the
// event types orders and other, consumes it directly, and gives the relay a sender through a proxy.
func rabbitOutageBroker(t *testing.T) *outageBroker {
	t.Helper()
	testenv.RequireTCP(t, "RabbitMQ", "127.0.0.1:5672")
	conn, err := amqp.Dial(testenv.RabbitURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	ex, q := testenv.UniqueName("e2e_ex_"), testenv.UniqueName("e2e_q_")
	if err := ch.ExchangeDeclare(ex, "topic", false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare(q, false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"orders", "other"} {
		if err := ch.QueueBind(q, key, ex, false, nil); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		if c, err := amqp.Dial(testenv.RabbitURL); err == nil {
			if ch, err := c.Channel(); err == nil {
				_, _ = ch.QueueDelete(q, false, false, false)
				_ = ch.ExchangeDelete(ex, false, false)
			}
			c.Close()
		}
	})
	b := &outageBroker{name: "rabbitmq", route: sender.Route{Exchange: ex, RoutingKey: "{event_type}"}}
	ds, err := ch.Consume(q, "", true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for d := range ds {
			b.add(d.MessageId)
		}
	}()
	b.proxy = sendertest.NewProxy(t, "127.0.0.1:5672")
	s, err := rabbitmq.New(rabbitmq.Config{
		URL:            "amqp://guest:guest@" + b.proxy.Addr() + "/",
		DialTimeout:    2 * time.Second,
		ReconnectDelay: 200 * time.Millisecond,
		ConfirmTimeout: 5 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	b.sender = s
	return b
}

// kafkaOutageBroker runs an in-process kfake cluster, reads its topics
// directly, and gives the relay a sender whose every broker connection
// goes through a proxy (a broker advertises its own address, so the
// dialer, not the seed list, routes through the proxy).
func kafkaOutageBroker(t *testing.T) *outageBroker {
	t.Helper()
	// A short delivery timeout makes the sender report the outage (and
	// each failed probe) quickly.
	return kafkaBroker(t, 2*time.Second)
}

func kafkaBroker(t *testing.T, deliveryTimeout time.Duration) *outageBroker {
	t.Helper()
	prefix := testenv.UniqueName("e2e_")
	topics := []string{prefix + "_orders", prefix + "_other"}
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, topics...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	b := &outageBroker{name: "kafka", route: sender.Route{Topic: prefix + "_{event_type}"}}

	consumer, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ConsumeTopics(topics...),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			consumer.PollFetches(ctx).EachRecord(func(r *kgo.Record) {
				for _, h := range r.Headers {
					if h.Key == txbox.HeaderEventID {
						b.add(string(h.Value))
					}
				}
			})
		}
	}()
	t.Cleanup(func() { cancel(); <-done; consumer.Close() })

	b.proxy = sendertest.NewProxy(t, c.ListenAddrs()[0])
	opts, err := kafka.Config{Brokers: c.ListenAddrs(), DeliveryTimeout: deliveryTimeout, DialTimeout: time.Second}.Options()
	if err != nil {
		t.Fatal(err)
	}
	dialer := &net.Dialer{Timeout: time.Second}
	proxyAddr := b.proxy.Addr()
	opts = append(opts, kgo.Dialer(func(ctx context.Context, network, _ string) (net.Conn, error) {
		return dialer.DialContext(ctx, network, proxyAddr)
	}))
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	b.sender = kafka.NewFromClient(cl)
	return b
}

// redisOutageBroker reads two streams directly and gives the relay a
// sender through a proxy in front of Redis.
func redisOutageBroker(t *testing.T) *outageBroker {
	t.Helper()
	testenv.RequireTCP(t, "Redis", testenv.RedisAddr)
	prefix := testenv.UniqueName("e2e_")
	streams := []string{prefix + "_orders", prefix + "_other"}
	b := &outageBroker{name: "redisstream", route: sender.Route{Stream: prefix + "_{event_type}"}}
	rdb := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		last := []string{"0", "0"}
		for ctx.Err() == nil {
			res, err := rdb.XRead(ctx, &redis.XReadArgs{Streams: append(append([]string(nil), streams...), last...), Count: 1000, Block: 200 * time.Millisecond}).Result()
			if err != nil {
				continue // redis.Nil on an idle block, or the test ending
			}
			for _, st := range res {
				for _, m := range st.Messages {
					if id, ok := m.Values["id"].(string); ok {
						b.add(id)
					}
					for i, name := range streams {
						if name == st.Stream {
							last[i] = m.ID
						}
					}
				}
			}
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		rdb.Del(context.Background(), streams...)
		rdb.Close()
	})
	b.proxy = sendertest.NewProxy(t, testenv.RedisAddr)
	s, err := redisstream.New(redisstream.Config{Addr: b.proxy.Addr(), DialTimeout: time.Second, ReadTimeout: 2 * time.Second, WriteTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	b.sender = s
	return b
}

// outageLength is how long the broker stays down: short by default, one
// minute under TXBOX_CHAOS.
func outageLength() time.Duration {
	if os.Getenv("TXBOX_CHAOS") != "" {
		return time.Minute
	}
	return 6 * time.Second
}

// liveHeap is the heap in use after a full collection.
func liveHeap() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// TestBrokerOutage (docs/testing.md, scenario 7): through the real relay on
// PostgreSQL, the broker (RabbitMQ, Kafka, Redis Streams) becomes unreachable for a while under a steady
// publishing load. The circuit opens, no attempt is burned, nothing is
// dead-lettered, the relay's memory stays flat while the backlog grows in
// the database, and once the broker is back the backlog drains with
// nothing lost.
//
// Not parallel on purpose: it measures this process's heap, which other
// tests running at the same time would disturb. Go runs it before the
// package's parallel tests start.
func TestBrokerOutage(t *testing.T) {
	for _, tc := range []struct {
		name string
		new  func(t *testing.T) *outageBroker
	}{
		{"rabbitmq", rabbitOutageBroker},
		{"kafka", kafkaOutageBroker},
		{"redisstream", redisOutageBroker},
	} {
		t.Run(tc.name, func(t *testing.T) { runOutage(t, tc.new(t), postgresKind) })
	}
	// WAL mode: the stream spills the events of the paused destination
	// into the table, and the poller delivers them after the outage.
	t.Run("rabbitmq-wal", func(t *testing.T) { runOutage(t, rabbitOutageBroker(t), walKind) })
}

func runOutage(t *testing.T, b *outageBroker, kind storeKind) {
	ns := kind.newNamespace(t)
	d := openStore(t, kind, ns, 6)
	rec := &attemptRecorder{Sender: b.sender}
	circuits := &circuitHook{}
	cfg := relayConfig(d, rec, "unused", 0)
	cfg.Senders = map[string]sender.Sender{b.name: rec}
	cfg.Defaults.Route = &b.route
	cfg.Defaults.MaxAttempts = new(2)
	cfg.Events = map[string]relay.EventSettings{"orders": {}, "other": {}}
	cfg.Hooks = []txbox.RelayHook{circuits}
	r := relaytest.Start(t, cfg)

	o := newOracle()
	publishN(t, kind, d, "orders", 200, o)
	testenv.WaitFor(t, 30*time.Second, "first events delivered", func() bool { return b.unique() >= 200 })

	// A steady load of small business transactions, on two types, for
	// the whole outage and a little after.
	stopLoad := make(chan struct{})
	loadDone := make(chan struct{})
	var published atomic.Int64
	var loadErr atomic.Pointer[error]
	go func() {
		defer close(loadDone)
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-stopLoad:
				return
			case <-tick.C:
			}
			typ := "orders"
			if i%3 == 0 {
				typ = "other"
			}
			evs := make([]*txbox.Event, 10)
			ids := make([]txbox.ID, len(evs))
			for j := range evs {
				ids[j] = txbox.NewID()
				evs[j] = &txbox.Event{ID: ids[j], Type: typ, Key: fmt.Sprint(j), Payload: []byte(`{"outage":true}`)}
			}
			if err := kind.publish(context.Background(), d, evs, true); err != nil {
				loadErr.Store(&err)
				return
			}
			o.committedIDs(ids...)
			published.Add(int64(len(evs)))
		}
	}()
	defer func() {
		select {
		case <-loadDone:
		default:
			close(stopLoad)
			<-loadDone
		}
	}()

	// Slow the acks down first, so batches are waiting for them when the
	// connection is cut: their outcome is then unknown, the relay must
	// resend them, and the oracle sees duplicates, never a loss.
	b.proxy.SetLatency(t, 300*time.Millisecond)
	sentBefore := len(b.all())
	testenv.WaitFor(t, 20*time.Second, "sends under ack latency", func() bool { return len(b.all()) >= sentBefore+50 })
	b.proxy.Down(t)
	testenv.WaitFor(t, 20*time.Second, "circuit open", func() bool { return circuits.opened() >= 1 })
	heapAtStart := liveHeap()
	var peak uint64
	publishedAtStart := published.Load()
	outage := time.NewTimer(outageLength())
	check := time.NewTicker(250 * time.Millisecond)
	for waiting := true; waiting; {
		select {
		case <-outage.C:
			waiting = false
		case <-check.C:
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			peak = max(peak, ms.HeapAlloc)
			// The outage is the scenario's input, not an effect to wait
			// for; meanwhile its invariants must hold at every moment.
			if n, _ := d.DeadLetterCount(context.Background(), &store.DeadLetterFilter{}); n != 0 {
				t.Fatalf("%d dead letters during the outage", n)
			}
			if m := rec.maxAttempt(); m > 1 {
				t.Fatalf("a message was sent as attempt %d during the outage: attempts were burned", m)
			}
		}
	}
	check.Stop()
	if h := r.Health(); !h.Degraded {
		t.Errorf("health not degraded during the outage: %+v", h)
	}
	heapAtEnd := liveHeap()
	backlog := published.Load() - publishedAtStart
	growth := int64(heapAtEnd) - int64(heapAtStart)
	t.Logf("%s: outage %v, %d events published meanwhile, %d circuit openings, live heap %.1f MiB -> %.1f MiB",
		b.name, outageLength(), backlog, circuits.opened(), float64(heapAtStart)/(1<<20), float64(heapAtEnd)/(1<<20))
	if backlog < 100 {
		t.Fatalf("only %d events published during the outage: the load did not run", backlog)
	}
	// The backlog waits in the database, not in the relay: its heap must
	// not grow with it. 32 MiB is far below what holding the backlog's
	// rows (or retrying them in memory) would cost at the chaos length,
	// and far above GC noise.
	if growth > 32<<20 {
		t.Errorf("live heap grew by %.1f MiB during the outage", float64(growth)/(1<<20))
	}
	// Between collections the heap may reach about twice the live heap
	// (GOGC=100); a relay that buffered the backlog would blow far past.
	t.Logf("%s: peak heap during the outage %.1f MiB", b.name, float64(peak)/(1<<20))
	if peak > 2*heapAtStart+64<<20 {
		t.Errorf("heap peaked at %.1f MiB during the outage (live %.1f MiB at its start)", float64(peak)/(1<<20), float64(heapAtStart)/(1<<20))
	}

	b.proxy.Up(t)
	b.proxy.SetLatency(t, 0)
	close(stopLoad)
	<-loadDone
	if p := loadErr.Load(); p != nil {
		t.Fatalf("publish under load: %v", *p)
	}
	drain := 60 * time.Second
	if os.Getenv("TXBOX_CHAOS") != "" {
		drain = 5 * time.Minute
	}
	testenv.WaitFor(t, drain, "backlog drained after the outage", func() bool { return outboxSettled(t, d) })
	testenv.WaitFor(t, 30*time.Second, "every committed event at the broker", func() bool { return b.unique() >= o.expected() })

	rec.noBurnedAttempts(t)
	if h := r.Health().Stream; h != nil {
		t.Logf("%s: the stream spilled %d events for the poller", b.name, h.Spilled)
		if h.Spilled == 0 {
			t.Error("WAL mode: the stream spilled nothing during the outage")
		}
	}
	noDeadLetters(t, d, "after the outage")
	if h := r.Health(); h.Degraded {
		t.Errorf("health still degraded after the backlog drained: %+v", h)
	}
	o.receivedIDs(b.all()...)
	rep := o.report()
	t.Logf("%s: oracle: %v", b.name, rep)
	// Duplicates only from sends whose outcome the cut made unknown:
	// at most the batches in flight per type when the proxy went down,
	// and the probes after.
	if len(rep.Lost) != 0 || len(rep.Unexpected) != 0 || rep.extra() > 2*relay.DefaultInFlight*relay.DefaultBatchSize {
		t.Errorf("oracle: %v", rep)
	}
}

// BenchmarkDrainSenders drains the same PostgreSQL backlog through the
// real relay into Kafka (kfake, in process), RabbitMQ and Redis Streams,
// and through a sender that acks at once (the relay's database-side
// ceiling, measured in the same run). It reports events/s and the ratio to
// the no-op sender. Backlog size: TXBOX_BENCH_EVENTS (default 20,000).
//
//	go test -run '^$' -bench DrainSenders -benchtime 1x ./e2e
func BenchmarkDrainSenders(b *testing.B) {
	testenv.RequireTCP(b, "PostgreSQL", testenv.PostgresAddr)
	n := benchEvents(b)
	var ceiling float64
	for _, tc := range []struct {
		name string
		new  func(b *testing.B) (sender.Sender, sender.Route)
	}{
		{"noop", func(b *testing.B) (sender.Sender, sender.Route) { return noopSender{}, sender.Route{} }},
		{"kafka", benchKafka},
		{"rabbitmq", benchRabbit},
		{"redisstream", benchRedis},
	} {
		b.Run(tc.name, func(b *testing.B) {
			for range b.N {
				b.StopTimer()
				ns := postgresKind.newNamespace(b)
				d := openStore(b, postgresKind, ns, 4).(*postgres.Driver)
				fillBacklog(b, d, n)
				s, route := tc.new(b)
				rd := openStore(b, postgresKind, ns, 2*relay.DefaultInFlight+4)
				cfg := relayConfig(rd, s, "unused", 0)
				cfg.Senders = map[string]sender.Sender{tc.name: s}
				cfg.Defaults.Route = &route
				cfg.Cleanup.Disabled = true
				cfg.DiscoverInterval = -1
				timing := &timingHook{}
				cfg.Hooks = []txbox.RelayHook{timing}
				r, err := relay.New(cfg)
				if err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				start := time.Now()
				if err := r.Start(context.Background()); err != nil {
					b.Fatal(err)
				}
				testenv.WaitFor(b, 30*time.Minute, "backlog drained", func() bool { return outboxSettledOrders(b, d) })
				el := time.Since(start)
				b.StopTimer()
				if err := r.Stop(context.Background()); err != nil {
					b.Fatal(err)
				}
				if dl, _ := d.DeadLetterCount(context.Background(), &store.DeadLetterFilter{}); dl != 0 {
					b.Fatalf("%d dead letters", dl)
				}
				rate := float64(n) / el.Seconds()
				b.Logf("%s: %d events in %v; %s", tc.name, n, el.Round(time.Millisecond), timing)
				b.ReportMetric(rate, "events/s")
				if tc.name == "noop" {
					ceiling = rate
				} else if ceiling > 0 {
					b.ReportMetric(rate/ceiling, "ratio-to-noop")
				}
				b.StartTimer()
			}
		})
	}
}

func benchKafka(b *testing.B) (sender.Sender, sender.Route) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, "orders"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(c.Close)
	s, err := kafka.New(kafka.Config{Brokers: c.ListenAddrs()})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Close(context.Background()) })
	return s, sender.Route{Topic: "{event_type}"}
}

func benchRabbit(b *testing.B) (sender.Sender, sender.Route) {
	// The broker routes and stores every message; the queue drops its
	// head beyond 10,000 so the benchmark does not fill the broker.
	ex, _ := amqptest.Bound(b, amqptest.Admin(b), "orders", amqp.Table{"x-max-length": int32(10000)})
	s, err := rabbitmq.New(rabbitmq.Config{URL: testenv.RabbitURL, Channels: benchChannels()})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Close(context.Background()) })
	return s, sender.Route{Exchange: ex}
}

func benchRedis(b *testing.B) (sender.Sender, sender.Route) {
	stream := testenv.UniqueName("bench_stream_")
	s, err := redisstream.New(redisstream.Config{Addr: testenv.RedisAddr, MaxLen: 10000})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		_ = s.Close(context.Background())
		rdb := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr})
		rdb.Del(context.Background(), stream)
		rdb.Close()
	})
	return s, sender.Route{Stream: stream}
}

// benchChannels is the RabbitMQ sender's channel count in the drain
// benchmark: TXBOX_BENCH_RABBIT_CHANNELS, default the sender's default.
func benchChannels() int {
	n, _ := strconv.Atoi(os.Getenv("TXBOX_BENCH_RABBIT_CHANNELS"))
	return n
}

// TestUnroutableDeadLettered (docs/testing.md, scenario 8) for the brokers of
// this file: an event whose route leads nowhere (RabbitMQ: no queue bound
// for its routing key; Kafka: a topic that does not exist; Redis: a key of
// another type) is never marked done, counts an attempt per try, and is
// dead-lettered after max attempts with the broker's reason, while the
// other events flow and the circuit stays closed.
func TestUnroutableDeadLettered(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		new    func(t *testing.T) *outageBroker
		poison func(t *testing.T, b *outageBroker) sender.Route
		reason string
	}{
		{"rabbitmq", rabbitOutageBroker, func(t *testing.T, b *outageBroker) sender.Route {
			return sender.Route{Exchange: b.route.Exchange, RoutingKey: "bound-to-nothing"}
		}, "unroutable"},
		// The sender's default delivery timeout: learning that a topic does
		// not exist takes a few metadata round trips, and a timeout shorter
		// than those reports a slow answer as an outage.
		{"kafka", func(t *testing.T) *outageBroker { return kafkaBroker(t, kafka.DefaultDeliveryTimeout) }, func(t *testing.T, b *outageBroker) sender.Route {
			return sender.Route{Topic: "no-such-topic"}
		}, "UNKNOWN_TOPIC_OR_PARTITION"},
		{"redisstream", redisOutageBroker, func(t *testing.T, b *outageBroker) sender.Route {
			key := testenv.UniqueName("e2e_string_")
			rdb := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr})
			t.Cleanup(func() { rdb.Del(context.Background(), key); rdb.Close() })
			if err := rdb.Set(context.Background(), key, "not a stream", 0).Err(); err != nil {
				t.Fatal(err)
			}
			return sender.Route{Stream: key}
		}, "WRONGTYPE"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := tc.new(t)
			kind := postgresKind
			d := openStore(t, kind, kind.newNamespace(t), 4)
			rec := &attemptRecorder{Sender: b.sender}
			circuits := &circuitHook{}
			poison := tc.poison(t, b)
			cfg := relayConfig(d, rec, "unused", 0)
			cfg.Senders = map[string]sender.Sender{b.name: rec}
			cfg.Defaults.Route = &b.route
			cfg.Defaults.MaxAttempts = new(3)
			cfg.Events = map[string]relay.EventSettings{"orders": {}, "lost": {Route: &poison}}
			cfg.Hooks = []txbox.RelayHook{circuits}
			relaytest.Start(t, cfg)

			o := newOracle()
			lost := publishN(t, kind, d, "lost", 3, nil)
			publishN(t, kind, d, "orders", 100, o)
			testenv.WaitFor(t, 60*time.Second, "poison dead-lettered", func() bool {
				n, err := d.DeadLetterCount(context.Background(), &store.DeadLetterFilter{})
				if err != nil {
					t.Fatal(err)
				}
				return n == int64(len(lost)) && outboxSettled(t, d)
			})
			for _, id := range lost {
				dl, err := d.DeadLetterGet(context.Background(), id)
				if err != nil {
					t.Fatalf("dead letter %s: %v", id, err)
				}
				if dl.Attempts != 3 || !strings.Contains(dl.LastError, tc.reason) {
					t.Errorf("dead letter %s: attempts %d, last error %q; want 3 attempts and %q", id, dl.Attempts, dl.LastError, tc.reason)
				}
			}
			if n := circuits.opened(); n != 0 {
				t.Errorf("circuit opened %d times for a rejected message", n)
			}
			testenv.WaitFor(t, 30*time.Second, "orders at the broker", func() bool { return b.unique() >= 100 })
			o.receivedIDs(b.all()...)
			if rep := o.report(); !rep.clean() {
				t.Errorf("oracle (orders): %v", rep)
			}
		})
	}
}

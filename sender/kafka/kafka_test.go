package kafka_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/internal/testenv"
	"github.com/txbox/txbox/sender"
	"github.com/txbox/txbox/sender/kafka"
	"github.com/txbox/txbox/sender/sendertest"
)

type bundle struct {
	cluster *kfake.Cluster
	topic   string
	sender  *kafka.Sender
	cfg     kafka.Config
}

func setup(t *testing.T, cfg kafka.Config, topics ...string) *bundle {
	t.Helper()
	if len(topics) == 0 {
		topics = []string{"orders"}
	}
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, topics...))
	if err != nil {
		t.Fatalf("kfake: %v", err)
	}
	t.Cleanup(c.Close)
	cfg.Brokers = c.ListenAddrs()
	s, err := kafka.New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = s.Close(ctx)
	})
	return &bundle{cluster: c, topic: topics[0], sender: s, cfg: cfg}
}

func messages(n int, topic string) []*sender.Message {
	out := make([]*sender.Message, n)
	for i := range out {
		id := txbox.NewID()
		out[i] = &sender.Message{
			ID:        id,
			EventType: "order-created",
			Payload:   fmt.Appendf(nil, `{"n":%d}`, i),
			Headers: map[string]string{
				"tenant":              "acme",
				txbox.HeaderEventID:   id.String(),
				txbox.HeaderEventType: "order-created",
			},
			CreatedAt: time.Now(),
			Attempt:   1,
			Route:     sender.Route{Topic: topic},
		}
		if i%2 == 0 {
			out[i].Key = fmt.Sprintf("order-%d", i%5)
		}
	}
	return out
}

// consume reads records from topic until n arrived or the deadline passed.
func consume(t *testing.T, addrs []string, topic string, n int) []*kgo.Record {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	var out []*kgo.Record
	for len(out) < n {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("consumed %d of %d records before the deadline", len(out), n)
		}
		fs.EachError(func(_ string, _ int32, err error) { t.Fatalf("fetch: %v", err) })
		out = append(out, fs.Records()...)
	}
	return out
}

func header(r *kgo.Record, k string) (string, bool) {
	for _, h := range r.Headers {
		if h.Key == k {
			return string(h.Value), true
		}
	}
	return "", false
}

func TestSendDeliversKeysHeadersPayloads(t *testing.T) {
	t.Parallel()
	b := setup(t, kafka.Config{})
	msgs := messages(50, b.topic)
	if err := b.sender.Send(context.Background(), msgs); err != nil {
		t.Fatalf("Send: %v", err)
	}
	recs := consume(t, b.cluster.ListenAddrs(), b.topic, len(msgs))
	if len(recs) != len(msgs) {
		t.Fatalf("got %d records, want %d", len(recs), len(msgs))
	}
	byID := map[string]*sender.Message{}
	for _, m := range msgs {
		byID[m.ID.String()] = m
	}
	seen := map[string]bool{}
	for _, r := range recs {
		id, ok := header(r, txbox.HeaderEventID)
		if !ok {
			t.Fatalf("record without %s", txbox.HeaderEventID)
		}
		m := byID[id]
		if m == nil {
			t.Fatalf("unexpected record %s", id)
		}
		if seen[id] {
			t.Fatalf("duplicate record %s", id)
		}
		seen[id] = true
		wantKey := m.Key
		if wantKey == "" {
			wantKey = m.ID.String()
		}
		if string(r.Key) != wantKey {
			t.Errorf("record %s key = %q, want %q", id, r.Key, wantKey)
		}
		if !bytes.Equal(r.Value, m.Payload) {
			t.Errorf("record %s value = %q, want %q", id, r.Value, m.Payload)
		}
		if v, _ := header(r, "tenant"); v != "acme" {
			t.Errorf("record %s tenant header = %q", id, v)
		}
		if v, _ := header(r, txbox.HeaderEventType); v != "order-created" {
			t.Errorf("record %s type header = %q", id, v)
		}
	}
}

func TestSendAddsMissingTxboxHeaders(t *testing.T) {
	t.Parallel()
	b := setup(t, kafka.Config{})
	m := messages(1, b.topic)[0]
	m.Headers = nil
	if err := b.sender.Send(context.Background(), []*sender.Message{m}); err != nil {
		t.Fatal(err)
	}
	r := consume(t, b.cluster.ListenAddrs(), b.topic, 1)[0]
	for k, want := range map[string]string{
		txbox.HeaderEventID:   m.ID.String(),
		txbox.HeaderEventType: m.EventType,
		txbox.HeaderCreatedAt: m.CreatedAt.UTC().Format(time.RFC3339Nano),
	} {
		if got, _ := header(r, k); got != want {
			t.Errorf("header %s = %q, want %q", k, got, want)
		}
	}
}

func TestSendUnknownTopicRejectsOnlyThoseMessages(t *testing.T) {
	t.Parallel()
	b := setup(t, kafka.Config{})
	msgs := messages(6, b.topic)
	msgs[1].Route.Topic = "no-such-topic"
	msgs[4].Route.Topic = ""
	err := b.sender.Send(context.Background(), msgs)
	var be *sender.BatchError
	if !errors.As(err, &be) {
		t.Fatalf("Send = %v, want *sender.BatchError", err)
	}
	for i, e := range be.Errs {
		switch i {
		case 1:
			if !errors.Is(e, kerr.UnknownTopicOrPartition) || txbox.Classify(e) != txbox.ClassRejected {
				t.Errorf("msg 1: %v (class %v), want rejected UNKNOWN_TOPIC_OR_PARTITION", e, txbox.Classify(e))
			}
		case 4:
			if !errors.Is(e, kafka.ErrNoTopic) || txbox.Classify(e) != txbox.ClassRejected {
				t.Errorf("msg 4: %v, want rejected ErrNoTopic", e)
			}
		default:
			if e != nil {
				t.Errorf("msg %d: %v, want acked", i, e)
			}
		}
	}
	if got := consume(t, b.cluster.ListenAddrs(), b.topic, 4); len(got) != 4 {
		t.Fatalf("got %d records, want 4", len(got))
	}
}

// TestSendTooLargeIsPermanent: a record over the producer's limit can
// never be produced: dead-lettered on its first try, with the reason.
func TestSendTooLargeIsPermanent(t *testing.T) {
	t.Parallel()
	b := setup(t, kafka.Config{MaxRecordBytes: 4096})
	msgs := messages(3, b.topic)
	msgs[2].Payload = bytes.Repeat([]byte("x"), 8192)
	err := b.sender.Send(context.Background(), msgs)
	errs := sender.Results(err, len(msgs))
	if errs[0] != nil || errs[1] != nil {
		t.Fatalf("small messages failed: %v", err)
	}
	if !errors.Is(errs[2], kerr.MessageTooLarge) || txbox.Classify(errs[2]) != txbox.ClassPermanent || !strings.Contains(errs[2].Error(), "max.message.bytes") {
		t.Fatalf("large message: %v, want permanent MESSAGE_TOO_LARGE naming the limits", errs[2])
	}
}

func TestSendBrokerMessageTooLargeIsPermanent(t *testing.T) {
	t.Parallel()
	b := setup(t, kafka.Config{}, "orders", "big")
	b.cluster.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: "big", Err: kerr.MessageTooLarge, Count: -1})
	msgs := messages(4, b.topic)
	msgs[3].Route.Topic = "big"
	errs := sender.Results(b.sender.Send(context.Background(), msgs), len(msgs))
	for i := 0; i < 3; i++ {
		if errs[i] != nil {
			t.Errorf("msg %d: %v", i, errs[i])
		}
	}
	if !errors.Is(errs[3], kerr.MessageTooLarge) || txbox.Classify(errs[3]) != txbox.ClassPermanent {
		t.Fatalf("msg 3: %v, want permanent MESSAGE_TOO_LARGE", errs[3])
	}
}

func TestSendRetriableBrokerErrorsBecomeTransient(t *testing.T) {
	t.Parallel()
	b := setup(t, kafka.Config{DeliveryTimeout: time.Second})
	b.cluster.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Err: kerr.NotEnoughReplicas, Count: -1})
	start := time.Now()
	err := b.sender.Send(context.Background(), messages(10, b.topic))
	if err == nil || txbox.Classify(err) != txbox.ClassTransient {
		t.Fatalf("Send = %v (class %v), want one transient error", err, txbox.Classify(err))
	}
	var be *sender.BatchError
	if errors.As(err, &be) {
		t.Fatalf("whole-batch outage reported as a batch error: %v", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("Send took %s, want about the delivery timeout", d)
	}
	// The broker answers, only this topic's partitions cannot take
	// records: an outage of the topic, not of the connection.
	if sender.IsDisconnected(err) {
		t.Fatalf("a topic's failure marked as a lost connection: %v", err)
	}
}

func TestSendClusterDownIsTransientAndBounded(t *testing.T) {
	t.Parallel()
	b := setup(t, kafka.Config{DeliveryTimeout: time.Second, DialTimeout: 500 * time.Millisecond})
	if err := b.sender.Send(context.Background(), messages(2, b.topic)); err != nil {
		t.Fatalf("warm-up Send: %v", err)
	}
	b.cluster.Close()
	start := time.Now()
	err := b.sender.Send(context.Background(), messages(20, b.topic))
	if err == nil || txbox.Classify(err) != txbox.ClassTransient {
		t.Fatalf("Send during outage = %v (class %v), want transient", err, txbox.Classify(err))
	}
	// No broker answers: every topic of the sender is down with it.
	for i, e := range sender.Results(err, 20) {
		if !sender.IsDisconnected(e) {
			t.Fatalf("message %d with the cluster down: %v, want it marked Disconnected", i, e)
		}
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("Send during outage took %s", d)
	}
}

func TestSendNeverReachableIsTransient(t *testing.T) {
	t.Parallel()
	// A port nothing listens on: the relay may start during an outage.
	s, err := kafka.New(kafka.Config{Brokers: []string{"127.0.0.1:1"}, DeliveryTimeout: time.Second, DialTimeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	err = s.Send(context.Background(), messages(3, "orders"))
	if err == nil || txbox.Classify(err) != txbox.ClassTransient || !sender.IsDisconnected(err) {
		t.Fatalf("Send = %v, want transient and Disconnected", err)
	}
}

func TestDestinationIsTheTopic(t *testing.T) {
	t.Parallel()
	s, err := kafka.New(kafka.Config{Brokers: []string{"127.0.0.1:1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	if got := sender.DestinationOf(s, sender.Route{Topic: "orders", Subject: "x", Stream: "y"}); got != "orders" {
		t.Fatalf("destination = %q, want the topic", got)
	}
}

func TestSendHonoursContext(t *testing.T) {
	t.Parallel()
	b := setup(t, kafka.Config{DeliveryTimeout: time.Minute})
	// Hold every produce request until the test ends so acks never come.
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	b.cluster.ControlKey(kmsg.Produce.Int16(), func(kmsg.Request) (kmsg.Response, error, bool) {
		b.cluster.KeepControl()
		b.cluster.SleepControl(func() { <-release })
		return nil, nil, false
	})
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := b.sender.Send(ctx, messages(5, b.topic))
	if err == nil || txbox.Classify(err) != txbox.ClassTransient {
		t.Fatalf("Send = %v, want transient", err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("Send returned %s after its context ended", d)
	}
}

func TestConcurrentSends(t *testing.T) {
	t.Parallel()
	b := setup(t, kafka.Config{})
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- b.sender.Send(context.Background(), messages(25, b.topic))
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if got := consume(t, b.cluster.ListenAddrs(), b.topic, 200); len(got) != 200 {
		t.Fatalf("got %d records, want 200", len(got))
	}
}

func TestSendAfterClose(t *testing.T) {
	t.Parallel()
	b := setup(t, kafka.Config{})
	if err := b.sender.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	err := b.sender.Send(context.Background(), messages(1, b.topic))
	if !errors.Is(err, txbox.ErrClosed) {
		t.Fatalf("Send after Close = %v, want ErrClosed", err)
	}
}

func TestConfigValidation(t *testing.T) {
	t.Parallel()
	for name, cfg := range map[string]kafka.Config{
		"no brokers":        {},
		"bad broker":        {Brokers: []string{"localhost"}},
		"negative buffered": {Brokers: []string{"a:1"}, MaxBufferedRecords: -1},
		"negative timeout":  {Brokers: []string{"a:1"}, DeliveryTimeout: -time.Second},
		"tiny max bytes":    {Brokers: []string{"a:1"}, MaxRecordBytes: 10},
		"negative linger":   {Brokers: []string{"a:1"}, Linger: -time.Millisecond},
	} {
		if _, err := kafka.New(cfg); !errors.Is(err, kafka.ErrInvalidConfig) {
			t.Errorf("%s: New = %v, want ErrInvalidConfig", name, err)
		}
	}
}

// sink reads a topic in the background for the conformance suite.
type sink struct {
	mu  sync.Mutex
	got []*kgo.Record
}

func newSink(t *testing.T, addrs []string, topic string) *sink {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	s := &sink{}
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			fs := cl.PollFetches(ctx)
			s.mu.Lock()
			s.got = append(s.got, fs.Records()...)
			s.mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		cl.Close()
	})
	return s
}

func TestConformance(t *testing.T) {
	t.Parallel()
	sendertest.Exercise(t, sendertest.Harness{
		Features:         sendertest.Features{SupportsPerMessageReject: true, SupportsKey: true, MarksDisconnected: true},
		UnreachableBound: 10 * time.Second,
		NewDestination: func(t *testing.T) *sendertest.Destination {
			topic := testenv.UniqueName("txbox_")
			c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, topic))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(c.Close)
			sk := newSink(t, c.ListenAddrs(), topic)
			return &sendertest.Destination{
				Addr: c.ListenAddrs()[0],
				Connect: func(t *testing.T, addr string) (sender.Sender, sender.Route) {
					opts, err := kafka.Config{Brokers: c.ListenAddrs(), DeliveryTimeout: 3 * time.Second, DialTimeout: time.Second}.Options()
					if err != nil {
						t.Fatal(err)
					}
					// A broker advertises its own address; dial every
					// broker through addr so the suite's proxy sits on
					// every connection.
					d := &net.Dialer{Timeout: time.Second}
					opts = append(opts, kgo.Dialer(func(ctx context.Context, network, _ string) (net.Conn, error) {
						return d.DialContext(ctx, network, addr)
					}))
					cl, err := kgo.NewClient(opts...)
					if err != nil {
						t.Fatal(err)
					}
					t.Cleanup(cl.Close)
					return kafka.NewFromClient(cl), sender.Route{Topic: topic}
				},
				Received: func(t *testing.T) []sendertest.Delivery {
					sk.mu.Lock()
					defer sk.mu.Unlock()
					out := make([]sendertest.Delivery, 0, len(sk.got))
					for _, r := range sk.got {
						h := map[string]string{}
						for _, x := range r.Headers {
							h[x.Key] = string(x.Value)
						}
						out = append(out, sendertest.Delivery{Payload: r.Value, Headers: h, Key: string(r.Key)})
					}
					return out
				},
				Poison: func(t *testing.T, m *sender.Message) {
					m.Route.Topic = "no-such-topic"
				},
			}
		},
	})
}

// TestSameKeyKeepsOrder: records with one key land in one partition in the
// order of the batch, which ordered delivery (ordering: key) relies on.
func TestSameKeyKeepsOrder(t *testing.T) {
	t.Parallel()
	b := setup(t, kafka.Config{})
	msgs := messages(200, b.topic)
	for i, m := range msgs {
		m.Key = fmt.Sprintf("aggregate-%d", i%5)
	}
	// Two Sends in a row, as the relay does for consecutive batches.
	if err := b.sender.Send(context.Background(), msgs[:100]); err != nil {
		t.Fatal(err)
	}
	if err := b.sender.Send(context.Background(), msgs[100:]); err != nil {
		t.Fatal(err)
	}
	pos := map[string]int{}
	for i, m := range msgs {
		pos[m.ID.String()] = i
	}
	recs := consume(t, b.cluster.ListenAddrs(), b.topic, len(msgs))
	partOf := map[string]int32{}
	last := map[string]int{}
	for _, r := range recs {
		id, _ := header(r, txbox.HeaderEventID)
		k := string(r.Key)
		if p, ok := partOf[k]; ok && p != r.Partition {
			t.Fatalf("key %s in partitions %d and %d", k, p, r.Partition)
		}
		partOf[k] = r.Partition
		if prev, ok := last[k]; ok && pos[id] < prev {
			t.Fatalf("key %s: message %d arrived after message %d", k, pos[id], prev)
		}
		last[k] = pos[id]
	}
	if len(partOf) != 5 {
		t.Fatalf("%d keys seen, want 5", len(partOf))
	}
}

// TestHungBroker: the broker stops answering without closing anything.
// With the idempotent producer a written but unanswered request normally
// pins its records forever; the sender allows cancelling them, so Send
// reports transient after DeliveryTimeout and recovers afterwards.
func TestHungBroker(t *testing.T) {
	t.Parallel()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, "orders"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	f := sendertest.NewFreezer(t, c.ListenAddrs()[0])
	opts, err := kafka.Config{Brokers: c.ListenAddrs(), DeliveryTimeout: time.Second, DialTimeout: time.Second}.Options()
	if err != nil {
		t.Fatal(err)
	}
	d := &net.Dialer{Timeout: time.Second}
	opts = append(opts, kgo.Dialer(func(ctx context.Context, network, _ string) (net.Conn, error) {
		return d.DialContext(ctx, network, f.Addr())
	}))
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	s := kafka.NewFromClient(cl)
	if err := s.Send(context.Background(), messages(5, "orders")); err != nil {
		t.Fatalf("warm-up: %v", err)
	}
	// The bound is that Send returns, not how fast: a second send to the
	// hung broker also waits for the client's redials (DialTimeout 1s
	// each), and took 4.5s once with two test suites on 2 cores (1.5s
	// quiet). A pinned request would hold it forever.
	sendertest.CheckHung(t, s, f, "broker", 2, 10*time.Second, func(n int) []*sender.Message { return messages(n, "orders") })
}

func TestNilMessageIsPermanentNotPanic(t *testing.T) {
	t.Parallel()
	b := setup(t, kafka.Config{})
	msgs := messages(2, b.topic)
	errs := sender.Results(b.sender.Send(context.Background(), []*sender.Message{msgs[0], nil, msgs[1]}), 3)
	if errs[0] != nil || errs[2] != nil || !errors.Is(errs[1], kafka.ErrNilMessage) || txbox.Classify(errs[1]) != txbox.ClassPermanent {
		t.Fatalf("results = %v", errs)
	}
}

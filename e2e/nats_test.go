package e2e

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/internal/testenv"
	"github.com/txbox/txbox/sender"
)

// jsStream is a JetStream stream of its own for one test, on a unique
// subject prefix, deleted when the test ends.
type jsStream struct {
	name   string
	prefix string // subjects are prefix + "." + anything
	nc     *natsgo.Conn
	js     jetstream.JetStream
	s      jetstream.Stream
}

// newStream creates the stream. Its duplicate window is 100ms, the
// server's minimum, so the broker's Nats-Msg-Id deduplication can hide
// only a duplicate sent within 100ms of the first; the relay-side ack
// records catch those too.
func newStream(t testing.TB) *jsStream {
	t.Helper()
	testenv.RequireTCP(t, "NATS", "127.0.0.1:4222")
	nc, err := natsgo.Connect(testenv.NATSURL)
	if err != nil {
		t.Fatalf("nats connect: %v", err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	name := testenv.UniqueName("E2E_")
	prefix := testenv.UniqueName("e2e_")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := js.CreateStream(ctx, jetstream.StreamConfig{
		Name:       name,
		Subjects:   []string{prefix + ".>"},
		Storage:    jetstream.MemoryStorage,
		Duplicates: 100 * time.Millisecond, // the server's minimum
	})
	if err != nil {
		t.Fatalf("create stream: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = js.DeleteStream(ctx, name)
	})
	return &jsStream{name: name, prefix: prefix, nc: nc, js: js, s: s}
}

// count returns the number of messages in the stream.
func (s *jsStream) count(t testing.TB) uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	info, err := s.s.Info(ctx)
	if err != nil {
		t.Fatalf("stream info: %v", err)
	}
	return info.State.Msgs
}

// received is one message read back from the stream.
type received struct {
	id      txbox.ID
	subject string
	headers natsgo.Header
	at      time.Time // the broker's timestamp
}

// readAll reads every message of the stream.
func (s *jsStream) readAll(t testing.TB) []received {
	t.Helper()
	total := s.count(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := s.s.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatalf("consumer: %v", err)
	}
	out := make([]received, 0, total)
	for uint64(len(out)) < total {
		batch, err := c.Fetch(1000, jetstream.FetchMaxWait(2*time.Second))
		if err != nil {
			t.Fatalf("fetch: %v", err)
		}
		for m := range batch.Messages() {
			md, err := m.Metadata()
			if err != nil {
				t.Fatal(err)
			}
			id, err := txbox.ParseID(m.Headers().Get(txbox.HeaderEventID))
			if err != nil {
				t.Fatalf("message without a txbox event id: %v", err)
			}
			out = append(out, received{id: id, subject: m.Subject(), headers: m.Headers(), at: md.Timestamp})
		}
		if err := batch.Error(); err != nil && !errors.Is(err, jetstream.ErrNoMessages) && !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("fetch: %v", err)
		}
		if ctx.Err() != nil {
			t.Fatalf("read %d of %d messages before the deadline", len(out), total)
		}
	}
	return out
}

// ackCounter wraps a sender and remembers every message the destination
// acknowledged, counting repeats: the relay-side view of duplicates.
type ackCounter struct {
	sender.Sender
	mu    sync.Mutex
	acked map[txbox.ID]int
}

func newAckCounter(s sender.Sender) *ackCounter {
	return &ackCounter{Sender: s, acked: map[txbox.ID]int{}}
}

func (a *ackCounter) Send(ctx context.Context, msgs []*sender.Message) error {
	err := a.Sender.Send(ctx, msgs)
	res := sender.Results(err, len(msgs))
	a.mu.Lock()
	for i, m := range msgs {
		if res[i] == nil {
			a.acked[m.ID]++
		}
	}
	a.mu.Unlock()
	return err
}

func (a *ackCounter) ids() []txbox.ID {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([]txbox.ID, 0, len(a.acked))
	for id, n := range a.acked {
		for range n {
			out = append(out, id)
		}
	}
	return out
}

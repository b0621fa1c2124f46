package nats_test

import (
	"context"
	"errors"
	"log/slog"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/txbox/txbox/internal/natstest"
	"github.com/txbox/txbox/internal/testenv"
	"github.com/txbox/txbox/sender"
	txnats "github.com/txbox/txbox/sender/nats"
	"github.com/txbox/txbox/sender/sendertest"
)

// natsAddr is the host:port of the local NATS server.
func natsAddr(t testing.TB) string {
	t.Helper()
	u, err := url.Parse(testenv.NATSURL)
	if err != nil {
		t.Fatalf("parse %s: %v", testenv.NATSURL, err)
	}
	testenv.RequireTCP(t, "NATS", u.Host)
	return u.Host
}

// stream is a JetStream stream of its own for one test, bound to
// "<name>.>", deleted when the test ends. It reads back what arrived
// through an admin connection that no fault touches.
type stream struct {
	name string
	js   jetstream.JetStream
	s    jetstream.Stream

	mu   sync.Mutex
	next uint64
	got  []sendertest.Delivery
}

func newStream(t testing.TB) *stream {
	t.Helper()
	addr := natsAddr(t)
	js := natstest.JetStream(t, "nats://"+addr)
	name := testenv.UniqueName("sendertest_")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := js.CreateStream(ctx, jetstream.StreamConfig{
		Name:     name,
		Subjects: []string{name + ".>"},
		Storage:  jetstream.MemoryStorage,
	})
	if err != nil {
		t.Fatalf("create stream: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := js.DeleteStream(ctx, name); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
			t.Errorf("delete stream: %v", err)
		}
	})
	return &stream{name: name, js: js, s: s, next: 1}
}

func (st *stream) subject() string { return st.name + ".events" }

// received reads the messages stored since the last call; the stream is
// append-only, so earlier reads stay valid.
func (st *stream) received(t testing.TB) []sendertest.Delivery {
	t.Helper()
	st.mu.Lock()
	defer st.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	info, err := st.s.Info(ctx)
	if err != nil {
		t.Fatalf("stream info: %v", err)
	}
	for ; st.next <= info.State.LastSeq; st.next++ {
		m, err := st.s.GetMsg(ctx, st.next)
		if err != nil {
			t.Fatalf("get message %d: %v", st.next, err)
		}
		h := make(map[string]string, len(m.Header))
		for k, vs := range m.Header {
			if len(vs) > 0 {
				h[k] = vs[0]
			}
		}
		st.got = append(st.got, sendertest.Delivery{
			ID: m.Header.Get(txnats.HeaderMsgID), Payload: m.Data, Headers: h,
			Key: m.Header.Get(sender.HeaderKey),
		})
	}
	return append([]sendertest.Delivery(nil), st.got...)
}

func newSender(t testing.TB, addr string, cfg txnats.Config) *txnats.Sender {
	t.Helper()
	cfg.URL = "nats://" + addr
	if cfg.ReconnectWait == 0 {
		cfg.ReconnectWait = 100 * time.Millisecond
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.ConnectTimeout == 0 {
		cfg.ConnectTimeout = 2 * time.Second
	}
	s, err := txnats.New(cfg)
	if err != nil {
		t.Fatalf("nats.New: %v", err)
	}
	return s
}

func TestConformance(t *testing.T) {
	t.Parallel()
	addr := natsAddr(t)
	sendertest.Exercise(t, sendertest.Harness{
		Features: sendertest.Features{
			SupportsPerMessageReject: true,
			SupportsKey:              true,
			BrokerDedup:              true,
			MarksDisconnected:        true,
		},
		UnreachableBound: 10 * time.Second,
		NewDestination: func(t *testing.T) *sendertest.Destination {
			st := newStream(t)
			return &sendertest.Destination{
				Addr: addr,
				Connect: func(t *testing.T, addr string) (sender.Sender, sender.Route) {
					return newSender(t, addr, txnats.Config{}), sender.Route{Subject: st.subject()}
				},
				Received: func(t *testing.T) []sendertest.Delivery { return st.received(t) },
				Poison: func(_ *testing.T, m *sender.Message) {
					// No stream binds this subject: JetStream has no
					// responder for it.
					m.Route.Subject = testenv.UniqueName("nostream_") + ".events"
				},
			}
		},
	})
}

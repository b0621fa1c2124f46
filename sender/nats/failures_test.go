package nats_test

import (
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/internal/natstest"
	"github.com/txbox/txbox/internal/testenv"
	"github.com/txbox/txbox/sender"
	txnats "github.com/txbox/txbox/sender/nats"
	"github.com/txbox/txbox/sender/sendertest"
)

// embeddedServer starts a NATS server with JetStream in this process, for
// the tests that need a server setting the shared one does not have (a
// small max_payload) or that switch JetStream off.
func embeddedServer(t *testing.T, maxPayload int32) *natsserver.Server {
	t.Helper()
	ns, err := natsserver.NewServer(&natsserver.Options{
		Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: filepath.Join(t.TempDir(), "js"),
		MaxPayload: maxPayload, NoLog: true, NoSigs: true, DisableJetStreamBanner: true,
	})
	if err != nil {
		t.Fatalf("embedded NATS: %v", err)
	}
	go ns.Start()
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("embedded NATS did not start within 10s")
	}
	return ns
}

// embeddedOrders starts an embedded server (embeddedServer) with an
// ORDERS stream on orders.> and opens a sender on it.
func embeddedOrders(t *testing.T, maxPayload int32) (*natsserver.Server, *txnats.Sender) {
	t.Helper()
	ns := embeddedServer(t, maxPayload)
	js := natstest.JetStream(t, ns.ClientURL())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "ORDERS", Subjects: []string{"orders.>"}, Storage: jetstream.MemoryStorage}); err != nil {
		t.Fatal(err)
	}
	return ns, openSender(t, strings.TrimPrefix(ns.ClientURL(), "nats://"), txnats.Config{})
}

func TestDestinationIsTheSubject(t *testing.T) {
	t.Parallel()
	s := openSender(t, sendertest.ClosedAddr(t), txnats.Config{})
	a := sender.DestinationOf(s, sender.Route{Subject: "orders.created", Stream: "order-created", Topic: "x"})
	if a != "orders.created" {
		t.Fatalf("destination = %q, want the subject", a)
	}
	if sender.DestinationOf(s, sender.Route{Subject: "orders.paid"}) == a {
		t.Fatal("two subjects share a destination")
	}
}

// TestNotConnectedSaysWhy: a URL nothing answers on used to give only
// "nats: not connected", in Send errors and in the logs. Both must name
// the server (without its credentials) and the dial error, and the
// failure is marked as the connection's.
func TestNotConnectedSaysWhy(t *testing.T) {
	t.Parallel()
	addr := sendertest.ClosedAddr(t)
	var logs testenv.LogBuffer
	s, err := txnats.New(txnats.Config{
		URL:           "nats://txbox:s3cr3t-canary@" + addr,
		ReconnectWait: 50 * time.Millisecond,
		Logger:        slog.New(slog.NewTextHandler(&logs, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	closeOnCleanup(t, s)
	msgs := sendertest.NewMessages(3, sender.Route{Subject: "x.events"})
	var last error
	testenv.WaitFor(t, 10*time.Second, "a Send error with the dial error", func() bool {
		last = s.Send(context.Background(), msgs)
		return last != nil && strings.Contains(last.Error(), "connection refused")
	})
	for i, e := range sender.Results(last, len(msgs)) {
		if !errors.Is(e, txnats.ErrNotConnected) || txbox.Classify(e) != txbox.ClassTransient || !sender.IsDisconnected(e) {
			t.Fatalf("message %d: %v, want transient, Disconnected ErrNotConnected", i, e)
		}
		if !strings.Contains(e.Error(), "nats://"+addr) {
			t.Fatalf("message %d: %v does not name the server", i, e)
		}
	}
	testenv.WaitFor(t, 10*time.Second, "the dial error logged", func() bool {
		out := logs.String()
		return strings.Contains(out, "nats connect failed") && strings.Contains(out, addr) && strings.Contains(out, "connection refused")
	})
	out := logs.String()
	if strings.Contains(out, "s3cr3t-canary") || strings.Contains(last.Error(), "s3cr3t-canary") {
		t.Fatalf("the password leaks:\nerror %v\nlogs:\n%s", last, out)
	}
	// One line for the outage, not one per reconnect attempt (every
	// 50ms here).
	if n := strings.Count(out, "nats connect failed"); n > 3 {
		t.Fatalf("%d connect failures logged for one outage:\n%s", n, out)
	}
}

// heldLog is a log writer whose first line blocks until release is
// closed; entered is closed when that line starts.
type heldLog struct {
	entered, release chan struct{}
	once             sync.Once
}

func (l *heldLog) Write(p []byte) (int, error) {
	first := false
	l.once.Do(func() { first = true; close(l.entered) })
	if first {
		<-l.release
	}
	return len(p), nil
}

// TestCloseWaitsForConnectionCallbacks: a connection callback queued
// before Close (here a failed dial's log line, held in its writer) has
// run when Close returns, so the sender never writes to its log after
// Close: a caller may close the log's file next, and a test reads its
// buffer.
func TestCloseWaitsForConnectionCallbacks(t *testing.T) {
	t.Parallel()
	w := &heldLog{entered: make(chan struct{}), release: make(chan struct{})}
	s, err := txnats.New(txnats.Config{
		URL:           "nats://" + sendertest.ClosedAddr(t),
		ReconnectWait: 20 * time.Millisecond,
		Logger:        slog.New(slog.NewTextHandler(w, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-w.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("no dial failure logged within 10s")
	}
	closed := make(chan error, 1)
	go func() { closed <- s.Close(context.Background()) }()
	// While the line is held, Close must not return; given a second to
	// do so, a Close that does not wait returns in microseconds.
	returned := testenv.Within(time.Second, 5*time.Millisecond, func() bool { return len(closed) > 0 })
	close(w.release)
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	if returned {
		t.Fatal("Close returned while a connection log line was still being written")
	}
}

// TestUnboundSubjectOneLookupPerBatch: "no responders" is confirmed as a
// missing stream by one stream lookup for the whole batch, then each
// message is rejected (an attempt, not an outage).
func TestUnboundSubjectOneLookupPerBatch(t *testing.T) {
	t.Parallel()
	st := newStream(t)
	// Count the stream lookups by listening on the JetStream API subject
	// next to the server, on a connection of its own.
	mon, err := natsgo.Connect("nats://" + natsAddr(t))
	if err != nil {
		t.Fatal(err)
	}
	defer mon.Close()
	unbound := testenv.UniqueName("nostream_") + ".events"
	var lookups atomic.Int64
	sub, err := mon.Subscribe("$JS.API.STREAM.NAMES", func(m *natsgo.Msg) {
		if strings.Contains(string(m.Data), unbound) {
			lookups.Add(1)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := mon.Flush(); err != nil {
		t.Fatal(err)
	}

	s := openSender(t, natsAddr(t), txnats.Config{})
	msgs := sendertest.NewMessages(20, sender.Route{Subject: unbound})
	msgs[0].Route.Subject = st.subject()
	errs := send(t, s, msgs)
	if errs[0] != nil {
		t.Fatalf("message to the bound subject: %v", errs[0])
	}
	for i, err := range errs[1:] {
		if !errors.Is(err, txnats.ErrNoStream) || !errors.Is(err, jetstream.ErrNoStreamResponse) || txbox.Classify(err) != txbox.ClassRejected {
			t.Fatalf("message %d: %v, want rejected ErrNoStream", i+1, err)
		}
		if sender.IsDisconnected(err) {
			t.Fatalf("message %d: a missing stream marked as a lost connection: %v", i+1, err)
		}
	}
	if err := mon.Flush(); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 5*time.Second, "the lookup seen by the monitor", func() bool { return lookups.Load() >= 1 })
	if n := lookups.Load(); n != 1 {
		t.Fatalf("%d stream lookups for one batch of 19 messages to an unbound subject, want 1", n)
	}
}

// TestJetStreamDownIsTransient: JetStream stops answering (disabled,
// restarting, restoring) while the connection stays up. Publishes get "no
// responders", and the stream lookup gets no answer: an outage, not
// rejections that burn attempts.
func TestJetStreamDownIsTransient(t *testing.T) {
	t.Parallel()
	ns, s := embeddedOrders(t, 0)
	route := sender.Route{Subject: "orders.created"}
	if err := send(t, s, sendertest.NewMessages(1, route))[0]; err != nil {
		t.Fatalf("warm-up: %v", err)
	}
	if err := ns.DisableJetStream(); err != nil {
		t.Fatal(err)
	}
	errs := send(t, s, sendertest.NewMessages(5, route))
	for i, err := range errs {
		if !errors.Is(err, txnats.ErrStreamUnavailable) || txbox.Classify(err) != txbox.ClassTransient {
			t.Fatalf("message %d with JetStream down: %v, want transient ErrStreamUnavailable", i, err)
		}
		if sender.IsDisconnected(err) {
			t.Fatalf("message %d: the connection is up, yet marked Disconnected: %v", i, err)
		}
	}
	// (JetStream is not switched back on: nats-server v2.15's
	// EnableJetStream races with API requests in flight, which -race
	// reports. Recovery is the relay's probing, tested with the relay.)
}

// TestMaxPayloadIsTheServers: the limit is the one the server announced
// (here 4 KiB, not NATS's default 1 MiB), payload and headers counted
// together, and a message over it fails Permanent with the sizes.
func TestMaxPayloadIsTheServers(t *testing.T) {
	t.Parallel()
	_, s := embeddedOrders(t, 4096)
	msgs := sendertest.NewMessages(3, sender.Route{Subject: "orders.created"})
	msgs[0].Payload = make([]byte, 3000)
	msgs[1].Payload = make([]byte, 4000) // fits alone, not with its headers
	msgs[2].Payload = make([]byte, 4096)
	errs := send(t, s, msgs)
	if errs[0] != nil {
		t.Fatalf("3000-byte payload: %v", errs[0])
	}
	for _, i := range []int{1, 2} {
		err := errs[i]
		if !errors.Is(err, natsgo.ErrMaxPayload) || txbox.Classify(err) != txbox.ClassPermanent {
			t.Fatalf("message %d: %v, want permanent ErrMaxPayload", i, err)
		}
		if !strings.Contains(err.Error(), "max_payload is 4096 bytes") || !strings.Contains(err.Error(), "headers") {
			t.Fatalf("message %d: %v does not give the sizes", i, err)
		}
	}
}

// TestEventAtThePublishLimit: txbox accepts payloads up to 1 MiB by
// default, NATS's default max_payload is 1 MiB including headers. Such an
// event can never be published: it fails Permanent on its first try (so
// the relay dead-letters it at once), with the reason.
func TestEventAtThePublishLimit(t *testing.T) {
	t.Parallel()
	st := newStream(t)
	s := openSender(t, natsAddr(t), txnats.Config{})
	msgs := sendertest.NewMessages(2, sender.Route{Subject: st.subject()})
	msgs[1].Payload = make([]byte, txbox.DefaultMaxPayloadSize)
	errs := send(t, s, msgs)
	if errs[0] != nil {
		t.Fatalf("small message: %v", errs[0])
	}
	if txbox.Classify(errs[1]) != txbox.ClassPermanent || !strings.Contains(errs[1].Error(), "max_payload") {
		t.Fatalf("event at the publish limit: %v, want permanent with the server's max_payload", errs[1])
	}
}

package nats_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/internal/testenv"
	"github.com/txbox/txbox/sender"
	txnats "github.com/txbox/txbox/sender/nats"
	"github.com/txbox/txbox/sender/sendertest"
)

func send(t *testing.T, s sender.Sender, msgs []*sender.Message) []error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return sender.Results(s.Send(ctx, msgs), len(msgs))
}

// openSender is newSender, closed when t ends.
func openSender(t *testing.T, addr string, cfg txnats.Config) *txnats.Sender {
	t.Helper()
	s := newSender(t, addr, cfg)
	closeOnCleanup(t, s)
	return s
}

func closeOnCleanup(t *testing.T, s sender.Sender) {
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := s.Close(ctx); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
}

func TestConfigErrors(t *testing.T) {
	t.Parallel()
	for name, cfg := range map[string]txnats.Config{
		"url":             {},
		"ack-timeout":     {URL: "nats://127.0.0.1:1", AckTimeout: -1},
		"max-pending":     {URL: "nats://127.0.0.1:1", MaxPending: -1},
		"connect-timeout": {URL: "nats://127.0.0.1:1", ConnectTimeout: -time.Second},
		"reconnect-wait":  {URL: "nats://127.0.0.1:1", ReconnectWait: -time.Second},
	} {
		_, err := txnats.New(cfg)
		var ce *txnats.ConfigError
		if !errors.As(err, &ce) || ce.Field != name {
			t.Errorf("New(%+v) = %v, want a ConfigError for %s", cfg, err, name)
		}
	}
	_, err := txnats.NewFromConn(nil, txnats.Config{})
	var ce *txnats.ConfigError
	if !errors.As(err, &ce) || ce.Field != "conn" {
		t.Errorf("NewFromConn(nil) = %v, want a ConfigError for conn", err)
	}
}

func TestConnectErrorHidesCredentials(t *testing.T) {
	t.Parallel()
	_, err := txnats.New(txnats.Config{URL: "nats://user:s3cr3t-canary@[bad"})
	if err == nil {
		t.Fatal("New with a malformed URL succeeded")
	}
	if strings.Contains(err.Error(), "s3cr3t-canary") {
		t.Fatalf("error leaks the password: %v", err)
	}
}

func TestNotConnectedIsTransient(t *testing.T) {
	t.Parallel()
	s := openSender(t, sendertest.ClosedAddr(t), txnats.Config{})
	msgs := sendertest.NewMessages(3, sender.Route{Subject: "x.events"})
	for i, err := range send(t, s, msgs) {
		if !errors.Is(err, txnats.ErrNotConnected) || txbox.Classify(err) != txbox.ClassTransient {
			t.Fatalf("message %d: %v, want transient ErrNotConnected", i, err)
		}
	}
}

// TestPerMessageFailures puts every kind of per-message failure in one
// batch and checks each is classified on its own while the good messages
// are stored.
func TestPerMessageFailures(t *testing.T) {
	t.Parallel()
	st := newStream(t)
	s := openSender(t, natsAddr(t), txnats.Config{})
	msgs := sendertest.NewMessages(6, sender.Route{Subject: st.subject()})
	msgs[1].Route.Subject = "nostream_" + st.name + ".events"
	msgs[2].Route.Subject = ""
	msgs[3].Headers["Nats-Rollup"] = "all"
	msgs[4].Headers["bad name"] = "x"
	errs := send(t, s, msgs)
	want := []struct {
		class txbox.ErrorClass
		is    error
	}{
		{},
		{txbox.ClassRejected, txnats.ErrNoStream},
		{txbox.ClassPermanent, nil},
		{txbox.ClassPermanent, nil},
		{txbox.ClassPermanent, nil},
		{},
	}
	for i, w := range want {
		err := errs[i]
		if i == 0 || i == 5 {
			if err != nil {
				t.Fatalf("message %d failed with its neighbours: %v", i, err)
			}
			continue
		}
		if err == nil {
			t.Fatalf("message %d acked, want a %v error", i, w.class)
		}
		if c := txbox.Classify(err); c != w.class {
			t.Fatalf("message %d classified %v, want %v: %v", i, c, w.class, err)
		}
		if w.is != nil && !errors.Is(err, w.is) {
			t.Fatalf("message %d: %v, want errors.Is %v", i, err, w.is)
		}
		var me *txnats.MessageError
		if w.class == txbox.ClassPermanent && !errors.As(err, &me) {
			t.Fatalf("message %d: %v, want a *MessageError", i, err)
		}
	}
	if !errors.Is(errs[1], jetstream.ErrNoStreamResponse) {
		t.Fatalf("no-stream error does not match jetstream.ErrNoStreamResponse: %v", errs[1])
	}
	got := st.received(t)
	if len(got) != 2 {
		t.Fatalf("stream holds %d messages, want the 2 good ones", len(got))
	}
}

func TestStreamMaxMsgSizeIsPermanent(t *testing.T) {
	t.Parallel()
	st := newStream(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// A stream limit the message breaks: JetStream answers with an API
	// error. The message can never fit: Permanent, on the first try.
	if _, err := st.js.UpdateStream(ctx, jetstream.StreamConfig{
		Name: st.name, Subjects: []string{st.name + ".>"}, Storage: jetstream.MemoryStorage,
		MaxMsgSize: 512,
	}); err != nil {
		t.Fatalf("update stream: %v", err)
	}
	s := openSender(t, natsAddr(t), txnats.Config{})
	msgs := sendertest.NewMessages(2, sender.Route{Subject: st.subject()})
	msgs[1].Payload = make([]byte, 2048)
	errs := send(t, s, msgs)
	if errs[0] != nil {
		t.Fatalf("small message: %v", errs[0])
	}
	var apiErr *jetstream.APIError
	if !errors.As(errs[1], &apiErr) || apiErr.ErrorCode != jetstream.JSErrCodeStreamMessageExceedsMaximum || txbox.Classify(errs[1]) != txbox.ClassPermanent {
		t.Fatalf("oversized message: %v, want a permanent *jetstream.APIError 10054", errs[1])
	}
}

func TestOverServerMaxPayloadIsPermanent(t *testing.T) {
	t.Parallel()
	st := newStream(t)
	s := openSender(t, natsAddr(t), txnats.Config{})
	msgs := sendertest.NewMessages(1, sender.Route{Subject: st.subject()})
	msgs[0].Payload = make([]byte, 64<<20) // beyond any max_payload NATS allows
	errs := send(t, s, msgs)
	if !errors.Is(errs[0], natsgo.ErrMaxPayload) || txbox.Classify(errs[0]) != txbox.ClassPermanent {
		t.Fatalf("64 MiB message: %v, want permanent ErrMaxPayload", errs[0])
	}
}

// TestBatchLargerThanMaxPending checks a batch larger than the in-flight
// cap is published as acks free room, not failed.
func TestBatchLargerThanMaxPending(t *testing.T) {
	t.Parallel()
	st := newStream(t)
	s := openSender(t, natsAddr(t), txnats.Config{MaxPending: 8})
	msgs := sendertest.NewMessages(300, sender.Route{Subject: st.subject()})
	for i, err := range send(t, s, msgs) {
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
	}
	if got := len(st.received(t)); got != len(msgs) {
		t.Fatalf("stream holds %d messages, want %d", got, len(msgs))
	}
}

func TestAckTimeoutIsTransient(t *testing.T) {
	t.Parallel()
	st := newStream(t)
	p := sendertest.NewProxy(t, natsAddr(t))
	s := openSender(t, p.Addr(), txnats.Config{AckTimeout: 200 * time.Millisecond})
	route := sender.Route{Subject: st.subject()}
	if err := send(t, s, sendertest.NewMessages(1, route))[0]; err != nil {
		t.Fatalf("warm-up: %v", err)
	}
	p.SetLatency(t, 3*time.Second)
	start := time.Now()
	errs := send(t, s, sendertest.NewMessages(5, route))
	took := time.Since(start)
	for i, err := range errs {
		if !errors.Is(err, jetstream.ErrAsyncPublishTimeout) || txbox.Classify(err) != txbox.ClassTransient {
			t.Fatalf("message %d: %v, want transient ErrAsyncPublishTimeout", i, err)
		}
	}
	if took > 2*time.Second {
		t.Fatalf("Send took %v with a 200ms ack timeout", took)
	}
	p.SetLatency(t, 0)
}

func TestNewFromConnLeavesConnOpen(t *testing.T) {
	t.Parallel()
	st := newStream(t)
	nc, err := natsgo.Connect("nats://" + natsAddr(t))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	s, err := txnats.NewFromConn(nc, txnats.Config{})
	if err != nil {
		t.Fatal(err)
	}
	msgs := sendertest.NewMessages(3, sender.Route{Subject: st.subject()})
	for i, err := range send(t, s, msgs) {
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
	}
	if err := s.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if nc.IsClosed() {
		t.Fatal("Close closed a connection the caller owns")
	}
	err = s.Send(context.Background(), msgs)
	if !errors.Is(err, txbox.ErrClosed) || txbox.Classify(err) != txbox.ClassTransient {
		t.Fatalf("Send after Close = %v, want transient ErrClosed", err)
	}
}

// TestHeadersKeepTheirCase checks NATS, whose header names are case
// sensitive, gets them exactly as the event had them.
func TestHeadersKeepTheirCase(t *testing.T) {
	t.Parallel()
	st := newStream(t)
	s := openSender(t, natsAddr(t), txnats.Config{})
	msgs := sendertest.NewMessages(1, sender.Route{Subject: st.subject()})
	msgs[0].Headers["X-MixedCase"] = "v"
	msgs[0].Key = ""
	if err := send(t, s, msgs)[0]; err != nil {
		t.Fatal(err)
	}
	got := st.received(t)
	if len(got) != 1 {
		t.Fatalf("got %d messages", len(got))
	}
	if got[0].Headers["X-MixedCase"] != "v" {
		t.Fatalf("headers %v lack X-MixedCase exactly", got[0].Headers)
	}
	if _, ok := got[0].Headers[sender.HeaderKey]; ok {
		t.Fatalf("%s set for an event without a key", sender.HeaderKey)
	}
	if got[0].ID != msgs[0].ID.String() {
		t.Fatalf("%s = %q, want %s", txnats.HeaderMsgID, got[0].ID, msgs[0].ID)
	}
}

// TestRoutesOfOneEventAreNotDuplicates: two routes of one fanned-out
// event (docs/concepts.md, "Fan-out") to two subjects of one stream carry
// the same event id and different delivery ids; JetStream keeps both,
// since Nats-Msg-Id is the delivery id, and both carry txbox-event-id.
func TestRoutesOfOneEventAreNotDuplicates(t *testing.T) {
	t.Parallel()
	st := newStream(t)
	s := openSender(t, natsAddr(t), txnats.Config{})
	msgs := sendertest.NewMessages(2, sender.Route{Subject: st.subject()})
	msgs[1].ID = msgs[0].ID
	msgs[1].DeliveryID = txbox.NewID()
	for i, err := range send(t, s, msgs) {
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
	}
	got := st.received(t)
	if len(got) != 2 {
		t.Fatalf("the stream kept %d of the two routes' messages", len(got))
	}
	if got[0].ID != msgs[0].ID.String() || got[1].ID != msgs[1].DeliveryID.String() {
		t.Errorf("%s = %q, %q; want the event id, then the second route's delivery id", txnats.HeaderMsgID, got[0].ID, got[1].ID)
	}
	for _, m := range got {
		if m.Headers[txbox.HeaderEventID] != msgs[0].ID.String() {
			t.Errorf("txbox-event-id = %q, want the event id %s on both", m.Headers[txbox.HeaderEventID], msgs[0].ID)
		}
	}
}

// TestConnectionLogsHideCredentials drives a connection through a drop and
// a reconnect with a password in the URL, and checks the logs report both
// without the password.
func TestConnectionLogsHideCredentials(t *testing.T) {
	t.Parallel()
	st := newStream(t)
	p := sendertest.NewProxy(t, natsAddr(t))
	var logs testenv.LogBuffer
	s, err := txnats.New(txnats.Config{
		URL:           "nats://txbox:s3cr3t-canary@" + p.Addr(),
		ReconnectWait: 50 * time.Millisecond,
		Logger:        slog.New(slog.NewTextHandler(&logs, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	closeOnCleanup(t, s)
	route := sender.Route{Subject: st.subject()}
	waitAcked := func() {
		t.Helper()
		testenv.WaitForEvery(t, 30*time.Second, 50*time.Millisecond, "a successful send", func() bool {
			return send(t, s, sendertest.NewMessages(1, route))[0] == nil
		})
	}
	waitAcked()
	p.Down(t)
	p.Up(t)
	waitAcked()
	reconnected := false
	defer func() {
		// Runs also when WaitFor fails the test: show what was logged.
		if !reconnected {
			t.Logf("no reconnect logged; logs:\n%s", logs.String())
		}
	}()
	testenv.WaitForEvery(t, 10*time.Second, 20*time.Millisecond, "a reconnect to be logged", func() bool {
		return strings.Contains(logs.String(), "nats reconnected")
	})
	reconnected = true
	out := logs.String()
	if !strings.Contains(out, "nats disconnected") {
		t.Errorf("no disconnect logged; logs:\n%s", out)
	}
	if strings.Contains(out, "s3cr3t-canary") {
		t.Fatalf("logs leak the password:\n%s", out)
	}
}

func TestNilMessageIsPermanent(t *testing.T) {
	t.Parallel()
	st := newStream(t)
	s := openSender(t, natsAddr(t), txnats.Config{})
	msgs := sendertest.NewMessages(2, sender.Route{Subject: st.subject()})
	msgs[0] = nil
	errs := send(t, s, msgs)
	var me *txnats.MessageError
	if !errors.As(errs[0], &me) || txbox.Classify(errs[0]) != txbox.ClassPermanent {
		t.Fatalf("nil message: %v, want a permanent *MessageError", errs[0])
	}
	if errs[1] != nil {
		t.Fatalf("the other message: %v", errs[1])
	}
}

// TestStreamFullIsTransient: a stream at its limits with DiscardNew
// answers 503; that is the destination out of room, not the message's
// fault, so no attempt is burned.
func TestStreamFullIsTransient(t *testing.T) {
	t.Parallel()
	st := newStream(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := st.js.UpdateStream(ctx, jetstream.StreamConfig{
		Name: st.name, Subjects: []string{st.name + ".>"}, Storage: jetstream.MemoryStorage,
		MaxMsgs: 1, Discard: jetstream.DiscardNew,
	}); err != nil {
		t.Fatalf("update stream: %v", err)
	}
	s := openSender(t, natsAddr(t), txnats.Config{})
	errs := send(t, s, sendertest.NewMessages(2, sender.Route{Subject: st.subject()}))
	if errs[0] != nil {
		t.Fatalf("first message: %v", errs[0])
	}
	var apiErr *jetstream.APIError
	if !errors.As(errs[1], &apiErr) || apiErr.Code != 503 || txbox.Classify(errs[1]) != txbox.ClassTransient {
		t.Fatalf("message beyond the stream's limit: %v, want a transient 503 *jetstream.APIError", errs[1])
	}
}

// TestCancelWhileAtMaxPending: with MaxPending messages awaiting acks that
// the latency holds back, a batch larger than MaxPending is blocked
// publishing; cancelling its context must still return promptly.
func TestCancelWhileAtMaxPending(t *testing.T) {
	t.Parallel()
	st := newStream(t)
	p := sendertest.NewProxy(t, natsAddr(t))
	s := openSender(t, p.Addr(), txnats.Config{MaxPending: 8, AckTimeout: 20 * time.Second})
	route := sender.Route{Subject: st.subject()}
	if err := send(t, s, sendertest.NewMessages(1, route))[0]; err != nil {
		t.Fatalf("warm-up: %v", err)
	}
	p.SetLatency(t, 5*time.Second)
	msgs := sendertest.NewMessages(50, route)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Send(ctx, msgs) }()
	// Wait until the first 8 reached the server: the sender is now at
	// MaxPending, blocked on the ninth.
	testenv.WaitForEvery(t, 30*time.Second, 10*time.Millisecond, "the first 8 messages to reach the server", func() bool {
		return len(st.received(t)) >= 1+8
	})
	cancel()
	cancelled := time.Now()
	var err error
	select {
	case err = <-done:
	case <-time.After(4 * time.Second):
		t.Fatal("Send blocked at MaxPending did not return within 4s of its context being cancelled")
	}
	if took := time.Since(cancelled); took > 2*time.Second {
		t.Fatalf("Send returned %v after cancel, want promptly", took)
	}
	for i, e := range sender.Results(err, len(msgs)) {
		if txbox.Classify(e) != txbox.ClassTransient || e == nil {
			t.Fatalf("message %d: %v, want transient", i, e)
		}
	}
	p.SetLatency(t, 0)
}

package nats_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/consume"
	cnats "github.com/txbox/txbox/consume/nats"
	"github.com/txbox/txbox/internal/consumetest"
	"github.com/txbox/txbox/internal/natstest"
	"github.com/txbox/txbox/internal/testenv"
)

// stream creates a unique stream and durable consumer on the local NATS,
// deleted when the test ends.
func stream(t testing.TB) (jetstream.JetStream, string, jetstream.Consumer) {
	t.Helper()
	js := natstest.JetStream(t, testenv.NATSURL)
	name := testenv.UniqueName("TXBOXINBOX_")
	subject := name + ".events"
	ctx := context.Background()
	s, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{subject}, Storage: jetstream.MemoryStorage})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = js.DeleteStream(context.Background(), name) })
	cons, err := s.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{Durable: "inbox", AckPolicy: jetstream.AckExplicitPolicy, AckWait: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return js, subject, cons
}

func publish(t testing.TB, js jetstream.JetStream, subject string, id txbox.ID, asMsgID bool) {
	t.Helper()
	m := natsgo.NewMsg(subject)
	m.Data = []byte(`{"n":1}`)
	m.Header.Set(txbox.HeaderEventType, "order-created")
	if asMsgID {
		m.Header.Set(jetstream.MsgIDHeader, id.String())
	} else {
		m.Header.Set(txbox.HeaderEventID, id.String())
	}
	if _, err := js.PublishMsg(context.Background(), m); err != nil {
		t.Fatal(err)
	}
}

// TestAckAfterHandler: duplicates (published without Nats-Msg-Id, so
// JetStream does not drop them) have no second effect, a failing handler
// is naked and redelivered until it succeeds, a message without id is
// terminated, and nothing stays pending or unacked.
func TestAckAfterHandler(t *testing.T) {
	t.Parallel()
	js, subject, jc := stream(t)
	env := consumetest.New(t, "nats-test")
	const n = 200
	ids := make([]txbox.ID, n)
	for i := range ids {
		ids[i] = txbox.NewID()
		publish(t, js, subject, ids[i], i%2 == 1)
	}
	for i := 0; i < n; i += 10 {
		publish(t, js, subject, ids[i], false)
	}
	if _, err := js.Publish(context.Background(), subject, []byte("no id")); err != nil {
		t.Fatal(err)
	}
	env.FailFirst(ids[5], 2)
	poison := txbox.NewID()
	env.Poison(poison)
	publish(t, js, subject, poison, false)
	cons, err := cnats.New(jc, cnats.Config{Inbox: env.Inbox, Handler: env.Handler, Backoff: consume.Backoff{Min: 5 * time.Millisecond, Max: 20 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	_, cancel, done := consumetest.Run(cons.Run)
	env.WaitEffects(t, ids, 60*time.Second)
	var info *jetstream.ConsumerInfo
	settled := false
	defer func() {
		// Runs also when WaitFor fails the test.
		if !settled && info != nil {
			t.Errorf("consumer still has %d pending, %d unacked, %d redelivered", info.NumPending, info.NumAckPending, info.NumRedelivered)
		}
	}()
	testenv.WaitForEvery(t, 30*time.Second, 10*time.Millisecond, "the consumer to have nothing pending, unacked or redelivered", func() bool {
		var err error
		if info, err = jc.Info(context.Background()); err != nil {
			t.Fatal(err)
		}
		return info.NumPending == 0 && info.NumAckPending == 0 && info.NumRedelivered == 0
	})
	settled = true
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run = %v", err)
	}
	env.CheckExactlyOnce(t, ids)
	// The handler sees the broker's delivery metadata: the failing event
	// was delivered three times, each with its JetStream sequences.
	ds := env.Deliveries(ids[5])
	if len(ds) != 3 {
		t.Fatalf("deliveries of the failing event = %+v, want 3", ds)
	}
	for i, d := range ds {
		if d.Broker != "nats" || d.Source != strings.TrimSuffix(subject, ".events") || d.Count != i+1 || d.Redelivered != (i > 0) || d.StreamSeq != 6 || d.ConsumerSeq == 0 {
			t.Errorf("delivery %d = %+v; want count %d of stream sequence 6", i+1, d, i+1)
		}
	}
	if got := env.Calls(); got != n+3 {
		t.Errorf("handler calls = %d, want %d (the poison event once)", got, n+3)
	}
}

func TestConfigErrors(t *testing.T) {
	t.Parallel()
	_, _, jc := stream(t)
	env := consumetest.New(t, "nats-cfg")
	if _, err := cnats.New(nil, cnats.Config{Inbox: env.Inbox, Handler: env.Handler}); err == nil {
		t.Error("nil consumer accepted")
	}
	if _, err := cnats.New(jc, cnats.Config{Inbox: env.Inbox}); err == nil {
		t.Error("missing handler accepted")
	}
	if _, err := cnats.New(jc, cnats.Config{Inbox: env.Inbox, Handler: env.Handler, Backoff: consume.Backoff{Min: -1}}); err == nil {
		t.Error("negative backoff accepted")
	}
	for _, tc := range []struct {
		field string
		cfg   cnats.Config
	}{
		{"Concurrency", cnats.Config{Concurrency: -1}},
		{"PullMaxMessages", cnats.Config{PullMaxMessages: -1}},
		{"PullMaxBytes", cnats.Config{PullMaxBytes: -1}},
		{"PullMaxMessages, PullMaxBytes", cnats.Config{PullMaxMessages: 10, PullMaxBytes: 1 << 20}},
		{"PullExpiry", cnats.Config{PullExpiry: 500 * time.Millisecond}},
		{"ProgressInterval", cnats.Config{ProgressInterval: -time.Second}},
		{"DrainTimeout", cnats.Config{DrainTimeout: -time.Second}},
	} {
		tc.cfg.Inbox, tc.cfg.Handler = env.Inbox, env.Handler
		var ce *consume.ConfigError
		if _, err := cnats.New(jc, tc.cfg); !errors.As(err, &ce) || ce.Field != tc.field {
			t.Errorf("%+v: err = %v; want a *consume.ConfigError for %s", tc.cfg, err, tc.field)
		}
	}
}

package nats

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/internal/testenv"
	"github.com/txbox/txbox/sender"
)

// TestNoRespondersFromAnExistingStream: "no responders" for a subject a
// stream binds means the stream has no leader at the moment (an election
// in a cluster, a restore), which a single test server cannot produce on
// demand; the answer is fed to classify directly, the stream lookup goes
// to the real server. It must be an outage of that subject (Transient,
// no attempt burned), not a rejection and not a lost connection.
func TestNoRespondersFromAnExistingStream(t *testing.T) {
	t.Parallel()
	nc, err := natsgo.Connect(testenv.NATSURL)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	name := testenv.UniqueName("sendertest_")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{name + ".>"}, Storage: jetstream.MemoryStorage}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = js.DeleteStream(context.Background(), name) })
	s, err := NewFromConn(nc, Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close(context.Background()) })

	err = s.classify(ctx, jetstream.ErrNoStreamResponse, name+".events")
	if !errors.Is(err, ErrStreamUnavailable) || txbox.Classify(err) != txbox.ClassTransient || sender.IsDisconnected(err) {
		t.Fatalf("no responders from stream %s: %v, want transient ErrStreamUnavailable, not Disconnected", name, err)
	}
	err = s.classify(ctx, jetstream.ErrNoStreamResponse, "nostream_"+name+".events")
	if !errors.Is(err, ErrNoStream) || txbox.Classify(err) != txbox.ClassRejected {
		t.Fatalf("no responders, no stream: %v, want rejected ErrNoStream", err)
	}
	for _, e := range []error{natsgo.ErrConnectionClosed, natsgo.ErrDisconnected, natsgo.ErrReconnectBufExceeded, natsgo.ErrConnectionReconnecting} {
		if err := s.classify(ctx, e, "a.b"); !sender.IsDisconnected(err) || txbox.Classify(err) != txbox.ClassTransient {
			t.Errorf("classify(%v) = %v, want transient and Disconnected", e, err)
		}
	}
	for _, e := range []error{jetstream.ErrAsyncPublishTimeout, jetstream.ErrJetStreamNotEnabled} {
		if err := s.classify(ctx, e, "a.b"); sender.IsDisconnected(err) || txbox.Classify(err) != txbox.ClassTransient {
			t.Errorf("classify(%v) = %v, want transient, not Disconnected", e, err)
		}
	}
}

func TestBindableAndCovers(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"events.{event_type}":         "events.>",
		"a.b.{event_type}":            "a.b.>",
		"orders.created":              "orders.created",
		"{event_type}":                "",
		"x{event_type}":               "",
		"events.{event_type}.1":       "",
		"a.{event_type}.{event_type}": "",
	} {
		got, ok := bindable(in)
		if ok != (want != "") || got != want {
			t.Errorf("bindable(%q) = %q, %v; want %q", in, got, ok, want)
		}
	}
	for _, c := range []struct {
		a, b string
		want bool
	}{
		{"a.>", "a.b", true}, {"a.>", "a.b.c", true}, {"a.>", "a", false}, {"a.*", "a.b", true},
		{"a.*", "a.b.c", false}, {"a.*", "a.>", false}, {"a.b", "a.b", true}, {"a.b", "a.c", false},
		{">", "a", true}, {"a.>", "a.*", true}, {"a.b", "a.*", false},
	} {
		if got := covers(c.a, c.b); got != c.want {
			t.Errorf("covers(%q, %q) = %v, want %v", c.a, c.b, got, c.want)
		}
	}
	got := cover([]string{"a.b", "a.>", "c", "a.b", "d.*", "d.x"})
	if want := []string{"a.>", "c", "d.*"}; !equal(got, want) {
		t.Errorf("cover = %q, want %q", got, want)
	}
}

func equal(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// FuzzHeaderBound: the header bound buildMsg returns is never below the
// header block nats.go writes, so checkSize's shortcut never lets an
// oversized message through.
func FuzzHeaderBound(f *testing.F) {
	f.Add("X-Tenant", "acme", "", "k")
	f.Add(txbox.HeaderEventID, "short", sender.HeaderKey, "")
	f.Add(sender.HeaderKey, "x", "a", "  padded\t")
	f.Fuzz(func(t *testing.T, k1, v1, k2, key string) {
		m := &sender.Message{ID: txbox.NewID(), EventType: "fuzz", Payload: []byte("x"), Key: key,
			Headers: map[string]string{k1: v1, k2: v1 + v1}, Route: sender.Route{Subject: "s"}}
		nm, bound, err := buildMsg(m)
		if err != nil {
			return
		}
		exact := nm.Size() - len(nm.Subject) - len(nm.Data)
		if bound < exact {
			t.Fatalf("bound %d below the header block's %d bytes for %v", bound, exact, nm.Header)
		}
	})
}

package nats_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/txbox/txbox/internal/natstest"
	"github.com/txbox/txbox/internal/testenv"
	"github.com/txbox/txbox/sender"
	txnats "github.com/txbox/txbox/sender/nats"
	"github.com/txbox/txbox/sender/sendertest"
)

// provisionFixture is a unique stream name and subject prefix on the
// shared server, both removed when the test ends.
func provisionFixture(t *testing.T) (js jetstream.JetStream, stream, prefix string) {
	t.Helper()
	js = natstest.JetStream(t, "nats://"+natsAddr(t))
	stream = testenv.UniqueName("prov_")
	prefix = testenv.UniqueName("p") + "."
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for name := range js.StreamNames(ctx).Name() {
			if strings.HasPrefix(name, stream) {
				_ = js.DeleteStream(ctx, name)
			}
		}
	})
	return js, stream, prefix
}

func streamSubjects(t *testing.T, js jetstream.JetStream, name string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := js.Stream(ctx, name)
	if err != nil {
		t.Fatalf("stream %s: %v", name, err)
	}
	subs := slices.Clone(st.CachedInfo().Config.Subjects)
	slices.Sort(subs)
	return subs
}

// TestProvisionCreatesStream: following the quickstart (a subject
// template and a listed type) with provisioning on, the stream is created
// from the routes' subjects and events are stored instead of rejected.
func TestProvisionCreatesStream(t *testing.T) {
	t.Parallel()
	js, stream, prefix := provisionFixture(t)
	s := openSender(t, natsAddr(t), txnats.Config{ProvisionStream: stream})
	routes := []sender.Route{
		{Subject: prefix + "events.{event_type}"}, // the defaults route
		{Subject: prefix + "events.order-created"},
		{Subject: prefix + "audit"},
		{Subject: "{event_type}"}, // cannot be bound: skipped
		{Topic: "not-nats"},
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.Provision(ctx, routes); err != nil {
		t.Fatalf("Provision: %v", err)
	}
	if got, want := streamSubjects(t, js, stream), []string{prefix + "audit", prefix + "events.>"}; !slices.Equal(got, want) {
		t.Fatalf("stream subjects = %q, want %q", got, want)
	}
	msgs := sendertest.NewMessages(2, sender.Route{Subject: prefix + "events.order.shipped"})
	msgs[1].Route.Subject = prefix + "audit"
	for i, err := range send(t, s, msgs) {
		if err != nil {
			t.Fatalf("message %d after provisioning: %v", i, err)
		}
	}
	// Idempotent: a second start changes nothing.
	if err := s.Provision(ctx, routes); err != nil {
		t.Fatalf("second Provision: %v", err)
	}
	if got := streamSubjects(t, js, stream); len(got) != 2 {
		t.Fatalf("stream subjects after a second Provision = %q", got)
	}
}

// TestProvisionExtendsStream: an existing stream gains the subjects it
// lacks; its other settings and subjects stay as the operator set them.
func TestProvisionExtendsStream(t *testing.T) {
	t.Parallel()
	js, stream, prefix := provisionFixture(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: stream, Subjects: []string{prefix + "old"}, Storage: jetstream.MemoryStorage, MaxMsgs: 1000}); err != nil {
		t.Fatal(err)
	}
	s := openSender(t, natsAddr(t), txnats.Config{ProvisionStream: stream})
	if err := s.Provision(ctx, []sender.Route{{Subject: prefix + "new"}, {Subject: prefix + "old"}}); err != nil {
		t.Fatalf("Provision: %v", err)
	}
	if got, want := streamSubjects(t, js, stream), []string{prefix + "new", prefix + "old"}; !slices.Equal(got, want) {
		t.Fatalf("stream subjects = %q, want %q", got, want)
	}
	st, err := js.Stream(ctx, stream)
	if err != nil {
		t.Fatal(err)
	}
	if cfg := st.CachedInfo().Config; cfg.MaxMsgs != 1000 || cfg.Storage != jetstream.MemoryStorage {
		t.Fatalf("Provision changed the stream's settings: max-msgs %d, storage %v", cfg.MaxMsgs, cfg.Storage)
	}
}

// TestProvisionLeavesOtherStreams: a subject another stream binds stays
// there; a subject that only partly overlaps another stream is an error
// naming it, not a silent half-binding.
func TestProvisionLeavesOtherStreams(t *testing.T) {
	t.Parallel()
	js, stream, prefix := provisionFixture(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	other := stream + "_other"
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: other, Subjects: []string{prefix + "theirs.>"}, Storage: jetstream.MemoryStorage}); err != nil {
		t.Fatal(err)
	}
	s := openSender(t, natsAddr(t), txnats.Config{ProvisionStream: stream})
	if err := s.Provision(ctx, []sender.Route{{Subject: prefix + "theirs.a"}}); err != nil {
		t.Fatalf("Provision of a subject another stream binds: %v", err)
	}
	if _, err := js.Stream(ctx, stream); !errors.Is(err, jetstream.ErrStreamNotFound) {
		t.Fatalf("a stream was created although another one binds the subject: %v", err)
	}
	err := s.Provision(ctx, []sender.Route{{Subject: prefix + "{event_type}"}})
	if err == nil || !strings.Contains(err.Error(), other) {
		t.Fatalf("Provision of %s> overlapping stream %s = %v, want an error naming it", prefix, other, err)
	}
}

func TestProvisionNothingToBind(t *testing.T) {
	t.Parallel()
	s := openSender(t, natsAddr(t), txnats.Config{ProvisionStream: testenv.UniqueName("prov_")})
	err := s.Provision(context.Background(), []sender.Route{{Subject: "{event_type}"}, {Topic: "t"}})
	if err == nil || !strings.Contains(err.Error(), "no route gives a subject") {
		t.Fatalf("Provision without a bindable subject = %v", err)
	}
}

// TestProvisionWaitsForTheConnection: the relay provisions right after
// New, while the connection may still be coming up; a server that never
// answers ends in an error naming it.
func TestProvisionUnreachable(t *testing.T) {
	t.Parallel()
	s := openSender(t, sendertest.ClosedAddr(t), txnats.Config{ProvisionStream: testenv.UniqueName("prov_")})
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	err := s.Provision(ctx, []sender.Route{{Subject: "a.b"}})
	if !errors.Is(err, txnats.ErrNotConnected) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Provision with the server down = %v, want ErrNotConnected after the deadline", err)
	}
}

func TestProvisionStreamNameChecked(t *testing.T) {
	t.Parallel()
	_, err := txnats.New(txnats.Config{URL: "nats://127.0.0.1:1", ProvisionStream: "a.b"})
	var ce *txnats.ConfigError
	if !errors.As(err, &ce) || ce.Field != "provision-stream" {
		t.Fatalf("New with stream name a.b = %v, want a ConfigError for provision-stream", err)
	}
}

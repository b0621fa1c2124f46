package nats_test

import (
	"context"
	"errors"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/txbox/txbox"
	cnats "github.com/txbox/txbox/consume/nats"
	"github.com/txbox/txbox/inbox"
	"github.com/txbox/txbox/internal/consumetest"
	"github.com/txbox/txbox/internal/testenv"
	"github.com/txbox/txbox/sender"
	natssender "github.com/txbox/txbox/sender/nats"
)

// TestTenants: relays of tenants acme and globex (each its own PostgreSQL
// schema) and one without tenants deliver to one stream; one consumer with
// Config.Tenants (the default inbox in a third schema) puts each event in
// the inbox and effect table of its tenant, and the untenanted ones in
// the default's. The same event id under both tenants is processed once
// in each; a message of a tenant without an inbox is terminated and
// processed nowhere.
func TestTenants(t *testing.T) {
	t.Parallel()
	js, subject, jc := stream(t)
	pipes := map[string]*consumetest.Pipeline{
		"acme":   consumetest.NewPipeline(t, "billing"),
		"globex": consumetest.NewPipeline(t, "billing"),
		"":       consumetest.NewPipeline(t, "billing"),
	}
	tenants := &inbox.Tenants{Default: pipes[""].Inbox}
	for _, name := range []string{"acme", "globex"} {
		if err := tenants.Add(name, pipes[name].Inbox); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := cnats.New(jc, cnats.Config{Inbox: pipes[""].Inbox, Tenants: tenants, Handler: pipes[""].Handler}); !errors.Is(err, txbox.ErrInvalidConfig) {
		t.Fatalf("Inbox and Tenants both set: %v, want a ConfigError", err)
	}
	handler := func(ctx context.Context, tx any, m inbox.Message) error {
		return pipes[m.Tenant()].Handler(ctx, tx, m)
	}
	cons, err := cnats.New(jc, cnats.Config{Tenants: tenants, Handler: handler, Concurrency: 4})
	if err != nil {
		t.Fatal(err)
	}
	stop := run(t, cons)
	snd, err := natssender.New(natssender.Config{URL: testenv.NATSURL, AckTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = snd.Close(context.Background()) })
	for tenant, p := range pipes {
		p.Publish(t, "order-created", 20, 5, 0)
		p.StartTenantRelay(t, tenant, snd, sender.Route{Subject: subject}, 10*time.Second)
	}
	for _, p := range pipes {
		p.WaitDelivered(t, time.Minute)
	}

	shared, stray := txbox.NewID(), txbox.NewID()
	for _, tenant := range []string{"acme", "globex", "acme", "globex"} {
		publishTenant(t, js, subject, shared, tenant)
	}
	publishTenant(t, js, subject, stray, "initech")
	settled(t, jc)
	stop()
	for tenant, p := range pipes {
		want := map[string]int{"acme": 1, "globex": 1, "": 0}[tenant]
		if got := p.Effects(t)[shared]; got != want {
			t.Errorf("tenant %q: %d effects of the shared id, want %d", tenant, got, want)
		}
		if got := p.Effects(t)[stray]; got != 0 {
			t.Errorf("tenant %q: the unknown tenant's event had %d effects", tenant, got)
		}
		// The inbox that ran each event is the tenant's own: its hook
		// counts the pipeline's 100 events, plus the shared id (once
		// processed, once a duplicate) for acme and globex.
		r := p.Results()
		if r[inbox.Processed] != 100+want || r[inbox.Duplicate] != want || r[inbox.Failed] != 0 {
			t.Errorf("tenant %q: inbox results %v, want %d processed, %d duplicate", tenant, r, 100+want, want)
		}
	}
	info, err := jc.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if info.NumRedelivered != 0 {
		t.Errorf("%d redelivered messages: the unknown tenant's message should be terminated, not nak'ed", info.NumRedelivered)
	}
}

// publishTenant publishes an event of id with the txbox-tenant header,
// as a tenant's relay sends it.
func publishTenant(t *testing.T, js jetstream.JetStream, subject string, id txbox.ID, tenant string) {
	t.Helper()
	m := natsgo.NewMsg(subject)
	m.Data = []byte(`{"n":1}`)
	m.Header.Set(txbox.HeaderEventID, id.String())
	m.Header.Set(txbox.HeaderTenant, tenant)
	if _, err := js.PublishMsg(context.Background(), m); err != nil {
		t.Fatal(err)
	}
}

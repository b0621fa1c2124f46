package rabbitmq_test

import (
	"context"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/consume/rabbitmq"
	"github.com/txbox/txbox/inbox"
	"github.com/txbox/txbox/internal/consumetest"
	"github.com/txbox/txbox/internal/testenv"
)

// TestTenants: with Config.Tenants each delivery runs in the inbox of its
// txbox-tenant header, the same id once per tenant; a delivery of an
// unknown tenant is rejected (to the queue's dead-letter exchange, if
// any) like one without an id, and runs nowhere.
func TestTenants(t *testing.T) {
	t.Parallel()
	conn := dial(t)
	q := queue(t, conn)
	pub := channel(t, conn)
	envs := map[string]*consumetest.Env{"acme": consumetest.New(t, "billing"), "globex": consumetest.New(t, "billing")}
	var tenants inbox.Tenants
	for name, env := range envs {
		if err := tenants.Add(name, env.Inbox); err != nil {
			t.Fatal(err)
		}
	}
	id := txbox.NewID()
	for _, tenant := range []string{"acme", "globex", "acme", "initech"} {
		p := amqp.Publishing{Body: []byte(`{"n":1}`), MessageId: id.String(), Headers: amqp.Table{txbox.HeaderTenant: tenant}}
		if err := pub.PublishWithContext(context.Background(), "", q, false, false, p); err != nil {
			t.Fatal(err)
		}
	}
	handler := func(ctx context.Context, tx any, m inbox.Message) error { return envs[m.Tenant()].Handler(ctx, tx, m) }
	cons, err := rabbitmq.New(channel(t, conn), rabbitmq.Config{Tenants: &tenants, Handler: handler, Queue: q})
	if err != nil {
		t.Fatal(err)
	}
	stop := consumetest.Start(t, cons.Run)
	testenv.WaitFor(t, 30*time.Second, "3 acks and 1 reject", func() bool {
		s := cons.Stats()
		return s.Acked == 3 && s.Rejected == 1
	})
	stop()
	if s := cons.Stats(); s.Nacked != 0 {
		t.Errorf("stats %+v: nothing should be requeued", s)
	}
	for name, env := range envs {
		env.CheckExactlyOnce(t, []txbox.ID{id})
		if env.Calls() != 1 {
			t.Errorf("tenant %s: handler ran %d times, want 1", name, env.Calls())
		}
	}
}

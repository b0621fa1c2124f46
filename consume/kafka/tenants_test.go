package kafka_test

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/consume/kafka"
	"github.com/txbox/txbox/inbox"
	"github.com/txbox/txbox/internal/consumetest"
	"github.com/txbox/txbox/internal/testenv"
)

// TestTenants: with Config.Tenants each record runs in the inbox of its
// txbox-tenant header, the same id once per tenant; a record of an
// unknown tenant is skipped (logged) like one without an id: it runs
// nowhere and its offset is committed past.
func TestTenants(t *testing.T) {
	t.Parallel()
	c := cluster(t)
	envs := map[string]*consumetest.Env{"acme": consumetest.New(t, "billing"), "globex": consumetest.New(t, "billing")}
	var tenants inbox.Tenants
	for name, env := range envs {
		if err := tenants.Add(name, env.Inbox); err != nil {
			t.Fatal(err)
		}
	}
	id := txbox.NewID()
	var recs []*kgo.Record
	for _, tenant := range []string{"acme", "globex", "acme", "initech"} {
		r := record(id)
		r.Key = []byte("one-partition")
		r.Headers = append(r.Headers, kgo.RecordHeader{Key: txbox.HeaderTenant, Value: []byte(tenant)})
		recs = append(recs, r)
	}
	produce(t, c, recs)
	handler := func(ctx context.Context, tx any, m inbox.Message) error { return envs[m.Tenant()].Handler(ctx, tx, m) }
	cl := consumer(t, c, "g-tenants", kgo.DisableAutoCommit())
	if _, err := kafka.New(cl, kafka.Config{Handler: handler}); err == nil {
		t.Fatal("New without Inbox or Tenants: no error")
	}
	cons, err := kafka.New(cl, kafka.Config{Tenants: &tenants, Handler: handler, Backoff: consumeBackoff})
	if err != nil {
		t.Fatal(err)
	}
	stop := consumetest.Start(t, cons.Run)
	testenv.WaitFor(t, 30*time.Second, "offsets committed past every record", func() bool { return committedTotal(cl) == int64(len(recs)) })
	stop()
	for name, env := range envs {
		env.CheckExactlyOnce(t, []txbox.ID{id})
		if env.Calls() != 1 {
			t.Errorf("tenant %s: handler ran %d times, want 1", name, env.Calls())
		}
	}
}

package relay_test

import (
	"errors"
	"testing"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/internal/testenv"
	"github.com/txbox/txbox/relay"
	"github.com/txbox/txbox/sender"
)

// TestTenantHeader: a relay serving a tenant (Config.Tenant) puts the
// tenant's name in every message's txbox-tenant header, on a type with
// one route and on a fanned-out type's shared claim; a relay without a
// tenant sends no such header.
func TestTenantHeader(t *testing.T) {
	t.Parallel()
	for _, tenant := range []string{"acme", ""} {
		t.Run("tenant="+tenant, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			other := newTestSender()
			one := b.publish(t, "orders", 5, nil)
			fan := b.publish(t, "lines", 5, nil)
			b.start(t, func(c *relay.Config) {
				c.Tenant = tenant
				c.Senders["other"] = other
				c.Defaults.Sender = new("test")
				c.Events = map[string]relay.EventSettings{"orders": {}, "lines": {Routes: []relay.RouteSettings{
					{Name: "a", Sender: new("test")}, {Name: "b", Sender: new("other")},
				}}}
			})
			testenv.WaitFor(t, 20*time.Second, "every event delivered", func() bool {
				return containsAll(b.sender.ids(), append(one, fan...)) && containsAll(other.ids(), fan)
			})
			for _, s := range []*testSender{b.sender, other} {
				for _, id := range s.ids() {
					for _, d := range s.deliveries(id) {
						got, ok := d.msg.Headers[txbox.HeaderTenant]
						if tenant == "" && ok {
							t.Fatalf("event %s carries %s %q from a relay without a tenant", id, txbox.HeaderTenant, got)
						}
						if tenant != "" && got != tenant {
							t.Fatalf("event %s carries %s %q, want %q", id, txbox.HeaderTenant, got, tenant)
						}
					}
				}
			}
		})
	}
}

// TestTenantNameRejected: a tenant name that is not a-z, 0-9 and _ from
// a letter, or is too long, is a ConfigError naming Tenant.
func TestTenantNameRejected(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, name := range []string{"Acme", "1acme", "ac-me", "a b", string(make([]byte, 64))} {
		cfg := fastConfig(b.store, map[string]sender.Sender{"test": b.sender})
		cfg.Tenant = name
		_, err := relay.New(cfg)
		var ce *relay.ConfigError
		if !errors.As(err, &ce) || ce.Field != "Tenant" || !errors.Is(err, relay.ErrInvalidConfig) {
			t.Errorf("tenant %q: %v, want a ConfigError naming Tenant", name, err)
		}
	}
}

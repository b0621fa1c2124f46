package webhook_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/txbox/txbox"
	cwebhook "github.com/txbox/txbox/consume/webhook"
	"github.com/txbox/txbox/inbox"
	"github.com/txbox/txbox/internal/consumetest"
)

// TestTenants: with Config.Tenants each request runs in the inbox of its
// txbox-tenant header (the same id once per tenant); an unknown tenant,
// and no header without a Default, are 400 ProblemTenant and run nowhere.
// Inbox and Tenants are exclusive, and one is required.
func TestTenants(t *testing.T) {
	t.Parallel()
	envs := map[string]*consumetest.Env{"acme": consumetest.New(t, "billing"), "globex": consumetest.New(t, "billing")}
	var tenants inbox.Tenants
	for name, env := range envs {
		if err := tenants.Add(name, env.Inbox); err != nil {
			t.Fatal(err)
		}
	}
	handler := func(ctx context.Context, tx any, m inbox.Message) error { return envs[m.Tenant()].Handler(ctx, tx, m) }
	for _, cfg := range []cwebhook.Config{{Handler: handler}, {Inbox: envs["acme"].Inbox, Tenants: &tenants, Handler: handler}} {
		if _, err := cwebhook.New(cfg); !errors.Is(err, txbox.ErrInvalidConfig) {
			t.Errorf("Inbox %v, Tenants %v: %v, want a ConfigError", cfg.Inbox != nil, cfg.Tenants != nil, err)
		}
	}
	h, err := cwebhook.New(cwebhook.Config{Tenants: &tenants, Handler: handler})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	id := txbox.NewID()
	for _, tenant := range []string{"acme", "globex", "acme"} {
		resp, p := post(t, srv.URL, "{}", map[string]string{txbox.HeaderEventID: id.String(), txbox.HeaderTenant: tenant}, http.MethodPost)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("tenant %s: status %d %+v", tenant, resp.StatusCode, p)
		}
	}
	for _, headers := range []map[string]string{
		{txbox.HeaderEventID: txbox.NewID().String(), txbox.HeaderTenant: "initech"},
		{txbox.HeaderEventID: txbox.NewID().String()},
	} {
		resp, p := post(t, srv.URL, "{}", headers, http.MethodPost)
		if resp.StatusCode != http.StatusBadRequest || p.Type != cwebhook.ProblemTenant {
			t.Errorf("headers %v: status %d %+v, want 400 %s", headers, resp.StatusCode, p, cwebhook.ProblemTenant)
		}
	}
	for name, env := range envs {
		env.CheckExactlyOnce(t, []txbox.ID{id})
		if env.Calls() != 1 {
			t.Errorf("tenant %s: handler ran %d times, want 1", name, env.Calls())
		}
	}
}

package health_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/health"
	"github.com/txbox/txbox/internal/storeharness"
)

// TestTenantsDegradedByAFailingTenant: the combined probe of a relay that
// serves tenants is ok while every tenant runs, degraded (still ready)
// naming the tenant when one is down, and unavailable when none runs.
func TestTenantsDegradedByAFailingTenant(t *testing.T) {
	t.Parallel()
	d := storeharness.PostgresDriver(t)
	r := startRelay(t, d, &flakySender{})
	acme := newChecker(t, health.Config{Store: d, Relay: r, CacheFor: time.Millisecond})
	states := []health.TenantState{{Name: "acme", Checker: acme}}
	listErr := ""
	c := health.NewTenants(health.TenantsConfig{Tenants: func() []health.TenantState { return states }, ListErr: func() string { return listErr }})
	mux := http.NewServeMux()
	mux.Handle("/readyz", c.ReadyzHandler())

	if code, rep, body := get(t, mux, http.MethodGet, "/readyz"); code != http.StatusOK || rep.Status != txbox.HealthOK || rep.SchemaVersion == 0 {
		t.Fatalf("one running tenant: %d %s", code, body)
	}
	states = append(states, health.TenantState{Name: "globex", Down: "connect: connection refused"})
	listErr = "tenants-query: relation \"tenants\" does not exist"
	code, rep, body := get(t, mux, http.MethodGet, "/readyz")
	if code != http.StatusOK || rep.Status != txbox.HealthDegraded || !rep.Ready {
		t.Fatalf("a tenant down: %d %s, want 200 degraded", code, body)
	}
	var named, listed bool
	for _, r := range rep.Reasons {
		named = named || r.Kind == txbox.ReasonTenantFailing && r.Tenant == "globex" && r.Detail == "connect: connection refused"
		listed = listed || r.Kind == txbox.ReasonTenantsList
	}
	if !named || !listed {
		t.Fatalf("reasons %+v: want globex failing and the list error", rep.Reasons)
	}
	states = states[1:]
	if code, rep, body := get(t, mux, http.MethodGet, "/readyz"); code != http.StatusServiceUnavailable || rep.Status != txbox.HealthUnavailable {
		t.Fatalf("no tenant running: %d %s, want 503 unavailable", code, body)
	}
}

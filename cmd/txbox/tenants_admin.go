package main

import (
	"sort"

	"github.com/txbox/txbox/admin"
	"github.com/txbox/txbox/config"
	"github.com/txbox/txbox/relay"
	"github.com/txbox/txbox/tenants"
)

// The admin API of txbox relay with tenants (docs/operations.md,
// "Tenants"): one admin server whose routes name a tenant, each served
// by the admin configuration of that tenant's running unit.

// tenantAdmin is admin.Tenants over the supervisor's tenants.
type tenantAdmin struct{ sup *tenants.Supervisor }

var _ admin.Tenants = tenantAdmin{}

// List returns a page of the supervisor's tenants (Status lists them in
// name order).
func (ta tenantAdmin) List(after string, limit int) ([]admin.TenantStatus, string) {
	all, listErr := ta.sup.Status()
	i := sort.Search(len(all), func(i int) bool { return all[i].Name > after })
	page := all[i:min(len(all), i+limit)]
	out := make([]admin.TenantStatus, len(page))
	for j, st := range page {
		out[j] = ta.status(st)
	}
	return out, listErr
}

// Tenant returns the tenant named name, and wakes it when it is parked.
func (ta tenantAdmin) Tenant(name string) (admin.TenantStatus, bool) {
	all, _ := ta.sup.Status()
	i := sort.Search(len(all), func(i int) bool { return all[i].Name >= name })
	if i == len(all) || all[i].Name != name {
		return admin.TenantStatus{}, false
	}
	if all[i].State == tenants.StateParked {
		// An operator asks about it: wake it, so that the retry the
		// answer asks for finds its relay (docs/multi-tenant.md, "Idle
		// tenants"). It parks again when idle.
		ta.sup.Wake(name)
	}
	return ta.status(all[i]), true
}

// status is st with the admin configuration of its running unit: a
// tenant without one (whatever its state) does not run.
func (ta tenantAdmin) status(st tenants.Status) admin.TenantStatus {
	out := admin.TenantStatus{Name: st.Name, State: string(st.State), Since: st.Since, Err: st.Err, Failures: st.Failures, NextTry: st.NextTry}
	if u, ok := ta.sup.Unit(st.Name); ok {
		if tu, ok := u.(*tenantUnit); ok && tu.admin != nil {
			out.Config, out.Hold = tu.admin, tu.gate.enter
		}
	}
	return out
}

// tenantAdminHooks adds to rc, when admin.enabled, the recorder of the
// tenant's throughput and returns it (nil otherwise).
func tenantAdminHooks(cfg *config.Config, rc *relay.Config) *admin.Recorder {
	if !cfg.Admin.Enabled {
		return nil
	}
	rec := &admin.Recorder{}
	rc.Hooks = append(rc.Hooks, rec)
	return rec
}

// tenantAdminConfig is the admin configuration of a tenant's unit, nil
// when admin.enabled is off.
func tenantAdminConfig(cfg *config.Config, st *config.Store, r *relay.Relay, rec *admin.Recorder) *admin.Config {
	if !cfg.Admin.Enabled {
		return nil
	}
	ac := relayAdminConfig(cfg, st, r, rec)
	return &ac
}

// startTenantAdmin starts the admin server of a relay with tenants.
func startTenantAdmin(e *env, cfg *config.Config, sup *tenants.Supervisor, obs *observability) (func(), error) {
	if !cfg.Admin.Enabled {
		return func() {}, nil
	}
	return serveAdmin(e, cfg, admin.Config{Tenants: tenantAdmin{sup: sup}, Fingerprinter: cfg.Fingerprinter()}, obs.onAdmin, obs.log)
}

package health

import (
	"context"
	"net/http"
	"sort"
	"time"

	"github.com/txbox/txbox"
)

// TenantState is one tenant of a relay that serves tenants, as
// TenantsConfig.Tenants reports it.
type TenantState struct {
	// Name names the tenant.
	Name string
	// Checker checks the tenant's running relay and database; nil while
	// the tenant is not running.
	Checker *Checker
	// Down says why a tenant that is not running is not (its last
	// failure), or that it is starting.
	Down string
	// Parked is a tenant whose relay was stopped for having nothing to do
	// and whose tables are watched (docs/multi-tenant.md, "Idle
	// tenants"): it is well, and serves as a running one does.
	Parked bool
}

// TenantsConfig configures a TenantsChecker.
type TenantsConfig struct {
	// Tenants lists the tenants now. Required.
	Tenants func() []TenantState
	// ListErr returns the last failure to list the tenants, "" when the
	// last list succeeded. Optional.
	ListErr func() string
	// WatchErr returns the trouble of the watch of parked tenants ("" when
	// none): their wake-ups and sweeps do not run, which degrades.
	// Optional.
	WatchErr func() string
	// FailWhenDegraded makes /readyz answer 503 when degraded, as
	// Config.FailWhenDegraded.
	FailWhenDegraded bool
}

// TenantsChecker answers the probes of a relay that serves tenants
// (docs/multi-tenant.md): it combines the tenants' reports, each reason
// naming its tenant. One tenant's trouble, even a fatal one for that
// tenant (its database down, not migrated), only degrades the whole: the
// other tenants deliver. The process is unavailable when no tenant runs
// at all.
type TenantsChecker struct {
	cfg TenantsConfig
}

// NewTenants returns a TenantsChecker.
// A nil Tenants lists none.
func NewTenants(cfg TenantsConfig) *TenantsChecker {
	if cfg.Tenants == nil {
		cfg.Tenants = func() []TenantState { return nil }
	}
	return &TenantsChecker{cfg: cfg}
}

// Check returns the combined report. SchemaVersion is the lowest of the
// running tenants', LatestSchemaVersion this build's.
func (c *TenantsChecker) Check(ctx context.Context) txbox.HealthReport {
	rep := txbox.HealthReport{CheckedAt: time.Now()}
	var reasons []txbox.HealthReason
	running := 0
	tenants := c.cfg.Tenants()
	for _, t := range tenants {
		if t.Parked {
			running++
			continue
		}
		if t.Checker == nil {
			reasons = append(reasons, txbox.HealthReason{Kind: txbox.ReasonTenantFailing, Tenant: t.Name, Detail: t.Down})
			continue
		}
		running++
		tr := t.Checker.Check(ctx)
		if running == 1 || tr.SchemaVersion < rep.SchemaVersion {
			rep.SchemaVersion = tr.SchemaVersion
		}
		rep.LatestSchemaVersion = max(rep.LatestSchemaVersion, tr.LatestSchemaVersion)
		for _, r := range tr.Reasons {
			r.Tenant = t.Name
			reasons = append(reasons, r)
		}
	}
	if c.cfg.ListErr != nil {
		if e := c.cfg.ListErr(); e != "" {
			reasons = append(reasons, txbox.HealthReason{Kind: txbox.ReasonTenantsList, Detail: e})
		}
	}
	if c.cfg.WatchErr != nil {
		if e := c.cfg.WatchErr(); e != "" {
			reasons = append(reasons, txbox.HealthReason{Kind: txbox.ReasonTenantsWatch, Detail: e})
		}
	}
	switch {
	case running == 0:
		rep.Status = txbox.HealthUnavailable
		if len(tenants) == 0 {
			reasons = append(reasons, txbox.HealthReason{Kind: txbox.ReasonTenantFailing, Detail: "no tenant is configured or listed"})
		}
	case len(reasons) > 0:
		rep.Status, rep.Ready = txbox.HealthDegraded, true
	default:
		rep.Status, rep.Ready = txbox.HealthOK, true
	}
	sort.SliceStable(reasons, func(i, j int) bool {
		a, b := reasons[i], reasons[j]
		if a.Tenant != b.Tenant {
			return a.Tenant < b.Tenant
		}
		if a.Kind != b.Kind {
			return a.Kind < b.Kind
		}
		return a.Subject < b.Subject
	})
	rep.Reasons = reasons
	return rep
}

// ReadyzHandler answers as Checker.ReadyzHandler does, with the combined
// report.
func (c *TenantsChecker) ReadyzHandler() http.Handler {
	return readyzHandler(c.Check, c.cfg.FailWhenDegraded)
}

// LivezHandler answers as Checker.LivezHandler does.
func (c *TenantsChecker) LivezHandler() http.Handler { return (&Checker{}).LivezHandler() }

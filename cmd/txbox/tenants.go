package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/txbox/txbox/admin"
	"github.com/txbox/txbox/config"
	"github.com/txbox/txbox/health"
	"github.com/txbox/txbox/relay"
	"github.com/txbox/txbox/relay/relayprom"
	"github.com/txbox/txbox/sender"
	"github.com/txbox/txbox/tenants"
)

// txbox relay with tenants (docs/multi-tenant.md): one relay per tenant,
// each over its own store and sharing the process's senders, run by a
// tenants.Supervisor that lists the tenants again every tenants-interval
// and on SIGHUP (re-reading the configuration file's tenants), starts the
// new ones and stops those that went. One tenant's failure is its own:
// it is retried, /readyz names it, and the others deliver.

// tenantRelays is what runTenantRelays shares with its tenants' units.
type tenantRelays struct {
	e       *env
	cf      *configFlags
	log     *slog.Logger
	tp      *sdktrace.TracerProvider
	senders map[string]sender.Sender
	obs     *observability
	migrate bool

	mu sync.Mutex
	// listed are the tenants and their configuration as last listed, by
	// name: Open takes its tenant's from here.
	listed map[string]*config.Config
	// migrated are the tenants this process migrated (--migrate): a
	// tenant that wakes from parked is not migrated again.
	migrated map[string]bool
}

func (tr *tenantRelays) wasMigrated(name string) bool {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return tr.migrated[name]
}

func (tr *tenantRelays) markMigrated(name string) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.migrated[name] = true
}

// tenantUnit is one tenant's relay (tenants.Unit).
type tenantUnit struct {
	name    string
	r       *relay.Relay
	st      *config.Store
	checker *health.Checker
	// admin is the tenant's admin configuration (tenants_admin.go), nil
	// when admin.enabled is off.
	admin *admin.Config
	// unregister removes the tenant's metrics from the registry.
	unregister func()
	// work tells when the relay last had work (tenants.Idler).
	work *activity
	// gate holds the relay and store open for admin requests.
	gate useGate
	log  *slog.Logger
}

// IdleSince is when the tenant's relay last had work (tenants.Idler).
func (u *tenantUnit) IdleSince() time.Time { return u.work.since() }

func (u *tenantUnit) Start(ctx context.Context) error { return u.r.Start(context.WithoutCancel(ctx)) }

// Stop waits (within ctx) for the admin requests using the tenant to
// end, stops the tenant's relay gracefully within ctx, then closes its
// store and removes its metrics.
func (u *tenantUnit) Stop(ctx context.Context) error {
	if !u.gate.close(ctx) {
		u.log.Warn("tenant stopping with admin requests still using it: the stop's deadline passed")
	}
	err := u.r.Stop(ctx)
	if errors.Is(err, relay.ErrNotStarted) {
		err = nil
	}
	u.st.Close()
	u.unregister()
	return err
}

// runTenantRelays is runRelay for a configuration with tenants.
func runTenantRelays(ctx context.Context, e *env, cf *configFlags, cfg *config.Config, log *slog.Logger, tp *sdktrace.TracerProvider, migrate bool, hup <-chan os.Signal) error {
	senders, err := cfg.OpenSenders(ctx, e.getenv, log)
	if err != nil {
		return err
	}
	defer closeSenders(ctx, senders, log)
	obs, err := listenObservability(cfg, nil, log)
	if err != nil {
		return err
	}
	defer obs.close(context.WithoutCancel(ctx))
	tr := &tenantRelays{e: e, cf: cf, log: log, tp: tp, senders: senders, obs: obs, migrate: migrate,
		listed: map[string]*config.Config{}, migrated: map[string]bool{}}
	tcfg := tenants.Config{List: tr.list, Open: tr.open, Interval: cfg.TenantsInterval, Logger: log,
		StopTimeout: cfg.Relay.ShutdownTimeout}
	var parker *tenantParker
	if cfg.TenantsParkAfter > 0 {
		pctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		parker = newTenantParker(pctx, tr, cfg.TenantsSweepInterval)
		defer parker.wait()
		defer cancel()
		tcfg.Parker, tcfg.ParkAfter = parker, cfg.TenantsParkAfter
	}
	sup, err := tenants.New(tcfg)
	if err != nil {
		return err
	}
	if parker != nil {
		parker.wake = sup.Wake
	}
	if err := sup.Start(ctx); err != nil {
		return err
	}
	hcfg := health.TenantsConfig{Tenants: func() []health.TenantState { return tenantStates(sup) },
		ListErr: func() string { _, e := sup.Status(); return e }, FailWhenDegraded: cfg.Health.FailWhenDegraded}
	if parker != nil {
		hcfg.WatchErr = parker.watchErr
	}
	hc := health.NewTenants(hcfg)
	obs.mountProbes(hc.LivezHandler(), hc.ReadyzHandler())
	obs.startServers()
	stopAdmin, err := startTenantAdmin(e, cfg, sup, obs)
	if err != nil {
		_ = sup.Stop(context.WithoutCancel(ctx))
		return err
	}
	defer stopAdmin()
	st, _ := sup.Status()
	log.Info("relay started", "tenants", len(st), "senders", sortedKeys(senders))
	for ctx.Err() == nil {
		select {
		case <-hup:
			log.Info("SIGHUP: listing the tenants again")
			sup.Reload()
		case <-ctx.Done():
		}
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.Relay.ShutdownTimeout)
	defer cancel()
	log.Info("relay stopping", "deadline", cfg.Relay.ShutdownTimeout.String())
	if err := sup.Stop(sctx); err != nil {
		return fmt.Errorf("graceful stop did not finish within %s: %w", cfg.Relay.ShutdownTimeout, err)
	}
	log.Info("relay stopped")
	return nil
}

// tenantStates are the probes' view of the supervisor's tenants.
func tenantStates(sup *tenants.Supervisor) []health.TenantState {
	st, _ := sup.Status()
	out := make([]health.TenantState, 0, len(st))
	for _, s := range st {
		ts := health.TenantState{Name: s.Name, Down: string(s.State), Parked: s.State == tenants.StateParked}
		if s.Err != "" {
			ts.Down = s.Err
		}
		if u, ok := sup.Unit(s.Name); ok {
			ts.Checker = u.(*tenantUnit).checker
		}
		out = append(out, ts)
	}
	return out
}

// list reads the configuration again (the file's tenants may have
// changed: SIGHUP, tenants-interval) and lists its tenants, each with a
// key of its settings, so that a tenant whose entry changed is restarted.
func (tr *tenantRelays) list(ctx context.Context) ([]tenants.Spec, error) {
	cfg, err := tr.cf.load(tr.e)
	if err != nil {
		return nil, err
	}
	all, err := cfg.ResolveTenants(ctx)
	if err != nil {
		return nil, err
	}
	listed := make(map[string]*config.Config, len(all))
	specs := make([]tenants.Spec, 0, len(all))
	for _, t := range all {
		tcfg, err := cfg.ForTenant(t, len(all))
		if err != nil {
			return nil, err
		}
		listed[t.Name] = tcfg
		b, _ := json.Marshal(t)
		sum := sha256.Sum256(b)
		specs = append(specs, tenants.Spec{Name: t.Name, Key: hex.EncodeToString(sum[:8])})
	}
	tr.mu.Lock()
	tr.listed = listed
	tr.mu.Unlock()
	return specs, nil
}

// open makes the relay of one tenant: its store (migrated with
// --migrate), its metrics labelled with the tenant, its probes' checker.
func (tr *tenantRelays) open(ctx context.Context, spec tenants.Spec) (tenants.Unit, error) {
	tr.mu.Lock()
	cfg := tr.listed[spec.Name]
	tr.mu.Unlock()
	if cfg == nil {
		return nil, fmt.Errorf("tenant %s is not listed", spec.Name)
	}
	log := tr.log.With("tenant", spec.Name)
	st, err := openRelayStore(ctx, cfg, tr.e, log, tr.migrate && !tr.wasMigrated(spec.Name))
	if err != nil {
		return nil, err
	}
	if tr.migrate {
		tr.markMigrated(spec.Name)
	}
	u := &tenantUnit{name: spec.Name, st: st, unregister: func() {}, work: newActivity(), log: log}
	u.gate.onUse = u.work.touch
	rc := cfg.RelayConfig(st, tr.senders, tr.log)
	rc.Hooks = append(rc.Hooks, u.work)
	rec := tenantAdminHooks(cfg, &rc)

	if tr.tp != nil {
		rc.TracerProvider = tr.tp
	}
	var m *relayprom.Metrics
	if tr.obs.reg != nil {
		m = relayprom.New(metricsOptions(cfg, st))
		reg := prometheus.WrapRegistererWith(prometheus.Labels{"tenant": spec.Name}, tr.obs.reg)
		if err := reg.Register(m); err != nil {
			st.Close()
			return nil, fmt.Errorf("metrics: %w", err)
		}
		u.unregister = func() { reg.Unregister(m) }
		rc.Hooks = append(rc.Hooks, m)
	}
	if u.r, err = relay.New(rc); err != nil {
		u.unregister()
		st.Close()
		if errors.Is(err, relay.ErrInvalidConfig) {
			return nil, &usageError{config.RelayError(err).Error()}
		}
		return nil, err
	}
	if m != nil {
		m.WatchRelay(u.r)
	}
	u.admin = tenantAdminConfig(cfg, st, u.r, rec)
	if u.checker, err = newChecker(cfg, st, u.r); err != nil {
		u.unregister()
		st.Close()
		return nil, err
	}
	return u, nil
}

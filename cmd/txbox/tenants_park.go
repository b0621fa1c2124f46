package main

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/config"
	"github.com/txbox/txbox/store/postgres"
	"github.com/txbox/txbox/tenants"
)

// Idle tenants (docs/multi-tenant.md, "Idle tenants"): a PostgreSQL
// tenant whose relay has had nothing to do for tenants-park-after is
// parked, its relay stopped and its pool closed; a new tenant starts
// parked. One postgres.ParkedWatch per database watches the parked
// tenants in it (one connection: their LISTENs and the periodic sweep)
// and wakes a tenant when it has work.

// tenantParker is the tenants.Parker of txbox relay.
type tenantParker struct {
	tr       *tenantRelays
	interval time.Duration
	wake     func(name string)
	ctx      context.Context
	wg       sync.WaitGroup

	mu sync.Mutex
	// byDSN are the watches, one per database.
	byDSN map[string]*postgres.ParkedWatch
	// where is the watch of each parked tenant.
	where map[string]*postgres.ParkedWatch
	// migrated are the tenants migrated by this process (--migrate).
	migrated map[string]bool
}

func newTenantParker(ctx context.Context, tr *tenantRelays, interval time.Duration) *tenantParker {
	return &tenantParker{tr: tr, interval: interval, ctx: ctx, byDSN: map[string]*postgres.ParkedWatch{},
		where: map[string]*postgres.ParkedWatch{}, migrated: map[string]bool{}}
}

// Watch watches a tenant about to be parked, in its database's watch.
// Tenants on MySQL or SQLite, and in WAL mode (whose slot must be read
// all the time), are never parked.
func (p *tenantParker) Watch(ctx context.Context, spec tenants.Spec) error {
	p.tr.mu.Lock()
	cfg := p.tr.listed[spec.Name]
	p.tr.mu.Unlock()
	if cfg == nil {
		return fmt.Errorf("tenant %s is not listed", spec.Name)
	}
	if cfg.Database.Dialect != config.DialectPostgres || cfg.Database.Source == config.SourceWAL {
		return tenants.ErrNotParkable
	}
	if err := p.migrateOnce(ctx, spec.Name, cfg); err != nil {
		return err
	}
	w, err := p.watchFor(cfg)
	if err != nil {
		return err
	}
	cl := cfg.RelayConfig(nil, nil, p.tr.log).WithDefaults(true).Cleanup
	pt := postgres.ParkedTables{Key: spec.Name, Schema: cfg.Database.Schema, TablePrefix: cfg.Database.TablePrefix,
		Cleanup: !cl.Disabled}
	if pt.Cleanup {
		pt.OutboxTTL, pt.DeadLetterTTL, pt.AuditTTL = *cl.OutboxTTL, *cl.DeadLetterTTL, *cl.AuditTTL
	}
	if err := w.Watch(ctx, pt); err != nil {
		return err
	}
	p.mu.Lock()
	p.where[spec.Name] = w
	p.mu.Unlock()
	return nil
}

// Unwatch stops watching a tenant; it does not wait.
func (p *tenantParker) Unwatch(_ context.Context, spec tenants.Spec) {
	p.mu.Lock()
	w := p.where[spec.Name]
	delete(p.where, spec.Name)
	p.mu.Unlock()
	if w != nil {
		w.Unwatch(spec.Name)
	}
}

// SweepSoon asks the tenant's database's watch for a sweep.
func (p *tenantParker) SweepSoon(spec tenants.Spec) {
	p.mu.Lock()
	w := p.where[spec.Name]
	p.mu.Unlock()
	if w != nil {
		w.SweepSoon()
	}
}

// migrateOnce migrates a tenant's tables once in this process's life when
// txbox relay runs with --migrate: a tenant that starts parked is
// migrated before it is watched, and is not migrated again each time it
// wakes.
func (p *tenantParker) migrateOnce(ctx context.Context, name string, cfg *config.Config) error {
	if !p.tr.migrate || p.tr.wasMigrated(name) {
		return nil
	}
	st, err := openRelayStore(ctx, cfg, p.tr.e, p.tr.log.With("tenant", name), true)
	if err != nil {
		return err
	}
	st.Close()
	p.tr.markMigrated(name)
	return nil
}

// watchFor returns the watch of cfg's database, started on first use.
func (p *tenantParker) watchFor(cfg *config.Config) (*postgres.ParkedWatch, error) {
	dsn, err := cfg.DatabaseDSN(p.tr.e.getenv)
	if err != nil {
		return nil, err
	}
	key := dsn.Reveal()
	p.mu.Lock()
	defer p.mu.Unlock()
	if w := p.byDSN[key]; w != nil {
		return w, nil
	}
	cc, err := pgx.ParseConfig(key)
	if err != nil {
		return nil, config.Scrub(fmt.Errorf("parse dsn: %w", err), cfg.Secrets(p.tr.e.getenv))
	}
	if cc.RuntimeParams == nil {
		cc.RuntimeParams = map[string]string{}
	}
	cc.RuntimeParams["application_name"] = "txbox-parked"
	w, err := postgres.NewParkedWatch(postgres.ParkedWatchConfig{ConnConfig: cc, Interval: p.interval,
		Wake: p.wake, Logger: p.tr.log.With(slog.String("database", cc.Database))})
	if err != nil {
		return nil, err
	}
	p.byDSN[key] = w
	p.wg.Go(func() { _ = w.Run(p.ctx) })
	return w, nil
}

// watchErr is the trouble of the watches, for /readyz.
func (p *tenantParker) watchErr() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var errs []string
	for _, w := range p.byDSN {
		if e := w.Err(); e != "" {
			errs = append(errs, e)
		}
	}
	sort.Strings(errs)
	return strings.Join(errs, "; ")
}

// wait waits for the watches to end (after their context ended).
func (p *tenantParker) wait() { p.wg.Wait() }

// activity is a relay hook that tells when the relay last had work: a
// claim that claimed rows or failed, a batch, a circuit change, a
// maintenance round that changed rows.
type activity struct {
	txbox.NopRelayHook
	last atomic.Int64
}

func newActivity() *activity {
	a := &activity{}
	a.touch()
	return a
}

func (a *activity) touch() { a.last.Store(time.Now().UnixNano()) }

// OnPoll counts a claim that claimed rows or failed.
func (a *activity) OnPoll(ev txbox.PollEvent) {
	if ev.Claimed > 0 || ev.Err != nil {
		a.touch()
	}
}

// OnBatch counts every batch.
func (a *activity) OnBatch(txbox.BatchEvent) { a.touch() }

// OnCircuit counts every change of a circuit.
func (a *activity) OnCircuit(txbox.CircuitEvent) { a.touch() }

// OnMaintenance counts a round that changed rows or failed.
func (a *activity) OnMaintenance(ev txbox.MaintenanceEvent) {
	if ev.Count > 0 || ev.Err != nil {
		a.touch()
	}
}

// since is the time of the last work.
func (a *activity) since() time.Time { return time.Unix(0, a.last.Load()) }

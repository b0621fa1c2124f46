package tenants

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/internal/backoff"
)

// Spec is one tenant as Config.List reports it.
type Spec struct {
	// Name names the tenant (txbox.ValidateTenantName).
	Name string
	// Key stands for the tenant's settings (where its tables are, its
	// overrides): a tenant whose Key changes between two lists is
	// stopped and started again, so that its new settings apply.
	Key string
}

// Unit is what runs for one tenant: in txbox relay, its relay.
type Unit interface {
	// Start starts delivering; an error leaves nothing running.
	Start(ctx context.Context) error
	// Stop stops gracefully within ctx and releases what the unit holds
	// (its store's connections).
	Stop(ctx context.Context) error
}

// Idler is a Unit that knows since when it has had nothing to do: the
// Supervisor parks it after Config.ParkAfter.
type Idler interface {
	// IdleSince is the end of the unit's last work (its start when it
	// has done none).
	IdleSince() time.Time
}

// Parker watches parked tenants (docs/multi-tenant.md, "Idle tenants"):
// the Supervisor stops the unit of a tenant that has been idle for
// Config.ParkAfter, and the Parker calls Supervisor.Wake when the
// tenant has work again.
type Parker interface {
	// Watch starts watching a tenant about to be parked: once it returns
	// nil, the tenant's work (a wake-up, rows a sweep finds) calls
	// Supervisor.Wake. An error keeps the tenant running: it cannot be
	// parked now (ErrNotParkable: ever).
	Watch(ctx context.Context, spec Spec) error
	// Unwatch stops watching a tenant that was woken or went.
	Unwatch(ctx context.Context, spec Spec)
	// SweepSoon asks for a look at the parked tenant's tables soon: its
	// unit has just stopped, and rows may have come meanwhile.
	SweepSoon(spec Spec)
}

// ErrNotParkable is the error of Parker.Watch for a tenant that is never
// parked (its database cannot be watched: a dialect without a sweep, WAL
// mode); the Supervisor stops asking.
var ErrNotParkable = errors.New("tenants: this tenant cannot be parked")

// Config configures a Supervisor.
type Config struct {
	// List returns the tenants to serve now. Required.
	List func(ctx context.Context) ([]Spec, error)
	// Open makes the unit of one tenant, not started. An error counts as
	// a failed start: the tenant is retried. Required.
	Open func(ctx context.Context, spec Spec) (Unit, error)
	// Interval is how often List runs again. Defaults to 30s.
	Interval time.Duration
	// Retry is the back-off of a tenant that fails to open or start.
	// Defaults to 1s doubling up to 1m, with jitter.
	Retry backoff.Policy
	// StopTimeout bounds the graceful stop of a removed or changed
	// tenant. Defaults to 30s.
	StopTimeout time.Duration
	// Parallel bounds the tenants opened and started at once, so that a
	// relay with many tenants does not open every pool in the same
	// instant. Defaults to 8.
	Parallel int
	// Logger receives the supervisor's logs. Defaults to slog.Default().
	Logger *slog.Logger
	// Parker parks idle tenants; nil runs every tenant all the time.
	Parker Parker
	// ParkAfter is how long a running tenant's unit (an Idler) has been
	// idle before it is parked, and a new tenant starts parked. Zero
	// never parks. It needs Parker.
	ParkAfter time.Duration
}

// State is where a tenant stands.
type State string

// The states of a tenant.
const (
	// StateStarting: its unit is being opened and started.
	StateStarting State = "starting"
	// StateRunning: its unit started.
	StateRunning State = "running"
	// StateFailing: its unit failed to open or start; it is retried at
	// Status.NextTry.
	StateFailing State = "failing"
	// StateParked: it had nothing to do, its unit is stopped and the
	// Parker watches it (docs/multi-tenant.md, "Idle tenants").
	StateParked State = "parked"
)

// Status is one tenant's state.
type Status struct {
	Name  string
	State State
	// Since is when the tenant entered State.
	Since time.Time
	// Err is the last failure of a failing tenant.
	Err string
	// Failures counts the failed starts in a row.
	Failures int
	// NextTry is when a failing tenant is tried again.
	NextTry time.Time
}

// ErrStopped is returned by Start after Stop.
var ErrStopped = errors.New("tenants: supervisor stopped")

// tenant is the supervisor's record of one tenant.
type tenant struct {
	spec   Spec
	unit   Unit // nil unless running
	status Status
	// noPark is set when the Parker said ErrNotParkable.
	noPark bool
}

// Supervisor runs one Unit per tenant. Its methods are safe for
// concurrent use.
type Supervisor struct {
	cfg    Config
	log    *slog.Logger
	reload chan struct{}
	done   chan struct{}
	cancel context.CancelFunc
	wg     sync.WaitGroup

	// woken signals wakes; wakes holds the names Wake asked for.
	woken chan struct{}

	mu      sync.Mutex
	tenants map[string]*tenant
	wakes   map[string]bool
	listErr string
	started bool
	stopped bool
}

// New checks cfg and returns a Supervisor, not started.
func New(cfg Config) (*Supervisor, error) {
	if cfg.List == nil || cfg.Open == nil {
		return nil, errors.New("tenants: Config.List and Config.Open are required")
	}
	if cfg.Interval <= 0 {
		cfg.Interval = 30 * time.Second
	}
	if cfg.Retry == (backoff.Policy{}) {
		cfg.Retry = backoff.Policy{Initial: time.Second, Multiplier: 2, Max: time.Minute, Jitter: 0.2}
	}
	if cfg.StopTimeout <= 0 {
		cfg.StopTimeout = 30 * time.Second
	}
	if cfg.Parallel <= 0 {
		cfg.Parallel = 8
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Supervisor{cfg: cfg, log: cfg.Logger.With(slog.String("component", "txbox.tenants")),
		reload: make(chan struct{}, 1), done: make(chan struct{}), tenants: map[string]*tenant{},
		woken: make(chan struct{}, 1), wakes: map[string]bool{}}, nil
}

// Start lists the tenants and makes one attempt to start each; it returns
// an error only when that first List fails or a name is invalid (the
// configuration is wrong), not when a tenant fails to start: that tenant
// is Failing and retried. The supervisor then lists again every Interval
// and on Reload, until Stop. ctx bounds the first round only.
func (s *Supervisor) Start(ctx context.Context) error {
	s.mu.Lock()
	if s.stopped {
		s.mu.Unlock()
		return ErrStopped
	}
	if s.started {
		s.mu.Unlock()
		return errors.New("tenants: supervisor already started")
	}
	s.started = true
	s.mu.Unlock()
	specs, err := s.list(ctx)
	if err != nil {
		return err
	}
	s.apply(ctx, specs)
	run, cancel := context.WithCancel(context.WithoutCancel(ctx))
	s.cancel = cancel
	s.wg.Go(func() { s.loop(run) })
	return nil
}

// Reload asks for a List now (on SIGHUP, say), without waiting for it.
func (s *Supervisor) Reload() {
	select {
	case s.reload <- struct{}{}:
	default:
	}
}

// Wake starts a parked tenant (the Parker calls it when the tenant has
// work); it does not wait, and does nothing for a tenant that is not
// parked.
func (s *Supervisor) Wake(name string) {
	s.mu.Lock()
	t, ok := s.tenants[name]
	if ok && t.status.State == StateParked {
		s.wakes[name] = true
	}
	s.mu.Unlock()
	if ok {
		select {
		case s.woken <- struct{}{}:
		default:
		}
	}
}

// Stop stops listing and stops every tenant's unit, all at once, within
// ctx; it returns the first error of a unit's Stop.
func (s *Supervisor) Stop(ctx context.Context) error {
	s.mu.Lock()
	if s.stopped {
		s.mu.Unlock()
		return nil
	}
	s.stopped = true
	cancel := s.cancel
	s.mu.Unlock()
	if cancel != nil {
		cancel()
	}
	s.wg.Wait()
	s.mu.Lock()
	var units []*tenant
	for _, t := range s.tenants {
		if t.unit != nil {
			units = append(units, t)
		}
	}
	s.mu.Unlock()
	errs := make([]error, len(units))
	var wg sync.WaitGroup
	for i, t := range units {
		wg.Go(func() {
			if err := t.unit.Stop(ctx); err != nil {
				errs[i] = fmt.Errorf("tenant %s: %w", t.spec.Name, err)
			}
		})
	}
	wg.Wait()
	close(s.done)
	return errors.Join(errs...)
}

// Status lists every tenant, by name, and the last List error ("" when
// the last List succeeded).
func (s *Supervisor) Status() (tenants []Status, listErr string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Status, 0, len(s.tenants))
	for _, t := range s.tenants {
		out = append(out, t.status)
	}
	slices.SortFunc(out, func(a, b Status) int {
		if a.Name < b.Name {
			return -1
		}
		if a.Name > b.Name {
			return 1
		}
		return 0
	})
	return out, s.listErr
}

// Unit returns the running unit of the tenant named name.
func (s *Supervisor) Unit(name string) (Unit, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.tenants[name]
	if !ok || t.unit == nil {
		return nil, false
	}
	return t.unit, true
}

// list runs Config.List and checks its names.
func (s *Supervisor) list(ctx context.Context) ([]Spec, error) {
	specs, err := s.cfg.List(ctx)
	if err == nil {
		seen := map[string]bool{}
		for _, sp := range specs {
			if verr := txbox.ValidateTenantName(sp.Name); verr != nil {
				err = fmt.Errorf("tenants: %w", verr)
				break
			}
			if seen[sp.Name] {
				err = fmt.Errorf("tenants: tenant %q is listed twice", sp.Name)
				break
			}
			seen[sp.Name] = true
		}
	}
	s.mu.Lock()
	s.listErr = ""
	if err != nil {
		s.listErr = err.Error()
	}
	s.mu.Unlock()
	return specs, err
}

// loop lists again every Interval and on Reload, and retries failing
// tenants when they are due.
func (s *Supervisor) loop(ctx context.Context) {
	tick := time.NewTicker(s.cfg.Interval)
	defer tick.Stop()
	retry := time.NewTimer(time.Hour)
	defer retry.Stop()
	var parkCheck <-chan time.Time
	if s.parking() {
		pt := time.NewTicker(max(min(s.cfg.ParkAfter/4, 5*time.Second), 10*time.Millisecond))
		defer pt.Stop()
		parkCheck = pt.C
	}
	for {
		s.armRetry(retry)
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		case <-s.reload:
		case <-retry.C:
			s.retryDue(ctx)
			continue
		case <-s.woken:
			s.wakeDue(ctx)
			continue
		case <-parkCheck:
			s.parkIdle(ctx)
			continue
		}
		specs, err := s.list(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			s.log.Warn("listing the tenants failed; the tenants stay as they are", slog.Any("error", err))
			continue
		}
		s.apply(ctx, specs)
	}
}

// apply makes the running tenants those of specs: it stops the tenants
// that went or whose Key changed, then starts the new and changed ones.
func (s *Supervisor) apply(ctx context.Context, specs []Spec) {
	want := make(map[string]Spec, len(specs))
	for _, sp := range specs {
		want[sp.Name] = sp
	}
	var gone, start []*tenant
	s.mu.Lock()
	for name, t := range s.tenants {
		if sp, ok := want[name]; !ok || sp.Key != t.spec.Key {
			gone = append(gone, t)
			delete(s.tenants, name)
		}
	}
	for _, sp := range specs {
		if _, ok := s.tenants[sp.Name]; ok {
			continue
		}
		t := &tenant{spec: sp, status: Status{Name: sp.Name, State: StateStarting, Since: time.Now()}}
		s.tenants[sp.Name] = t
		start = append(start, t)
	}
	s.mu.Unlock()
	s.each(gone, func(t *tenant) { s.stopTenant(ctx, t) })
	s.each(start, func(t *tenant) {
		if !s.park(ctx, t) {
			s.startTenant(ctx, t)
		}
	})
}

// parking says whether idle tenants are parked.
func (s *Supervisor) parking() bool { return s.cfg.Parker != nil && s.cfg.ParkAfter > 0 }

// parkIdle parks the running tenants whose units have been idle for
// ParkAfter.
func (s *Supervisor) parkIdle(ctx context.Context) {
	cutoff := time.Now().Add(-s.cfg.ParkAfter)
	var idle []*tenant
	s.mu.Lock()
	for _, t := range s.tenants {
		if t.unit == nil || t.noPark || t.status.State != StateRunning {
			continue
		}
		if id, ok := t.unit.(Idler); ok && id.IdleSince().Before(cutoff) {
			idle = append(idle, t)
		}
	}
	s.mu.Unlock()
	s.each(idle, func(t *tenant) { s.park(ctx, t) })
}

// park has the Parker watch t, stops t's unit if it runs, and leaves t
// parked; it reports false, t as it was, when parking is off or the
// Parker cannot watch t. A new tenant (no unit) starts parked this way:
// the sweep SweepSoon asks for starts it if it has work.
func (s *Supervisor) park(ctx context.Context, t *tenant) bool {
	if !s.parking() || t.noPark {
		return false
	}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	err := s.cfg.Parker.Watch(wctx, t.spec)
	cancel()
	if err != nil {
		if errors.Is(err, ErrNotParkable) {
			s.mu.Lock()
			t.noPark = true
			s.mu.Unlock()
		} else {
			s.log.Warn("tenant could not be parked; it runs on", slog.String("tenant", t.spec.Name), slog.Any("error", err))
		}
		return false
	}
	s.mu.Lock()
	u := t.unit
	t.unit = nil
	t.status = Status{Name: t.spec.Name, State: StateParked, Since: time.Now()}
	s.mu.Unlock()
	if u != nil {
		stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.StopTimeout)
		if err := u.Stop(stopCtx); err != nil {
			s.log.Warn("parked tenant stopped with an error", slog.String("tenant", t.spec.Name), slog.Any("error", err))
		}
		cancel()
		s.log.Info("tenant parked: idle", slog.String("tenant", t.spec.Name), slog.Duration("idle_for", s.cfg.ParkAfter))
	} else {
		s.log.Info("tenant added, parked until it has work", slog.String("tenant", t.spec.Name))
	}
	s.cfg.Parker.SweepSoon(t.spec)
	return true
}

// wakeDue starts the parked tenants that Wake asked for.
func (s *Supervisor) wakeDue(ctx context.Context) {
	now := time.Now()
	var due []*tenant
	s.mu.Lock()
	for name := range s.wakes {
		if t := s.tenants[name]; t != nil && t.status.State == StateParked {
			t.status = Status{Name: name, State: StateStarting, Since: now}
			due = append(due, t)
		}
	}
	clear(s.wakes)
	s.mu.Unlock()
	s.each(due, func(t *tenant) {
		s.cfg.Parker.Unwatch(ctx, t.spec)
		s.log.Debug("waking a parked tenant", slog.String("tenant", t.spec.Name))
		s.startTenant(ctx, t)
	})
}

// each runs fn on every tenant of ts, Config.Parallel at a time.
func (s *Supervisor) each(ts []*tenant, fn func(*tenant)) {
	sem := make(chan struct{}, s.cfg.Parallel)
	var wg sync.WaitGroup
	for _, t := range ts {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			fn(t)
		})
	}
	wg.Wait()
}

// startTenant opens and starts t's unit; on failure t is Failing until
// its next try.
func (s *Supervisor) startTenant(ctx context.Context, t *tenant) {
	u, err := s.cfg.Open(ctx, t.spec)
	if err == nil {
		if err = u.Start(ctx); err != nil {
			stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.StopTimeout)
			_ = u.Stop(stopCtx) // release what Open took
			cancel()
		}
	}
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		t.status.Failures++
		t.status.State, t.status.Err = StateFailing, err.Error()
		t.status.NextTry = now.Add(s.cfg.Retry.Delay(t.status.Failures))
		if t.status.Failures == 1 {
			t.status.Since = now
		}
		s.log.Warn("tenant failed to start; the other tenants go on, and it is tried again", slog.String("tenant", t.spec.Name),
			slog.Any("error", err), slog.Int("failures", t.status.Failures), slog.Time("next_try", t.status.NextTry))
		return
	}
	t.unit = u
	t.status = Status{Name: t.spec.Name, State: StateRunning, Since: now}
	s.log.Info("tenant started", slog.String("tenant", t.spec.Name))
}

// stopTenant stops a tenant that went or changed, within StopTimeout.
func (s *Supervisor) stopTenant(ctx context.Context, t *tenant) {
	if t.status.State == StateParked {
		s.cfg.Parker.Unwatch(ctx, t.spec)
		s.log.Info("tenant stopped", slog.String("tenant", t.spec.Name), slog.Bool("parked", true))
	}
	if t.unit == nil {
		return
	}
	stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.StopTimeout)
	defer cancel()
	if err := t.unit.Stop(stopCtx); err != nil {
		s.log.Warn("tenant stopped with an error", slog.String("tenant", t.spec.Name), slog.Any("error", err))
		return
	}
	s.log.Info("tenant stopped", slog.String("tenant", t.spec.Name))
}

// retryDue starts again the failing tenants whose next try has come.
func (s *Supervisor) retryDue(ctx context.Context) {
	now := time.Now()
	var due []*tenant
	s.mu.Lock()
	for _, t := range s.tenants {
		if t.status.State == StateFailing && !now.Before(t.status.NextTry) {
			due = append(due, t)
		}
	}
	s.mu.Unlock()
	s.each(due, func(t *tenant) { s.startTenant(ctx, t) })
}

// armRetry sets timer to the earliest next try of a failing tenant.
func (s *Supervisor) armRetry(timer *time.Timer) {
	next := time.Hour
	now := time.Now()
	s.mu.Lock()
	for _, t := range s.tenants {
		if t.status.State == StateFailing {
			next = min(next, max(t.status.NextTry.Sub(now), 0))
		}
	}
	s.mu.Unlock()
	timer.Reset(next) // Go ≥ 1.23: Reset drops a pending tick
}

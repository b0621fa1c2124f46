package tenants_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/txbox/txbox/internal/backoff"
	"github.com/txbox/txbox/internal/testenv"
	"github.com/txbox/txbox/tenants"
)

// fakeUnit records its start and stop.
type fakeUnit struct {
	name             string
	started, stopped atomic.Bool
	startErr         error
}

func (u *fakeUnit) Start(context.Context) error {
	if u.startErr != nil {
		return u.startErr
	}
	u.started.Store(true)
	return nil
}

func (u *fakeUnit) Stop(context.Context) error { u.stopped.Store(true); return nil }

// world is a tenant list and the units opened for it.
type world struct {
	mu      sync.Mutex
	specs   []tenants.Spec
	listErr error
	// failOpen fails the next n opens of a tenant.
	failOpen map[string]int
	units    []*fakeUnit
}

func (w *world) list(context.Context) ([]tenants.Spec, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]tenants.Spec(nil), w.specs...), w.listErr
}

func (w *world) open(_ context.Context, sp tenants.Spec) (tenants.Unit, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.failOpen[sp.Name] > 0 {
		w.failOpen[sp.Name]--
		return nil, errors.New("connect: connection refused")
	}
	u := &fakeUnit{name: sp.Name}
	w.units = append(w.units, u)
	return u, nil
}

// unitsOf returns the units opened for name, oldest first.
func (w *world) unitsOf(name string) []*fakeUnit {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []*fakeUnit
	for _, u := range w.units {
		if u.name == name {
			out = append(out, u)
		}
	}
	return out
}

func (w *world) set(specs ...tenants.Spec) {
	w.mu.Lock()
	w.specs = specs
	w.mu.Unlock()
}

func start(t *testing.T, w *world) *tenants.Supervisor {
	t.Helper()
	s, err := tenants.New(tenants.Config{List: w.list, Open: w.open, Interval: time.Hour,
		Retry: backoff.Policy{Initial: 20 * time.Millisecond, Multiplier: 2, Max: 100 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Stop(context.Background()) })
	return s
}

func states(s *tenants.Supervisor) map[string]tenants.State {
	st, _ := s.Status()
	out := map[string]tenants.State{}
	for _, x := range st {
		out[x.Name] = x.State
	}
	return out
}

// TestSupervisorIsolatesAFailingTenant: the tenants start; one whose
// database refuses connections is Failing with its error while the
// others run, and starts by itself once its database is back.
func TestSupervisorIsolatesAFailingTenant(t *testing.T) {
	t.Parallel()
	w := &world{specs: []tenants.Spec{{Name: "acme"}, {Name: "globex"}, {Name: "initech"}}, failOpen: map[string]int{"globex": 3}}
	s := start(t, w)
	st, _ := s.Status()
	if len(st) != 3 || st[0].State != tenants.StateRunning || st[1].State != tenants.StateFailing || st[2].State != tenants.StateRunning {
		t.Fatalf("status %+v: want acme and initech running, globex failing", st)
	}
	if !strings.Contains(st[1].Err, "connection refused") || st[1].NextTry.IsZero() {
		t.Fatalf("globex status %+v: want its error and a next try", st[1])
	}
	testenv.WaitFor(t, 5*time.Second, "globex started after its failures", func() bool { return states(s)["globex"] == tenants.StateRunning })
	if n := len(w.unitsOf("acme")); n != 1 {
		t.Fatalf("acme was opened %d times, want once: a failing tenant must not touch the others", n)
	}
	if err := s.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"acme", "globex", "initech"} {
		if u := w.unitsOf(name); len(u) != 1 || !u[0].stopped.Load() {
			t.Fatalf("%s: units %v, want one, stopped", name, u)
		}
	}
}

// TestSupervisorFollowsTheList: on Reload a new tenant starts, a removed
// one stops, one whose Key changed is stopped and started again, and an
// unchanged one is left alone; a List that fails leaves them as they are.
func TestSupervisorFollowsTheList(t *testing.T) {
	t.Parallel()
	w := &world{specs: []tenants.Spec{{Name: "acme", Key: "1"}, {Name: "globex", Key: "1"}, {Name: "initech", Key: "1"}}}
	s := start(t, w)
	w.set(tenants.Spec{Name: "acme", Key: "1"}, tenants.Spec{Name: "globex", Key: "2"}, tenants.Spec{Name: "hooli", Key: "1"})
	s.Reload()
	testenv.WaitFor(t, 5*time.Second, "the new list applied", func() bool {
		st := states(s)
		_, initech := st["initech"]
		return st["hooli"] == tenants.StateRunning && !initech && len(w.unitsOf("globex")) == 2
	})
	if u := w.unitsOf("initech"); !u[0].stopped.Load() {
		t.Fatal("the removed tenant was not stopped")
	}
	if u := w.unitsOf("globex"); !u[0].stopped.Load() || u[1].stopped.Load() || !u[1].started.Load() {
		t.Fatal("the changed tenant was not stopped and started again")
	}
	if u := w.unitsOf("acme"); len(u) != 1 || u[0].stopped.Load() {
		t.Fatal("the unchanged tenant was touched")
	}
	w.mu.Lock()
	w.listErr = errors.New("relation \"tenants\" does not exist")
	w.mu.Unlock()
	s.Reload()
	testenv.WaitFor(t, 5*time.Second, "the list error reported", func() bool { _, e := s.Status(); return e != "" })
	if st := states(s); len(st) != 3 || st["acme"] != tenants.StateRunning {
		t.Fatalf("after a failed list: %v, want the three tenants still running", st)
	}
}

// TestSupervisorRejectsABadList: a first List that fails, names a tenant
// twice or gives an invalid name fails Start.
func TestSupervisorRejectsABadList(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		specs []tenants.Spec
		err   error
		want  string
	}{
		{err: errors.New("boom"), want: "boom"},
		{specs: []tenants.Spec{{Name: "acme"}, {Name: "acme"}}, want: "listed twice"},
		{specs: []tenants.Spec{{Name: "Acme"}}, want: "invalid tenant name"},
	} {
		w := &world{specs: tc.specs, listErr: tc.err}
		s, err := tenants.New(tenants.Config{List: w.list, Open: w.open})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Start(context.Background()); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Start with %v / %v: %v, want an error containing %q", tc.specs, tc.err, err, tc.want)
		}
		_ = s.Stop(context.Background())
	}
}

// idleUnit is a fakeUnit that reports itself idle since it started.
type idleUnit struct {
	fakeUnit
	since time.Time
}

func (u *idleUnit) IdleSince() time.Time { return u.since }

// fakeParker records what it watches; "mysql" tenants are not parkable.
type fakeParker struct {
	mu      sync.Mutex
	watched map[string]bool
	sweeps  atomic.Int32
}

func (p *fakeParker) Watch(_ context.Context, sp tenants.Spec) error {
	if strings.HasPrefix(sp.Name, "mysql") {
		return tenants.ErrNotParkable
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.watched[sp.Name] = true
	return nil
}

func (p *fakeParker) Unwatch(_ context.Context, sp tenants.Spec) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.watched, sp.Name)
}

func (p *fakeParker) SweepSoon(tenants.Spec) { p.sweeps.Add(1) }

func (p *fakeParker) isWatched(name string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.watched[name]
}

// TestSupervisorParksIdleTenants: a new tenant starts parked and watched
// (a sweep asked for), a Wake starts it and ends the watch, an idle unit
// is parked again after ParkAfter, a tenant the Parker cannot watch runs
// all the time, and a parked tenant that goes is unwatched.
func TestSupervisorParksIdleTenants(t *testing.T) {
	t.Parallel()
	var units sync.Map
	open := func(_ context.Context, sp tenants.Spec) (tenants.Unit, error) {
		u := &idleUnit{fakeUnit: fakeUnit{name: sp.Name}, since: time.Now()}
		units.Store(sp.Name, u)
		return u, nil
	}
	w := &world{}
	w.set(tenants.Spec{Name: "a"}, tenants.Spec{Name: "mysql1"})
	p := &fakeParker{watched: map[string]bool{}}
	sup, err := tenants.New(tenants.Config{List: w.list, Open: open, Interval: time.Hour, Parker: p, ParkAfter: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := sup.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sup.Stop(context.Background()) }()
	state := func(name string) tenants.State {
		st, _ := sup.Status()
		for _, s := range st {
			if s.Name == name {
				return s.State
			}
		}
		return ""
	}
	if s := state("a"); s != tenants.StateParked || !p.isWatched("a") || p.sweeps.Load() == 0 {
		t.Fatalf("new tenant a: state %s, watched %v, sweeps %d; want parked, watched, a sweep", s, p.isWatched("a"), p.sweeps.Load())
	}
	if _, ok := units.Load("a"); ok {
		t.Fatal("a parked tenant's unit was opened")
	}
	if s := state("mysql1"); s != tenants.StateRunning {
		t.Fatalf("a tenant the parker cannot watch is %s, want running", s)
	}
	sup.Wake("a")
	testenv.WaitFor(t, 5*time.Second, "a woken", func() bool { return state("a") == tenants.StateRunning })
	if p.isWatched("a") {
		t.Fatal("a woken tenant is still watched")
	}
	u, _ := units.Load("a")
	testenv.WaitFor(t, 5*time.Second, "a parked again", func() bool { return state("a") == tenants.StateParked })
	if !u.(*idleUnit).stopped.Load() || !p.isWatched("a") {
		t.Fatal("a parked tenant's unit was not stopped, or the tenant not watched")
	}
	if s := state("mysql1"); s != tenants.StateRunning {
		t.Fatalf("a tenant the parker cannot watch was %s after ParkAfter, want running", s)
	}
	w.set(tenants.Spec{Name: "mysql1"})
	sup.Reload()
	testenv.WaitFor(t, 5*time.Second, "a gone", func() bool { return state("a") == "" })
	if p.isWatched("a") {
		t.Fatal("a parked tenant that went is still watched")
	}
}

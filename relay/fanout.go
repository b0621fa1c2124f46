package relay

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/sender"
	"github.com/txbox/txbox/store"
)

// Fan-out (docs/concepts.md, "Fan-out"): an event type with routes is
// published as one row, as any other. A type with no route in key order
// takes the shared claim (relay/fanout_shared.go): the row is claimed
// once and sent to every route, and only the routes that did not
// acknowledge it get rows of their own. Otherwise the type's expander
// turns each such row into one row per route (store.Expander). Each route
// has a poller and a lane of its own for its rows, as a type with one
// route has. A route that is down, slow or rejecting holds back only its
// own rows.

// RouteSettings is one route of a fanned-out event type
// (EventSettings.Routes): where it goes, and the per-destination settings
// it sets itself. An unset field inherits the type's setting.
type RouteSettings struct {
	// Name names the route in the outbox rows (store.OutboxRow.Route),
	// the dead letters, the metrics and the logs: 1 to 64 of
	// [A-Za-z0-9._-]. Renaming a route is removing it and adding another.
	// Defaults to the route's sender name, which must then be unique
	// among the type's routes.
	Name string
	// Sender names the entry of Config.Senders to use. Defaults to the
	// type's sender.
	Sender *string
	// Route is where the route's messages go: its own fields, with
	// "{event_type}" replaced by the type; nothing is inherited from
	// Defaults.Route.
	sender.Route
	// BatchSize, MaxAttempts, Backoff, Ordering and InFlight are the
	// per-destination settings of EventSettings, for this route's own
	// rows. The shared claim (a type with no route in key order) sends
	// its batches, of the type's batch size and in-flight bound, to
	// every route; a route whose Ordering is key makes the type deliver
	// by rows per route instead (docs/concepts.md, "Fan-out").
	BatchSize   *int
	MaxAttempts *int
	Backoff     *BackoffSettings
	Ordering    *txbox.Ordering
	InFlight    *int
}

// RouteName is the route's name: Name, else the sender's name, else
// senderName (the type's sender).
func (r *RouteSettings) RouteName(senderName string) string {
	switch {
	case r.Name != "":
		return r.Name
	case r.Sender != nil:
		return *r.Sender
	}
	return senderName
}

// eventSettings is the route as the settings of a type with one route:
// own over the type's (own.Inherit(typ)).
func (r *RouteSettings) eventSettings(typ EventSettings) EventSettings {
	route := r.Route
	own := EventSettings{
		Sender: r.Sender, Route: &route, BatchSize: r.BatchSize, MaxAttempts: r.MaxAttempts,
		Backoff: r.Backoff, Ordering: r.Ordering, InFlight: r.InFlight,
	}
	typ.Route, typ.Routes = nil, nil
	return own.Inherit(typ)
}

func cloneRoutes(rs []RouteSettings) []RouteSettings {
	if rs == nil {
		return nil
	}
	out := make([]RouteSettings, len(rs))
	for i, r := range rs {
		out[i] = RouteSettings{
			Name: r.Name, Sender: pick(r.Sender, nil), Route: r.Route,
			BatchSize: pick(r.BatchSize, nil), MaxAttempts: pick(r.MaxAttempts, nil),
			Backoff: r.Backoff.inherit(nil), Ordering: pick(r.Ordering, nil), InFlight: pick(r.InFlight, nil),
		}
	}
	return out
}

// maxExpandBatch bounds the events one expansion takes: the most the
// MySQL and SQLite expanders take in one call, so that a full round is
// recognised as full and followed by another at once.
const maxExpandBatch = 1000

// fansOut reports whether the type's settings fan it out.
func fansOut(ev EventSettings) bool { return len(ev.Routes) > 1 }

// routesFor resolves the routes of a fanned-out type, in their order (the
// order is their index in store.RouteRowID). path is the Go path of the
// type's entry.
func (c *Config) routesFor(eventType, path string, ev EventSettings) ([]*typeSettings, error) {
	typ := ev.Inherit(c.Defaults)
	typSender := deref(typ.Sender)
	if typSender == "" && len(c.Senders) == 1 {
		for name := range c.Senders {
			typSender = name
		}
	}
	out := make([]*typeSettings, 0, len(ev.Routes))
	names := map[string]int{}
	dests := map[string]int{}
	for i := range ev.Routes {
		r := &ev.Routes[i]
		rp := fmt.Sprintf("%s.Routes[%d]", path, i)
		s, err := c.resolve(eventType, rp, r.eventSettings(ev), c.Defaults)
		if err != nil {
			return nil, err
		}
		s.routeName = r.RouteName(typSender)
		if r.Name == "" && r.Sender == nil {
			s.routeName = s.senderName
		}
		if !store.ValidRouteName(s.routeName) {
			return nil, &ConfigError{Component: "relay", Field: field(rp, "Name"), Reason: fmt.Sprintf("%q is not a valid route name: 1 to 64 of A-Z a-z 0-9 . _ -", s.routeName)}
		}
		if j, dup := names[s.routeName]; dup {
			return nil, &ConfigError{Component: "relay", Field: field(rp, "Name"), Reason: fmt.Sprintf("route name %q is also the name of routes[%d]: give each route of a sender a name", s.routeName, j)}
		}
		names[s.routeName] = i
		dest := s.senderName + " " + sender.DestinationOf(s.sender, s.route)
		if j, dup := dests[dest]; dup {
			return nil, &ConfigError{Component: "relay", Field: rp, Reason: fmt.Sprintf("goes to the same destination as routes[%d] (sender %s, %s): every route of a type needs a destination of its own", j, s.senderName, sender.DestinationOf(s.sender, s.route))}
		}
		dests[dest] = i
		out = append(out, s)
	}
	return out, nil
}

// validateRoutes checks what Validate cannot: the routes' senders and
// names, and that the store can expand events.
func (c *Config) validateRoutes() error {
	for _, t := range sortedKeys(c.Events) {
		ev := c.Events[t]
		p := index("Events", t)
		if !fansOut(ev) {
			continue
		}
		if _, ok := c.Store.(store.Expander); !ok {
			return &ConfigError{Component: "relay", Field: field(p, "Routes"), Reason: "fan-out routes need a store that can expand events (store.Expander)"}
		}
		if _, err := c.routesFor(t, p, ev); err != nil {
			return err
		}
	}
	return nil
}

// singleRoute folds a one-entry Routes into the type's own settings.
func singleRoute(ev EventSettings) EventSettings {
	if len(ev.Routes) != 1 {
		return ev
	}
	return ev.Routes[0].eventSettings(ev)
}

// typeSource is what the relay keeps of one event type's table source: a
// poller, or a fanout.
type typeSource interface {
	wake()
	healths() []TypeHealth
}

func (p *poller) healths() []TypeHealth { return []TypeHealth{p.health()} }

// fanout is the table source of a fanned-out type: its expander and one
// poller per route.
type fanout struct {
	eventType string
	routes    []string
	expander  store.Expander
	pollers   []*poller
	// shared, when set, is the shared claim's poller (relay/
	// fanout_shared.go); the expander then does not run.
	shared    *poller
	sharedFan *sharedFan
	polling   polling
	limit     int
	log       *slog.Logger
	hooks     []txbox.RelayHook
	wakeC     chan struct{}

	mu      sync.Mutex
	lastErr string
}

func (f *fanout) wake() {
	select {
	case f.wakeC <- struct{}{}:
	default:
	}
	for _, p := range f.pollers {
		p.wake()
	}
	if f.shared != nil {
		f.shared.wake()
	}
}

func (f *fanout) healths() []TypeHealth {
	f.mu.Lock()
	lastErr := f.lastErr
	f.mu.Unlock()
	if lastErr != "" {
		lastErr = "expanding the type's events: " + lastErr
	}
	if f.shared != nil {
		lastErr = f.sharedError()
	}
	out := make([]TypeHealth, 0, len(f.pollers))
	for _, p := range f.pollers {
		th := p.health()
		if th.LastError == "" && lastErr != "" {
			th.LastError = lastErr
		}
		out = append(out, th)
	}
	return out
}

// run expands the type's new events while the relay runs: at once after
// a wake-up or a full round, else after the type's polling delay, which
// grows while rounds find nothing (as a poller's does).
func (f *fanout) run(ctx context.Context) {
	pace := pollingState{strategy: newPollingDelays(f.polling)}
	timer := time.NewTimer(0)
	defer timer.Stop()
	fails := 0
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		case <-f.wakeC:
			pace.woken()
			if !timer.Stop() {
				select {
				case <-timer.C:
				default:
				}
			}
		}
		n, err := f.expander.OutboxExpand(ctx, &store.OutboxExpandParams{EventType: f.eventType, Routes: f.routes, Limit: f.limit})
		f.mu.Lock()
		if err != nil {
			f.lastErr = err.Error()
		} else {
			f.lastErr = ""
		}
		f.mu.Unlock()
		for _, h := range f.hooks {
			h.OnMaintenance(txbox.MaintenanceEvent{Job: txbox.JobExpand, Count: n, Err: err})
		}
		var delay time.Duration
		switch {
		case err != nil:
			if ctx.Err() != nil {
				return
			}
			fails++
			delay = errorBackoff.Delay(fails)
			f.log.Warn("expanding fan-out events failed", slog.Any("error", err), slog.Duration("retry_in", delay))
		case n > 0:
			fails = 0
			for _, p := range f.pollers {
				p.wake()
			}
			if n < f.limit {
				delay = pace.next(n, f.limit)
			}
		default:
			fails = 0
			delay = pace.next(0, f.limit)
		}
		timer.Reset(delay)
	}
}

// startFanoutLocked starts the expander and the route pollers of the
// fanned-out type t. r.mu is held.
func (r *Relay) startFanoutLocked(t string) error {
	ev := r.cfg.Events[t]
	routes, err := r.cfg.routesFor(t, index("Events", t), ev)
	if err != nil {
		return err
	}
	typ, err := r.cfg.settingsFor(t)
	if err != nil {
		return err
	}
	f := &fanout{
		// One expansion is one transaction; the dialects cap it at
		// maxExpandBatch events.
		eventType: t, expander: r.cfg.Store.(store.Expander), polling: typ.polling, limit: min(typ.batchSize, maxExpandBatch),
		log:   r.log.With(slog.String("event_type", t)),
		hooks: r.cfg.Hooks, wakeC: make(chan struct{}, 1),
	}
	for _, s := range routes {
		f.routes = append(f.routes, s.routeName)
		p := newPoller(r.pollerDeps(), s)
		f.pollers = append(f.pollers, p)
		if s.claim == txbox.ClaimLock {
			r.locks.added(s.inFlight)
		}
		r.life.Go(p.run)
	}
	r.pollers[t] = f
	if sharedEligible(routes, r.cfg.Stream.Enabled) {
		r.startSharedLocked(f, sharedSettings(typ, routes))
		return nil
	}
	ctx := r.runCtx
	r.life.Go(func() { f.run(ctx) })
	return nil
}

// startSharedLocked starts the shared claim of the fanned-out type f
// (relay/fanout_shared.go), with settings s, in place of its expander.
// r.mu is held.
func (r *Relay) startSharedLocked(f *fanout, s *typeSettings) {
	sf := &sharedFan{
		eventType: f.eventType, routeNames: f.routes, routes: f.pollers, splitter: f.expander,
		hooks: f.hooks, log: f.log, detachedUntil: make([]time.Time, len(f.pollers)),
	}
	p := newPoller(r.pollerDeps(), s)
	p.lane.circuit = r.circuits.unjudged()
	p.lane.deliverFn = func(b batch, t ticket, taken time.Time) { sf.deliver(p.lane, b, t, taken) }
	f.shared, f.sharedFan = p, sf
	if s.claim == txbox.ClaimLock {
		r.locks.added(s.inFlight)
	}
	r.life.Go(p.run)
}

// sharedError is the shared claim's last claim or split error, for the
// routes' health.
func (f *fanout) sharedError() string {
	if e := f.shared.health().LastError; e != "" {
		return "claiming the type's events: " + e
	}
	f.sharedFan.mu.Lock()
	defer f.sharedFan.mu.Unlock()
	if f.sharedFan.lastErr != "" {
		return "splitting the type's events: " + f.sharedFan.lastErr
	}
	return ""
}

// dropRoutesRound fails the pending rows of routes that left the
// configuration, so they go to the dead letters (where an operator sees
// and can delete or redrive them) rather than wait for ever or vanish. A
// type this relay does not fan out keeps its rows of route "" only.
func (r *Relay) dropRoutesRound(ctx context.Context) (int, error) {
	x, ok := r.cfg.Store.(store.Expander)
	if !ok {
		return 0, nil
	}
	pending, err := x.OutboxPendingRoutes(ctx)
	if err != nil {
		return 0, err
	}
	total := 0
	for _, tr := range pending {
		if slices.Contains(r.configuredRoutes(tr.EventType), tr.Route) {
			continue
		}
		r.log.Warn("a route with pending deliveries is no longer configured; dead-lettering them",
			slog.String("event_type", tr.EventType), slog.String("route", tr.Route), slog.Int64("pending", tr.Pending))
		reason := fmt.Sprintf("%sroute %q of event type %s was removed from the configuration", store.NotSentPrefix, tr.Route, tr.EventType)
		for {
			n, err := x.OutboxDropRoute(ctx, &store.OutboxDropRouteParams{EventType: tr.EventType, Route: tr.Route, Reason: reason, Limit: r.cfg.MaintenanceBatchSize})
			total += n
			if err != nil {
				return total, err
			}
			if n < r.cfg.MaintenanceBatchSize {
				break
			}
		}
	}
	if total > 0 {
		sendTrigger(r.triggers.deadLetter, triggerNow)
	}
	return total, nil
}

// routeSettings are the settings of one route of eventType: the type's
// own for route "", nil when the type has no such route.
func (c *Config) routeSettings(eventType, route string) (*typeSettings, error) {
	ev, ok := c.Events[eventType]
	if route == "" || !ok || !fansOut(ev) {
		if route != "" {
			return nil, nil
		}
		return c.settingsFor(eventType)
	}
	routes, err := c.routesFor(eventType, index("Events", eventType), ev)
	if err != nil {
		return nil, err
	}
	for _, s := range routes {
		if s.routeName == route {
			return s, nil
		}
	}
	return nil, nil
}

// streamRoutes are the resolved routes of a fanned-out type, in their
// order, and nil for any other type: the WAL source hands each of the
// type's events to every route's lane (relay/stream.go, fanOut).
func (c *Config) streamRoutes(eventType string) ([]*typeSettings, error) {
	ev, ok := c.Events[eventType]
	if !ok || !fansOut(ev) {
		return nil, nil
	}
	return c.routesFor(eventType, index("Events", eventType), ev)
}

// configuredRoutes are the route names of a fanned-out type, nil for any
// other type.
func (r *Relay) configuredRoutes(t string) []string {
	ev, ok := r.cfg.Events[t]
	if !ok || !fansOut(ev) {
		return nil
	}
	routes, err := r.cfg.routesFor(t, index("Events", t), ev)
	if err != nil {
		return nil
	}
	names := make([]string, len(routes))
	for i, s := range routes {
		names[i] = s.routeName
	}
	return names
}

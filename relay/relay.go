package relay

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/internal/startstop"
	"github.com/txbox/txbox/store"
)

// Sentinel errors of the relay's lifecycle.
var (
	// ErrAlreadyStarted is returned by a second call to Start.
	ErrAlreadyStarted = errors.New("relay: already started")
	// ErrNotStarted is returned by Stop before Start.
	ErrNotStarted = errors.New("relay: not started")
	// ErrStopped is returned by Start after Stop (even a Stop before
	// Start): a Relay runs once.
	ErrStopped = errors.New("relay: stopped")
	// ErrStoreUnreachable is returned by Start when the database did not
	// answer its check (unreachable, a wrong DSN or password, txbox's
	// schema missing) within Start's context. The error also wraps the
	// driver's, which errors.Is and errors.As find.
	ErrStoreUnreachable = errors.New("relay: store unreachable")
)

// finishTimeout bounds one finish statement. Finishes run without the
// caller's cancellation (a shutdown must not strand rows it could still
// mark), so they need their own bound.
const finishTimeout = 30 * time.Second

// finishTimeoutAfterDeadline bounds the finishes still running after
// Stop's context expired: best effort, then the rows' leases expire and
// recovery puts them back.
const finishTimeoutAfterDeadline = 2 * time.Second

// Relay delivers outbox rows to senders. Create it with New, run it with
// Start and stop it with Stop. A Relay is safe for concurrent use.
type Relay struct {
	cfg      Config
	log      *slog.Logger
	circuits *circuitSet
	// fingerprint fingerprints dead letters (Config.Fingerprinter).
	fingerprint store.Fingerprinter

	// life is the relay's start, goroutines and stop
	// (internal/startstop).
	life startstop.Lifetime
	mu   sync.Mutex
	// pollers are the table sources by event type: a *poller, or a
	// *fanout for a type with routes.
	pollers map[string]typeSource
	// runCtx ends when Stop begins: no new claims. hardCtx ends when
	// Stop's context expires: in-flight sends abort. Both are life's,
	// set by Start.
	runCtx  context.Context
	hardCtx context.Context

	jobsMu  sync.Mutex
	jobErrs map[string]string
	// triggers tell the background jobs what the pollers saw.
	triggers jobTriggers
	// locks bounds the lock-claimed batches of all pollers (LockBudget).
	locks *claimBudget
	// looks start the pollers of the new types wake-ups name (wake.go).
	looks *wakeDiscovery
	// stream is WAL mode's source, nil in table mode.
	stream *streamSource
}

// New checks cfg and returns a Relay that is not running yet. Every
// configuration problem is a *ConfigError (matching ErrInvalidConfig) that
// names the Go path of the field, such as Defaults.Polling.MaxDelay
// (ConfigError). With Stream.Enabled the
// store must be a store.Streamer, and Stream.PauseLimit (unset: half the
// store's sender timeout) below its sender timeout.
func New(cfg Config) (*Relay, error) {
	if storeSource(cfg.Store) == store.SourceWAL {
		// WAL mode is the store's switch: its producers' events are in the
		// log, and a relay that did not stream would never deliver them.
		cfg.Stream.Enabled = true
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	log := cfg.Logger.With(slog.String("component", "txbox.relay"), slog.String("instance", cfg.InstanceID))
	if cfg.Tenant != "" {
		log = log.With(slog.String("tenant", cfg.Tenant))
	}
	r := &Relay{
		cfg:      cfg,
		log:      log,
		pollers:  make(map[string]typeSource),
		jobErrs:  make(map[string]string),
		triggers: jobTriggers{recover: make(chan jobTrigger, 1), deadLetter: make(chan jobTrigger, 1), fingerprint: make(chan jobTrigger, 1)},
		locks:    newClaimBudget(cfg.lockBudget()),
		looks:    newWakeDiscovery(),
	}
	r.fingerprint = cfg.Fingerprinter()
	r.circuits = newCircuitSet(sortedKeys(cfg.Senders), cfg.Circuit, time.Now, r.onCircuit)
	return r, nil
}

// Start checks the store, then starts the pollers of the configured
// event types, discovery, the wake-up listener (when the store implements
// store.Waker) and the background jobs, and returns. The relay runs until
// Stop.
//
// Start checks what it can reach. The database must answer one read of
// the outbox table (the pending types discovery looks for) within ctx, or within 15 s when ctx has no earlier
// deadline: otherwise Start returns an error matching ErrStoreUnreachable
// and the driver's error, and the relay is not started (Start may be
// called again), so a wrong DSN fails at once instead of a relay that
// logs failed claims for ever. Config.StartWithoutStore skips that check,
// for a relay started before its database is up: it then retries its
// claims until the database answers. Senders that can check their
// connection (sender.ConnectionChecker) are checked after Start returned,
// and one that cannot be reached is logged as a warning, not an error: a
// broker down at start must not stop the others' deliveries.
//
// ctx bounds the check and carries values; the running relay is detached
// from its cancellation, so that a request-scoped context cannot stop the
// relay by accident.
func (r *Relay) Start(ctx context.Context) error {
	switch began, ending := r.life.State(); {
	case ending:
		return ErrStopped
	case began:
		return ErrAlreadyStarted
	}
	// Before r.mu: Health takes it, and a probe must not wait for the
	// database's answer.
	if err := r.checkStore(ctx); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.life.Begin(context.WithoutCancel(ctx)); err != nil {
		if errors.Is(err, startstop.ErrStopped) {
			return ErrStopped
		}
		return ErrAlreadyStarted
	}
	r.runCtx, r.hardCtx = r.life.Run(), r.life.Hard()

	for _, t := range sortedKeys(r.cfg.Events) {
		if err := r.startPollerLocked(t); err != nil {
			return err
		}
	}
	r.locks.warnIfShort(r.log)
	c := &r.cfg
	r.goJob(txbox.JobRecover, newJobSchedule(c.RecoverInterval, c.RecoverMaxInterval), r.triggers.recover, r.recoverRound)
	r.goJob(txbox.JobDeadLetterMove, newJobSchedule(c.DeadLetterInterval, c.DeadLetterMaxInterval), r.triggers.deadLetter, r.deadLetterRound)
	r.goJob(txbox.JobDeadLetterFingerprint, newJobSchedule(c.DeadLetterInterval, c.DeadLetterMaxInterval), r.triggers.fingerprint, r.fingerprintRound)
	if c.DiscoverInterval > 0 {
		r.goJob(txbox.JobDiscover, newJobSchedule(c.DiscoverInterval, c.DiscoverMaxInterval), nil, r.discoverRound)
	}
	if _, ok := c.Store.(store.Expander); ok {
		// Routes that left the configuration (docs/concepts.md,
		// "Fan-out"): looked for on the dead-letter sweep's schedule
		// (at start, then backing off to dead-letter-max-interval), whether
		// or not a type fans out now: a removed route's rows wait either
		// way.
		r.goJob(txbox.JobDropRoutes, newJobSchedule(c.DeadLetterInterval, c.DeadLetterMaxInterval), nil, r.dropRoutesRound)
	}
	if !r.cfg.Cleanup.Disabled {
		r.life.Go(r.cleanupLoop)
	}
	r.startHeartbeat()
	r.startWakeDiscovery()
	if c.Stream.Enabled {
		r.stream = newStreamSource(r.sourceEnv(), r.cfg.Stream.withDefaults(), r.cfg.Store.(store.Streamer)) // validated by New
		r.stream.start()
	}
	if w, ok := r.cfg.Store.(store.Waker); ok {
		r.life.Go(func() { r.listen(w) })
	}
	r.checkSenders()
	r.log.Info("relay started", slog.Int("configured_types", len(r.cfg.Events)))
	return nil
}

// Stop stops claiming at once, lets the batches in flight finish, and
// returns when every goroutine of the relay has ended. When ctx ends
// first, sends still in flight are cancelled and their rows released
// (best effort; rows that cannot be released are recovered when their
// lease expires), and Stop returns ctx's error after the goroutines
// ended. A second Stop waits for the first, bounded by its own ctx.
// Stop before Start returns ErrNotStarted, and the relay can then no
// longer start. Stop does not close the store or the senders.
func (r *Relay) Stop(ctx context.Context) error {
	err := r.life.End(ctx, func() {
		r.releaseCleanupLease()
		r.removeHeartbeat()
		r.log.Info("relay stopped")
	})
	if errors.Is(err, startstop.ErrNotStarted) {
		return ErrNotStarted
	}
	return err
}

// Started is closed once Start succeeded.
func (r *Relay) Started() <-chan struct{} { return r.life.Started() }

// Stopped is closed once the relay stopped: every goroutine ended and
// Stop's clean-up ran (or Stop was called before Start).
func (r *Relay) Stopped() <-chan struct{} { return r.life.Stopped() }

// startPollerLocked starts the poller of event type t. r.mu is held.
func (r *Relay) startPollerLocked(t string) error {
	if _, ok := r.pollers[t]; ok {
		return nil
	}
	if fansOut(r.cfg.Events[t]) {
		return r.startFanoutLocked(t)
	}
	s, err := r.cfg.settingsFor(t)
	if err != nil {
		return err
	}
	p := newPoller(r.pollerDeps(), s)
	r.pollers[t] = p
	if s.claim == txbox.ClaimLock {
		r.locks.added(s.inFlight)
	}
	r.life.Go(p.run)
	return nil
}

// running reports whether the relay started and is not stopping.
func (r *Relay) running() bool {
	began, ending := r.life.State()
	return began && !ending
}

// laneDeps is what the relay's lanes take from it. Start has set the
// contexts.
func (r *Relay) laneDeps() laneDeps {
	hooks := append(slices.Clip(r.cfg.Hooks), r.triggers)
	d := laneDeps{hooks: hooks, log: r.log, circuits: r.circuits, hard: r.hardCtx, life: &r.life, tenant: r.cfg.Tenant}
	if r.cfg.TracerProvider != nil {
		d.tracer = r.cfg.TracerProvider.Tracer(tracerName)
	}
	return d
}

// pollerDeps is what the relay's pollers take from it.
func (r *Relay) pollerDeps() pollerDeps {
	return pollerDeps{laneDeps: r.laneDeps(), store: r.cfg.Store, run: r.runCtx, locks: r.locks}
}

// ensurePollers starts pollers for the types that have none yet.
func (r *Relay) ensurePollers(types []string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ending := r.life.State(); ending {
		return 0
	}
	n := 0
	for _, t := range types {
		if _, ok := r.pollers[t]; ok {
			continue
		}
		if err := txbox.ValidateEventType(t); err != nil {
			r.log.Warn("pending rows have an invalid event type; not delivered", slog.Any("error", err))
			continue
		}
		if err := r.startPollerLocked(t); err != nil {
			r.log.Warn("cannot start poller", slog.String("event_type", t), slog.Any("error", err))
			continue
		}
		r.log.Info("discovered event type", slog.String("event_type", t))
		n++
	}
	r.locks.warnIfShort(r.log)
	return n
}

func (r *Relay) onCircuit(ev txbox.CircuitEvent) {
	attrs := []any{slog.String("sender", ev.Sender), slog.String("state", ev.State.String())}
	if ev.Connection {
		attrs = append(attrs, slog.Bool("connection", true))
	} else {
		attrs = append(attrs, slog.String("destination", ev.Destination))
	}
	switch {
	case ev.State == txbox.CircuitOpen && ev.Connection:
		attrs = append(attrs, slog.Duration("cool_down", ev.CoolDown), slog.Any("error", ev.Err))
		r.log.Warn("circuit opened: sender disconnected, pausing every destination of the sender", attrs...)
	case ev.State == txbox.CircuitOpen:
		attrs = append(attrs, slog.Duration("cool_down", ev.CoolDown), slog.Any("error", ev.Err))
		r.log.Warn("circuit opened: destination unavailable, pausing the types routed to it", attrs...)
	default:
		r.log.Info("circuit state changed", attrs...)
	}
	for _, h := range r.cfg.Hooks {
		h.OnCircuit(ev)
	}
}

// Health is a snapshot of a relay's state for status pages and probes.
type Health struct {
	// InstanceID is Config.InstanceID.
	InstanceID string
	// Running is true between Start and Stop.
	Running bool
	// Stream is WAL mode's stream, nil in table mode.
	Stream *StreamHealth
	// Degraded is true when a circuit is not closed or the last claim of
	// some type or the last round of some job failed.
	Degraded bool
	// Circuits has, per sender (sorted by name), the sender's connection
	// circuit, then one entry per destination that a poller is routed to,
	// sorted by destination.
	Circuits []CircuitHealth
	// Types has one entry per poller, sorted by event type.
	Types []TypeHealth
	// JobErrors maps a job name (Job* constants) to the error of its last
	// round, for jobs whose last round failed.
	JobErrors map[string]string
	// LockClaims is the state of the lock claims' budget
	// (Config.LockBudget).
	LockClaims LockClaimHealth
}

// CircuitHealth is one circuit: a destination's, or a sender's
// connection (docs/concepts.md, "Outages versus poison").
type CircuitHealth struct {
	// Sender names the sender.
	Sender string
	// Destination names the destination (sender.DestinationOf of the
	// routes using it); empty for the connection circuit.
	Destination string
	// Connection is true for the sender's connection circuit, which
	// pauses every destination of the sender while it is not closed.
	Connection bool
	// State is the circuit's state.
	State txbox.CircuitState
	// LastError is the failure that last opened the circuit, empty once
	// it closed again.
	LastError string
}

// TypeHealth is one event type's poller.
type TypeHealth struct {
	// EventType is the poller's type.
	EventType string
	// Route is the fan-out route the poller delivers (docs/concepts.md,
	// "Fan-out"); empty for a type with one route. A fanned-out type has
	// one TypeHealth per route, in the routes' order.
	Route string
	// Sender names the sender the type is routed to.
	Sender string
	// Destination names the destination on that sender the type's route
	// resolves to (see CircuitHealth).
	Destination string
	// LastPoll is when the last claim returned.
	LastPoll time.Time
	// LastError is the last claim's error, empty when it succeeded.
	LastError string
	// Delay is the current polling delay.
	Delay time.Duration
	// InFlight is the number of batches between claim and finish.
	InFlight int
	// SendingSince is when the oldest send of the type still waiting for
	// its destination began; zero when none is.
	SendingSince time.Time
	// Claim is the type's claim mode.
	Claim txbox.ClaimMode
	// RejectingSince is when the destination began refusing the type's
	// messages (rejected or failed, not an outage) without acknowledging
	// any since; zero while it acknowledges. LastRejected is when it last
	// refused one, and LastRejection that message's error.
	RejectingSince, LastRejected time.Time
	LastRejection                string
}

// Health returns a snapshot of the relay's state.
func (r *Relay) Health() Health {
	r.mu.Lock()
	h := Health{InstanceID: r.cfg.InstanceID, Running: r.running(), JobErrors: map[string]string{}, LockClaims: r.locks.health()}
	pollers := make([]typeSource, 0, len(r.pollers))
	for _, p := range r.pollers {
		pollers = append(pollers, p)
	}
	stream := r.stream
	r.mu.Unlock()
	h.Circuits = r.circuits.health()
	for _, ch := range h.Circuits {
		if ch.State != txbox.CircuitClosed {
			h.Degraded = true
		}
	}
	for _, p := range pollers {
		for _, th := range p.healths() {
			if th.LastError != "" {
				h.Degraded = true
			}
			h.Types = append(h.Types, th)
		}
	}
	sort.SliceStable(h.Types, func(i, j int) bool { return h.Types[i].EventType < h.Types[j].EventType })
	r.jobsMu.Lock()
	for k, v := range r.jobErrs {
		h.JobErrors[k] = v
		h.Degraded = true
	}
	r.jobsMu.Unlock()
	if stream != nil {
		h.Stream = stream.healthSnapshot()
		if h.Stream.State == StreamFailing || h.Stream.Lagging || h.Stream.State == StreamStarting {
			h.Degraded = true
		}
		h.Types = append(h.Types, stream.laneHealth()...)
		sort.SliceStable(h.Types, func(i, j int) bool { return h.Types[i].EventType < h.Types[j].EventType })
	}
	return h
}

func (r *Relay) setJobErr(job string, err error) {
	r.jobsMu.Lock()
	defer r.jobsMu.Unlock()
	if err == nil {
		delete(r.jobErrs, job)
		return
	}
	r.jobErrs[job] = err.Error()
}

// String describes the relay for logs.
func (r *Relay) String() string { return fmt.Sprintf("relay %s", r.cfg.InstanceID) }

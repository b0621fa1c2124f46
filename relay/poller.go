package relay

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/internal/backoff"
	"github.com/txbox/txbox/store"
)

// probeBatchSize bounds the batch a half-open circuit lets through: a probe
// should cost little when the destination is still down.
const probeBatchSize = 10

// pollerDeps is what a poller takes from its relay: the relay hands each
// of its pollers the same (Relay.pollerDeps), and a test can build one
// without a relay. The lane's part (laneDeps) is what its lane takes.
type pollerDeps struct {
	laneDeps
	// store claims and finishes the rows.
	store pollerStore
	// run ends when Stop begins: no new claims.
	run context.Context
	// locks bounds the lock-claimed batches of all pollers.
	locks *claimBudget
}

// pollerStore is the part of store.Driver a poller uses.
type pollerStore interface {
	OutboxClaim(ctx context.Context, params *store.OutboxClaimParams) ([]*store.OutboxRow, error)
	OutboxFinish(ctx context.Context, params *store.OutboxFinishParams) (*store.OutboxFinishResult, error)
}

// poller is the table source of one event type: it claims the type's rows
// and hands each batch to the type's lane (relay/lane.go), which sends and
// finishes it.
type poller struct {
	deps pollerDeps
	lane *lane
	s    *typeSettings
	log  *slog.Logger
	// claimBatch claims in the type's claim mode.
	claimBatch claimFunc
	wakeC      chan struct{}
	// againC asks for a claim at once: an ordered batch finished
	// (relay/ordered.go).
	againC chan struct{}

	// Group finish: see finishCoalesced.
	fmu       sync.Mutex
	finishing bool
	fqueue    []*finishReq

	mu       sync.Mutex
	lastPoll time.Time
	lastErr  string
	delay    time.Duration
	helpers  int
	// claimErrs are the failed claims in a row: the wait after each
	// (errorBackoff, or connLostBackoff after a lost connection).
	claimErrs dbRetry
	// horizonCuts are the claims in a row that the commit horizon cut: the
	// wait after each (horizonBackoff, relay/ordered.go).
	horizonCuts backoff.Streak
	horizonWait time.Duration
}

func newPoller(deps pollerDeps, s *typeSettings) *poller {
	l := newLane(deps.laneDeps, s)
	p := &poller{
		deps:   deps,
		lane:   l,
		s:      s,
		log:    l.log,
		wakeC:  make(chan struct{}, 1),
		againC: make(chan struct{}, 1),

		claimErrs:   newDBRetry(),
		horizonCuts: backoff.Streak{Policy: horizonBackoff},
	}
	p.claimBatch = p.leaseClaim
	if s.claim == txbox.ClaimLock {
		// New checked that the store has a lock claim.
		p.claimBatch = p.lockClaim(deps.store.(store.OutboxLocker))
	}
	if s.ordered() {
		l.finished = p.batchDone
	}
	return p
}

func (p *poller) wake() {
	select {
	case p.wakeC <- struct{}{}:
	default:
	}
}

func (p *poller) health() TypeHealth {
	th := p.lane.health()
	p.mu.Lock()
	defer p.mu.Unlock()
	th.LastPoll, th.LastError, th.Delay = p.lastPoll, p.lastErr, p.delay
	return th
}

// run is the poller's loop: wait, take an in-flight slot, ask the circuit,
// claim, hand the batch to a goroutine, choose the next delay.
func (p *poller) run() {
	ctx := p.deps.run
	pace := pollingState{strategy: newPollingDelays(p.s.polling), ordered: p.s.ordered()}
	var delay time.Duration // no initial delay: poll at once
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	select {
	case <-p.wakeC:
		// Started by a wake-up (Relay.Wake): the first poll may come
		// before the waking publisher's commit.
		pace.woken()
	default:
	}
	for {
		if delay > 0 && !p.sleep(ctx, timer, delay, &pace) {
			return
		}
		t, ok := p.lane.acquire(ctx)
		if !ok {
			return
		}
		if !t.ok {
			if !p.waitCircuit(ctx, t, timer) {
				return
			}
			delay = 0
			continue
		}
		limit := p.lane.batchLimit(t)
		claimStart := time.Now()
		b, took, err := p.claim(limit)
		if err != nil {
			p.lane.release(t)
			if ctx.Err() != nil {
				return
			}
			delay = p.claimFailed(err)
			p.emitPoll(txbox.PollEvent{EventType: p.s.eventType, Route: p.s.routeName, Limit: limit, NextDelay: delay, Duration: took, Err: err}, false)
			continue
		}
		p.claimSucceeded()
		n := claimed(b)
		delay = p.horizonDelay(pace.next(n, limit)) // relay/ordered.go
		p.mu.Lock()
		p.delay = delay
		p.mu.Unlock()
		p.emitPoll(txbox.PollEvent{EventType: p.s.eventType, Route: p.s.routeName, Claimed: n, Limit: limit, Full: n == limit, NextDelay: delay, Duration: took}, false)
		if n == 0 {
			p.lane.release(t)
			continue
		}
		p.lane.dispatch(b, t, claimStart)
		if n == p.s.batchSize {
			p.startHelper(ctx)
		}
	}
}

// sleep waits delay, or less when the poller is woken or asked to claim
// again. It returns false when the relay stops.
func (p *poller) sleep(ctx context.Context, timer *time.Timer, delay time.Duration, pace *pollingState) bool {
	timer.Reset(delay)
	select {
	case <-ctx.Done():
		return false
	case <-timer.C:
	case <-p.wakeC:
		pace.woken()
		timer.Stop() // Go ≥ 1.23: no stale tick remains after Stop
	case <-p.againC:
		pace.strategy.reset()
		timer.Stop()
	}
	return true
}

// claim runs one claim statement, in the poller's claim mode (claimBatch).
// Stop does not interrupt it (only Stop's deadline does): a claim
// cancelled mid-flight may still commit on the server, and its rows would
// then wait out their lease before anyone could deliver them. A claim that
// completes during a graceful stop is delivered like any other batch. A
// nil batch means no rows.
//
// No claim starts once Stop has begun: it returns errStopping instead.
// The check is here, at the one place every claimer goes through, because
// a select between the stop signal and a free slot picks either at random
// when both are ready.
func (p *poller) claim(limit int) (b batch, took time.Duration, err error) {
	if p.deps.run.Err() != nil {
		return nil, 0, errStopping
	}
	ctx, cancel := context.WithTimeout(p.deps.hard, finishTimeout)
	defer cancel()
	start := time.Now()
	params := &store.OutboxClaimParams{
		EventType:     p.s.eventType,
		Route:         p.s.routeName,
		Limit:         limit,
		LeaseDuration: p.s.leaseDuration,
	}
	if p.s.ordered() {
		params.OrderedByKey, params.KeyRun = true, keyRun(p.s.batchSize, p.s.inFlight)
		params.HorizonOff = !p.s.commitHorizon
		defer func() { p.horizonCut(params.HorizonCut, claimed(b)) }() // relay/ordered.go
	}
	b, err = p.claimBatch(ctx, params)
	return b, time.Since(start), err
}

// claimed is how many rows b holds (0 for none).
func claimed(b batch) int {
	if b == nil {
		return 0
	}
	return len(b.Rows())
}

// startHelper starts one more claimer while the type has a backlog, up to
// maxHelpers. A claim is a write statement whose latency, not the
// database's capacity, bounds a single claimer: with one claimer a
// backlog drains at batch-size / claim-latency however many batches may be
// in flight. Helpers claim concurrently (SKIP LOCKED hands them disjoint
// rows) and share the poller's in-flight slots, so the in-flight bound
// still holds. A helper stops at the first batch that is not full, so an
// idle type still costs one poller's queries.
func (p *poller) startHelper(ctx context.Context) {
	p.mu.Lock()
	if p.helpers >= p.maxHelpers() {
		p.mu.Unlock()
		return
	}
	p.helpers++
	helpers := p.helpers
	p.mu.Unlock()
	p.log.Debug("backlog; extra claimer started", slog.Int("helpers", helpers))
	p.deps.life.Go(func() {
		defer func() {
			p.mu.Lock()
			p.helpers--
			p.mu.Unlock()
		}()
		for {
			t, ok := p.lane.acquire(ctx)
			if !ok || !t.ok {
				return // outages are the main loop's business
			}
			if t.probe {
				p.lane.release(t) // and so are probes
				return
			}
			claimStart := time.Now()
			b, took, err := p.claim(p.s.batchSize)
			n := claimed(b)
			if err != nil || n == 0 {
				p.lane.release(t)
				if err != nil && ctx.Err() == nil {
					p.emitPoll(txbox.PollEvent{EventType: p.s.eventType, Route: p.s.routeName, Limit: p.s.batchSize, Duration: took, Err: err}, true)
				}
				return
			}
			full := n == p.s.batchSize
			p.emitPoll(txbox.PollEvent{EventType: p.s.eventType, Route: p.s.routeName, Claimed: n, Limit: p.s.batchSize, Full: full, Duration: took}, true)
			p.lane.dispatch(b, t, claimStart)
			if !full {
				return
			}
		}
	})
}

// maxHelpers is how many extra claimers a backlog may start: half the
// in-flight batches, so each claimer keeps about two batches in flight.
func (p *poller) maxHelpers() int { return p.s.inFlight / 2 }

// waitCircuit waits until the circuit may let a claim through. It returns
// false when the relay stops.
func (p *poller) waitCircuit(ctx context.Context, t ticket, timer *time.Timer) bool {
	p.log.Debug("circuit not closed; waiting to claim", slog.String("destination", p.lane.dest), slog.Duration("wait", t.wait))
	timer.Reset(max(t.wait, time.Millisecond))
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-timer.C:
	case <-t.changed:
	}
	return true
}

func (p *poller) claimFailed(err error) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.lastPoll = time.Now()
	p.lastErr = err.Error()
	d := p.claimErrs.next(err)
	p.delay = d
	lvl := slog.LevelWarn
	if p.claimErrs.repeatedLoss(err) {
		lvl = slog.LevelDebug // once a second while the database is down
	}
	p.log.Log(context.Background(), lvl, "claim failed; backing off", slog.Any("error", err), slog.Duration("retry_in", d))
	return d
}

func (p *poller) claimSucceeded() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.lastPoll = time.Now()
	p.lastErr = ""
	p.claimErrs.reset()
}

// emitPoll reports a claim to the hooks, and to the log at debug level
// (counts and durations only, never payloads). helper is true for the
// claims of a helper (startHelper), which claims again at once while its
// batches are full and never waits NextDelay.
func (p *poller) emitPoll(ev txbox.PollEvent, helper bool) {
	if p.log.Enabled(context.Background(), slog.LevelDebug) {
		attrs := []slog.Attr{slog.Int("limit", ev.Limit), slog.Int("claimed", ev.Claimed), slog.Duration("took", ev.Duration)}
		if helper {
			attrs = append(attrs, slog.Bool("helper", true))
		} else {
			attrs = append(attrs, slog.Duration("next_delay", ev.NextDelay))
		}
		if ev.Err != nil {
			attrs = append(attrs, slog.Any("error", ev.Err))
		}
		p.log.LogAttrs(context.Background(), slog.LevelDebug, "poll", attrs...)
	}
	for _, h := range p.deps.hooks {
		h.OnPoll(ev)
	}
}

// errStopping is what claim returns once Stop has begun.
var errStopping = errors.New("relay: stopping")

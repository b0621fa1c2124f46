package relay

import (
	"context"
	"errors"
	"log/slog"
	"maps"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/sender"
	"github.com/txbox/txbox/store"
)

// probeBatchSize bounds the batch a half-open circuit lets through: a probe
// should cost little when the destination is still down.
const probeBatchSize = 10

// poller claims, sends and finishes the rows of one event type.
type poller struct {
	r       *Relay
	s       *settings
	circuit *circuit
	log     *slog.Logger
	wakeC   chan struct{}
	// slots bounds the batches between claim and finish.
	slots chan struct{}

	mu        sync.Mutex
	lastPoll  time.Time
	lastErr   string
	delay     time.Duration
	inFlight  int
	errStreak int
}

func newPoller(r *Relay, s *settings) *poller {
	return &poller{
		r:       r,
		s:       s,
		circuit: r.circuits[s.senderName],
		log:     r.log.With(slog.String("event_type", s.eventType), slog.String("sender", s.senderName)),
		wakeC:   make(chan struct{}, 1),
		slots:   make(chan struct{}, s.inFlight),
	}
}

func (p *poller) wake() {
	select {
	case p.wakeC <- struct{}{}:
	default:
	}
}

func (p *poller) health() TypeHealth {
	p.mu.Lock()
	defer p.mu.Unlock()
	return TypeHealth{
		EventType: p.s.eventType, Sender: p.s.senderName, LastPoll: p.lastPoll,
		LastError: p.lastErr, Delay: p.delay, InFlight: p.inFlight,
	}
}

// run is the poller's loop: wait, take an in-flight slot, ask the circuit,
// claim, hand the batch to a goroutine, choose the next delay.
func (p *poller) run() {
	defer p.r.wg.Done()
	ctx := p.r.runCtx
	strategy := newPollStrategy(p.s.polling)
	var delay time.Duration // no initial delay: poll at once
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		if delay > 0 {
			timer.Reset(delay)
			select {
			case <-ctx.Done():
				return
			case <-timer.C:
			case <-p.wakeC:
				strategy.reset()
				timer.Stop() // Go ≥ 1.23: no stale tick remains after Stop
			}
		}
		// Take a slot: at most inFlight batches between claim and finish.
		select {
		case <-ctx.Done():
			return
		case p.slots <- struct{}{}:
		}
		t := p.circuit.allow()
		if !t.ok {
			<-p.slots
			if !p.waitCircuit(ctx, t, timer) {
				return
			}
			delay = 0
			continue
		}
		limit := p.s.batchSize
		if t.probe {
			limit = min(limit, probeBatchSize)
		}
		start := time.Now()
		rows, err := p.r.cfg.Store.OutboxClaim(ctx, &store.OutboxClaimParams{
			EventType:     p.s.eventType,
			Limit:         limit,
			LeaseDuration: p.s.leaseDuration,
			OrderedByKey:  p.s.ordering == OrderingKey,
		})
		took := time.Since(start)
		if err != nil {
			<-p.slots
			p.circuit.abandon(t)
			if ctx.Err() != nil {
				return
			}
			delay = p.claimFailed(err)
			p.emitPoll(PollEvent{EventType: p.s.eventType, Limit: limit, NextDelay: delay, Duration: took, Err: err})
			continue
		}
		p.claimSucceeded()
		delay = strategy.next(len(rows), limit)
		p.mu.Lock()
		p.delay = delay
		p.mu.Unlock()
		p.emitPoll(PollEvent{EventType: p.s.eventType, Claimed: len(rows), Limit: limit, Full: len(rows) == limit, NextDelay: delay, Duration: took})
		if len(rows) == 0 {
			<-p.slots
			p.circuit.abandon(t)
			continue
		}
		p.mu.Lock()
		p.inFlight++
		p.mu.Unlock()
		p.r.wg.Add(1)
		go func() {
			defer p.r.wg.Done()
			p.deliver(rows, t)
			p.mu.Lock()
			p.inFlight--
			p.mu.Unlock()
			<-p.slots
		}()
	}
}

// waitCircuit waits until the circuit may let a claim through. It returns
// false when the relay stops.
func (p *poller) waitCircuit(ctx context.Context, t ticket, timer *time.Timer) bool {
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
	p.errStreak++
	d := min(DefaultErrorBackoff<<min(p.errStreak-1, 16), DefaultErrorMaxBackoff)
	p.delay = d
	p.log.Warn("claim failed; backing off", slog.Any("error", err), slog.Duration("retry_in", d))
	return d
}

func (p *poller) claimSucceeded() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.lastPoll = time.Now()
	p.lastErr = ""
	p.errStreak = 0
}

func (p *poller) emitPoll(ev PollEvent) {
	for _, h := range p.r.cfg.Hooks {
		h.OnPoll(ev)
	}
}

// deliver sends one claimed batch and finishes it.
func (p *poller) deliver(rows []*store.OutboxRow, t ticket) {
	msgs := make([]*sender.Message, len(rows))
	for i, row := range rows {
		h := make(map[string]string, len(row.Headers)+3)
		maps.Copy(h, row.Headers)
		h[txbox.HeaderEventID] = row.ID.String()
		h[txbox.HeaderEventType] = row.EventType
		h[txbox.HeaderCreatedAt] = row.CreatedAt.UTC().Format(time.RFC3339Nano)
		msgs[i] = &sender.Message{
			ID: row.ID, EventType: row.EventType, Key: row.Key, Payload: row.Payload,
			Headers: h, CreatedAt: row.CreatedAt, Attempt: row.Attempts + 1, Route: p.s.route,
		}
	}

	// The send may take at most the lease: past it another relay may own
	// the rows, and our finish would be fenced anyway.
	sendCtx, cancel := context.WithTimeout(p.r.hardCtx, p.s.leaseDuration)
	start := time.Now()
	err := p.s.sender.Send(sendCtx, msgs)
	took := time.Since(start)
	cancel()
	shuttingDown := p.r.hardCtx.Err() != nil

	results := sender.Results(err, len(rows))
	items := make([]store.OutboxFinishItem, len(rows))
	ev := BatchEvent{EventType: p.s.eventType, Sender: p.s.senderName, SendDuration: took}
	transient := 0
	var firstTransient error
	for i, row := range rows {
		it := store.OutboxFinishItem{ID: row.ID, LeaseToken: row.LeaseToken}
		res := results[i]
		switch {
		case res == nil:
			it.Outcome = store.OutcomeAcked
			ev.Sent++
		case shuttingDown || txbox.Classify(res) == txbox.ClassTransient:
			// The destination (or this relay) is unavailable: put the
			// row back without counting an attempt.
			it.Outcome = store.OutcomeReleased
			if !shuttingDown {
				transient++
				if firstTransient == nil {
					firstTransient = res
				}
				// Only some messages failed this way: wait a little so a
				// sick partition is not hammered; the circuit is not
				// opened for a partial failure.
				it.RetryAfter = p.r.cfg.Circuit.CoolDown
			}
			ev.Released++
		case txbox.Classify(res) == txbox.ClassPermanent:
			it.Outcome = store.OutcomeFailed
			it.Error = errorText(res)
			ev.Failed++
		default: // rejected
			it.Error = errorText(res)
			if row.Attempts+1 >= p.s.maxAttempts {
				it.Outcome = store.OutcomeFailed
				ev.Failed++
			} else {
				it.Outcome = store.OutcomeRetry
				it.RetryAfter = p.s.backoff.delay(row.Attempts+1, rand.Float64)
				ev.Retried++
			}
		}
		items[i] = it
	}
	if !shuttingDown {
		switch {
		case transient == len(rows):
			if t.probe {
				p.log.Warn("probe batch failed; destination still unavailable", slog.Any("error", firstTransient))
			}
			p.circuit.failure(t, firstTransient)
		case ev.Sent > 0 || ev.Retried > 0 || ev.Failed > 0:
			// The destination answered: it is up.
			p.circuit.success(t)
		default:
			p.circuit.abandon(t)
		}
	} else {
		p.circuit.abandon(t)
	}
	if ev.Failed > 0 || ev.Retried > 0 {
		p.log.Info("messages rejected by the destination",
			slog.Int("retried", ev.Retried), slog.Int("failed", ev.Failed), slog.Any("first_error", firstError(results)))
	}

	res, ferr := p.finish(items)
	if ferr != nil {
		ev.FinishErr = ferr
		p.log.Error("finish failed; rows will be recovered after their lease expires",
			slog.Int("rows", len(items)), slog.Any("error", ferr))
	} else if res.Fenced > 0 {
		ev.Fenced = res.Fenced
		p.log.Warn("lease lost before finish; another relay owns these rows now", slog.Int("fenced", res.Fenced))
	}
	for _, h := range p.r.cfg.Hooks {
		h.OnBatch(ev)
	}
}

// finish records the batch's outcome, retrying a few times on error: a
// finish is fenced by the lease token, so repeating it is harmless, and a
// row left IN_PROCESS would be delivered again after its lease expires.
func (p *poller) finish(items []store.OutboxFinishItem) (*store.OutboxFinishResult, error) {
	params := &store.OutboxFinishParams{Items: items, DeleteAcked: p.s.retention == 0}
	var lastErr error
	backoff := 50 * time.Millisecond
	for attempt := 0; attempt < 4; attempt++ {
		timeout := finishTimeout
		if p.r.hardCtx.Err() != nil {
			timeout = finishTimeoutAfterDeadline
			if attempt > 0 {
				break
			}
		}
		ctx, cancel := context.WithTimeout(context.WithoutCancel(p.r.hardCtx), timeout)
		res, err := p.r.cfg.Store.OutboxFinish(ctx, params)
		cancel()
		if err == nil {
			return res, nil
		}
		lastErr = err
		select {
		case <-time.After(backoff):
		case <-p.r.hardCtx.Done():
		}
		backoff *= 4
	}
	return nil, lastErr
}

// maxErrorText bounds the last error stored per row.
const maxErrorText = 2000

func errorText(err error) string {
	s := err.Error()
	if len(s) > maxErrorText {
		s = strings.ToValidUTF8(s[:maxErrorText], "")
	}
	return s
}

func firstError(errs []error) error {
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	return errors.New("none")
}

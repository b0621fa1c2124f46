package relay

import (
	"context"
	"log/slog"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/internal/backoff"
	"github.com/txbox/txbox/store"
)

// cleanupLeaseName is the database lease under which one instance at a
// time runs cleanup.
const cleanupLeaseName = "txbox.relay.cleanup"

// maxRoundsPerTick bounds how many full batches one job tick processes in
// a row, so a huge backlog of expired leases cannot monopolise the job.
const maxRoundsPerTick = 100

// jobGrowth is how much a background job's interval grows after a round
// that found nothing to do.
const jobGrowth = 2

// jobTrigger is how a background job is told that there may be work for
// it.
type jobTrigger int

const (
	// triggerSoon shortens a backed-off wait to the job's shortest interval:
	// rows were claimed, so leases exist that may expire.
	triggerSoon jobTrigger = iota
	// triggerNow runs the job at once: a finish failed rows for good.
	triggerNow
)

// jobSchedule is the adaptive interval of a background job: Interval after
// a round that changed rows, then doubling for each round in a row that
// found nothing, capped at MaxInterval. A round is idle when it found
// nothing; idle is the number of such rounds in a row. A round that failed
// is retried sooner: jobRetryDelay, doubling per failure in a row, never
// later than Interval, so that one lost connection does not leave the job
// failed (and the relay's health degraded) for a whole interval, up to the
// heartbeat's DefaultHeartbeatInterval or the cleanup's backed-off
// DefaultCleanupMaxInterval.
type jobSchedule struct {
	grow  backoff.Policy
	idle  int
	fails int
}

// roundOutcome is what one round of a background job did.
type roundOutcome int

const (
	roundIdle   roundOutcome = iota // found nothing to do
	roundBusy                       // changed rows
	roundFailed                     // returned an error
)

// jobRetryDelay is the first wait after a failed round.
const jobRetryDelay = time.Second

func newJobSchedule(interval, maxInterval time.Duration) *jobSchedule {
	return &jobSchedule{grow: backoff.Policy{Initial: interval, Multiplier: jobGrowth, Max: max(interval, maxInterval)}}
}

// after records a round and returns the wait before the next one.
func (s *jobSchedule) after(o roundOutcome) time.Duration {
	switch o {
	case roundFailed:
		s.idle = 0
		s.fails++
		retry := backoff.Policy{Initial: min(jobRetryDelay, s.grow.Initial), Multiplier: 2, Max: s.grow.Initial}
		return retry.Delay(s.fails)
	case roundBusy:
		s.idle, s.fails = 0, 0
	default:
		s.idle++
		s.fails = 0
	}
	return s.grow.Delay(s.idle + 1)
}

// runJob runs round at once, then again after sched's wait, until the
// relay stops. round reports what it did: a busy round is followed by the
// shortest interval, an idle one by a longer wait, a failed one by a
// retry within a second or so. A trigger on triggers (nil: none)
// either runs round at once (triggerNow) or shortens the wait to the
// shortest interval when the job had backed off (triggerSoon); a job that has
// not backed off ignores triggerSoon, so a stream of triggers cannot postpone its
// next round.
func (r *Relay) runJob(sched *jobSchedule, triggers <-chan jobTrigger, round func(ctx context.Context) roundOutcome) {
	ctx := r.runCtx
	timer := time.NewTimer(0) // the first round at start
	defer timer.Stop()
	due := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		case k := <-triggers:
			if k == triggerSoon {
				if soon := time.Now().Add(sched.grow.Initial); sched.idle > 0 && soon.Before(due) {
					sched.idle = 0
					due = soon
					timer.Reset(time.Until(due))
				}
				continue
			}
		}
		wait := sched.after(round(ctx))
		due = time.Now().Add(wait)
		timer.Reset(wait)
	}
}

// goJob starts a background job that reports each round to the log and
// the hooks. A round returns how many rows it changed and its error.
func (r *Relay) goJob(name string, sched *jobSchedule, triggers <-chan jobTrigger, round func(ctx context.Context) (int, error)) {
	r.life.Go(func() { r.runJob(sched, triggers, r.reportRound(name, round)) })
}

// reportRound makes a job's round report itself to the log and the hooks.
func (r *Relay) reportRound(name string, round func(ctx context.Context) (int, error)) func(ctx context.Context) roundOutcome {
	return func(ctx context.Context) roundOutcome {
		n, err := round(ctx)
		if ctx.Err() != nil {
			return roundIdle
		}
		r.setJobErr(name, err)
		if err != nil {
			r.log.Warn("background job failed", slog.String("job", name), slog.Any("error", err))
		} else if n > 0 {
			r.log.Info("background job changed rows", slog.String("job", name), slog.Int("rows", n))
		}
		for _, h := range r.cfg.Hooks {
			h.OnMaintenance(txbox.MaintenanceEvent{Job: name, Count: n, Err: err})
		}
		switch {
		case err != nil:
			return roundFailed
		case n > 0:
			return roundBusy
		}
		return roundIdle
	}
}

// sendTrigger hands k to a job without blocking: a trigger already
// pending covers this one, except that triggerNow replaces a pending
// triggerSoon.
func sendTrigger(ch chan jobTrigger, k jobTrigger) {
	select {
	case ch <- k:
		return
	default:
	}
	if k != triggerNow {
		return
	}
	select {
	case old := <-ch:
		if old == triggerNow {
			k = old
		}
	default:
	}
	select {
	case ch <- k:
	default:
	}
}

// jobTriggers is the relay's own hook on its pollers: claims keep recovery at
// its shortest interval, and a batch that failed rows moves them to the
// dead-letter table at once instead of waiting for the sweep.
type jobTriggers struct {
	txbox.NopRelayHook
	recover, deadLetter, fingerprint chan jobTrigger
}

func (k jobTriggers) OnPoll(ev txbox.PollEvent) {
	if ev.Claimed > 0 {
		sendTrigger(k.recover, triggerSoon)
	}
}

func (k jobTriggers) OnBatch(ev txbox.BatchEvent) {
	if ev.Failed > 0 {
		sendTrigger(k.deadLetter, triggerNow)
		sendTrigger(k.fingerprint, triggerSoon)
	}
}

// batched repeats call while it returns full batches, up to
// maxRoundsPerTick times.
func batched(ctx context.Context, limit int, call func() (int, error)) (int, error) {
	total := 0
	for i := 0; i < maxRoundsPerTick && ctx.Err() == nil; i++ {
		n, err := call()
		total += n
		if err != nil || n < limit {
			return total, err
		}
	}
	return total, nil
}

func (r *Relay) recoverRound(ctx context.Context) (int, error) {
	limit := r.cfg.MaintenanceBatchSize
	return batched(ctx, limit, func() (int, error) {
		return r.cfg.Store.OutboxRecover(ctx, &store.OutboxRecoverParams{Limit: limit})
	})
}

func (r *Relay) deadLetterRound(ctx context.Context) (int, error) {
	limit := r.cfg.MaintenanceBatchSize
	n, err := batched(ctx, limit, func() (int, error) {
		return r.cfg.Store.DeadLetterMove(ctx, &store.DeadLetterMoveParams{Limit: limit})
	})
	if n > 0 {
		sendTrigger(r.triggers.fingerprint, triggerNow)
	}
	return n, err
}

// fingerprintRound fingerprints the dead letters that have none, a
// maintenance batch at a time. It runs after every mover round that moved
// rows, and on the mover's schedule, so the rows a lock claim's finish
// moves itself are fingerprinted too.
func (r *Relay) fingerprintRound(ctx context.Context) (int, error) {
	limit := r.cfg.MaintenanceBatchSize
	return batched(ctx, limit, func() (int, error) {
		return r.cfg.Store.DeadLetterFingerprint(ctx, &store.DeadLetterFingerprintParams{Limit: limit, Print: r.fingerprint})
	})
}

func (r *Relay) discoverRound(ctx context.Context) (int, error) {
	types, err := r.cfg.Store.OutboxPendingTypes(ctx)
	if err != nil {
		return 0, err
	}
	return r.ensurePollers(types), nil
}

// cleanupLoop deletes processed rows and resolved dead letters past their
// TTLs while this instance holds the cleanup lease. Its interval adapts:
// Interval after a round that deleted something, doubling up to
// MaxInterval while rounds find nothing.
func (r *Relay) cleanupLoop() {
	cfg := r.cfg.Cleanup
	r.runJob(newJobSchedule(cfg.Interval, cfg.MaxInterval), nil, r.cleanupRound)
}

// cleanupRound runs the cleanups (outbox, dead letters, audit trail) if
// the lease is ours: busy when it
// deleted rows, failed when the lease or a cleanup failed.
func (r *Relay) cleanupRound(ctx context.Context) roundOutcome {
	cfg := r.cfg.Cleanup
	held, err := r.cfg.Store.LeaseAcquire(ctx, &store.LeaseParams{Name: cleanupLeaseName, Holder: r.cfg.InstanceID, TTL: cfg.LeaseTTL})
	if err != nil {
		if ctx.Err() == nil {
			r.setJobErr(txbox.JobOutboxCleanup, err)
			r.log.Warn("cleanup lease failed", slog.Any("error", err))
		}
		return roundFailed
	}
	if !held {
		return roundIdle
	}
	total, failed := 0, false
	for _, job := range []struct {
		name string
		ttl  time.Duration
		call func(context.Context, *store.CleanupParams) (int, error)
	}{
		{txbox.JobOutboxCleanup, *cfg.OutboxTTL, r.cfg.Store.OutboxCleanup},
		{txbox.JobDeadLetterCleanup, *cfg.DeadLetterTTL, r.cfg.Store.DeadLetterCleanup},
		{txbox.JobAuditCleanup, *cfg.AuditTTL, r.cfg.Store.AuditCleanup},
	} {
		n, err := batched(ctx, cfg.BatchSize, func() (int, error) {
			return job.call(ctx, &store.CleanupParams{OlderThan: job.ttl, Limit: cfg.BatchSize})
		})
		if ctx.Err() != nil {
			return roundIdle
		}
		total += n
		r.setJobErr(job.name, err)
		if err != nil {
			failed = true
			r.log.Warn("cleanup failed", slog.String("job", job.name), slog.Any("error", err))
		} else if n > 0 {
			r.log.Info("cleanup deleted rows", slog.String("job", job.name), slog.Int("rows", n))
		}
		for _, h := range r.cfg.Hooks {
			h.OnMaintenance(txbox.MaintenanceEvent{Job: job.name, Count: n, Err: err})
		}
	}
	switch {
	case failed:
		return roundFailed
	case total > 0:
		return roundBusy
	}
	return roundIdle
}

func (r *Relay) releaseCleanupLease() {
	if r.cfg.Cleanup.Disabled {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.hardCtx), finishTimeoutAfterDeadline)
	defer cancel()
	_ = r.cfg.Store.LeaseRelease(ctx, &store.LeaseParams{Name: cleanupLeaseName, Holder: r.cfg.InstanceID, TTL: r.cfg.Cleanup.LeaseTTL})
}

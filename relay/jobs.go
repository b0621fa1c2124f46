package relay

import (
	"context"
	"log/slog"
	"time"

	"github.com/txbox/txbox/internal/backoff"
	"github.com/txbox/txbox/store"
)

// cleanupLeaseName is the database lease under which one instance at a
// time runs cleanup.
const cleanupLeaseName = "txbox.relay.cleanup"

// maxRoundsPerTick bounds how many full batches one job tick processes in
// a row, so a huge backlog of expired leases cannot monopolise the job.
const maxRoundsPerTick = 100

// goJob runs round at once and then every interval until the relay stops.
// A round returns how many rows it changed and its error.
func (r *Relay) goJob(name string, interval time.Duration, round func(ctx context.Context) (int, error)) {
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		ctx := r.runCtx
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			n, err := round(ctx)
			if ctx.Err() != nil {
				return
			}
			r.setJobErr(name, err)
			if err != nil {
				r.log.Warn("background job failed", slog.String("job", name), slog.Any("error", err))
			} else if n > 0 {
				r.log.Info("background job changed rows", slog.String("job", name), slog.Int("rows", n))
			}
			for _, h := range r.cfg.Hooks {
				h.OnMaintenance(MaintenanceEvent{Job: name, Count: n, Err: err})
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
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
	return batched(ctx, limit, func() (int, error) {
		return r.cfg.Store.DeadLetterMove(ctx, &store.DeadLetterMoveParams{Limit: limit})
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
	defer r.wg.Done()
	ctx := r.runCtx
	cfg := r.cfg.Cleanup
	grow := backoff.Policy{Initial: cfg.Interval, Multiplier: 2, Max: cfg.MaxInterval}
	idle := 0                 // rounds in a row that deleted nothing
	timer := time.NewTimer(0) // the first round at start
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		}
		if r.cleanupRound(ctx) > 0 {
			idle = 0
		} else {
			idle++
		}
		timer.Reset(grow.Delay(idle + 1))
	}
}

// cleanupRound runs both cleanups if the lease is ours and returns how
// many rows were deleted.
func (r *Relay) cleanupRound(ctx context.Context) int {
	cfg := r.cfg.Cleanup
	held, err := r.cfg.Store.LeaseAcquire(ctx, &store.LeaseParams{Name: cleanupLeaseName, Holder: r.cfg.InstanceID, TTL: cfg.LeaseTTL})
	if err != nil {
		if ctx.Err() == nil {
			r.setJobErr(JobOutboxCleanup, err)
			r.log.Warn("cleanup lease failed", slog.Any("error", err))
		}
		return 0
	}
	if !held {
		return 0
	}
	total := 0
	for _, job := range []struct {
		name string
		ttl  time.Duration
		call func(context.Context, *store.CleanupParams) (int, error)
	}{
		{JobOutboxCleanup, *cfg.OutboxTTL, r.cfg.Store.OutboxCleanup},
		{JobDeadLetterCleanup, *cfg.DeadLetterTTL, r.cfg.Store.DeadLetterCleanup},
	} {
		n, err := batched(ctx, cfg.BatchSize, func() (int, error) {
			return job.call(ctx, &store.CleanupParams{OlderThan: job.ttl, Limit: cfg.BatchSize})
		})
		if ctx.Err() != nil {
			return total
		}
		total += n
		r.setJobErr(job.name, err)
		if err != nil {
			r.log.Warn("cleanup failed", slog.String("job", job.name), slog.Any("error", err))
		} else if n > 0 {
			r.log.Info("cleanup deleted rows", slog.String("job", job.name), slog.Int("rows", n))
		}
		for _, h := range r.cfg.Hooks {
			h.OnMaintenance(MaintenanceEvent{Job: job.name, Count: n, Err: err})
		}
	}
	return total
}

func (r *Relay) releaseCleanupLease() {
	if r.cfg.Cleanup.Disabled {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.hardCtx), finishTimeoutAfterDeadline)
	defer cancel()
	_ = r.cfg.Store.LeaseRelease(ctx, &store.LeaseParams{Name: cleanupLeaseName, Holder: r.cfg.InstanceID, TTL: r.cfg.Cleanup.LeaseTTL})
}

// listen runs the store's wake-up listener until the relay stops,
// restarting it after an error (the Waker reconnects by itself; this is
// the backstop).
func (r *Relay) listen(w store.Waker) {
	defer r.wg.Done()
	ctx := r.runCtx
	// The wait only grows: OutboxListen reconnects by itself and returns
	// only on what it cannot recover from, so its returns count as
	// failures in a row however far apart they come.
	ends := backoff.Streak{Policy: errorBackoff}
	for {
		err := w.OutboxListen(ctx, func(eventType string) { r.Wake(eventType) })
		if ctx.Err() != nil {
			return
		}
		wait := ends.Next()
		r.log.Warn("wake-up listener ended; polling continues", slog.Any("error", err), slog.Duration("retry_in", wait))
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}

package inbox

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/internal/backoff"
	"github.com/txbox/txbox/internal/startstop"
	"github.com/txbox/txbox/store"
)

// Cleaner defaults.
const (
	// DefaultCleanupBatchSize bounds one DELETE, so no statement holds row
	// locks for long.
	DefaultCleanupBatchSize = 1000
	// DefaultCleanupMaxBatches bounds the batches of one run; the lease is
	// renewed between batches.
	DefaultCleanupMaxBatches = 100
	// DefaultCleanupMinDelay is the delay after a run that deleted rows.
	DefaultCleanupMinDelay = 10 * time.Second
	// DefaultCleanupMaxDelay caps the delay between idle runs.
	DefaultCleanupMaxDelay = 5 * time.Minute
	// DefaultCleanupMultiplier grows the delay after an idle run.
	DefaultCleanupMultiplier = 2.0
	// DefaultCleanupLeaseName is the database lease that makes one
	// instance at a time clean the inbox table.
	DefaultCleanupLeaseName = "txbox.inbox.cleanup"
	// DefaultCleanupLeaseTTL is how long a cleaner holds the lease without
	// renewing it. A crashed holder blocks cleanup for at most this long.
	DefaultCleanupLeaseTTL = time.Minute
)

// CleanerConfig configures a Cleaner.
type CleanerConfig struct {
	// TTL: ids recorded longer ago than this are deleted. Keep it equal to
	// the Config.TTL of the inboxes sharing the table. Defaults to
	// DefaultTTL.
	TTL time.Duration
	// BatchSize bounds one DELETE. Defaults to DefaultCleanupBatchSize.
	BatchSize int
	// MaxBatches bounds the batches of one run. Defaults to
	// DefaultCleanupMaxBatches.
	MaxBatches int
	// MinDelay is the delay after a run that deleted rows (more are
	// probably expiring). Defaults to DefaultCleanupMinDelay.
	MinDelay time.Duration
	// MaxDelay caps the delay, which grows by Multiplier after each run
	// that deleted nothing or did not hold the lease. Defaults to
	// DefaultCleanupMaxDelay.
	MaxDelay time.Duration
	// Multiplier grows the delay after an idle run; at least 1. Defaults
	// to DefaultCleanupMultiplier.
	Multiplier float64
	// LeaseName names the database lease. Defaults to
	// DefaultCleanupLeaseName.
	LeaseName string
	// LeaseTTL is the lease's lifetime per renewal; it must exceed the
	// time one batch takes. Defaults to DefaultCleanupLeaseTTL.
	LeaseTTL time.Duration
	// Holder identifies this instance in the lease table. Defaults to
	// hostname, pid and a random suffix.
	Holder string
	// Logger receives run summaries and errors. Defaults to slog.Default().
	Logger *slog.Logger
	// Hook observes runs through its OnCleanup method (inbox/inboxprom
	// counts the deletions). Defaults to NopHook.
	Hook Hook
}

// Cleaner deletes expired inbox ids in bounded batches, under a database
// lease so that one instance at a time does it, with adaptive polling.
type Cleaner struct {
	st     store.Inbox
	leases store.Leases
	cfg    CleanerConfig
	logger *slog.Logger

	// life runs the loop: Start begins it, Stop ends it
	// (internal/startstop).
	life startstop.Lifetime
}

// NewCleaner returns a Cleaner for st's inbox table using leases. Invalid
// settings are a *ConfigError naming the field.
func NewCleaner(st store.Inbox, leases store.Leases, cfg CleanerConfig) (*Cleaner, error) {
	if st == nil {
		return nil, &ConfigError{Component: "inbox", Field: "store", Reason: "is nil"}
	}
	if leases == nil {
		return nil, &ConfigError{Component: "inbox", Field: "leases", Reason: "is nil"}
	}
	if err := cfg.withDefaults(); err != nil {
		return nil, err
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.Default()
	}
	return &Cleaner{st: st, leases: leases, cfg: cfg, logger: logger.With("job", cfg.LeaseName)}, nil
}

func (c *CleanerConfig) withDefaults() error {
	neg := func(field string, bad bool, v any) error {
		if bad {
			return &ConfigError{Component: "inbox", Field: field, Reason: fmt.Sprintf("must not be negative, got %v", v)}
		}
		return nil
	}
	for _, err := range []error{
		neg("TTL", c.TTL < 0, c.TTL), neg("BatchSize", c.BatchSize < 0, c.BatchSize),
		neg("MaxBatches", c.MaxBatches < 0, c.MaxBatches), neg("MinDelay", c.MinDelay < 0, c.MinDelay),
		neg("MaxDelay", c.MaxDelay < 0, c.MaxDelay), neg("LeaseTTL", c.LeaseTTL < 0, c.LeaseTTL),
	} {
		if err != nil {
			return err
		}
	}
	if c.TTL == 0 {
		c.TTL = DefaultTTL
	}
	if c.BatchSize == 0 {
		c.BatchSize = DefaultCleanupBatchSize
	}
	if c.MaxBatches == 0 {
		c.MaxBatches = DefaultCleanupMaxBatches
	}
	if c.MinDelay == 0 {
		c.MinDelay = DefaultCleanupMinDelay
	}
	if c.MaxDelay == 0 {
		c.MaxDelay = DefaultCleanupMaxDelay
	}
	if c.Multiplier == 0 {
		c.Multiplier = DefaultCleanupMultiplier
	}
	if c.LeaseName == "" {
		c.LeaseName = DefaultCleanupLeaseName
	}
	if c.LeaseTTL == 0 {
		c.LeaseTTL = DefaultCleanupLeaseTTL
	}
	if c.Holder == "" {
		c.Holder = defaultHolder()
	}
	if c.Hook == nil {
		c.Hook = NopHook{}
	}
	if c.MaxDelay < c.MinDelay {
		return &ConfigError{Component: "inbox", Field: "MaxDelay", Reason: fmt.Sprintf("%s must be ≥ MinDelay %s", c.MaxDelay, c.MinDelay)}
	}
	if c.Multiplier < 1 {
		return &ConfigError{Component: "inbox", Field: "Multiplier", Reason: fmt.Sprintf("must be ≥ 1, got %g", c.Multiplier)}
	}
	if len(c.LeaseName) > 200 || len(c.Holder) > 200 {
		return &ConfigError{Component: "inbox", Field: "LeaseName", Reason: "must be at most 200 bytes, the holder too"}
	}
	return nil
}

func defaultHolder() string {
	host, _ := os.Hostname()
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b))
}

// RunOnce takes (or renews) the lease and, when it holds it, deletes
// expired ids batch by batch until a batch comes back partial or
// MaxBatches ran. It returns the number deleted and whether it held the
// lease. The lease is kept afterwards (it expires after LeaseTTL) so the
// same instance keeps the job.
func (c *Cleaner) RunOnce(ctx context.Context) (deleted int, held bool, err error) {
	start := time.Now()
	defer func() {
		if held || err != nil {
			c.cfg.Hook.OnCleanup(CleanupEvent{Deleted: deleted, Held: held, Duration: time.Since(start), Err: err})
		}
	}()
	lp := &store.LeaseParams{Name: c.cfg.LeaseName, Holder: c.cfg.Holder, TTL: c.cfg.LeaseTTL}
	for batch := 0; batch < c.cfg.MaxBatches; batch++ {
		ok, err := c.leases.LeaseAcquire(ctx, lp)
		if err != nil {
			return deleted, held, fmt.Errorf("inbox: cleanup lease: %w", err)
		}
		if !ok {
			return deleted, held, nil
		}
		held = true
		n, err := c.st.InboxCleanup(ctx, &store.CleanupParams{OlderThan: c.cfg.TTL, Limit: c.cfg.BatchSize})
		deleted += n
		if err != nil {
			return deleted, held, fmt.Errorf("inbox: cleanup: %w", err)
		}
		if n < c.cfg.BatchSize {
			break
		}
	}
	return deleted, held, nil
}

// Start runs cleanup in the background, the first run at once, until Stop
// or ctx ends. It returns txbox.ErrClosed after Stop and an error when
// already started.
func (c *Cleaner) Start(ctx context.Context) error {
	switch err := c.life.Begin(ctx); {
	case errors.Is(err, startstop.ErrStopped):
		return txbox.ErrClosed
	case errors.Is(err, startstop.ErrAlreadyStarted):
		return errors.New("inbox: cleaner already started")
	case err != nil:
		return err
	}
	c.life.Go(func() { c.loop(c.life.Run()) })
	return nil
}

// Stop ends the background loop and waits for it; when ctx ends first,
// the run in progress is cut short, and Stop returns ctx's error once the
// loop ended. It then releases the lease so another instance can take
// over at once. Stop before Start does nothing.
func (c *Cleaner) Stop(ctx context.Context) error {
	var released error
	err := c.life.End(ctx, func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
		defer cancel()
		released = c.leases.LeaseRelease(rctx, &store.LeaseParams{Name: c.cfg.LeaseName, Holder: c.cfg.Holder, TTL: c.cfg.LeaseTTL})
	})
	if errors.Is(err, startstop.ErrNotStarted) {
		return nil
	}
	return cmp.Or(err, released)
}

// Started is closed once Start succeeded.
func (c *Cleaner) Started() <-chan struct{} { return c.life.Started() }

// Stopped is closed once Stop has ended the loop and released the lease.
func (c *Cleaner) Stopped() <-chan struct{} { return c.life.Stopped() }

// releaseTimeout bounds the lease's release at Stop, which runs even when
// Stop's context has ended: left held, the lease blocks other instances
// until its TTL.
const releaseTimeout = 5 * time.Second

func (c *Cleaner) loop(ctx context.Context) {
	idle := 0 // idle or failed runs in a row
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		n, _, err := c.RunOnce(ctx)
		switch {
		case err != nil && ctx.Err() == nil:
			c.logger.ErrorContext(ctx, "inbox cleanup failed", "deleted", n, "error", err)
			idle++
		case n > 0:
			c.logger.InfoContext(ctx, "inbox cleanup", "deleted", n)
			idle = 0
		default: // nothing expired, or another instance holds the lease
			idle++
		}
		t.Reset(c.idleDelay(idle))
	}
}

// idleDelay is the wait after idle idle or failed runs in a row: a run
// that deleted something (idle 0) waits MinDelay, each idle or failed run
// after it Multiplier times longer, up to MaxDelay.
func (c *Cleaner) idleDelay(idle int) time.Duration {
	return backoff.Policy{Initial: c.cfg.MinDelay, Multiplier: c.cfg.Multiplier, Max: c.cfg.MaxDelay}.Delay(idle + 1)
}

package relay

import (
	"errors"
	"time"

	"github.com/txbox/txbox/internal/backoff"
	"github.com/txbox/txbox/store"
)

// Defaults of the retry backoff settings.
const (
	// DefaultBackoffDelay is the delay before the first retry.
	DefaultBackoffDelay = 10 * time.Second
	// DefaultBackoffMultiplier gives 10s, 30s, 90s.
	DefaultBackoffMultiplier = 3.0
	// DefaultBackoffMax caps one backoff.
	DefaultBackoffMax = time.Hour
)

// BackoffSettings configure the delay before retry n:
// Delay × Multiplier^(n-1), capped by Max, then spread by ±Jitter. A nil
// field is unset and inherits (EventSettings.Inherit); a set zero (Jitter
// 0) wins.
type BackoffSettings struct {
	// Delay before the first retry. Defaults to 10s.
	Delay *time.Duration
	// Multiplier per further retry; at least 1. Defaults to 3.0.
	Multiplier *float64
	// Max caps one delay; at least Delay. Defaults to 1h.
	Max *time.Duration
	// Jitter is the random spread as a fraction in [0, 1]: 0.2 means
	// ±20%. Defaults to 0 (none).
	Jitter *float64
}

// resolvedBackoff is BackoffSettings with every field set, as a poller
// uses it.
type resolvedBackoff struct {
	Delay      time.Duration
	Multiplier float64
	Max        time.Duration
	Jitter     float64
}

// inherit returns b with every unset field taken from parent, or nil when
// both are nil. The result shares no memory with b or parent.
func (b *BackoffSettings) inherit(parent *BackoffSettings) *BackoffSettings {
	if b == nil && parent == nil {
		return nil
	}
	own, par := deref(b), deref(parent)
	return &BackoffSettings{
		Delay: pick(own.Delay, par.Delay), Multiplier: pick(own.Multiplier, par.Multiplier),
		Max: pick(own.Max, par.Max), Jitter: pick(own.Jitter, par.Jitter),
	}
}

// resolved returns the values of b, whose fields must all be set.
func (b *BackoffSettings) resolved() resolvedBackoff {
	return resolvedBackoff{Delay: *b.Delay, Multiplier: *b.Multiplier, Max: *b.Max, Jitter: *b.Jitter}
}

// policy is the retry schedule of resolved settings b: the wait before
// retry n (the retry after the n-th failed attempt) is
// Delay × Multiplier^(n-1), capped at Max, then spread by ±Jitter and
// capped at Max again (docs/concepts.md; internal/backoff computes it).
func (b resolvedBackoff) policy() backoff.Policy {
	return backoff.Policy{Initial: b.Delay, Multiplier: b.Multiplier, Max: b.Max, Jitter: b.Jitter}
}

// errorBackoff is the wait after database errors in a row: a poller's
// failed claims, the wake-up listener's restarts.
var errorBackoff = backoff.Policy{Initial: DefaultErrorBackoff, Multiplier: 2, Max: DefaultErrorMaxBackoff}

// connLostBackoff is the wait after database errors in a row that lost
// the connection (store.ErrConnectionLost), instead of errorBackoff: the
// driver has already dropped its stale pooled connections, so the next
// attempt dials afresh and a multi-host DSN finds the new primary. The
// first retry comes soon; the waits grow only while the fresh
// connections fail too, and stay at most a second, so that the relay is
// back within about a second of a promotion (docs/operations.md,
// "Database failover"). While the database is down each retrying loop dials once
// a second: a refused connection, or a standby's check of
// target_session_attrs.
var connLostBackoff = backoff.Policy{Initial: DefaultErrorBackoff, Multiplier: 2, Max: time.Second, Jitter: 0.2}

// dbRetry is the wait after database errors in a row: connLostBackoff
// for lost connections, errorBackoff for the others, each growing with
// its own kind's failures since the last success. The zero value is not
// ready: use newDBRetry. A dbRetry is not safe for concurrent use.
type dbRetry struct {
	errs, lost backoff.Streak
}

func newDBRetry() dbRetry {
	return dbRetry{errs: backoff.Streak{Policy: errorBackoff}, lost: backoff.Streak{Policy: connLostBackoff}}
}

// next counts the failure err and returns the wait before the retry.
func (r *dbRetry) next(err error) time.Duration {
	if errors.Is(err, store.ErrConnectionLost) {
		return r.lost.Next()
	}
	return r.errs.Next()
}

// repeatedLoss reports whether err is a lost connection after another:
// the driver logged the loss already, and logs when the database is
// back.
func (r *dbRetry) repeatedLoss(err error) bool {
	return errors.Is(err, store.ErrConnectionLost) && r.lost.Len() > 1
}

// reset forgets the failures after a success.
func (r *dbRetry) reset() {
	r.errs.Reset()
	r.lost.Reset()
}

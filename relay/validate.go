package relay

import (
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/store"
)

// Bounds narrow the ranges Validate accepts. The zero Bounds, which New
// uses, reject only values that cannot work; a loader may narrow them to
// catch values that are almost certainly typos (config.Load does, with the
// ranges docs/configuration.md lists). A zero field adds no bound.
type Bounds struct {
	// MaxBatchSize, MaxAttempts and MaxInFlight cap
	// EventSettings.BatchSize, MaxAttempts and InFlight (each is at least
	// 1 anyway).
	MaxBatchSize, MaxAttempts, MaxInFlight int
	// MaxCleanupBatchSize caps CleanupConfig.BatchSize.
	MaxCleanupBatchSize int
	// MinLease is the shortest EventSettings.LeaseDuration; without it a
	// lease must be > 0.
	MinLease time.Duration
	// MinPollDelay is the shortest PollingSettings.MinDelay and Delay;
	// without it they must be ≥ 0 and > 0.
	MinPollDelay time.Duration
	// MinCleanupInterval is the shortest CleanupConfig.Interval; without
	// it the interval must be > 0.
	MinCleanupInterval time.Duration
	// MinInterval is the shortest Config.DiscoverInterval,
	// RecoverInterval, DeadLetterInterval and Circuit.CoolDown. Without it
	// they must be > 0, except the discover interval, which a negative
	// value disables.
	MinInterval time.Duration
	// ZeroIsSet checks a zero DiscoverInterval, RecoverInterval,
	// DeadLetterInterval, HeartbeatInterval, Cleanup.Interval,
	// Cleanup.MaxInterval, Cleanup.BatchSize or Circuit field as it is,
	// instead of giving it its default as New does: a loader that filled
	// every default in before decoding (config.Load) knows that a zero
	// left was set on purpose, such as a file's cleanup interval of 0s.
	ZeroIsSet bool
}

// Validate checks every setting of c, as New does, within b, and returns
// each problem: relay-wide fields first, then Defaults, then the event
// types in order. It leaves out what it cannot know without them: Store,
// Senders (so whether each type finds its sender), Logger and Hooks. A
// loader can therefore check a file before it opens anything.
//
// Each problem is a *ConfigError whose Field is the Go path of the field
// in c (see ConfigError), such as Defaults.Polling.MaxDelay. An event type
// is reported only for fields it sets itself; a mistake it inherits is
// reported once, at Defaults.
func (c Config) Validate(b Bounds) []*ConfigError {
	// A derived outbox TTL is the longest retention: a negative one is
	// reported at its retention key, not again here.
	ownTTL := c.Cleanup.OutboxTTL != nil
	c = c.withSettingDefaults(b.ZeroIsSet)
	v := &validator{b: b}
	v.relayWide(&c, ownTTL)
	builtin := DefaultEventSettings()
	v.eventSettings("Defaults", c.Defaults, c.Defaults.Inherit(builtin))
	if len(c.Defaults.Routes) > 0 {
		v.fail("Defaults.Routes", "routes are set per event type (events), not in defaults")
	}
	for _, t := range sortedKeys(c.Events) {
		p := index("Events", t)
		if err := txbox.ValidateEventType(t); err != nil {
			v.fail(p, "is not a valid event type: "+err.Error())
			continue
		}
		own := c.Events[t]
		v.eventSettings(p, own, own.Inherit(c.Defaults).Inherit(builtin))
		v.routes(p, own, c.Defaults.Inherit(builtin))
	}
	return v.errs
}

// field appends the field name to the Go path path (ConfigError.Field).
func field(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

// index appends a map key to the Go path path, quoted in brackets, so that
// any key, even one with a dot, reads back unambiguously.
func index(path, key string) string { return path + "[" + strconv.Quote(key) + "]" }

// validator collects the problems Validate finds.
type validator struct {
	b    Bounds
	errs []*ConfigError
}

func (v *validator) fail(path, reason string) {
	v.errs = append(v.errs, &ConfigError{Component: "relay", Field: path, Reason: reason})
}

func (v *validator) relayWide(c *Config, ownTTL bool) {
	if v.b.MinInterval > 0 {
		v.duration("DiscoverInterval", c.DiscoverInterval, v.b.MinInterval, false)
	}
	v.duration("RecoverInterval", c.RecoverInterval, v.b.MinInterval, false)
	v.duration("DeadLetterInterval", c.DeadLetterInterval, v.b.MinInterval, false)
	if c.HeartbeatInterval >= 0 {
		// The heartbeat's TTL is three intervals, and stores take TTLs of
		// a second or more.
		v.duration("HeartbeatInterval", c.HeartbeatInterval, time.Second, false)
	}
	if c.DiscoverInterval > 0 {
		v.notBelow("DiscoverMaxInterval", c.DiscoverMaxInterval, c.DiscoverInterval, "discover-interval")
	}
	v.notBelow("RecoverMaxInterval", c.RecoverMaxInterval, c.RecoverInterval, "recover-interval")
	v.notBelow("DeadLetterMaxInterval", c.DeadLetterMaxInterval, c.DeadLetterInterval, "dead-letter-interval")
	v.count("MaintenanceBatchSize", c.MaintenanceBatchSize, 0)
	cl := &c.Cleanup
	v.duration("Cleanup.Interval", cl.Interval, v.b.MinCleanupInterval, false)
	v.notBelow("Cleanup.MaxInterval", cl.MaxInterval, cl.Interval, "interval")
	v.count("Cleanup.BatchSize", cl.BatchSize, v.b.MaxCleanupBatchSize)
	v.duration("Cleanup.LeaseTTL", cl.LeaseTTL, 0, false)
	if ownTTL {
		v.duration("Cleanup.OutboxTTL", *cl.OutboxTTL, 0, true)
	}
	v.duration("Cleanup.DeadLetterTTL", *cl.DeadLetterTTL, 0, true)
	v.duration("Cleanup.AuditTTL", *cl.AuditTTL, 0, true)
	ci := &c.Circuit
	v.duration("Circuit.CoolDown", ci.CoolDown, v.b.MinInterval, false)
	v.notBelow("Circuit.MaxCoolDown", ci.MaxCoolDown, ci.CoolDown, "cool-down")
	v.multiplier("Circuit.Multiplier", ci.Multiplier)
}

// eventSettings checks eff, the settings of one layer (defaults or an
// event type) with everything inherited, reporting only the keys own (the
// layer itself) sets.
func (v *validator) eventSettings(p string, own, eff EventSettings) {
	if own.BatchSize != nil {
		v.count(field(p, "BatchSize"), *eff.BatchSize, v.b.MaxBatchSize)
	}
	if own.MaxAttempts != nil {
		v.count(field(p, "MaxAttempts"), *eff.MaxAttempts, v.b.MaxAttempts)
	}
	if own.InFlight != nil {
		v.count(field(p, "InFlight"), *eff.InFlight, v.b.MaxInFlight)
	}
	if own.LeaseDuration != nil {
		v.duration(field(p, "LeaseDuration"), *eff.LeaseDuration, v.b.MinLease, false)
	}
	if own.Retention != nil {
		v.duration(field(p, "Retention"), *eff.Retention, 0, true)
	}
	if own.Ordering != nil {
		if o := *eff.Ordering; o != txbox.OrderingNone && o != txbox.OrderingKey {
			v.fail(field(p, "Ordering"), fmt.Sprintf("must be %s or %s, not %q", txbox.OrderingNone, txbox.OrderingKey, clip(string(o))))
		}
	}
	if own.CommitHorizon != nil && own.OrderingFence != nil && *own.CommitHorizon != *own.OrderingFence {
		v.fail(field(p, "OrderingFence"), fmt.Sprintf("is the deprecated name of CommitHorizon, which is set to %q: set only CommitHorizon", clip(string(*own.CommitHorizon))))
	}
	if own.commitHorizon() != nil {
		if f := *eff.CommitHorizon; f != txbox.CommitHorizonOn && f != txbox.CommitHorizonOff {
			v.fail(field(p, "CommitHorizon"), fmt.Sprintf("must be %s or %s, not %q", txbox.CommitHorizonOn, txbox.CommitHorizonOff, clip(string(f))))
		}
	}
	if own.Claim != nil {
		if c := *eff.Claim; c != txbox.ClaimLease && c != txbox.ClaimLock {
			v.fail(field(p, "Claim"), fmt.Sprintf("must be %s or %s, not %q", txbox.ClaimLease, txbox.ClaimLock, clip(string(c))))
		}
	}
	v.polling(field(p, "Polling"), deref(own.Polling), *eff.Polling)
	v.backoff(field(p, "Backoff"), deref(own.Backoff), *eff.Backoff)
}

// routes checks the shape of a type's Routes and each route's own
// settings; the senders and destinations are checked where the senders
// are known (New; the config package for a file).
func (v *validator) routes(p string, own, parent EventSettings) {
	if len(own.Routes) == 0 {
		return
	}
	if own.Route != nil {
		v.fail(field(p, "Routes"), "is set beside Route: a type has one route (route) or several (routes), not both")
	}
	if len(own.Routes) > store.MaxRoutes {
		v.fail(field(p, "Routes"), fmt.Sprintf("has %d routes; at most %d", len(own.Routes), store.MaxRoutes))
	}
	for i := range own.Routes {
		r := &own.Routes[i]
		rp := fmt.Sprintf("%s.Routes[%d]", p, i)
		if r.Name != "" && !store.ValidRouteName(r.Name) {
			v.fail(field(rp, "Name"), fmt.Sprintf("%q is not a valid route name: 1 to 64 of A-Z a-z 0-9 . _ -", clip(r.Name)))
		}
		mine := EventSettings{BatchSize: r.BatchSize, MaxAttempts: r.MaxAttempts, Backoff: r.Backoff, Ordering: r.Ordering, InFlight: r.InFlight}
		v.eventSettings(rp, mine, r.eventSettings(own).Inherit(parent))
	}
}

// polling checks every polling key whatever the mode, so that switching
// the mode never makes a configuration invalid.
func (v *validator) polling(p string, own, eff PollingSettings) {
	if own.Mode != nil {
		if m := *eff.Mode; m != PollingAdaptive && m != PollingFixed {
			v.fail(field(p, "Mode"), fmt.Sprintf("must be %s or %s, not %q", PollingAdaptive, PollingFixed, clip(m)))
		}
	}
	if own.MinDelay != nil {
		v.duration(field(p, "MinDelay"), *eff.MinDelay, v.b.MinPollDelay, true)
	}
	if own.MaxDelay != nil || own.MinDelay != nil {
		v.capped(field(p, "MaxDelay"), *eff.MaxDelay, *eff.MinDelay, "min-delay", false)
	}
	if own.Multiplier != nil {
		v.multiplier(field(p, "Multiplier"), *eff.Multiplier)
	}
	if own.Delay != nil {
		v.duration(field(p, "Delay"), *eff.Delay, v.b.MinPollDelay, false)
	}
}

func (v *validator) backoff(p string, own, eff BackoffSettings) {
	if own.Delay != nil {
		v.duration(field(p, "Delay"), *eff.Delay, 0, true)
	}
	if own.Max != nil || own.Delay != nil {
		v.capped(field(p, "Max"), *eff.Max, *eff.Delay, "delay", true)
	}
	if own.Multiplier != nil {
		v.multiplier(field(p, "Multiplier"), *eff.Multiplier)
	}
	if own.Jitter != nil {
		if j := *eff.Jitter; !(j >= 0 && j <= 1) {
			v.fail(field(p, "Jitter"), "must be between 0 and 1")
		}
	}
}

// checkPauseLimit checks the stream's pause limit, its default included,
// against the store's sender timeout (0: unknown, nothing to check). The
// server ends a stream it has not heard from for the sender timeout and
// lets another relay take the slot: a relay that was stopped that long
// and still sent what it holds would send what the new reader sends too.
func checkPauseLimit(c StreamConfig, senderTimeout time.Duration) error {
	limit := c.WithDefaults(senderTimeout).PauseLimit
	if senderTimeout <= 0 || limit < senderTimeout {
		return nil
	}
	what := limit.String()
	if c.PauseLimit == 0 {
		what += " (the default)"
	}
	return &ConfigError{Component: "relay", Field: "Stream.PauseLimit", Reason: fmt.Sprintf(
		"must be below the store's sender timeout (%s), not %s: a relay stopped for the sender timeout may have lost the stream to another relay, "+
			"and must drop the events it holds before then", senderTimeout, what)}
}

// count checks a count: at least 1, at most limit when limit > 0.
func (v *validator) count(path string, n, limit int) {
	switch {
	case limit > 0 && (n < 1 || n > limit):
		v.fail(path, fmt.Sprintf("must be between 1 and %d", limit))
	case n < 1:
		v.fail(path, "must be ≥ 1")
	}
}

// duration checks d ≥ least when least > 0; otherwise d ≥ 0 when zeroOK,
// else d > 0.
func (v *validator) duration(path string, d, least time.Duration, zeroOK bool) {
	switch {
	case least > 0:
		if d < least {
			v.fail(path, "must be ≥ "+least.String())
		}
	case zeroOK:
		if d < 0 {
			v.fail(path, "must be ≥ 0")
		}
	case d <= 0:
		v.fail(path, "must be > 0")
	}
}

// notBelow checks hi ≥ lo (a cap against its base, named loKey) and
// reports whether it holds.
func (v *validator) notBelow(path string, hi, lo time.Duration, loKey string) bool {
	if hi < lo {
		v.fail(path, fmt.Sprintf("must be ≥ %s (%s < %s)", loKey, hi, lo))
		return false
	}
	return true
}

// capped checks a cap: not below its base, then > 0 (≥ 0 when zeroOK).
func (v *validator) capped(path string, hi, lo time.Duration, loKey string, zeroOK bool) {
	if v.notBelow(path, hi, lo, loKey) {
		v.duration(path, hi, 0, zeroOK)
	}
}

func (v *validator) multiplier(path string, m float64) {
	switch {
	case !(m >= 1):
		v.fail(path, "must be ≥ 1")
	case math.IsInf(m, 0):
		v.fail(path, "must be finite")
	}
}

// clip shortens a quoted value in a message.
func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}

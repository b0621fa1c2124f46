package relay

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"sort"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/sender"
	"github.com/txbox/txbox/store"
)

// Defaults of the per-event-type settings (SPEC §4.3, §4.4, §4.5).
const (
	// DefaultBatchSize is how many rows one claim takes.
	DefaultBatchSize = 200
	// DefaultMaxAttempts is 1 try + 3 retries.
	DefaultMaxAttempts = 4
	// DefaultLeaseDuration is the max-batch-processing-time: after it a
	// claimed row may be recovered and claimed by another relay.
	DefaultLeaseDuration = 5 * time.Minute
	// DefaultRetention keeps processed rows for a day before cleanup.
	DefaultRetention = 24 * time.Hour
	// DefaultInFlight is how many batches of one type may be between claim
	// and finish at once.
	DefaultInFlight = 4
	// DefaultOrdering delivers without per-key ordering.
	DefaultOrdering = OrderingNone
)

// Defaults of the relay-wide settings.
const (
	// DefaultDiscoverInterval is how often the relay looks for pending
	// types that have no poller yet.
	DefaultDiscoverInterval = 10 * time.Second
	// DefaultRecoverInterval is how often expired leases are swept.
	DefaultRecoverInterval = 5 * time.Second
	// DefaultDeadLetterInterval is how often FAILED rows are moved to the
	// dead-letter table.
	DefaultDeadLetterInterval = 5 * time.Second
	// DefaultMaintenanceBatchSize bounds one recover, move or cleanup
	// statement.
	DefaultMaintenanceBatchSize = 1000
	// DefaultCleanupInterval is the cleanup job's shortest interval; it
	// stretches up to DefaultCleanupMaxInterval while there is nothing to
	// delete.
	DefaultCleanupInterval = time.Minute
	// DefaultCleanupMaxInterval caps the cleanup job's interval.
	DefaultCleanupMaxInterval = 10 * time.Minute
	// DefaultDeadLetterTTL keeps resolved dead letters for a week.
	DefaultDeadLetterTTL = 7 * 24 * time.Hour
	// DefaultCleanupLeaseTTL is how long one instance holds the cleanup
	// lease.
	DefaultCleanupLeaseTTL = time.Minute
	// DefaultErrorBackoff is the first wait after a database error in a
	// poller; it doubles up to DefaultErrorMaxBackoff.
	DefaultErrorBackoff = 100 * time.Millisecond
	// DefaultErrorMaxBackoff caps the wait after repeated database errors.
	DefaultErrorMaxBackoff = 10 * time.Second
)

// Ordering says whether events of one type are delivered in order per key.
type Ordering string

// Orderings.
const (
	// OrderingNone delivers rows in parallel, roughly in due-time order.
	OrderingNone Ordering = "none"
	// OrderingKey delivers events with the same key in id order
	// (SPEC §4.6).
	OrderingKey Ordering = "key"
)

// ErrInvalidConfig is matched (errors.Is) by every configuration error
// returned from New. The message names the field path, for example
// "relay: events.orders.polling.max-delay must be ≥ min-delay".
var ErrInvalidConfig = errors.New("relay: invalid configuration")

// ConfigError is a configuration problem at one field path.
type ConfigError struct {
	// Path is the field path in the YAML spelling used by the txbox
	// command, such as "events.orders.polling.max-delay".
	Path string
	// Reason says what is wrong.
	Reason string
}

// Error returns "relay: <path> <reason>".
func (e *ConfigError) Error() string { return "relay: " + e.Path + " " + e.Reason }

// Is makes every ConfigError match ErrInvalidConfig.
func (e *ConfigError) Is(target error) bool { return target == ErrInvalidConfig }

// Config configures a Relay. Only Store and Senders are required.
type Config struct {
	// Store is the database. Required.
	Store store.Driver
	// Senders are the destinations by name. At least one is required. The
	// relay does not close them.
	Senders map[string]sender.Sender
	// Defaults are inherited by every event type, listed or not. Its
	// Route is a template: "{event_type}" is replaced by the type.
	// Defaults.Sender may be left unset only when there is exactly one
	// sender. Unset fields take the Default* constants.
	Defaults EventSettings
	// Events overrides settings per event type. Unset fields inherit
	// Defaults. Types not listed here are discovered and run with
	// Defaults.
	Events map[string]EventSettings
	// DiscoverInterval is how often the relay looks for event types with
	// pending rows that have no poller yet (the first look is at Start).
	// Defaults to 10s. Negative disables discovery.
	DiscoverInterval time.Duration
	// RecoverInterval is how often rows whose lease expired are put back
	// to PENDING. Defaults to 5s.
	RecoverInterval time.Duration
	// DeadLetterInterval is how often FAILED rows are moved to the
	// dead-letter table. Defaults to 5s.
	DeadLetterInterval time.Duration
	// MaintenanceBatchSize bounds the rows one recover or dead-letter move
	// statement touches. Defaults to 1000.
	MaintenanceBatchSize int
	// Cleanup configures deletion of processed rows and resolved dead
	// letters.
	Cleanup CleanupConfig
	// Circuit configures the circuit breakers (one per destination, and
	// one per sender's connection).
	Circuit CircuitConfig
	// InstanceID names this relay in leases and logs. Defaults to
	// hostname-pid-random.
	InstanceID string
	// Logger receives the relay's logs. Payloads are never logged.
	// Defaults to slog.Default().
	Logger *slog.Logger
	// Hooks observe the relay (metrics). They are called synchronously
	// from the relay's goroutines and must return quickly.
	Hooks []Hook
}

// EventSettings are the settings of one event type. A nil field is unset
// and inherits: an event type's settings inherit Config.Defaults, which
// inherit the Default* constants. Nested structs (Polling, Backoff) inherit
// field by field: a zero field inside them is unset.
type EventSettings struct {
	// Sender names the entry of Config.Senders to use. Defaults to the
	// only sender when there is exactly one.
	Sender *string
	// Route is where messages go. In Config.Defaults it is a template in
	// which "{event_type}" is replaced by the type. Defaults to
	// Defaults.Route expanded for the type; an empty route is passed to
	// the sender as is (a sender may derive its own default).
	Route *sender.Route
	// BatchSize is how many rows one claim takes. Defaults to 200.
	BatchSize *int
	// Polling says how often to poll. Defaults to adaptive, 250ms, ×1.5,
	// capped at 1m.
	Polling *PollingSettings
	// MaxAttempts is the number of tries (the first one included) before a
	// rejected message fails. Defaults to 4.
	MaxAttempts *int
	// Backoff is the delay before each retry. Defaults to 10s ×3.0
	// (10s, 30s, 90s), capped at 1h, no jitter.
	Backoff *BackoffSettings
	// Ordering enables per-key ordered delivery. Defaults to none.
	Ordering *Ordering
	// Retention is how long processed rows are kept; 0 deletes a row as
	// soon as it is acknowledged. Per type it only chooses between
	// deleting on ack and keeping the row; the cleanup job deletes kept
	// rows after Config.Cleanup.OutboxTTL (by default the longest
	// retention configured). Defaults to 24h.
	Retention *time.Duration
	// LeaseDuration is the max-batch-processing-time: how long a claimed
	// batch is exclusive before another relay may recover it. Defaults to
	// 5m.
	LeaseDuration *time.Duration
	// InFlight bounds the batches of this type between claim and finish
	// at once. Defaults to 4.
	InFlight *int
}

// CleanupConfig configures the cleanup job, which runs on one relay
// instance at a time under a database lease.
type CleanupConfig struct {
	// Disabled turns the cleanup job off on this instance.
	Disabled bool
	// Interval is the shortest time between cleanup rounds; it doubles up
	// to MaxInterval while a round finds nothing to delete. Defaults to 1m.
	Interval time.Duration
	// MaxInterval caps the interval. Defaults to 10m.
	MaxInterval time.Duration
	// OutboxTTL is how long PROCESSED rows are kept. The cleanup is not
	// per type, so nil defaults to the longest retention of Defaults and
	// every entry of Events (each unset one counting as 24h): no type
	// loses its processed rows before its own retention.
	OutboxTTL *time.Duration
	// DeadLetterTTL is how long RESOLVED dead letters are kept. Nil
	// defaults to 7 days.
	DeadLetterTTL *time.Duration
	// BatchSize bounds one delete statement. Defaults to 1000.
	BatchSize int
	// LeaseTTL is how long one instance holds the cleanup lease. Defaults
	// to 1m.
	LeaseTTL time.Duration
}

// settings are the resolved settings of one event type: every field set.
type settings struct {
	eventType     string
	senderName    string
	sender        sender.Sender
	route         sender.Route
	batchSize     int
	polling       PollingSettings
	maxAttempts   int
	backoff       BackoffSettings
	ordering      Ordering
	retention     time.Duration
	leaseDuration time.Duration
	inFlight      int
}

// withDefaults returns a copy of c with every unset relay-wide field set.
// Per-type settings are resolved by resolve.
func (c Config) withDefaults() Config {
	if c.DiscoverInterval == 0 {
		c.DiscoverInterval = DefaultDiscoverInterval
	}
	if c.RecoverInterval == 0 {
		c.RecoverInterval = DefaultRecoverInterval
	}
	if c.DeadLetterInterval == 0 {
		c.DeadLetterInterval = DefaultDeadLetterInterval
	}
	if c.MaintenanceBatchSize == 0 {
		c.MaintenanceBatchSize = DefaultMaintenanceBatchSize
	}
	cl := &c.Cleanup
	if cl.Interval == 0 {
		cl.Interval = DefaultCleanupInterval
	}
	if cl.MaxInterval == 0 {
		cl.MaxInterval = max(DefaultCleanupMaxInterval, cl.Interval)
	}
	if cl.OutboxTTL == nil {
		base := DefaultRetention
		if c.Defaults.Retention != nil {
			base = *c.Defaults.Retention
		}
		ttl := base
		for _, ev := range c.Events {
			if ev.Retention != nil {
				ttl = max(ttl, *ev.Retention)
			}
		}
		cl.OutboxTTL = &ttl
	}
	if cl.DeadLetterTTL == nil {
		ttl := DefaultDeadLetterTTL
		cl.DeadLetterTTL = &ttl
	}
	if cl.BatchSize == 0 {
		cl.BatchSize = DefaultMaintenanceBatchSize
	}
	if cl.LeaseTTL == 0 {
		cl.LeaseTTL = DefaultCleanupLeaseTTL
	}
	ci := &c.Circuit
	if ci.CoolDown == 0 {
		ci.CoolDown = DefaultCircuitCoolDown
	}
	if ci.MaxCoolDown == 0 {
		ci.MaxCoolDown = max(DefaultCircuitMaxCoolDown, ci.CoolDown)
	}
	if ci.Multiplier == 0 {
		ci.Multiplier = DefaultCircuitMultiplier
	}
	if c.InstanceID == "" {
		c.InstanceID = defaultInstanceID()
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

func defaultInstanceID() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown"
	}
	return fmt.Sprintf("%s-%d-%s", host, os.Getpid(), txbox.NewID().String()[24:])
}

// validate checks a Config that went through withDefaults. Every error is
// a *ConfigError naming the field path.
func (c *Config) validate() error {
	if c.Store == nil {
		return &ConfigError{Path: "store", Reason: "is required"}
	}
	if len(c.Senders) == 0 {
		return &ConfigError{Path: "senders", Reason: "must name at least one sender"}
	}
	for name, s := range c.Senders {
		if s == nil {
			return &ConfigError{Path: "senders." + name, Reason: "is nil"}
		}
	}
	for _, d := range []struct {
		path string
		v    time.Duration
	}{
		{"recover-interval", c.RecoverInterval},
		{"dead-letter-interval", c.DeadLetterInterval},
		{"cleanup.interval", c.Cleanup.Interval},
		{"cleanup.max-interval", c.Cleanup.MaxInterval},
		{"cleanup.lease-ttl", c.Cleanup.LeaseTTL},
		{"circuit.cool-down", c.Circuit.CoolDown},
		{"circuit.max-cool-down", c.Circuit.MaxCoolDown},
	} {
		if d.v <= 0 {
			return &ConfigError{Path: d.path, Reason: "must be > 0"}
		}
	}
	if c.MaintenanceBatchSize < 1 {
		return &ConfigError{Path: "maintenance-batch-size", Reason: "must be ≥ 1"}
	}
	if c.Cleanup.BatchSize < 1 {
		return &ConfigError{Path: "cleanup.batch-size", Reason: "must be ≥ 1"}
	}
	if c.Cleanup.MaxInterval < c.Cleanup.Interval {
		return &ConfigError{Path: "cleanup.max-interval", Reason: "must be ≥ interval"}
	}
	if *c.Cleanup.DeadLetterTTL < 0 {
		return &ConfigError{Path: "cleanup.dead-letter-ttl", Reason: "must be ≥ 0"}
	}
	if c.Circuit.MaxCoolDown < c.Circuit.CoolDown {
		return &ConfigError{Path: "circuit.max-cool-down", Reason: "must be ≥ cool-down"}
	}
	if !(c.Circuit.Multiplier >= 1) || math.IsInf(c.Circuit.Multiplier, 0) {
		return &ConfigError{Path: "circuit.multiplier", Reason: "must be a finite number ≥ 1"}
	}
	if _, err := c.resolve("", "defaults", c.Defaults, EventSettings{}); err != nil {
		return err
	}
	if *c.Cleanup.OutboxTTL < 0 {
		return &ConfigError{Path: "cleanup.outbox-ttl", Reason: "must be ≥ 0"}
	}
	for _, t := range sortedKeys(c.Events) {
		if err := txbox.ValidateEventType(t); err != nil {
			return &ConfigError{Path: "events." + t, Reason: "is not a valid event type: " + err.Error()}
		}
		if _, err := c.resolve(t, "events."+t, c.Events[t], c.Defaults); err != nil {
			return err
		}
	}
	return nil
}

// settingsFor returns the resolved settings of eventType: its entry in
// Events over Defaults over the Default* constants.
func (c *Config) settingsFor(eventType string) (*settings, error) {
	ev, ok := c.Events[eventType]
	if !ok {
		return c.resolve(eventType, "defaults", c.Defaults, EventSettings{})
	}
	return c.resolve(eventType, "events."+eventType, ev, c.Defaults)
}

// resolve merges own over parent over the Default* constants and checks
// the result. path prefixes error messages. eventType expands the route
// template; it is empty when only validating Defaults.
func (c *Config) resolve(eventType, path string, own, parent EventSettings) (*settings, error) {
	s := &settings{
		eventType:     eventType,
		batchSize:     DefaultBatchSize,
		maxAttempts:   DefaultMaxAttempts,
		ordering:      DefaultOrdering,
		retention:     DefaultRetention,
		leaseDuration: DefaultLeaseDuration,
		inFlight:      DefaultInFlight,
		polling:       defaultPolling(),
		backoff: BackoffSettings{
			Delay: DefaultBackoffDelay, Multiplier: DefaultBackoffMultiplier, Max: DefaultBackoffMax,
		},
	}
	var route *sender.Route
	for _, l := range []EventSettings{parent, own} {
		if l.Sender != nil {
			s.senderName = *l.Sender
		}
		if l.Route != nil {
			route = l.Route
		}
		if l.BatchSize != nil {
			s.batchSize = *l.BatchSize
		}
		if l.MaxAttempts != nil {
			s.maxAttempts = *l.MaxAttempts
		}
		if l.Ordering != nil {
			s.ordering = *l.Ordering
		}
		if l.Retention != nil {
			s.retention = *l.Retention
		}
		if l.LeaseDuration != nil {
			s.leaseDuration = *l.LeaseDuration
		}
		if l.InFlight != nil {
			s.inFlight = *l.InFlight
		}
		if l.Polling != nil {
			s.polling = overlayPolling(s.polling, *l.Polling)
		}
		if b := l.Backoff; b != nil {
			if b.Delay != 0 {
				s.backoff.Delay = b.Delay
			}
			if b.Multiplier != 0 {
				s.backoff.Multiplier = b.Multiplier
			}
			if b.Max != 0 {
				s.backoff.Max = b.Max
			}
			if b.Jitter != 0 {
				s.backoff.Jitter = b.Jitter
			}
		}
	}
	if route != nil {
		s.route = route.Expand(eventType)
		if eventType == "" {
			s.route = *route
		}
	}
	if s.senderName == "" {
		if len(c.Senders) != 1 {
			return nil, &ConfigError{Path: path + ".sender", Reason: fmt.Sprintf("is required when there are %d senders", len(c.Senders))}
		}
		for name := range c.Senders {
			s.senderName = name
		}
	}
	snd, ok := c.Senders[s.senderName]
	if !ok {
		return nil, &ConfigError{Path: path + ".sender", Reason: fmt.Sprintf("names unknown sender %q", s.senderName)}
	}
	s.sender = snd
	if err := s.check(path); err != nil {
		return nil, err
	}
	return s, nil
}

func (s *settings) check(path string) error {
	bad := func(field, reason string) error { return &ConfigError{Path: path + "." + field, Reason: reason} }
	if s.batchSize < 1 {
		return bad("batch-size", "must be ≥ 1")
	}
	if s.maxAttempts < 1 {
		return bad("max-attempts", "must be ≥ 1")
	}
	if s.inFlight < 1 {
		return bad("in-flight", "must be ≥ 1")
	}
	if s.leaseDuration <= 0 {
		return bad("lease-duration", "must be > 0")
	}
	if s.retention < 0 {
		return bad("retention", "must be ≥ 0")
	}
	switch s.ordering {
	case OrderingNone, OrderingKey:
	default:
		return bad("ordering", fmt.Sprintf("must be %q or %q, not %q", OrderingNone, OrderingKey, s.ordering))
	}
	p := s.polling
	switch p.Mode {
	case PollingAdaptive:
		if p.MinDelay < 0 {
			return bad("polling.min-delay", "must be ≥ 0")
		}
		if p.MaxDelay <= 0 {
			return bad("polling.max-delay", "must be > 0")
		}
		if p.MaxDelay < p.MinDelay {
			return bad("polling.max-delay", "must be ≥ min-delay")
		}
		if !(p.Multiplier >= 1) || math.IsInf(p.Multiplier, 0) {
			return bad("polling.multiplier", "must be a finite number ≥ 1")
		}
	case PollingFixed:
		if p.Delay <= 0 {
			return bad("polling.delay", "must be > 0")
		}
	default:
		return bad("polling.mode", fmt.Sprintf("must be %q or %q, not %q", PollingAdaptive, PollingFixed, p.Mode))
	}
	b := s.backoff
	if b.Delay < 0 {
		return bad("backoff.delay", "must be ≥ 0")
	}
	if b.Max < 0 {
		return bad("backoff.max", "must be ≥ 0")
	}
	if b.Max < b.Delay {
		return bad("backoff.max", "must be ≥ delay")
	}
	if !(b.Multiplier >= 1) || math.IsInf(b.Multiplier, 0) {
		return bad("backoff.multiplier", "must be a finite number ≥ 1")
	}
	if !(b.Jitter >= 0 && b.Jitter <= 1) {
		return bad("backoff.jitter", "must be in [0, 1]")
	}
	return nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

package relay

import (
	"fmt"
	"log/slog"
	"os"
	"sort"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/sender"
	"github.com/txbox/txbox/store"
)

// Defaults of the per-event-type settings (docs/configuration.md).
const (
	// DefaultBatchSize is how many rows one claim takes.
	DefaultBatchSize = 200
	// DefaultMaxAttempts is 1 try + 3 retries.
	DefaultMaxAttempts = 4
	// DefaultLeaseDuration is the max-batch-processing-time: after it a
	// claimed row may be recovered and claimed by another relay.
	DefaultLeaseDuration = 5 * time.Minute
	// DefaultRetention deletes a row as soon as its destination
	// acknowledged it: one write per event. Keeping processed rows (for
	// inspection or replay) turns that delete into an UPDATE that writes
	// a new row version and index entries, and a later delete by the
	// cleanup job, about half the drain rate (docs/benchmarks.md, "Claim
	// modes").
	DefaultRetention time.Duration = 0
	// DefaultInFlight is how many batches of one type may be between claim
	// and finish at once.
	DefaultInFlight = 4
	// DefaultOrdering delivers without per-key ordering.
	DefaultOrdering = txbox.OrderingNone
	// DefaultCommitHorizon keeps the commit horizon on for ordered types.
	DefaultCommitHorizon = txbox.CommitHorizonOn
	// DefaultOrderingFence is the former name of DefaultCommitHorizon.
	//
	// Deprecated: use DefaultCommitHorizon.
	DefaultOrderingFence = DefaultCommitHorizon
	// DefaultClaim is the claim of event types that set none and are not
	// routed to a broker: the lease claim, which every store has and
	// which suits slow destinations. Types routed to a sender that
	// acknowledges quickly ([sender.QuickAcker]: NATS, Kafka, RabbitMQ,
	// Redis) get txbox.ClaimLock instead when the store has a lock claim
	// (PostgreSQL, MySQL/MariaDB); see txbox.ClaimMode.
	DefaultClaim = txbox.ClaimLease
)

// Defaults of the relay-wide settings.
const (
	// DefaultDiscoverInterval is the discovery job's shortest interval:
	// how often the relay looks for pending types that have no poller yet
	// while it keeps finding some. It doubles up to
	// DefaultDiscoverMaxInterval while nothing new appears.
	DefaultDiscoverInterval = 10 * time.Second
	// DefaultDiscoverMaxInterval caps the discovery job's interval.
	DefaultDiscoverMaxInterval = 5 * time.Minute
	// DefaultRecoverInterval is the recovery job's shortest interval:
	// how often expired leases are swept while the relay is claiming rows
	// or sweeps find some. It doubles up to DefaultRecoverMaxInterval
	// while sweeps find nothing and nothing is claimed.
	DefaultRecoverInterval = 5 * time.Second
	// DefaultRecoverMaxInterval caps the recovery job's interval: a lease
	// that expires is recovered at most this long after it expired.
	DefaultRecoverMaxInterval = 2 * time.Minute
	// DefaultDeadLetterInterval is the dead-letter move's shortest
	// interval. The move runs at once after a batch failed rows; between
	// failures it is a backstop sweep (rows another relay failed just
	// before it crashed) that doubles up to DefaultDeadLetterMaxInterval
	// while it finds nothing.
	DefaultDeadLetterInterval = 5 * time.Second
	// DefaultDeadLetterMaxInterval caps the dead-letter sweep's interval.
	DefaultDeadLetterMaxInterval = 10 * time.Minute
	// DefaultMaintenanceBatchSize bounds one recover, move or cleanup
	// statement.
	DefaultMaintenanceBatchSize = 1000
	// DefaultCleanupInterval is the cleanup job's shortest interval; it
	// stretches up to DefaultCleanupMaxInterval while there is nothing to
	// delete.
	DefaultCleanupInterval = time.Minute
	// DefaultCleanupMaxInterval caps the cleanup job's interval. Rows
	// past their TTL wait at most this long more; an idle relay pays its
	// three statements (lease, two deletes) twice an hour.
	DefaultCleanupMaxInterval = 30 * time.Minute
	// DefaultDeadLetterTTL keeps resolved dead letters for a week.
	DefaultDeadLetterTTL = 7 * 24 * time.Hour
	// DefaultAuditTTL keeps the audit trail of operators' dead-letter
	// actions for 90 days.
	DefaultAuditTTL = 90 * 24 * time.Hour
	// DefaultCleanupLeaseTTL is how long one instance holds the cleanup
	// lease.
	DefaultCleanupLeaseTTL = time.Minute
	// DefaultErrorBackoff is the first wait after a database error in a
	// poller; it doubles up to DefaultErrorMaxBackoff.
	DefaultErrorBackoff = 100 * time.Millisecond
	// DefaultErrorMaxBackoff caps the wait after repeated database errors.
	DefaultErrorMaxBackoff = 10 * time.Second
)

// Ordering is txbox.Ordering: whether events of one type are delivered in
// order per key.
//
// Deprecated: use txbox.Ordering.
type Ordering = txbox.Ordering

// Orderings, now in package txbox.
const (
	// OrderingNone is txbox.OrderingNone.
	//
	// Deprecated: use txbox.OrderingNone.
	OrderingNone = txbox.OrderingNone
	// OrderingKey is txbox.OrderingKey.
	//
	// Deprecated: use txbox.OrderingKey.
	OrderingKey = txbox.OrderingKey
)

// CommitHorizon is txbox.CommitHorizon: whether an ordered type's claim
// waits for the commit horizon.
//
// Deprecated: use txbox.CommitHorizon.
type CommitHorizon = txbox.CommitHorizon

// OrderingFence is the former name of txbox.CommitHorizon: "fence" now
// names only the lease token that fences a finish.
//
// Deprecated: use txbox.CommitHorizon.
type OrderingFence = txbox.CommitHorizon

// Commit horizons, now in package txbox.
const (
	// CommitHorizonOn is txbox.CommitHorizonOn.
	//
	// Deprecated: use txbox.CommitHorizonOn.
	CommitHorizonOn = txbox.CommitHorizonOn
	// CommitHorizonOff is txbox.CommitHorizonOff.
	//
	// Deprecated: use txbox.CommitHorizonOff.
	CommitHorizonOff = txbox.CommitHorizonOff
	// OrderingFenceOn is the former name of txbox.CommitHorizonOn.
	//
	// Deprecated: use txbox.CommitHorizonOn.
	OrderingFenceOn = txbox.CommitHorizonOn
	// OrderingFenceOff is the former name of txbox.CommitHorizonOff.
	//
	// Deprecated: use txbox.CommitHorizonOff.
	OrderingFenceOff = txbox.CommitHorizonOff
)

// ClaimMode is txbox.ClaimMode: how a relay claims the rows of one event
// type.
//
// Deprecated: use txbox.ClaimMode.
type ClaimMode = txbox.ClaimMode

// Claim modes, now in package txbox.
const (
	// ClaimLease is txbox.ClaimLease.
	//
	// Deprecated: use txbox.ClaimLease.
	ClaimLease = txbox.ClaimLease
	// ClaimLock is txbox.ClaimLock.
	//
	// Deprecated: use txbox.ClaimLock.
	ClaimLock = txbox.ClaimLock
)

// ErrInvalidConfig is txbox.ErrInvalidConfig: every configuration error New
// returns matches it (errors.Is).
var ErrInvalidConfig = txbox.ErrInvalidConfig

// ConfigError is txbox.ConfigError with Component "relay": a configuration
// problem at one field of Config. Its Field is the Go path of that field
// from Config: field names joined by dots, a map's key quoted in brackets,
// such as Cleanup.Interval, Circuit.CoolDown, Defaults.Polling.MinDelay
// or Events["order-created"].BatchSize; the error reads
// `relay: Events["orders"].Polling.MaxDelay must be ≥ min-delay (1s < 5s)`.
// The txbox command's loader (config) translates these paths into the
// YAML key paths of docs/configuration.md.
type ConfigError = txbox.ConfigError

// Config configures a Relay. Only Store and Senders are required.
type Config struct {
	// Store is the database. Required.
	Store store.Driver
	// Senders are the destinations by name. Required: at least one. The
	// relay does not close them.
	Senders map[string]sender.Sender
	// StartWithoutStore makes Start skip its check that the database
	// answers, for a relay started before its database is up: it then
	// starts at once, and its claims fail, logged and reported by
	// Health, and are retried until the database answers. Defaults to
	// false: Start returns an error matching ErrStoreUnreachable when the
	// database does not answer (Relay.Start).
	StartWithoutStore bool
	// Defaults are inherited by every event type, listed or not. Its
	// Route is a template: "{event_type}" is replaced by the type.
	// Defaults.Sender may be left unset only when there is exactly one
	// sender. Defaults to DefaultEventSettings, field by field.
	Defaults EventSettings
	// Events overrides settings per event type (see
	// EventSettings.Inherit). Types not listed here are discovered and run
	// with Defaults. Defaults to none: every type runs with Defaults.
	Events map[string]EventSettings
	// DiscoverInterval is the shortest time between two looks for event
	// types with pending rows that have no poller yet (the first look is
	// at Start); it doubles up to DiscoverMaxInterval while a look finds
	// nothing new. Defaults to 10s. Negative disables discovery. A wake-up
	// naming a type without a poller does not wait for it, whatever its
	// value (Relay.Wake).
	DiscoverInterval time.Duration
	// DiscoverMaxInterval caps the discovery interval. Defaults to 5m
	// (DefaultDiscoverMaxInterval), or DiscoverInterval when that is
	// longer.
	DiscoverMaxInterval time.Duration
	// RecoverInterval is the shortest time between two sweeps that put
	// rows whose lease expired back to PENDING: the interval while this
	// relay claims rows or sweeps find some. It doubles up to
	// RecoverMaxInterval while sweeps find nothing and nothing is claimed
	// (docs/concepts.md, "Background jobs"). Defaults to 5s.
	RecoverInterval time.Duration
	// RecoverMaxInterval caps the recovery interval, and so bounds how
	// long after its expiry a lease is recovered. Defaults to 2m
	// (DefaultRecoverMaxInterval), or RecoverInterval when that is longer.
	RecoverMaxInterval time.Duration
	// DeadLetterInterval is the shortest time between two sweeps that move
	// FAILED rows to the dead-letter table. A batch that failed rows
	// triggers a move at once; the sweep is the backstop for rows failed
	// by a relay that stopped before its move, and doubles up to
	// DeadLetterMaxInterval while it finds nothing. Defaults to 5s.
	DeadLetterInterval time.Duration
	// HeartbeatInterval is how often the relay records that it is alive
	// in the heartbeat table (store.Instances), which the admin API lists
	// (docs/operations.md, "Relay instances"); a heartbeat counts for
	// three intervals. Defaults to [DefaultHeartbeatInterval]. Negative
	// disables it.
	HeartbeatInterval time.Duration
	// DeadLetterMaxInterval caps the dead-letter sweep's interval.
	// Defaults to 10m (DefaultDeadLetterMaxInterval), or
	// DeadLetterInterval when that is longer.
	DeadLetterMaxInterval time.Duration
	// MaintenanceBatchSize bounds the rows one recover or dead-letter move
	// statement touches. Defaults to 1000.
	MaintenanceBatchSize int
	// Cleanup configures deletion of processed rows and resolved dead
	// letters. Defaults to the defaults of each of its fields: on, every
	// minute to every 30 minutes.
	Cleanup CleanupConfig
	// Circuit configures the circuit breakers (one per destination, and
	// one per sender's connection). Defaults to the defaults of each of
	// its fields: a 1s cool-down, doubling up to 1m.
	Circuit CircuitConfig
	// InstanceID names this relay in leases and logs. Defaults to
	// hostname-pid-random.
	InstanceID string
	// Tenant names the tenant whose tables Store holds, for a relay that
	// is one of a process's tenants (docs/multi-tenant.md): every message
	// carries it in the txbox-tenant header (txbox.HeaderTenant), so a
	// consumer can route it to that tenant's inbox, and every log line
	// carries it. A name as txbox.ValidateTenantName takes it. Defaults
	// to none: a relay without tenants sends no txbox-tenant header.
	Tenant string
	// Logger receives the relay's logs. Payloads are never logged.
	// Defaults to slog.Default().
	Logger *slog.Logger
	// Hooks observe the relay (metrics). They are called synchronously
	// from the relay's goroutines and must return quickly. Defaults to
	// none.
	Hooks []txbox.RelayHook
	// TracerProvider, when set, traces deliveries with OpenTelemetry
	// (relay/trace.go): a span per batch linked to the producers' spans,
	// and a span per message that continues its producer's trace and
	// whose context replaces the message's traceparent, so the consumer
	// continues the same trace. Defaults to nil, which traces nothing and
	// leaves the producer's traceparent as it is.
	TracerProvider trace.TracerProvider
	// LockBudget bounds the lock-claimed batches (txbox.ClaimLock) of all types
	// that hold a database connection at once; further lock claims wait
	// for one to finish (docs/operations.md, "Connection pool"). Defaults
	// to (zero is) a budget derived from the store's pool: its size minus
	// LockReserve, so that heartbeats, background jobs, health checks and
	// lease-mode claims always find a connection; no bound when the store
	// reports no pool size. Negative: no bound. The txbox command derives
	// it from database.max-conns.
	LockBudget int

	// Stream turns on WAL mode's stream (docs/concepts.md, "WAL mode"):
	// events are read from the database's log as well as claimed from
	// the outbox table. Its PauseLimit must be below the store's sender
	// timeout (store.Streamer.StreamSenderTimeout, when the store knows
	// it); unset, it defaults to half of that timeout (5s with
	// PostgreSQL's default 10s), else to DefaultStreamPauseLimit
	// (StreamConfig.WithDefaults). Defaults to the defaults of each of
	// its fields: on when the store reports WAL mode, off otherwise.
	Stream StreamConfig
}

// EventSettings are the settings of one event type, and the model the
// txbox command decodes from the defaults and events keys of its YAML file
// (docs/configuration.md; the config package maps the fields to the keys).
// A nil field is unset and inherits (see Inherit): an event type's settings inherit
// Config.Defaults, which inherit DefaultEventSettings. A field that is set
// wins even when it holds a zero value, so backoff.jitter: 0 turns off the
// jitter Defaults turned on.
type EventSettings struct {
	// Sender names the entry of Config.Senders to use. Defaults to the
	// only sender when there is exactly one.
	Sender *string
	// Route is where messages go. In Config.Defaults it is a template in
	// which "{event_type}" is replaced by the type. An event type's Route
	// replaces the inherited one as a whole; the YAML loader merges a
	// file's routes key by key before it builds the relay's Config
	// (config.Config.Effective). Defaults to Defaults.Route expanded for
	// the type; an empty route is passed to the sender as is (a sender may
	// derive its own default).
	Route *sender.Route
	// BatchSize is how many rows one claim takes. Defaults to 200.
	BatchSize *int
	// Polling says how often to poll; its fields inherit one by one.
	// Defaults to adaptive, 250ms, ×1.5, capped at 1m.
	Polling *PollingSettings
	// MaxAttempts is the number of tries (the first one included) before a
	// rejected message fails. Defaults to 4.
	MaxAttempts *int
	// Backoff is the delay before each retry; its fields inherit one by
	// one. Defaults to 10s ×3.0 (10s, 30s, 90s), capped at 1h, no jitter.
	Backoff *BackoffSettings
	// Ordering enables per-key ordered delivery. Defaults to none.
	Ordering *txbox.Ordering
	// CommitHorizon, with Ordering key, says whether claims wait for the
	// commit horizon (CommitHorizon); off only for producers that never
	// overlap on a key. Defaults to on (DefaultCommitHorizon).
	CommitHorizon *txbox.CommitHorizon
	// OrderingFence is the former name of CommitHorizon, honoured when
	// CommitHorizon is nil; setting both to different values is an
	// error. Defaults to nil (CommitHorizon decides).
	//
	// Deprecated: use CommitHorizon.
	OrderingFence *txbox.CommitHorizon
	// Retention is how long processed rows are kept; 0 deletes a row as
	// soon as it is acknowledged. Per type it only chooses between
	// deleting on ack and keeping the row; the cleanup job deletes kept
	// rows after Config.Cleanup.OutboxTTL (by default the longest
	// retention configured). Defaults to 0 (DefaultRetention).
	Retention *time.Duration
	// LeaseDuration is the max-batch-processing-time: how long a claimed
	// batch is exclusive before another relay may recover it. Defaults to
	// 5m.
	LeaseDuration *time.Duration
	// InFlight bounds the batches of this type between claim and finish
	// at once. Defaults to 4.
	InFlight *int
	// Claim chooses the claim mode: lease or lock (txbox.ClaimMode). With lock,
	// LeaseDuration bounds the claim's transaction instead of a lease.
	// Defaults to lock for senders that acknowledge quickly (brokers) on
	// stores with a lock claim, else lease (DefaultClaim).
	Claim *txbox.ClaimMode
	// Routes, with two or more entries, fan the type out
	// (docs/concepts.md, "Fan-out"): every route gets every event, with
	// its own deliveries, retries, circuit and dead letters. Each route
	// inherits the type's other settings and may set its own sender,
	// destination and per-destination settings. One entry is the type's
	// single route, as Sender and Route would be. Only in Events, and
	// not beside Route. Defaults to none: the type has one route.
	Routes []RouteSettings
}

// DefaultEventSettings returns the settings every event type inherits
// last: each field set to its Default* constant, except Sender (the only
// sender, when there is exactly one) and Route (none: the sender derives
// its own default).
func DefaultEventSettings() EventSettings {
	return EventSettings{
		BatchSize:   new(DefaultBatchSize),
		Polling:     defaultPollingSettings(),
		MaxAttempts: new(DefaultMaxAttempts),
		Backoff: &BackoffSettings{
			Delay: new(DefaultBackoffDelay), Multiplier: new(DefaultBackoffMultiplier),
			Max: new(DefaultBackoffMax), Jitter: new(0.0),
		},
		Ordering:      new(DefaultOrdering),
		CommitHorizon: new(DefaultCommitHorizon),
		Retention:     new(DefaultRetention),
		LeaseDuration: new(DefaultLeaseDuration),
		InFlight:      new(DefaultInFlight),
		Claim:         new(DefaultClaim),
	}
}

// Inherit returns s with every unset field taken from parent: Polling and
// Backoff field by field, Route as a whole. The result shares no memory
// with s or parent.
func (s EventSettings) Inherit(parent EventSettings) EventSettings {
	return EventSettings{
		Sender:        pick(s.Sender, parent.Sender),
		Route:         pick(s.Route, parent.Route),
		BatchSize:     pick(s.BatchSize, parent.BatchSize),
		Polling:       s.Polling.inherit(parent.Polling),
		MaxAttempts:   pick(s.MaxAttempts, parent.MaxAttempts),
		Backoff:       s.Backoff.inherit(parent.Backoff),
		Ordering:      pick(s.Ordering, parent.Ordering),
		CommitHorizon: pick(s.commitHorizon(), parent.commitHorizon()),
		Retention:     pick(s.Retention, parent.Retention),
		LeaseDuration: pick(s.LeaseDuration, parent.LeaseDuration),
		InFlight:      pick(s.InFlight, parent.InFlight),
		Claim:         pick(s.Claim, parent.Claim),
		Routes:        cloneRoutes(s.Routes),
	}
}

// commitHorizon is CommitHorizon, or the deprecated OrderingFence when
// only that is set. Inherit folds the one into the other, so settings
// that went through it (every resolved and validated one) have
// CommitHorizon alone.
func (s EventSettings) commitHorizon() *txbox.CommitHorizon {
	if s.CommitHorizon == nil {
		return s.OrderingFence
	}
	return s.CommitHorizon
}

// pick returns a copy of own when it is set, else a copy of parent, else
// nil.
func pick[T any](own, parent *T) *T {
	switch {
	case own != nil:
		return new(*own)
	case parent != nil:
		return new(*parent)
	}
	return nil
}

// CleanupConfig configures the cleanup job, which runs on one relay
// instance at a time under a database lease.
type CleanupConfig struct {
	// Disabled turns the cleanup job off on this instance. Defaults to
	// false: the job runs.
	Disabled bool
	// Interval is the shortest time between cleanup rounds; it doubles up
	// to MaxInterval while a round finds nothing to delete. Defaults to 1m.
	Interval time.Duration
	// MaxInterval caps the interval. Defaults to
	// [DefaultCleanupMaxInterval], or Interval when that is longer.
	MaxInterval time.Duration
	// OutboxTTL is how long PROCESSED rows are kept. Defaults to the
	// longest retention of Defaults and every entry of Events (each unset
	// one counting as [DefaultRetention]): the cleanup is not per type,
	// and no type loses its processed rows before its own retention.
	OutboxTTL *time.Duration
	// DeadLetterTTL is how long RESOLVED dead letters are kept. Defaults
	// to 7 days (DefaultDeadLetterTTL).
	DeadLetterTTL *time.Duration
	// AuditTTL is how long entries of the audit trail (store.AuditLog)
	// are kept. Defaults to 90 days (DefaultAuditTTL).
	AuditTTL *time.Duration
	// BatchSize bounds one delete statement. Defaults to 1000.
	BatchSize int
	// LeaseTTL is how long one instance holds the cleanup lease. Defaults
	// to 1m (DefaultCleanupLeaseTTL).
	LeaseTTL time.Duration
}

// settings are the resolved settings of one event type: every field set.
type typeSettings struct {
	eventType string
	// routeName is the fan-out route these settings deliver to, "" for a
	// type with one route (store.OutboxRow.Route).
	routeName  string
	senderName string
	sender     sender.Sender
	route      sender.Route
	batchSize  int
	// batchSizeSet says batch-size was configured (in the type's entry
	// or in Defaults), not taken from DefaultEventSettings: WAL mode's
	// lanes use StreamConfig.BatchSize otherwise.
	batchSizeSet  bool
	polling       polling
	maxAttempts   int
	backoff       resolvedBackoff
	ordering      txbox.Ordering
	commitHorizon bool
	retention     time.Duration
	leaseDuration time.Duration
	inFlight      int
	claim         txbox.ClaimMode
}

// storeSource is what s reports of its producers' events
// (store.SourceReporter), "" when it does not say.
func storeSource(s store.Driver) string {
	if sr, ok := s.(store.SourceReporter); ok {
		return sr.Source()
	}
	return ""
}

// ordered reports whether the type is delivered in key order: the one
// place that asks (the lane and each source decide from it once, when
// they are made).
func (s *typeSettings) ordered() bool { return s.ordering == txbox.OrderingKey }

// withDefaults returns a copy of c with every unset relay-wide field set.
// Per-type settings are resolved by resolve.
func (c Config) withDefaults() Config {
	c = c.withSettingDefaults(false)
	if c.InstanceID == "" {
		c.InstanceID = defaultInstanceID()
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if st, ok := c.Store.(store.Streamer); ok && c.Stream.Enabled {
		c.Stream = c.Stream.WithDefaults(st.StreamSenderTimeout())
	}
	return c
}

// WithDefaults returns c with every unset field set to the value the
// relay uses with a store whose sender timeout is senderTimeout
// (store.Streamer.StreamSenderTimeout; 0 when unknown), as New sets them:
// an unset PauseLimit is half of a known sender timeout, like the YAML
// loader's database.wal.pause-limit, so that it stays below whatever
// timeout the store has; DefaultStreamPauseLimit otherwise. A loader uses
// it to show the effective values.
func (c StreamConfig) WithDefaults(senderTimeout time.Duration) StreamConfig {
	if c.PauseLimit == 0 && senderTimeout > 0 {
		c.PauseLimit = senderTimeout / 2
	}
	return c.withDefaults()
}

// WithDefaults returns c with every unset relay-wide setting set to the
// value the relay uses (the Default* constants, and the caps derived from
// their intervals), so a loader can show the effective values. keepZeros
// leaves alone the zero fields that Bounds.ZeroIsSet names, as a loader
// that filled its defaults in means them.
func (c Config) WithDefaults(keepZeros bool) Config { return c.withSettingDefaults(keepZeros) }

// withSettingDefaults sets the unset relay-wide settings that Validate
// checks; it has no side effects. keepZeros leaves alone the zero fields
// that Bounds.ZeroIsSet names.
func (c Config) withSettingDefaults(keepZeros bool) Config {
	cl, ci := &c.Cleanup, &c.Circuit
	if !keepZeros {
		setZero(&c.DiscoverInterval, DefaultDiscoverInterval)
		setZero(&c.RecoverInterval, DefaultRecoverInterval)
		setZero(&c.DeadLetterInterval, DefaultDeadLetterInterval)
		setZero(&c.HeartbeatInterval, DefaultHeartbeatInterval)
		setZero(&cl.Interval, DefaultCleanupInterval)
		setZero(&cl.MaxInterval, max(DefaultCleanupMaxInterval, cl.Interval))
		setZero(&cl.BatchSize, DefaultMaintenanceBatchSize)
		setZero(&ci.CoolDown, DefaultCircuitCoolDown)
		setZero(&ci.MaxCoolDown, max(DefaultCircuitMaxCoolDown, ci.CoolDown))
		setZero(&ci.Multiplier, DefaultCircuitMultiplier)
	}
	// A zero cap is unset even for a loader that filled defaults in: no
	// cap is 0, and a default derived from the interval follows one set in
	// the file.
	setZero(&c.DiscoverMaxInterval, max(DefaultDiscoverMaxInterval, c.DiscoverInterval))
	setZero(&c.RecoverMaxInterval, max(DefaultRecoverMaxInterval, c.RecoverInterval))
	setZero(&c.DeadLetterMaxInterval, max(DefaultDeadLetterMaxInterval, c.DeadLetterInterval))
	setZero(&c.MaintenanceBatchSize, DefaultMaintenanceBatchSize)
	setZero(&cl.LeaseTTL, DefaultCleanupLeaseTTL)
	if cl.OutboxTTL == nil {
		cl.OutboxTTL = new(c.longestRetention())
	}
	if cl.DeadLetterTTL == nil {
		cl.DeadLetterTTL = new(DefaultDeadLetterTTL)
	}
	if cl.AuditTTL == nil {
		cl.AuditTTL = new(DefaultAuditTTL)
	}
	return c
}

// longestRetention is the default of Cleanup.OutboxTTL: the longest
// retention of Defaults and of every entry of Events.
func (c *Config) longestRetention() time.Duration {
	ttl := DefaultRetention
	if c.Defaults.Retention != nil {
		ttl = *c.Defaults.Retention
	}
	for _, ev := range c.Events {
		if ev.Retention != nil {
			ttl = max(ttl, *ev.Retention)
		}
	}
	return ttl
}

// setZero sets *v to def when it is zero (unset).
func setZero[T comparable](v *T, def T) {
	var zero T
	if *v == zero {
		*v = def
	}
}

func defaultInstanceID() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown"
	}
	return fmt.Sprintf("%s-%d-%s", host, os.Getpid(), txbox.NewID().String()[24:])
}

// validate checks a Config before or after withDefaults: the store and
// the senders, then every setting (Validate with the zero Bounds), then
// that each event type finds its sender. It returns the first problem, a
// *ConfigError naming the key path.
func (c *Config) validate() error {
	if c.Tenant != "" {
		if err := txbox.ValidateTenantName(c.Tenant); err != nil {
			return &ConfigError{Component: "relay", Field: "Tenant", Reason: err.Error()}
		}
	}
	if c.Store == nil {
		return &ConfigError{Component: "relay", Field: "Store", Reason: "is required"}
	}
	if len(c.Senders) == 0 {
		return &ConfigError{Component: "relay", Field: "Senders", Reason: "must name at least one sender"}
	}
	for _, name := range sortedKeys(c.Senders) {
		if c.Senders[name] == nil {
			return &ConfigError{Component: "relay", Field: index("Senders", name), Reason: "is nil"}
		}
	}
	if errs := c.Validate(Bounds{}); len(errs) > 0 {
		return errs[0]
	}
	if c.Stream.Enabled {
		if storeSource(c.Store) == store.SourceTable {
			return &ConfigError{Component: "relay", Field: "Stream", Reason: "the store is in table mode (its producers write rows, which the pollers deliver); WAL mode is the store's setting (postgres.Config.Source = SourceWAL)"}
		}
		st, ok := c.Store.(store.Streamer)
		if !ok {
			return &ConfigError{Component: "relay", Field: "Stream", Reason: "needs a store that can stream (PostgreSQL in WAL mode)"}
		}
		if err := c.Stream.validate(); err != nil {
			return err
		}
		if err := checkPauseLimit(c.Stream, st.StreamSenderTimeout()); err != nil {
			return err
		}
	}
	if _, err := c.resolve("", "Defaults", c.Defaults, EventSettings{}); err != nil {
		return err
	}
	if err := c.validateRoutes(); err != nil {
		return err
	}
	for _, t := range sortedKeys(c.Events) {
		if _, err := c.resolve(t, index("Events", t), singleRoute(c.Events[t]), c.Defaults); err != nil {
			return err
		}
	}
	return nil
}

// settingsFor returns the resolved settings of eventType: its entry in
// Events over Defaults over DefaultEventSettings.
func (c *Config) settingsFor(eventType string) (*typeSettings, error) {
	ev, ok := c.Events[eventType]
	if !ok {
		return c.resolve(eventType, "Defaults", c.Defaults, EventSettings{})
	}
	return c.resolve(eventType, index("Events", eventType), singleRoute(ev), c.Defaults)
}

// resolve merges own over parent over DefaultEventSettings and finds the
// sender; Validate has checked the values. path prefixes error messages.
// eventType expands the route template; it is empty when only validating
// Defaults.
func (c *Config) resolve(eventType, path string, own, parent EventSettings) (*typeSettings, error) {
	set := own.Inherit(parent)
	e := set.Inherit(DefaultEventSettings())
	s := &typeSettings{
		eventType:     eventType,
		senderName:    deref(e.Sender),
		batchSize:     *e.BatchSize,
		batchSizeSet:  set.BatchSize != nil,
		polling:       e.Polling.resolved(),
		maxAttempts:   *e.MaxAttempts,
		backoff:       e.Backoff.resolved(),
		ordering:      *e.Ordering,
		commitHorizon: *e.CommitHorizon != txbox.CommitHorizonOff,
		retention:     *e.Retention,
		leaseDuration: *e.LeaseDuration,
		inFlight:      *e.InFlight,
		claim:         *e.Claim,
	}
	if e.Route != nil {
		s.route = e.Route.Expand(eventType)
		if eventType == "" {
			s.route = *e.Route
		}
	}
	if _, err := sender.ParseFormat(string(s.route.Format)); err != nil {
		return nil, &ConfigError{Component: "relay", Field: field(path, "Route.Format"), Reason: err.Error()}
	}
	if s.senderName == "" {
		if len(c.Senders) != 1 {
			return nil, &ConfigError{Component: "relay", Field: field(path, "Sender"), Reason: fmt.Sprintf("is required when there are %d senders", len(c.Senders))}
		}
		for name := range c.Senders {
			s.senderName = name
		}
	}
	snd, ok := c.Senders[s.senderName]
	if !ok {
		return nil, &ConfigError{Component: "relay", Field: field(path, "Sender"), Reason: fmt.Sprintf("names unknown sender %q", s.senderName)}
	}
	s.sender = snd
	_, canLock := c.Store.(store.OutboxLocker)
	if set.Claim == nil && canLock && sender.AcksQuickly(snd) {
		s.claim = txbox.ClaimLock
	}
	if s.claim == txbox.ClaimLock && !canLock {
		return nil, &ConfigError{Component: "relay", Field: field(path, "Claim"),
			Reason: "lock needs a store with a lock claim (PostgreSQL, MySQL/MariaDB; SQLite has none): use lease"}
	}
	return s, nil
}

// deref returns *p, or the zero value when p is nil.
func deref[T any](p *T) T {
	if p == nil {
		var zero T
		return zero
	}
	return *p
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

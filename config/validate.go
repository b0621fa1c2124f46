package config

import (
	"fmt"
	"maps"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/relay"
	"github.com/txbox/txbox/sender"
	"github.com/txbox/txbox/store"
	"github.com/txbox/txbox/store/postgres"
)

// Limits on numeric settings. Values outside them are almost certainly
// typos, and some would make the relay misbehave (a zero batch claims
// nothing forever).
const (
	MaxBatchSize   = 10_000
	MaxMaxAttempts = 1_000
)

// fileBounds are the ranges docs/configuration.md gives for a file: the
// relay's own checks (relay.Config.Validate), narrowed to catch typos.
var fileBounds = relay.Bounds{
	MaxBatchSize:        MaxBatchSize,
	MaxAttempts:         MaxMaxAttempts,
	MaxInFlight:         64,
	MaxCleanupBatchSize: 100_000,
	MinLease:            time.Second,
	MinPollDelay:        time.Millisecond,
	MinCleanupInterval:  time.Second,
	MinInterval:         10 * time.Millisecond,
	// Default fills every relay-wide key before decoding, so a zero left
	// is the file's.
	ZeroIsSet: true,
}

// Default returns the configuration with every default filled in: SQLite
// at ./txbox.db, no senders, and the relay's defaults
// (relay.DefaultEventSettings and the relay.Default* constants), the
// defaults route sending each type to a destination named after it.
// Defaults.Claim and Defaults.BatchSize are left unset: the relay's
// default for each depends on more than the key (Effective fills them in).
func Default() *Config {
	defaults := relay.DefaultEventSettings()
	// No claim: unless the file sets one, each type's claim follows its
	// sender and the database (defaultClaim), as the relay's own does.
	defaults.Claim = nil
	// No batch size: unless the file sets one, claims take
	// relay.DefaultBatchSize and WAL mode's stream batches
	// database.wal.batch-size; a batch-size the relay is given, even 200,
	// is set and sizes the stream's batches too.
	defaults.BatchSize = nil
	defaults.Route = &sender.Route{
		Topic:      DefaultDefaultSenderRoute,
		Subject:    DefaultDefaultSenderRoute,
		RoutingKey: DefaultDefaultSenderRoute,
		Stream:     DefaultDefaultSenderRoute,
	}
	return &Config{
		Database: Database{Dialect: DefaultDialect},
		Defaults: defaults,
		Cleanup: relay.CleanupConfig{
			Interval:      relay.DefaultCleanupInterval,
			MaxInterval:   relay.DefaultCleanupMaxInterval,
			BatchSize:     relay.DefaultMaintenanceBatchSize,
			DeadLetterTTL: new(relay.DefaultDeadLetterTTL),
			AuditTTL:      new(relay.DefaultAuditTTL),
		},
		Relay: RelaySettings{
			DiscoverInterval:   relay.DefaultDiscoverInterval,
			RecoverInterval:    relay.DefaultRecoverInterval,
			DeadLetterInterval: relay.DefaultDeadLetterInterval,
			HeartbeatInterval:  relay.DefaultHeartbeatInterval,
			ShutdownTimeout:    DefaultShutdownTimeout,
			Circuit: relay.CircuitConfig{
				CoolDown:    relay.DefaultCircuitCoolDown,
				MaxCoolDown: relay.DefaultCircuitMaxCoolDown,
				Multiplier:  relay.DefaultCircuitMultiplier,
			},
		},
		Log:     Log{Level: DefaultLogLevel, Format: DefaultLogFormat},
		Metrics: Metrics{Path: DefaultMetricsPath, StatsInterval: DefaultMetricsStatsInterval},
		Admin:   Admin{Listen: DefaultAdminListen},
		Health:  Health{HorizonThreshold: DefaultHealthHorizonThreshold},
		// Only read when tenants are configured (HasTenants).
		TenantsInterval:      DefaultTenantsInterval,
		TenantsParkAfter:     DefaultTenantsParkAfter,
		TenantsSweepInterval: DefaultTenantsSweepInterval,
	}
}

// HasCommitHorizon reports whether the defaults or a configured event
// type has ordering: key with its commit horizon on: the types whose
// delivery a long transaction of the database delays (docs/concepts.md,
// "Ordering").
func (c *Config) HasCommitHorizon() bool {
	behind := func(e relay.EventSettings) bool {
		return e.Ordering != nil && *e.Ordering == txbox.OrderingKey &&
			(e.CommitHorizon == nil || *e.CommitHorizon != txbox.CommitHorizonOff)
	}
	if behind(c.effective(nil)) {
		return true
	}
	for _, ev := range c.Events {
		if behind(c.effective(ev)) {
			return true
		}
	}
	return false
}

// HasFencedOrdering is the former name of HasCommitHorizon.
//
// Deprecated: use HasCommitHorizon.
func (c *Config) HasFencedOrdering() bool { return c.HasCommitHorizon() }

// HealthHorizonThreshold is health.horizon-threshold as the health check
// uses it: Health.HorizonThreshold, or the deprecated
// Health.FenceThreshold when a program set that.
func (c *Config) HealthHorizonThreshold() time.Duration {
	if c.Health.FenceThreshold != 0 {
		return c.Health.FenceThreshold
	}
	return c.Health.HorizonThreshold
}

// EventTypes returns the event types the configuration lists, sorted.
func (c *Config) EventTypes() []string { return sortedKeys(c.Events) }

// SenderNames returns the configured sender names, sorted.
func (c *Config) SenderNames() []string { return sortedKeys(c.Senders) }

// sortedKeys returns the keys of m, sorted; never nil.
func sortedKeys[V any](m map[string]V) []string {
	keys := slices.AppendSeq(make([]string, 0, len(m)), maps.Keys(m))
	slices.Sort(keys)
	return keys
}

// Effective returns the complete settings of eventType: its own entry in
// Events, each unset key inherited from Defaults (relay.EventSettings.Inherit),
// except that the route inherits key by key, as docs/configuration.md
// says. Every pointer in the result is set (Sender may point to ""), and
// the result shares no memory with c. Types not listed in Events get
// Defaults. A routes list of one entry is the type's single route: its
// keys are folded in (the route's own over the type's, its destination
// its own keys alone, as the relay takes them) and Routes is nil; with two
// or more, Routes holds them as the file does (see Routes for each one's
// effective settings).
func (c *Config) Effective(eventType string) relay.EventSettings {
	return c.effective(c.Events[eventType])
}

// effective returns own (nil: no entry) over Defaults, as Effective does.
func (c *Config) effective(ev *relay.EventSettings) relay.EventSettings {
	if ev != nil && len(ev.Routes) == 1 {
		return c.routeEffective(ev, &ev.Routes[0])
	}
	own := deref(ev)
	eff := own.Inherit(c.Defaults).Inherit(relay.DefaultEventSettings())
	route := deref(c.Defaults.Route)
	if r := own.Route; r != nil {
		for _, f := range []struct {
			dst *string
			src string
		}{
			{&route.Topic, r.Topic}, {&route.Subject, r.Subject}, {&route.Exchange, r.Exchange},
			{&route.RoutingKey, r.RoutingKey}, {&route.URL, r.URL}, {&route.Stream, r.Stream},
		} {
			if f.src != "" {
				*f.dst = f.src
			}
		}
		if r.Format != "" {
			route.Format = r.Format
		}
	}
	eff.Route = &route
	if eff.Sender == nil {
		eff.Sender = new("")
	}
	if own.Claim == nil && c.Defaults.Claim == nil {
		eff.Claim = new(c.defaultClaim(*eff.Sender))
	}
	return eff
}

// quickAckTypes are the sender types whose senders implement
// sender.QuickAcker: brokers that acknowledge within milliseconds.
// TestDefaultClaimMatchesTheSenders keeps the list true to the senders.
var quickAckTypes = map[string]bool{"nats": true, "kafka": true, "rabbitmq": true, "redis": true}

// defaultClaim is the claim the relay chooses for a type that sets none
// (relay.DefaultClaim): lock for a broker sender on a database with a
// lock claim, lease otherwise. senderName empty means the only sender.
func (c *Config) defaultClaim(senderName string) txbox.ClaimMode {
	if c.Database.Dialect == DialectSQLite {
		return txbox.ClaimLease
	}
	if senderName == "" && len(c.Senders) == 1 {
		for name := range c.Senders {
			senderName = name
		}
	}
	if s := c.Senders[senderName]; s != nil && quickAckTypes[s.Type] {
		return txbox.ClaimLock
	}
	return relay.DefaultClaim
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}

// validate checks values after decoding. Errors name the key whose value
// is wrong: for an event type, its own key when it sets one, else the
// defaults key it inherits. The relay's settings are checked by the relay
// itself (relay.Config.Validate, within fileBounds); what is checked here
// is what only this package knows: the database, the senders, whether each
// event type's sender exists and its route suits it, and the log.
func (c *Config) validate(d *decoder) {
	c.validateDatabase(d)
	for _, name := range c.SenderNames() {
		validateSender(d, join("senders", name), name, c.Senders[name])
	}
	// With exactly one sender it is the default: the common single-broker
	// file needs no defaults.sender.
	if deref(c.Defaults.Sender) == "" && len(c.Senders) == 1 {
		c.Defaults.Sender = new(c.SenderNames()[0])
	}
	rc := c.relayConfig()
	c.validateDestination(d, "defaults", nil)
	for _, t := range c.EventTypes() {
		p := join("events", t)
		if err := txbox.ValidateEventType(t); err != nil {
			d.fail(p, nil, "%v", err)
			delete(rc.Events, t) // reported here, not again by the relay
			continue
		}
		if c.Events[t] == nil {
			c.Events[t] = &relay.EventSettings{}
		}
		c.validateDestination(d, p, c.Events[t])
		c.validateRoutes(d, p, c.Events[t])
	}
	c.validateClaim(d)
	for _, e := range rc.Validate(fileBounds) {
		d.fail(keyPath(e.Field), nil, "%s", e.Reason)
	}
	if c.Relay.ShutdownTimeout < 10*time.Millisecond {
		d.fail("relay.shutdown-timeout", nil, "must be ≥ 10ms")
	}
	c.validateLog(d)
	c.validateListeners(d)
	c.validateAdmin(d)
	c.validateTracing(d)
	c.validateTenants(d)
}

// validateListeners checks metrics and health.
func (c *Config) validateListeners(d *decoder) {
	checkListen(d, "metrics.listen", c.Metrics.Listen)
	checkListen(d, "health.listen", c.Health.Listen)
	switch p := c.Metrics.Path; {
	case !strings.HasPrefix(p, "/") || strings.ContainsAny(p, " ?#"):
		d.fail("metrics.path", nil, "must be a URL path starting with /, not %q", clip(p))
	case p == "/livez" || p == "/readyz":
		d.fail("metrics.path", nil, "%s is the health probe's path", p)
	}
	if c.Health.HorizonThreshold < 0 || c.Health.FenceThreshold < 0 {
		d.fail("health.horizon-threshold", nil, "must not be negative (0 turns the check off)")
	}
	if c.Metrics.StatsInterval < time.Second {
		d.fail("metrics.stats-interval", nil, "must be ≥ 1s: each round counts the backlog")
	}
}

// checkListen checks a host:port to listen on; empty is off.
func checkListen(d *decoder, path, addr string) {
	if addr == "" {
		return
	}
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		d.fail(path, nil, "must be host:port, such as 127.0.0.1:9090, not %q", clip(addr))
		return
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		d.fail(path, nil, "port %q must be a number from 0 to 65535", clip(port))
	}
}

// validateClaim refuses claim: lock on SQLite, which has no lock claim
// (one writer at a time: a transaction held open through every send
// would stall every producer). The relay refuses it too; here the file's
// key path is known before anything is opened.
func (c *Config) validateClaim(d *decoder) {
	if c.Database.Dialect != DialectSQLite {
		return
	}
	check := func(p string, ev *relay.EventSettings) {
		if ev != nil && ev.Claim != nil && *ev.Claim == txbox.ClaimLock {
			d.fail(join(p, "claim"), nil, "lock is not available on sqlite (one writer at a time): use lease")
		}
	}
	check("defaults", &c.Defaults)
	for _, t := range c.EventTypes() {
		check(join("events", t), c.Events[t])
	}
}

func (c *Config) validateDatabase(d *decoder) {
	db := &c.Database
	switch db.Dialect {
	case DialectPostgres, DialectMySQL:
		if db.DSN == "" && db.DSNEnv == "" {
			d.fail("database.dsn", nil, "required for dialect %s (or set database.dsn-env, or %s)", db.Dialect, EnvName("database", "dsn"))
		}
	case DialectSQLite:
		if strings.Contains(db.DSN.Reveal(), "?") || db.DSN == ":memory:" {
			d.fail("database.dsn", nil, "sqlite takes a file path (WAL mode and timeouts are set by txbox), not a DSN with parameters or :memory:")
		}
	default:
		d.fail("database.dialect", nil, "unknown dialect %q (valid: postgres, mysql, sqlite)", clip(db.Dialect))
	}
	if db.Schema != "" {
		if err := store.ValidateIdentifier(db.Schema); err != nil {
			d.fail("database.schema", nil, "%v", err)
		}
		if db.Dialect == DialectSQLite {
			d.fail("database.schema", nil, "not supported by sqlite")
		}
	}
	if db.TablePrefix != "" {
		if err := store.ValidateIdentifier(db.TablePrefix); err != nil {
			d.fail("database.table-prefix", nil, "%v", err)
		}
	}
	checkEnvName(d, "database.dsn-env", db.DSNEnv)
	if db.MaxConns < 0 {
		d.fail("database.max-conns", nil, "must be ≥ 0")
	}
	if db.NotifyTrigger && db.Dialect != DialectPostgres {
		d.fail("database.notify-trigger", nil, "only supported by postgres (wake-ups are PostgreSQL LISTEN/NOTIFY)")
	}
	validateWAL(d, db)
}

// validateWAL checks database.source and database.wal.
func validateWAL(d *decoder, db *Database) {
	switch db.Source {
	case "", SourceTable:
		if db.WAL != (WAL{}) {
			d.fail("database.wal", nil, "is set but database.source is %q: WAL mode needs database.source: wal", SourceTable)
		}
		return
	case SourceWAL:
		if db.Dialect != DialectPostgres {
			d.fail("database.source", nil, "wal is only supported by postgres (PostgreSQL 15+ with wal_level = logical)")
		}
	default:
		d.fail("database.source", nil, "must be table or wal, not %q", clip(db.Source))
		return
	}
	w := db.WAL
	for _, f := range []struct {
		key string
		bad bool
	}{
		{"sender-timeout", w.SenderTimeout < 0},
		{"window", w.Window < 0},
		{"window-bytes", w.WindowBytes < 0},
		{"lane-queue", w.LaneQueue < 0},
		{"batch-size", w.BatchSize < 0},
		{"status-interval", w.StatusInterval < 0},
		{"standby-interval", w.StandbyInterval < 0},
		{"pause-limit", w.PauseLimit < 0},
		{"lag-threshold", w.LagThreshold < 0},
	} {
		if f.bad {
			d.fail("database.wal."+f.key, nil, "must be ≥ 0")
		}
	}
	if w.BatchSize > MaxBatchSize {
		d.fail("database.wal.batch-size", nil, "must be at most %d, not %d", MaxBatchSize, w.BatchSize)
	}
	switch relay.SlotLostPolicy(w.OnSlotLost) {
	case "", relay.SlotLostRecreate, relay.SlotLostStop:
	default:
		d.fail("database.wal.on-slot-lost", nil, "must be recreate or stop, not %q", clip(w.OnSlotLost))
	}
	timeout := w.SenderTimeout
	if timeout == 0 {
		timeout = postgres.DefaultSenderTimeout
	}
	if w.PauseLimit > 0 && w.PauseLimit >= timeout {
		d.fail("database.wal.pause-limit", nil, "must be below database.wal.sender-timeout (%s): a paused relay must drop its events before the server gives the stream to a standby", timeout)
	}
	for key, name := range map[string]string{"slot": w.Slot, "publication": w.Publication} {
		// {tenant} is a tenant's name (TenantSlot), checked per tenant.
		if name != "" && !validSlotName(strings.ReplaceAll(name, TenantPlaceholder, "a")) {
			d.fail("database.wal."+key, nil, "must be 1 to 63 lower-case letters, digits and underscores (and {tenant} with tenants), not %q", clip(name))
		}
	}
}

// validSlotName is PostgreSQL's rule for slot names, which txbox applies
// to publications too.
func validSlotName(s string) bool {
	if len(s) == 0 || len(s) > 63 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_') {
			return false
		}
	}
	return true
}

func (c *Config) validateLog(d *decoder) {
	switch c.Log.Level {
	case "debug", "info", "warn", "error":
	default:
		d.fail("log.level", nil, "must be debug, info, warn or error, not %q", clip(c.Log.Level))
	}
	switch c.Log.Format {
	case "text", "json":
	default:
		d.fail("log.format", nil, "must be text or json, not %q", clip(c.Log.Format))
	}
}

// validateDestination checks the sender and the route of the defaults
// (own == nil) or of one event type: the sender must exist, and the route
// must give it somewhere to send. For an event type only what it sets
// itself is checked; the rest was checked at defaults.
func (c *Config) validateDestination(d *decoder, p string, own *relay.EventSettings) {
	isDefaults := own == nil
	eff := c.effective(own)
	name := *eff.Sender
	if isDefaults || own.Sender != nil {
		switch {
		case name == "" && len(c.Senders) > 1:
			d.fail(join(p, "sender"), nil, "required when more than one sender is configured (have %s)", strings.Join(c.SenderNames(), ", "))
		case name != "" && c.Senders[name] == nil:
			d.fail(join(p, "sender"), nil, "no sender named %q (have %s)", clip(name), strings.Join(c.SenderNames(), ", "))
		}
	}
	sc := c.Senders[name]
	if sc == nil || !(isDefaults || own.Route != nil || own.Sender != nil) {
		return
	}
	r, rp := eff.Route, join(p, "route")
	if own == nil || own.Route != nil && own.Route.Format != "" {
		checkFormat(d, join(rp, "format"), string(r.Format), sc.Type)
	}
	switch sc.Type {
	case SenderNATS:
		if r.Subject == "" {
			d.fail(join(rp, "subject"), nil, "required for nats sender %q", name)
		}
	case SenderKafka:
		if r.Topic == "" {
			d.fail(join(rp, "topic"), nil, "required for kafka sender %q", name)
		}
	case SenderRabbitMQ:
		if r.Exchange == "" && r.RoutingKey == "" {
			d.fail(join(rp, "routing-key"), nil, "an exchange or a routing-key is required for rabbitmq sender %q", name)
		}
	case SenderRedis:
		if r.Stream == "" {
			d.fail(join(rp, "stream"), nil, "required for redis sender %q", name)
		}
	case SenderWebhook:
		u := r.URL
		if u == "" {
			u = sc.Webhook.URL
		}
		if u == "" {
			d.fail(join(rp, "url"), nil, "required for webhook sender %q (or set senders.%s.url)", name, name)
		} else if !isHTTPURL(u) {
			d.fail(join(rp, "url"), nil, "must be an http:// or https:// URL")
		}
	}
}

// routeFields are the route keys each sender type reads; format is every
// sender's.
var routeFields = map[string][]string{
	SenderNATS:     {"subject"},
	SenderKafka:    {"topic"},
	SenderRabbitMQ: {"exchange", "routing-key"},
	SenderRedis:    {"stream"},
	SenderWebhook:  {"url"},
}

// validateRoutes checks the routes of a fanned-out type (docs/concepts.md,
// "Fan-out"): each names a sender that exists, gives it somewhere to send,
// sets no route key its sender does not read, and no two routes share a
// name or a destination.
func (c *Config) validateRoutes(d *decoder, p string, own *relay.EventSettings) {
	if len(own.Routes) == 0 {
		return
	}
	typSender := *c.effective(own).Sender
	names := map[string]int{}
	dests := map[string]int{}
	for i := range own.Routes {
		r := &own.Routes[i]
		rp := fmt.Sprintf("%s.routes[%d]", p, i)
		name := deref(r.Sender)
		if name == "" {
			name = typSender
		}
		sc := c.Senders[name]
		switch {
		case name == "":
			d.fail(join(rp, "sender"), nil, "required: more than one sender is configured (have %s)", strings.Join(c.SenderNames(), ", "))
			continue
		case sc == nil:
			d.fail(join(rp, "sender"), nil, "no sender named %q (have %s)", clip(name), strings.Join(c.SenderNames(), ", "))
			continue
		}
		route := r.Route
		if sc.Type == SenderWebhook && route.URL == "" && sc.Webhook != nil {
			route.URL = sc.Webhook.URL
		}
		set := map[string]string{"topic": r.Topic, "subject": r.Subject, "exchange": r.Exchange, "routing-key": r.RoutingKey, "url": r.URL, "stream": r.Stream}
		for _, k := range []string{"topic", "subject", "exchange", "routing-key", "url", "stream"} {
			if set[k] != "" && !slices.Contains(routeFields[sc.Type], k) {
				d.fail(join(rp, k), nil, "the %s sender %q has no %s: its route keys are %s", sc.Type, name, k, strings.Join(routeFields[sc.Type], ", "))
			}
		}
		if route.Format != "" {
			checkFormat(d, join(rp, "format"), string(route.Format), sc.Type)
		}
		fields := routeFields[sc.Type]
		missing := true
		for _, k := range fields {
			if k == "url" && route.URL != "" || k != "url" && set[k] != "" {
				missing = false
			}
		}
		if missing {
			d.fail(join(rp, fields[len(fields)-1]), nil, "required for %s sender %q", sc.Type, name)
		} else if sc.Type == SenderWebhook && !isHTTPURL(route.URL) {
			d.fail(join(rp, "url"), nil, "must be an http:// or https:// URL")
		}
		rn := r.RouteName(typSender)
		if j, dup := names[rn]; dup {
			d.fail(join(rp, "name"), nil, "route name %q is also routes[%d]'s: give each route of one sender a name", clip(rn), j)
		}
		names[rn] = i
		dest := name + " " + sender.DestinationOf(nil, route.Expand(strings.TrimPrefix(p, "events.")))
		if j, dup := dests[dest]; dup {
			d.fail(rp, nil, "goes to the same destination as routes[%d] (%s): every route of a type needs a destination of its own", j, dest)
		}
		dests[dest] = i
	}
}

func isHTTPURL(u string) bool {
	return strings.HasPrefix(u, "http://") || strings.HasPrefix(u, "https://")
}

func validEnvName(s string) bool {
	if s == "" || len(s) > 256 {
		return false
	}
	for i, r := range s {
		if !(r == '_' || (r >= 'A' && r <= 'Z') || (r >= 'a' && r <= 'z') || (i > 0 && r >= '0' && r <= '9')) {
			return false
		}
	}
	return true
}

// checkEnvName reports a key that names an environment variable (set, but
// not a valid name).
func checkEnvName(d *decoder, path, v string) {
	if v != "" && !validEnvName(v) {
		d.fail(path, nil, "%q is not an environment variable name", clip(v))
	}
}

// Fingerprinter returns the function that fingerprints dead letters for
// c's event types: relay.Config.Fingerprinter of the relay configuration
// RelayConfig builds, so that processes that fingerprint without running
// a relay (txbox dlq groups, the admin API) group a dead letter as the
// relay does. It opens no sender: a fingerprint needs their names only.
func (c *Config) Fingerprinter() store.Fingerprinter {
	names := make(map[string]sender.Sender, len(c.Senders))
	for n := range c.Senders {
		names[n] = nil
	}
	return c.RelayConfig(nil, names, nil).Fingerprinter()
}

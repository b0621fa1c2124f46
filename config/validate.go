package config

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/sender"
	"github.com/txbox/txbox/store"
)

// Limits on numeric settings. Values outside them are almost certainly
// typos, and some would make the relay misbehave (a zero batch claims
// nothing forever).
const (
	MaxBatchSize   = 10_000
	MaxMaxAttempts = 1_000
	minLease       = time.Second
	minPollDelay   = time.Millisecond
)

// Default returns the configuration with every default filled in: SQLite
// at ./txbox.db, no senders, and the SPEC §4 relay defaults.
func Default() *Config {
	return &Config{
		Database: Database{Dialect: DefaultDialect},
		Defaults: EventSettings{
			Route: &Route{
				Topic:      DefaultDefaultSenderRoute,
				Subject:    DefaultDefaultSenderRoute,
				RoutingKey: DefaultDefaultSenderRoute,
				Stream:     DefaultDefaultSenderRoute,
			},
			BatchSize: ptr(DefaultBatchSize),
			Polling: &Polling{
				Mode:       ptr(DefaultPollingMode),
				MinDelay:   ptr(DefaultPollingMinDelay),
				Multiplier: ptr(DefaultPollingMultiplier),
				MaxDelay:   ptr(DefaultPollingMaxDelay),
				Delay:      ptr(DefaultPollingDelay),
			},
			MaxAttempts: ptr(DefaultMaxAttempts),
			Backoff: &Backoff{
				Delay:      ptr(DefaultBackoffDelay),
				Multiplier: ptr(DefaultBackoffMultiplier),
				Max:        ptr(DefaultBackoffMax),
				Jitter:     ptr(DefaultBackoffJitter),
			},
			Ordering:  ptr(DefaultOrdering),
			Retention: ptr(DefaultRetention),
			Lease:     ptr(DefaultLease),
			InFlight:  ptr(DefaultInFlight),
		},
		Cleanup: Cleanup{
			Interval:      DefaultCleanupInterval,
			MaxInterval:   DefaultCleanupMaxInterval,
			BatchSize:     DefaultCleanupBatchSize,
			DeadLetterTTL: DefaultDeadLetterTTL,
		},
		Relay: RelaySettings{
			DiscoverInterval:   DefaultDiscoverInterval,
			RecoverInterval:    DefaultRecoverInterval,
			DeadLetterInterval: DefaultDeadLetterInterval,
			ShutdownTimeout:    DefaultShutdownTimeout,
			Circuit: Circuit{
				CoolDown:    DefaultCircuitCoolDown,
				MaxCoolDown: DefaultCircuitMaxCoolDown,
				Multiplier:  DefaultCircuitMultiplier,
			},
		},
		Log: Log{Level: DefaultLogLevel, Format: DefaultLogFormat},
	}
}

func ptr[T any](v T) *T { return &v }

// EventTypes returns the event types the configuration lists, sorted.
func (c *Config) EventTypes() []string {
	out := make([]string, 0, len(c.Events))
	for t := range c.Events {
		out = append(out, t)
	}
	sort.Strings(out)
	return out
}

// SenderNames returns the configured sender names, sorted.
func (c *Config) SenderNames() []string {
	out := make([]string, 0, len(c.Senders))
	for n := range c.Senders {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// Effective returns the complete settings of eventType: its own entry in
// Events, each unset key inherited from Defaults. Every pointer in the
// result is set (Sender may point to ""), and the result shares no memory
// with c. Types not listed in Events get Defaults.
func (c *Config) Effective(eventType string) EventSettings {
	return merge(c.Defaults, c.Events[eventType])
}

func merge(def EventSettings, ev *EventSettings) EventSettings {
	out := EventSettings{
		Sender:      ptr(deref(def.Sender)),
		Route:       ptr(derefRoute(def.Route)),
		BatchSize:   ptr(deref(def.BatchSize)),
		Polling:     &Polling{},
		MaxAttempts: ptr(deref(def.MaxAttempts)),
		Backoff:     &Backoff{},
		Ordering:    ptr(deref(def.Ordering)),
		Retention:   ptr(deref(def.Retention)),
		Lease:       ptr(deref(def.Lease)),
		InFlight:    ptr(deref(def.InFlight)),
	}
	dp, db := def.Polling, def.Backoff
	if dp == nil {
		dp = &Polling{}
	}
	if db == nil {
		db = &Backoff{}
	}
	*out.Polling = Polling{Mode: ptr(deref(dp.Mode)), MinDelay: ptr(deref(dp.MinDelay)), Multiplier: ptr(deref(dp.Multiplier)), MaxDelay: ptr(deref(dp.MaxDelay)), Delay: ptr(deref(dp.Delay))}
	*out.Backoff = Backoff{Delay: ptr(deref(db.Delay)), Multiplier: ptr(deref(db.Multiplier)), Max: ptr(deref(db.Max)), Jitter: ptr(deref(db.Jitter))}
	if ev == nil {
		return out
	}
	over(&out.Sender, ev.Sender)
	over(&out.BatchSize, ev.BatchSize)
	over(&out.MaxAttempts, ev.MaxAttempts)
	over(&out.Ordering, ev.Ordering)
	over(&out.Retention, ev.Retention)
	over(&out.Lease, ev.Lease)
	over(&out.InFlight, ev.InFlight)
	if r := ev.Route; r != nil {
		o := out.Route
		for _, f := range []struct {
			dst *string
			src string
		}{
			{&o.Topic, r.Topic}, {&o.Subject, r.Subject}, {&o.Exchange, r.Exchange},
			{&o.RoutingKey, r.RoutingKey}, {&o.URL, r.URL}, {&o.Stream, r.Stream},
		} {
			if f.src != "" {
				*f.dst = f.src
			}
		}
	}
	if p := ev.Polling; p != nil {
		over(&out.Polling.Mode, p.Mode)
		over(&out.Polling.MinDelay, p.MinDelay)
		over(&out.Polling.Multiplier, p.Multiplier)
		over(&out.Polling.MaxDelay, p.MaxDelay)
		over(&out.Polling.Delay, p.Delay)
	}
	if b := ev.Backoff; b != nil {
		over(&out.Backoff.Delay, b.Delay)
		over(&out.Backoff.Multiplier, b.Multiplier)
		over(&out.Backoff.Max, b.Max)
		over(&out.Backoff.Jitter, b.Jitter)
	}
	return out
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}

func derefRoute(r *Route) Route {
	if r == nil {
		return Route{}
	}
	return *r
}

func over[T any](dst **T, src *T) {
	if src != nil {
		*dst = ptr(*src)
	}
}

// validate checks values after decoding. Errors name the key whose value
// is wrong: for an event type, its own key when it sets one, else the
// defaults key it inherits.
func (c *Config) validate(d *decoder) {
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
	if db.DSNEnv != "" && !validEnvName(db.DSNEnv) {
		d.fail("database.dsn-env", nil, "%q is not an environment variable name", clip(db.DSNEnv))
	}
	if db.MaxConns < 0 {
		d.fail("database.max-conns", nil, "must be ≥ 0")
	}

	for _, name := range c.SenderNames() {
		c.validateSender(d, join("senders", name), name, c.Senders[name])
	}

	// With exactly one sender it is the default: the common single-broker
	// file needs no defaults.sender.
	if deref(c.Defaults.Sender) == "" && len(c.Senders) == 1 {
		c.Defaults.Sender = ptr(c.SenderNames()[0])
	}
	c.validateSettings(d, "defaults", &c.Defaults, nil)
	for _, t := range c.EventTypes() {
		p := join("events", t)
		if err := txbox.ValidateEventType(t); err != nil {
			d.fail(p, nil, "%v", err)
			continue
		}
		ev := c.Events[t]
		if ev == nil {
			ev = &EventSettings{}
			c.Events[t] = ev
		}
		eff := c.Effective(t)
		c.validateSettings(d, p, &eff, ev)
	}

	if c.Cleanup.Interval < time.Second {
		d.fail("cleanup.interval", nil, "must be ≥ 1s")
	}
	if c.Cleanup.MaxInterval < c.Cleanup.Interval {
		d.fail("cleanup.max-interval", nil, "must be ≥ interval (%s < %s)", c.Cleanup.MaxInterval, c.Cleanup.Interval)
	}
	if c.Cleanup.BatchSize < 1 || c.Cleanup.BatchSize > 100_000 {
		d.fail("cleanup.batch-size", nil, "must be between 1 and 100000")
	}
	r := &c.Relay
	for _, iv := range []struct {
		key string
		v   time.Duration
	}{
		{"relay.discover-interval", r.DiscoverInterval},
		{"relay.recover-interval", r.RecoverInterval},
		{"relay.dead-letter-interval", r.DeadLetterInterval},
		{"relay.shutdown-timeout", r.ShutdownTimeout},
		{"relay.circuit.cool-down", r.Circuit.CoolDown},
	} {
		if iv.v < 10*time.Millisecond {
			d.fail(iv.key, nil, "must be ≥ 10ms")
		}
	}
	if r.Circuit.MaxCoolDown < r.Circuit.CoolDown {
		d.fail("relay.circuit.max-cool-down", nil, "must be ≥ cool-down (%s < %s)", r.Circuit.MaxCoolDown, r.Circuit.CoolDown)
	}
	if r.Circuit.Multiplier < 1 {
		d.fail("relay.circuit.multiplier", nil, "must be ≥ 1")
	}
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

// onlyWithProvision reports provision-* keys set on a sender whose
// provisioning is off: they would do nothing, which is likely not what the
// file meant.
func onlyWithProvision(d *decoder, p string, on bool, set map[string]bool) {
	if on {
		return
	}
	keys := make([]string, 0, len(set))
	for k, v := range set {
		if v {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		d.fail(join(p, k), nil, "only used with provision: true")
	}
}

func (c *Config) validateSender(d *decoder, p, name string, s *Sender) {
	for i := 0; i < len(name); i++ {
		ch := name[i]
		if !(ch == '_' || ch == '-' || (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9')) || len(name) > 64 {
			d.fail(p, nil, "sender names use [A-Za-z0-9_-], at most 64 characters")
			return
		}
	}
	if s == nil || s.Type == "" {
		d.fail(join(p, "type"), nil, "required: one of %s", strings.Join(SenderTypes(), ", "))
		return
	}
	positive := func(key string, v time.Duration) {
		if v <= 0 {
			d.fail(join(p, key), nil, "must be > 0")
		}
	}
	env := func(key, v string) {
		if v != "" && !validEnvName(v) {
			d.fail(join(p, key), nil, "%q is not an environment variable name", clip(v))
		}
	}
	switch s.Type {
	case SenderNATS:
		if s.NATS.URL == "" {
			d.fail(join(p, "url"), nil, "required")
		}
		positive("timeout", s.NATS.Timeout)
		if s.NATS.MaxPending < 0 {
			d.fail(join(p, "max-pending"), nil, "must be ≥ 0")
		}
		n := s.NATS
		onlyWithProvision(d, p, n.Provision, map[string]bool{"provision-stream": n.ProvisionStream != "", "provision-subjects": len(n.ProvisionSubjects) > 0})
		if n.ProvisionStream != "" && strings.ContainsAny(n.ProvisionStream, " \t.*>/\\") {
			d.fail(join(p, "provision-stream"), nil, "%q is not a JetStream stream name (no spaces, '.', '*', '>', '/' or '\\')", clip(n.ProvisionStream))
		}
		for i, subj := range n.ProvisionSubjects {
			if subj == "" || strings.ContainsAny(subj, " \t") || strings.Contains(subj, "..") || strings.HasPrefix(subj, ".") || strings.HasSuffix(subj, ".") {
				d.fail(fmt.Sprintf("%s[%d]", join(p, "provision-subjects"), i), nil, "%q is not a NATS subject", clip(subj))
			}
		}
	case SenderWebhook:
		if u := s.Webhook.URL; u != "" && !strings.HasPrefix(u, "http://") && !strings.HasPrefix(u, "https://") {
			d.fail(join(p, "url"), nil, "must be an http:// or https:// URL")
		}
		positive("timeout", s.Webhook.Timeout)
		env("hmac-secret-env", s.Webhook.HMACSecretEnv)
		if s.Webhook.Concurrency < 0 {
			d.fail(join(p, "concurrency"), nil, "must be ≥ 0")
		}
	case SenderKafka:
		if len(s.Kafka.Brokers) == 0 {
			d.fail(join(p, "brokers"), nil, "required: at least one host:port")
		}
		for i, b := range s.Kafka.Brokers {
			if !strings.Contains(b, ":") {
				d.fail(fmt.Sprintf("%s[%d]", join(p, "brokers"), i), nil, "must be host:port, not %q", clip(b))
			}
		}
		positive("timeout", s.Kafka.Timeout)
		if s.Kafka.MaxBufferedRecords < 0 {
			d.fail(join(p, "max-buffered-records"), nil, "must be ≥ 0")
		}
		k := s.Kafka
		if k.MaxRecordBytes != 0 && (k.MaxRecordBytes < 512 || k.MaxRecordBytes > 1<<30) {
			d.fail(join(p, "max-record-bytes"), nil, "must be in 512..1073741824, got %d", k.MaxRecordBytes)
		}
		onlyWithProvision(d, p, k.Provision, map[string]bool{"provision-topics": len(k.ProvisionTopics) > 0,
			"provision-partitions": k.ProvisionPartitions != 0, "provision-replication-factor": k.ProvisionReplicationFactor != 0})
		if k.ProvisionPartitions < -1 || k.ProvisionPartitions > 1_000_000 {
			d.fail(join(p, "provision-partitions"), nil, "must be ≥ 1, or -1 for the broker's default, got %d", k.ProvisionPartitions)
		}
		if k.ProvisionReplicationFactor < -1 || k.ProvisionReplicationFactor > 32767 {
			d.fail(join(p, "provision-replication-factor"), nil, "must be ≥ 1, or -1 for the broker's default, got %d", k.ProvisionReplicationFactor)
		}
		for i, topic := range k.ProvisionTopics {
			if topic == "" || strings.Contains(topic, sender.PlaceholderEventType) {
				d.fail(fmt.Sprintf("%s[%d]", join(p, "provision-topics"), i), nil, "must name one topic, not %q", clip(topic))
			}
		}
	case SenderRabbitMQ:
		if s.RabbitMQ.URL == "" {
			d.fail(join(p, "url"), nil, "required")
		}
		positive("timeout", s.RabbitMQ.Timeout)
		if s.RabbitMQ.Channels < 0 {
			d.fail(join(p, "channels"), nil, "must be ≥ 0")
		}
		r := s.RabbitMQ
		if r.MaxMessageBytes < 0 {
			d.fail(join(p, "max-message-bytes"), nil, "must be ≥ 0")
		}
		onlyWithProvision(d, p, r.Provision, map[string]bool{"provision-exchanges": len(r.ProvisionExchanges) > 0, "provision-exchange-type": r.ProvisionExchangeType != ""})
		switch t := r.ProvisionExchangeType; {
		case t == "", t == "direct", t == "fanout", t == "topic", t == "headers", strings.HasPrefix(t, "x-") && len(t) > 2:
		default:
			d.fail(join(p, "provision-exchange-type"), nil, "must be direct, fanout, topic, headers or x-*, not %q", clip(t))
		}
		for i, ex := range r.ProvisionExchanges {
			if ex == "" || strings.Contains(ex, sender.PlaceholderEventType) {
				d.fail(fmt.Sprintf("%s[%d]", join(p, "provision-exchanges"), i), nil, "must name one exchange, not %q", clip(ex))
			}
		}
	case SenderRedis:
		if s.Redis.Addr == "" {
			d.fail(join(p, "addr"), nil, "required")
		}
		if s.Redis.DB < 0 {
			d.fail(join(p, "db"), nil, "must be ≥ 0")
		}
		if s.Redis.MaxLen < 0 {
			d.fail(join(p, "max-len"), nil, "must be ≥ 0")
		}
		if s.Redis.PoolSize < 0 {
			d.fail(join(p, "pool-size"), nil, "must be ≥ 0")
		}
		positive("timeout", s.Redis.Timeout)
		env("password-env", s.Redis.PasswordEnv)
	}
}

// validateSettings checks the effective settings s of one event type (or
// the defaults, own == nil). For an event type, only the keys it sets
// itself are reported, at its own path; inherited mistakes are reported
// once, at defaults.
func (c *Config) validateSettings(d *decoder, p string, s *EventSettings, own *EventSettings) {
	isDefaults := own == nil
	set := func(present bool) bool { return isDefaults || present }
	ownPolling, ownBackoff := own != nil && own.Polling != nil, own != nil && own.Backoff != nil
	has := func(f func(*EventSettings) bool) bool { return own != nil && f(own) }

	sender := deref(s.Sender)
	if set(has(func(e *EventSettings) bool { return e.Sender != nil })) {
		switch {
		case sender == "" && len(c.Senders) > 1:
			d.fail(join(p, "sender"), nil, "required when more than one sender is configured (have %s)", strings.Join(c.SenderNames(), ", "))
		case sender != "" && c.Senders[sender] == nil:
			d.fail(join(p, "sender"), nil, "no sender named %q (have %s)", clip(sender), strings.Join(c.SenderNames(), ", "))
		}
	}
	if set(has(func(e *EventSettings) bool { return e.BatchSize != nil })) {
		if b := *s.BatchSize; b < 1 || b > MaxBatchSize {
			d.fail(join(p, "batch-size"), nil, "must be between 1 and %d", MaxBatchSize)
		}
	}
	if set(has(func(e *EventSettings) bool { return e.MaxAttempts != nil })) {
		if m := *s.MaxAttempts; m < 1 || m > MaxMaxAttempts {
			d.fail(join(p, "max-attempts"), nil, "must be between 1 and %d", MaxMaxAttempts)
		}
	}
	if set(has(func(e *EventSettings) bool { return e.Ordering != nil })) {
		if o := *s.Ordering; o != OrderingNone && o != OrderingKey {
			d.fail(join(p, "ordering"), nil, "must be none or key, not %q", clip(o))
		}
	}
	if set(has(func(e *EventSettings) bool { return e.Lease != nil })) && *s.Lease < minLease {
		d.fail(join(p, "lease"), nil, "must be ≥ %s", minLease)
	}
	if set(has(func(e *EventSettings) bool { return e.InFlight != nil })) {
		if n := *s.InFlight; n < 1 || n > 64 {
			d.fail(join(p, "in-flight"), nil, "must be between 1 and 64")
		}
	}

	pp := join(p, "polling")
	po := s.Polling
	var op Polling
	if ownPolling {
		op = *own.Polling
	}
	if set(op.Mode != nil) {
		if m := *po.Mode; m != PollingAdaptive && m != PollingFixed {
			d.fail(join(pp, "mode"), nil, "must be adaptive or fixed, not %q", clip(m))
		}
	}
	if set(op.MinDelay != nil) && *po.MinDelay < minPollDelay {
		d.fail(join(pp, "min-delay"), nil, "must be ≥ %s", minPollDelay)
	}
	if set(op.Multiplier != nil) && *po.Multiplier < 1 {
		d.fail(join(pp, "multiplier"), nil, "must be ≥ 1")
	}
	if set(op.Delay != nil) && *po.Delay < minPollDelay {
		d.fail(join(pp, "delay"), nil, "must be ≥ %s", minPollDelay)
	}
	if set(op.MaxDelay != nil || op.MinDelay != nil) && *po.MaxDelay < *po.MinDelay {
		d.fail(join(pp, "max-delay"), nil, "must be ≥ min-delay (%s < %s)", *po.MaxDelay, *po.MinDelay)
	}

	bp := join(p, "backoff")
	bo := s.Backoff
	var ob Backoff
	if ownBackoff {
		ob = *own.Backoff
	}
	if set(ob.Multiplier != nil) && *bo.Multiplier < 1 {
		d.fail(join(bp, "multiplier"), nil, "must be ≥ 1")
	}
	if set(ob.Max != nil || ob.Delay != nil) && *bo.Max < *bo.Delay {
		d.fail(join(bp, "max"), nil, "must be ≥ delay (%s < %s)", *bo.Max, *bo.Delay)
	}
	if set(ob.Jitter != nil) && (*bo.Jitter < 0 || *bo.Jitter > 1) {
		d.fail(join(bp, "jitter"), nil, "must be between 0 and 1")
	}

	// The route must give the chosen sender somewhere to send. Checked
	// whenever the event sets its route or sender, or at defaults.
	if sender != "" && c.Senders[sender] != nil && set(has(func(e *EventSettings) bool { return e.Route != nil || e.Sender != nil })) {
		r := s.Route
		rp := join(p, "route")
		switch c.Senders[sender].Type {
		case SenderNATS:
			if r.Subject == "" {
				d.fail(join(rp, "subject"), nil, "required for nats sender %q", sender)
			}
		case SenderKafka:
			if r.Topic == "" {
				d.fail(join(rp, "topic"), nil, "required for kafka sender %q", sender)
			}
		case SenderRabbitMQ:
			if r.Exchange == "" && r.RoutingKey == "" {
				d.fail(join(rp, "routing-key"), nil, "an exchange or a routing-key is required for rabbitmq sender %q", sender)
			}
		case SenderRedis:
			if r.Stream == "" {
				d.fail(join(rp, "stream"), nil, "required for redis sender %q", sender)
			}
		case SenderWebhook:
			u := r.URL
			if u == "" {
				u = c.Senders[sender].Webhook.URL
			}
			if u == "" {
				d.fail(join(rp, "url"), nil, "required for webhook sender %q (or set senders.%s.url)", sender, sender)
			} else if !strings.HasPrefix(u, "http://") && !strings.HasPrefix(u, "https://") {
				d.fail(join(rp, "url"), nil, "must be an http:// or https:// URL")
			}
		}
	}
}

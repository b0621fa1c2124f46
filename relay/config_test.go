package relay

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/sender"
	"github.com/txbox/txbox/store"
)

// nopSender is a sender for configuration tests; it is never called.
type nopSender struct{}

func (nopSender) Send(context.Context, []*sender.Message) error { return nil }
func (nopSender) Close(context.Context) error                   { return nil }

// fakeDriver satisfies store.Driver for configuration tests, which never
// touch the database; calling any method panics through the nil
// embedded interface.
type fakeDriver struct{ store.Driver }

func ptr[T any](v T) *T { return &v }

func TestSettingsInheritance(t *testing.T) {
	t.Parallel()
	cfg := Config{
		Store:   fakeDriver{},
		Senders: map[string]sender.Sender{"nats": nopSender{}, "hook": nopSender{}},
		Defaults: EventSettings{
			Sender:    ptr("nats"),
			Route:     &sender.Route{Subject: "events.{event_type}"},
			BatchSize: ptr(500),
			Polling:   &PollingSettings{MaxDelay: new(10 * time.Second)},
			Backoff:   &BackoffSettings{Delay: new(time.Second), Jitter: new(0.1)},
		},
		Events: map[string]EventSettings{
			"orders": {
				Sender:    ptr("hook"),
				Route:     &sender.Route{URL: "http://x/{event_type}"},
				Polling:   &PollingSettings{MinDelay: new(100 * time.Millisecond)},
				Backoff:   &BackoffSettings{Multiplier: new(2.0)},
				Retention: ptr(time.Duration(0)),
				Ordering:  ptr(txbox.OrderingKey),
			},
		},
	}.withDefaults()
	if err := cfg.validate(); err != nil {
		t.Fatal(err)
	}
	o, err := cfg.settingsFor("orders")
	if err != nil {
		t.Fatal(err)
	}
	if o.senderName != "hook" || o.route.URL != "http://x/orders" || o.route.Subject != "" {
		t.Errorf("orders sender/route = %q %+v", o.senderName, o.route)
	}
	if o.batchSize != 500 {
		t.Errorf("orders batch size = %d, want inherited 500", o.batchSize)
	}
	wantPoll := polling{Mode: PollingAdaptive, MinDelay: 100 * time.Millisecond, MaxDelay: 10 * time.Second, Multiplier: 1.5, Delay: DefaultPollingDelay}
	if o.polling != wantPoll {
		t.Errorf("orders polling = %+v, want %+v", o.polling, wantPoll)
	}
	wantBackoff := resolvedBackoff{Delay: time.Second, Multiplier: 2, Max: DefaultBackoffMax, Jitter: 0.1}
	if o.backoff != wantBackoff {
		t.Errorf("orders backoff = %+v, want %+v", o.backoff, wantBackoff)
	}
	if o.retention != 0 || o.ordering != txbox.OrderingKey || o.maxAttempts != DefaultMaxAttempts || o.leaseDuration != DefaultLeaseDuration || o.inFlight != DefaultInFlight {
		t.Errorf("orders = %+v", o)
	}
	u, err := cfg.settingsFor("unlisted")
	if err != nil {
		t.Fatal(err)
	}
	if u.senderName != "nats" || u.route.Subject != "events.unlisted" || u.retention != DefaultRetention || u.ordering != txbox.OrderingNone {
		t.Errorf("unlisted = %+v", u)
	}
	if *cfg.Cleanup.OutboxTTL != DefaultRetention || *cfg.Cleanup.DeadLetterTTL != DefaultDeadLetterTTL {
		t.Errorf("cleanup TTLs = %v %v", *cfg.Cleanup.OutboxTTL, *cfg.Cleanup.DeadLetterTTL)
	}
}

func TestOutboxTTLIsTheLongestRetention(t *testing.T) {
	t.Parallel()
	one := map[string]sender.Sender{"a": nopSender{}}
	cfg := Config{Store: fakeDriver{}, Senders: one,
		Defaults: EventSettings{Retention: ptr(time.Duration(0))},
		Events: map[string]EventSettings{
			"audit":  {Retention: ptr(7 * 24 * time.Hour)},
			"orders": {Retention: ptr(time.Hour)},
			"plain":  {},
		}}.withDefaults()
	if got := *cfg.Cleanup.OutboxTTL; got != 7*24*time.Hour {
		t.Errorf("outbox TTL = %v, want the longest retention (7d)", got)
	}
	cfg = Config{Store: fakeDriver{}, Senders: one, Defaults: EventSettings{Retention: ptr(time.Duration(0))}}.withDefaults()
	if got := *cfg.Cleanup.OutboxTTL; got != 0 {
		t.Errorf("outbox TTL with retention 0 everywhere = %v, want 0", got)
	}
	explicit := time.Minute
	cfg = Config{Store: fakeDriver{}, Senders: one, Cleanup: CleanupConfig{OutboxTTL: &explicit},
		Events: map[string]EventSettings{"audit": {Retention: ptr(48 * time.Hour)}}}.withDefaults()
	if got := *cfg.Cleanup.OutboxTTL; got != time.Minute {
		t.Errorf("explicit outbox TTL = %v, want 1m", got)
	}
}

func TestDefaultsMatchSpec(t *testing.T) {
	t.Parallel()
	cfg := Config{Store: fakeDriver{}, Senders: map[string]sender.Sender{"only": nopSender{}}}.withDefaults()
	if err := cfg.validate(); err != nil {
		t.Fatal(err)
	}
	s, err := cfg.settingsFor("x")
	if err != nil {
		t.Fatal(err)
	}
	if s.senderName != "only" {
		t.Errorf("sender = %q, want the only one", s.senderName)
	}
	if s.batchSize != 200 || s.polling.MinDelay != 250*time.Millisecond || s.polling.Multiplier != 1.5 ||
		s.polling.MaxDelay != time.Minute || s.polling.Mode != "adaptive" || s.maxAttempts != 4 ||
		s.backoff.Delay != 10*time.Second || s.backoff.Multiplier != 3 || s.leaseDuration != 5*time.Minute ||
		s.retention != 0 || s.claim != txbox.ClaimLease {
		t.Errorf("defaults = %+v", s)
	}
	if cfg.InstanceID == "" || cfg.Logger == nil {
		t.Error("instance id or logger not defaulted")
	}
}

func TestConfigErrorsNameThePath(t *testing.T) {
	t.Parallel()
	two := map[string]sender.Sender{"a": nopSender{}, "b": nopSender{}}
	one := map[string]sender.Sender{"a": nopSender{}}
	cases := []struct {
		name string
		cfg  Config
		want string
	}{
		{"no store", Config{Senders: one}, "relay: Store is required"},
		{"no senders", Config{Store: fakeDriver{}}, "relay: Senders must name at least one sender"},
		{"nil sender", Config{Store: fakeDriver{}, Senders: map[string]sender.Sender{"x": nil}}, `relay: Senders["x"] is nil`},
		{"ambiguous sender", Config{Store: fakeDriver{}, Senders: two}, "relay: Defaults.Sender is required when there are 2 senders"},
		{"unknown sender", Config{Store: fakeDriver{}, Senders: one, Events: map[string]EventSettings{"orders": {Sender: ptr("zz")}}},
			`relay: Events["orders"].Sender names unknown sender "zz"`},
		{"max below min", Config{Store: fakeDriver{}, Senders: one, Events: map[string]EventSettings{"orders": {Polling: &PollingSettings{MinDelay: new(2 * time.Minute)}}}},
			`relay: Events["orders"].Polling.MaxDelay must be ≥ min-delay`},
		{"bad mode", Config{Store: fakeDriver{}, Senders: one, Defaults: EventSettings{Polling: &PollingSettings{Mode: new("lazy")}}},
			`relay: Defaults.Polling.Mode must be adaptive or fixed, not "lazy"`},
		{"multiplier below 1", Config{Store: fakeDriver{}, Senders: one, Events: map[string]EventSettings{"o": {Polling: &PollingSettings{Multiplier: new(0.5)}}}},
			`relay: Events["o"].Polling.Multiplier must be ≥ 1`},
		{"multiplier infinite", Config{Store: fakeDriver{}, Senders: one, Defaults: EventSettings{Backoff: &BackoffSettings{Multiplier: new(math.Inf(1))}}},
			"relay: Defaults.Backoff.Multiplier must be finite"},
		{"batch 0", Config{Store: fakeDriver{}, Senders: one, Events: map[string]EventSettings{"o": {BatchSize: ptr(0)}}},
			`relay: Events["o"].BatchSize must be ≥ 1`},
		{"attempts 0", Config{Store: fakeDriver{}, Senders: one, Defaults: EventSettings{MaxAttempts: ptr(0)}},
			"relay: Defaults.MaxAttempts must be ≥ 1"},
		{"jitter", Config{Store: fakeDriver{}, Senders: one, Defaults: EventSettings{Backoff: &BackoffSettings{Jitter: new(1.5)}}},
			"relay: Defaults.Backoff.Jitter must be between 0 and 1"},
		{"backoff max", Config{Store: fakeDriver{}, Senders: one, Defaults: EventSettings{Backoff: &BackoffSettings{Delay: new(2 * time.Hour)}}},
			"relay: Defaults.Backoff.Max must be ≥ delay"},
		{"retention", Config{Store: fakeDriver{}, Senders: one, Defaults: EventSettings{Retention: ptr(-time.Second)}},
			"relay: Defaults.Retention must be ≥ 0"},
		{"ordering", Config{Store: fakeDriver{}, Senders: one, Defaults: EventSettings{Ordering: ptr(Ordering("fifo"))}},
			`relay: Defaults.Ordering must be none or key, not "fifo"`},
		{"in flight", Config{Store: fakeDriver{}, Senders: one, Defaults: EventSettings{InFlight: ptr(-1)}},
			"relay: Defaults.InFlight must be ≥ 1"},
		{"lease", Config{Store: fakeDriver{}, Senders: one, Defaults: EventSettings{LeaseDuration: ptr(time.Duration(0))}},
			"relay: Defaults.LeaseDuration must be > 0"},
		{"fixed delay", Config{Store: fakeDriver{}, Senders: one, Defaults: EventSettings{Polling: &PollingSettings{Mode: new("fixed"), Delay: new(time.Duration(-1))}}},
			"relay: Defaults.Polling.Delay must be > 0"},
		{"bad type", Config{Store: fakeDriver{}, Senders: one, Events: map[string]EventSettings{`x"; DROP`: {}}},
			`relay: Events["x\"; DROP"] is not a valid event type`},
		{"cleanup interval", Config{Store: fakeDriver{}, Senders: one, Cleanup: CleanupConfig{Interval: time.Hour, MaxInterval: time.Minute}},
			"relay: Cleanup.MaxInterval must be ≥ interval"},
		{"recover interval", Config{Store: fakeDriver{}, Senders: one, RecoverInterval: -time.Second},
			"relay: RecoverInterval must be > 0"},
		{"heartbeat interval", Config{Store: fakeDriver{}, Senders: one, HeartbeatInterval: 10 * time.Millisecond},
			"relay: HeartbeatInterval must be ≥ 1s"},
		{"recover max interval", Config{Store: fakeDriver{}, Senders: one, RecoverInterval: 2 * time.Minute, RecoverMaxInterval: time.Minute},
			"relay: RecoverMaxInterval must be ≥ recover-interval"},
		{"discover max interval", Config{Store: fakeDriver{}, Senders: one, DiscoverInterval: time.Minute, DiscoverMaxInterval: time.Second},
			"relay: DiscoverMaxInterval must be ≥ discover-interval"},
		{"circuit", Config{Store: fakeDriver{}, Senders: one, Circuit: CircuitConfig{Multiplier: 0.5}},
			"relay: Circuit.Multiplier must be ≥ 1"},
		{"claim", Config{Store: fakeDriver{}, Senders: one, Defaults: EventSettings{Claim: ptr(txbox.ClaimMode("grab"))}},
			`relay: Defaults.Claim must be lease or lock, not "grab"`},
		{"lock claim without a locker", Config{Store: fakeDriver{}, Senders: one, Events: map[string]EventSettings{"o": {Claim: ptr(txbox.ClaimLock)}}},
			`relay: Events["o"].Claim lock needs a store with a lock claim (PostgreSQL, MySQL/MariaDB; SQLite has none)`},
		{"dead letter ttl", Config{Store: fakeDriver{}, Senders: one, Cleanup: CleanupConfig{DeadLetterTTL: ptr(-time.Hour)}},
			"relay: Cleanup.DeadLetterTTL must be ≥ 0"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r, err := New(tc.cfg)
			if err == nil {
				t.Fatalf("New accepted the config: %v", r)
			}
			if !errors.Is(err, ErrInvalidConfig) {
				t.Errorf("error %v does not match ErrInvalidConfig", err)
			}
			var ce *ConfigError
			if !errors.As(err, &ce) {
				t.Errorf("error %T is not a *ConfigError", err)
			}
			if !strings.HasPrefix(err.Error(), tc.want) {
				t.Errorf("error = %q, want prefix %q", err.Error(), tc.want)
			}
		})
	}
}

// TestSetZeroWinsOverInherited: a field set to zero is set, so it
// overrides a non-zero value of Defaults instead of inheriting it
// (backoff.jitter: 0 turns jitter off for one type); unset fields still
// inherit field by field.
func TestSetZeroWinsOverInherited(t *testing.T) {
	t.Parallel()
	cfg := Config{
		Store:   fakeDriver{},
		Senders: map[string]sender.Sender{"a": nopSender{}},
		Defaults: EventSettings{
			Backoff: &BackoffSettings{Delay: new(time.Second), Max: new(time.Minute), Jitter: new(0.2)},
			Polling: &PollingSettings{MinDelay: new(time.Second)},
		},
		Events: map[string]EventSettings{
			"exact": {
				Backoff:   &BackoffSettings{Delay: new(time.Duration(0)), Jitter: new(0.0)},
				Polling:   &PollingSettings{MinDelay: new(time.Duration(0))},
				Retention: new(time.Duration(0)),
			},
		},
	}
	if _, err := New(cfg); err != nil {
		t.Fatal(err)
	}
	cfg = cfg.withDefaults()
	exact, err := cfg.settingsFor("exact")
	if err != nil {
		t.Fatal(err)
	}
	if want := (resolvedBackoff{Delay: 0, Multiplier: DefaultBackoffMultiplier, Max: time.Minute, Jitter: 0}); exact.backoff != want {
		t.Errorf("exact backoff = %+v, want %+v (the set zeros win, the rest inherits)", exact.backoff, want)
	}
	if exact.polling.MinDelay != 0 || exact.retention != 0 {
		t.Errorf("exact polling min-delay %v, retention %v; want the set zeros", exact.polling.MinDelay, exact.retention)
	}
	other, err := cfg.settingsFor("other")
	if err != nil {
		t.Fatal(err)
	}
	if other.backoff.Jitter != 0.2 || other.backoff.Delay != time.Second || other.polling.MinDelay != time.Second {
		t.Errorf("other = backoff %+v, polling %+v; want Defaults'", other.backoff, other.polling)
	}
}

// quickSender is a sender that says its destination acks quickly.
type quickSender struct{ nopSender }

func (quickSender) AcksQuickly() bool { return true }

// lockingDriver is a store with a lock claim.
type lockingDriver struct{ fakeDriver }

func (lockingDriver) OutboxLock(context.Context, *store.OutboxClaimParams) (store.LockedBatch, error) {
	return nil, errors.New("not used")
}

// TestDefaultClaimFollowsTheSender: a type that sets no claim gets the
// lock claim when its sender acks quickly (a broker) and the store has
// a lock claim, else the lease claim; a claim the configuration sets
// wins either way.
func TestDefaultClaimFollowsTheSender(t *testing.T) {
	t.Parallel()
	senders := map[string]sender.Sender{"broker": quickSender{}, "hook": nopSender{}}
	for _, tc := range []struct {
		name  string
		store store.Driver
		own   EventSettings
		want  txbox.ClaimMode
	}{
		{"broker on a locking store", lockingDriver{}, EventSettings{Sender: new("broker")}, txbox.ClaimLock},
		{"webhook on a locking store", lockingDriver{}, EventSettings{Sender: new("hook")}, txbox.ClaimLease},
		{"broker on a store without a lock claim", fakeDriver{}, EventSettings{Sender: new("broker")}, txbox.ClaimLease},
		{"lease set for a broker", lockingDriver{}, EventSettings{Sender: new("broker"), Claim: new(txbox.ClaimLease)}, txbox.ClaimLease},
		{"lock set for a webhook", lockingDriver{}, EventSettings{Sender: new("hook"), Claim: new(txbox.ClaimLock)}, txbox.ClaimLock},
	} {
		cfg := Config{Store: tc.store, Senders: senders, Events: map[string]EventSettings{"x": tc.own}}.withDefaults()
		s, err := cfg.settingsFor("x")
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if s.claim != tc.want {
			t.Errorf("%s: claim %q, want %q", tc.name, s.claim, tc.want)
		}
	}
}

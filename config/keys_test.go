package config

import (
	"reflect"
	"testing"

	"github.com/txbox/txbox/relay"
)

// TestKeysCoverEveryField: every struct type of another package that a
// file decodes into (the relay's settings, sender.Route) has its keys in
// keys, one for each exported field ("-" for none), and no yaml tags of
// its own, so a field added to relay cannot be silently undecodable, and
// the schema is written in one place.
func TestKeysCoverEveryField(t *testing.T) {
	t.Parallel()
	own := reflect.TypeFor[Config]().PkgPath()
	reached := map[reflect.Type]bool{}
	var walk func(reflect.Type)
	walk = func(typ reflect.Type) {
		typ = elemType(typ)
		switch typ.Kind() {
		case reflect.Map, reflect.Slice:
			walk(typ.Elem())
			return
		case reflect.Struct:
		default:
			return
		}
		if reached[typ] {
			return
		}
		reached[typ] = true
		for _, f := range keyFields(typ) {
			walk(typ.FieldByIndex(f.index).Type)
		}
	}
	walk(reflect.TypeFor[Config]())
	for _, mk := range senderTypes {
		walk(reflect.TypeOf(mk(&Sender{})))
	}
	for typ := range reached {
		if _, ok := keys[typ]; typ.PkgPath() != own && !ok {
			t.Errorf("%s is decoded from a file but has no entry in keys", typ)
		}
	}
	for typ, names := range keys {
		if !reached[typ] {
			t.Errorf("keys lists %s, which no file key reaches", typ)
		}
		seen := map[string]string{}
		for i := 0; i < typ.NumField(); i++ {
			f := typ.Field(i)
			if tag, ok := f.Tag.Lookup("yaml"); ok {
				t.Errorf("%s.%s has a yaml tag %q: its key belongs in keys", typ, f.Name, tag)
			}
			if !f.IsExported() {
				continue
			}
			key, ok := names[f.Name]
			switch {
			case !ok:
				t.Errorf("%s.%s has no key in keys: add its key (or \"-\" for none) and a row in docs/configuration.md", typ, f.Name)
			case key != "-" && seen[key] != "":
				t.Errorf("%s: %s and %s have the same key %s", typ, seen[key], f.Name, key)
			default:
				seen[key] = f.Name
			}
		}
		for name := range names {
			if _, ok := typ.FieldByName(name); !ok {
				t.Errorf("keys lists %s.%s, which is no field", typ, name)
			}
		}
	}
}

// TestRelayFieldsHaveKeyPaths: each field of relay.Config that a file
// sets translates to its key path, and every other field is named here
// as having none, so that a new field of relay.Config needs a decision.
func TestRelayFieldsHaveKeyPaths(t *testing.T) {
	t.Parallel()
	want := map[string]string{
		"Defaults":              "defaults",
		"Events":                "events",
		"Cleanup":               "cleanup",
		"Circuit":               "relay.circuit",
		"DiscoverInterval":      "relay.discover-interval",
		"DiscoverMaxInterval":   "relay.discover-max-interval",
		"RecoverInterval":       "relay.recover-interval",
		"RecoverMaxInterval":    "relay.recover-max-interval",
		"DeadLetterInterval":    "relay.dead-letter-interval",
		"DeadLetterMaxInterval": "relay.dead-letter-max-interval",
		"HeartbeatInterval":     "relay.heartbeat-interval",
		"InstanceID":            "relay.instance-id",
		"Stream":                "database.wal",
		"Senders":               "senders",
		// No key: built from the file by RelayConfig, or the relay's own.
		"Store": "Store", "Logger": "Logger", "Hooks": "Hooks", "TracerProvider": "TracerProvider",
		"LockBudget": "LockBudget", "MaintenanceBatchSize": "MaintenanceBatchSize",
		// No key: `txbox relay` wants Start's check of the database (it
		// pings before it starts anyway); only a program that starts its
		// relay before its database sets it.
		"StartWithoutStore": "StartWithoutStore",
		// No key of its own: a tenant's name (tenants[].name), set by
		// RelayConfig on a tenant's configuration (ForTenant).
		"Tenant": "Tenant",
	}
	rt := reflect.TypeFor[relay.Config]()
	for i := 0; i < rt.NumField(); i++ {
		name := rt.Field(i).Name
		w, ok := want[name]
		if !ok {
			t.Errorf("relay.Config.%s: no key path decided; add it to relayRoot's sources (or here, as having none)", name)
			continue
		}
		if got := keyPath(name); got != w {
			t.Errorf("keyPath(%s) = %s, want %s", name, got, w)
		}
	}
}

// TestKeyPath: the Go paths of relay.ConfigError become the key paths of
// docs/configuration.md; an event type with a dot is bracketed as the
// loader spells it; a path with a field that has no key stays as it is.
func TestKeyPath(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ goPath, want string }{
		{`Events["order-created"].BatchSize`, "events.order-created.batch-size"},
		{`Events["order.created"].Polling.MaxDelay`, `events["order.created"].polling.max-delay`},
		{`Events["x\"; DROP"]`, `events.x"; DROP`},
		{"Defaults.Polling.MinDelay", "defaults.polling.min-delay"},
		{"Defaults.LeaseDuration", "defaults.lease"},
		{"Defaults.Route.Format", "defaults.route.format"},
		{"Defaults.Backoff.Jitter", "defaults.backoff.jitter"},
		{"Cleanup.Interval", "cleanup.interval"},
		{"Cleanup.DeadLetterTTL", "cleanup.dead-letter-ttl"},
		{"Circuit.CoolDown", "relay.circuit.cool-down"},
		{"RecoverMaxInterval", "relay.recover-max-interval"},
		{"Stream.PauseLimit", "database.wal.pause-limit"},
		{`Senders["main"]`, "senders.main"},
		{"Cleanup.LeaseTTL", "Cleanup.LeaseTTL"},
		{"Stream.ConfirmInterval", "Stream.ConfirmInterval"},
		{"Store", "Store"},
		{`Events["unterminated`, `Events["unterminated`},
		{"Defaults..BatchSize", "Defaults..BatchSize"},
	} {
		if got := keyPath(tc.goPath); got != tc.want {
			t.Errorf("keyPath(%s) = %s, want %s", tc.goPath, got, tc.want)
		}
	}
}

// TestRelayErrorNamesTheKey: relay.New's error for a configuration built
// from a file names the file's key, as config check does.
func TestRelayErrorNamesTheKey(t *testing.T) {
	t.Parallel()
	_, err := relay.New(relay.Config{})
	if got := RelayError(err).Error(); got != "relay: Store is required" {
		t.Errorf("RelayError = %q, want the Go path kept for a field with no key", got)
	}
	cfg := relay.Config{Events: map[string]relay.EventSettings{"orders": {BatchSize: new(0)}}}
	errs := cfg.Validate(relay.Bounds{})
	if len(errs) != 1 {
		t.Fatalf("Validate = %v, want one error", errs)
	}
	if got := RelayError(errs[0]).Error(); got != "relay: events.orders.batch-size must be ≥ 1" {
		t.Errorf("RelayError = %q", got)
	}
	if errs[0].Field != `Events["orders"].BatchSize` {
		t.Errorf("RelayError changed its argument: %s", errs[0].Field)
	}
}

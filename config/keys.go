package config

import (
	"reflect"
	"strconv"
	"strings"

	"github.com/txbox/txbox/relay"
	"github.com/txbox/txbox/sender"
)

// keys is the YAML schema of the types of other packages that a file
// decodes into: for each, its Go field names to their keys, "-" for a
// field that has no key. relay and sender are plain Go, so this package
// owns their keys, as the tags of its own types own theirs; every walk
// over the keys of a struct (keyFields) reads it. TestKeysCoverEveryField
// fails when one of these types gains an exported field without an entry
// here, or when the file reaches a type of another package that has none.
var keys = map[reflect.Type]map[string]string{
	reflect.TypeFor[relay.EventSettings](): {
		"Sender":        "sender",
		"Route":         "route",
		"BatchSize":     "batch-size",
		"Polling":       "polling",
		"MaxAttempts":   "max-attempts",
		"Backoff":       "backoff",
		"Ordering":      "ordering",
		"CommitHorizon": "commit-horizon",
		// The deprecated Go field has no key of its own: a file's
		// ordering-fence is an alias of commit-horizon (renamedKeys).
		"OrderingFence": "-",
		"Retention":     "retention",
		"LeaseDuration": "lease",
		"InFlight":      "in-flight",
		"Claim":         "claim",
		"Routes":        "routes",
	},
	// A route's destination fields (the inline sender.Route) are keys of
	// the entry itself: { sender: kafka, topic: orders }.
	reflect.TypeFor[relay.RouteSettings](): {
		"Name":        "name",
		"Sender":      "sender",
		"Route":       inlineKey,
		"BatchSize":   "batch-size",
		"MaxAttempts": "max-attempts",
		"Backoff":     "backoff",
		"Ordering":    "ordering",
		"InFlight":    "in-flight",
	},
	reflect.TypeFor[relay.PollingSettings](): {
		"Mode":       "mode",
		"MinDelay":   "min-delay",
		"Multiplier": "multiplier",
		"MaxDelay":   "max-delay",
		"Delay":      "delay",
	},
	reflect.TypeFor[relay.BackoffSettings](): {
		"Delay":      "delay",
		"Multiplier": "multiplier",
		"Max":        "max",
		"Jitter":     "jitter",
	},
	reflect.TypeFor[relay.CleanupConfig](): {
		"Disabled":      "disabled",
		"Interval":      "interval",
		"MaxInterval":   "max-interval",
		"OutboxTTL":     "outbox-ttl",
		"DeadLetterTTL": "dead-letter-ttl",
		"AuditTTL":      "audit-ttl",
		"BatchSize":     "batch-size",
		// The cleanup lease is the relay's own business.
		"LeaseTTL": "-",
	},
	reflect.TypeFor[relay.CircuitConfig](): {
		"CoolDown":    "cool-down",
		"MaxCoolDown": "max-cool-down",
		"Multiplier":  "multiplier",
	},
	reflect.TypeFor[sender.Route](): {
		"Topic":      "topic",
		"Subject":    "subject",
		"Exchange":   "exchange",
		"RoutingKey": "routing-key",
		"URL":        "url",
		"Stream":     "stream",
		"Format":     "format",
	},
}

// inlineKey, as the key of an embedded field in keys, puts the keys of
// the embedded struct in its place, as a yaml ",inline" tag does for this
// package's own types.
const inlineKey = ",inline"

// keyOf returns the key of field f of a struct, "" when it has none: from
// keys for the types listed there, else from its yaml tag.
func keyOf(t reflect.Type, f reflect.StructField) string {
	if names, ok := keys[t]; ok {
		if name := names[f.Name]; name != "-" {
			return name
		}
		return ""
	}
	tag := f.Tag.Get("yaml")
	if tag == "" || tag == "-" {
		return ""
	}
	name, _, _ := strings.Cut(tag, ",")
	return name
}

// relayRoot returns where the field name of relay.Config lives in a file,
// and the type that holds its keys: Defaults, Events and Cleanup are keys
// of Config, the relay-wide fields keys of RelaySettings under relay
// (relayConfig copies them by name), and Stream is database.wal.
func relayRoot(name string) (string, reflect.Type, bool) {
	if name == "Stream" {
		return "database.wal", reflect.TypeFor[WAL](), true
	}
	for _, r := range []struct {
		prefix string
		t      reflect.Type
	}{{"", reflect.TypeFor[Config]()}, {"relay", reflect.TypeFor[RelaySettings]()}} {
		for _, f := range keyFields(r.t) {
			if f.goName == name {
				return join(r.prefix, f.name), r.t.FieldByIndex(f.index).Type, true
			}
		}
	}
	return "", nil, false
}

// keyPath translates the Go path of a relay.ConfigError (its Field, such
// as Events["orders"].Polling.MaxDelay) into the key path of
// docs/configuration.md (events.orders.polling.max-delay), so that a
// file's problems name its keys. A path with a field that has no key
// (Store, Cleanup.LeaseTTL) is returned as it is.
func keyPath(goPath string) string {
	var (
		out string
		t   reflect.Type
	)
	for rest := goPath; rest != ""; {
		if rest[0] == '[' && t != nil && t.Kind() == reflect.Slice {
			// A list item, as the decoder names it: routes[1].
			end := strings.IndexByte(rest, ']')
			if end < 0 {
				return goPath
			}
			if _, err := strconv.Atoi(rest[1:end]); err != nil {
				return goPath
			}
			out, t, rest = out+rest[:end+1], elemType(t.Elem()), rest[end+1:]
			continue
		}
		if rest[0] == '[' {
			q, err := strconv.QuotedPrefix(rest[1:])
			if err != nil || t == nil || t.Kind() != reflect.Map || !strings.HasPrefix(rest[1+len(q):], "]") {
				return goPath
			}
			k, _ := strconv.Unquote(q)
			out, t, rest = join(out, k), elemType(t.Elem()), rest[len(q)+2:]
			continue
		}
		if t != nil {
			if rest[0] != '.' {
				return goPath
			}
			rest = rest[1:]
		}
		end := strings.IndexAny(rest, ".[")
		if end < 0 {
			end = len(rest)
		}
		name := rest[:end]
		rest = rest[end:]
		if t == nil {
			root, rt, ok := relayRoot(name)
			if !ok {
				return goPath
			}
			out, t = root, elemType(rt)
			continue
		}
		f, ok := fieldByGoName(t, name)
		if !ok {
			return goPath
		}
		out, t = join(out, f.name), elemType(t.FieldByIndex(f.index).Type)
	}
	return out
}

// fieldByGoName returns the key field of struct type t that is the Go
// field name.
func fieldByGoName(t reflect.Type, name string) (keyField, bool) {
	if t.Kind() != reflect.Struct {
		return keyField{}, false
	}
	for _, f := range keyFields(t) {
		if f.goName == name {
			return f, true
		}
	}
	return keyField{}, false
}

// elemType is t without its pointers.
func elemType(t reflect.Type) reflect.Type {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t
}

// RelayError returns err, an error of relay.New for a configuration this
// package built (RelayConfig), with the Field of a relay.ConfigError
// translated into the file's key path (Events["orders"].Claim into
// events.orders.claim), so that the txbox command names the keys a user
// wrote. Any other error is returned as it is.
func RelayError(err error) error {
	ce, ok := err.(*relay.ConfigError)
	if !ok || ce.Component != "relay" {
		return err
	}
	out := *ce
	out.Field = keyPath(ce.Field)
	return &out
}

package config

import (
	"fmt"
	"reflect"
	"sort"
	"strings"
	"time"

	"github.com/txbox/txbox/relay"
	"github.com/txbox/txbox/store"
)

// Setting is one key of a loaded configuration: its effective value and
// where that value came from. Settings lists them for `txbox config
// print`.
type Setting struct {
	// Path is the key path, such as defaults.batch-size or
	// senders.orders.url.
	Path string
	// Value is the value as the relay uses it, secrets redacted; "(unset)"
	// for an optional block or key nobody set.
	Value string
	// Source is "default", "file NAME:LINE", "environment variable
	// TXBOX_...", "flag --set KEY", or, for a key of an event type the
	// file does not set, "inherited from defaults.KEY (SOURCE)".
	Source string
}

// Source labels of Setting.
const (
	SourceDefault = "default"
)

var dsnType = reflect.TypeOf(DSN(""))

// Settings returns every key of the configuration with its effective
// value and its source, in path order within each section. Event types
// show their effective settings (Effective): a key the entry does not set
// shows the defaults value and says it is inherited. Values are redacted
// as DSNs are (String): a password never appears.
func (c *Config) Settings() []Setting {
	var out []Setting
	sourceOf := func(p string) string {
		if s, ok := c.origins[p]; ok {
			return s
		}
		return SourceDefault
	}
	walk := func(path string, v reflect.Value, src func(string) string) {
		settingsOf(path, v, src, &out)
	}
	// The relay-wide settings as the relay will use them: a cap left at
	// zero follows its interval, the outbox TTL the longest retention.
	eff := *c
	rc := c.relayConfig().WithDefaults(true)
	eff.Relay.DiscoverMaxInterval = rc.DiscoverMaxInterval
	eff.Relay.RecoverMaxInterval = rc.RecoverMaxInterval
	eff.Relay.DeadLetterMaxInterval = rc.DeadLetterMaxInterval
	eff.Cleanup = rc.Cleanup
	eff.Database.WAL = c.shownWAL()
	if eff.Defaults.BatchSize == nil {
		eff.Defaults.BatchSize = new(relay.DefaultBatchSize)
	}
	cv := reflect.ValueOf(&eff).Elem()
	for _, f := range keyFields(cv.Type()) {
		switch f.name {
		case "senders", "events":
			continue
		case "tenants":
			if c.tenantSettings(sourceOf, &out) {
				continue
			}
		}
		walk(f.name, cv.FieldByIndex(f.index), sourceOf)
	}
	for _, n := range c.SenderNames() {
		p := join("senders", n)
		s := c.Senders[n]
		out = append(out, Setting{Path: join(p, "type"), Value: s.Type, Source: sourceOf(join(p, "type"))})
		for _, v := range []any{s.NATS, s.Webhook, s.Kafka, s.RabbitMQ, s.Redis} {
			if rv := reflect.ValueOf(v); !rv.IsNil() {
				walk(p, rv, sourceOf)
			}
		}
	}
	c.explainDerived(out)
	for _, t := range c.EventTypes() {
		p := join("events", t)
		single := c.Events[t] != nil && len(c.Events[t].Routes) == 1
		typeSource := func(key string) string {
			if s, ok := c.origins[key]; ok {
				return s
			}
			if single {
				// A routes list of one entry is the type's route
				// (Effective): its keys are routes[0]'s, the
				// destination's inline.
				rest := strings.TrimPrefix(strings.TrimPrefix(key, p), ".route")
				if s, ok := c.origins[p+".routes[0]"+rest]; ok {
					return s
				}
			}
			d := "defaults" + strings.TrimPrefix(key, p)
			return fmt.Sprintf("inherited from %s (%s)", d, sourceOf(d))
		}
		eff := c.Effective(t)
		if len(eff.Routes) < 2 {
			walk(p, reflect.ValueOf(eff), typeSource)
			continue
		}
		out = append(out, c.routeSettings(t, p, eff, typeSource)...)
	}
	return out
}

// routeKeys are the keys a route of a fanned-out type sets for itself
// (relay.RouteSettings); its other settings are the type's.
var routeKeys = map[string]bool{"sender": true, "route": true, "batch-size": true, "max-attempts": true, "backoff": true,
	"ordering": true, "in-flight": true, "claim": true}

// routeSettings are the settings of fanned-out type t (path p, effective
// settings eff): the type's own keys but its route, which no route reads,
// then each route's name and keys, as Routes resolves them, under
// p.routes[i].
func (c *Config) routeSettings(t, p string, eff relay.EventSettings, typeSource func(string) string) []Setting {
	var out []Setting
	routes := eff.Routes
	eff.Routes, eff.Route = nil, nil
	var typ []Setting
	settingsOf(p, reflect.ValueOf(eff), typeSource, &typ)
	for _, s := range typ {
		if s.Path != join(p, "route") && s.Path != join(p, "routes") {
			out = append(out, s)
		}
	}
	views := c.Routes(t)
	own := c.Events[t]
	for i := range routes {
		rp := fmt.Sprintf("%s.routes[%d]", p, i)
		src := func(key string) string {
			if s, ok := c.origins[key]; ok {
				return s
			}
			rest := strings.TrimPrefix(key, rp)
			if rest == ".claim" && own.Claim == nil && c.Defaults.Claim == nil {
				return SourceDefault + " (by the route's sender)"
			}
			return fmt.Sprintf("inherited from %s (%s)", p+rest, typeSource(p+rest))
		}
		nameSrc, ok := c.origins[join(rp, "name")]
		if !ok {
			nameSrc = SourceDefault + " (the route's sender)"
		}
		out = append(out, Setting{Path: join(rp, "name"), Value: views[i].Name, Source: nameSrc})
		re := c.routeEffective(own, &own.Routes[i])
		re.Routes = nil
		var all []Setting
		settingsOf(rp, reflect.ValueOf(re), src, &all)
		for _, s := range all {
			key, _, _ := strings.Cut(strings.TrimPrefix(s.Path, rp+"."), ".")
			if !routeKeys[key] {
				continue
			}
			if key == "route" {
				// The destination keys are the route entry's own,
				// inline (routes[i].topic): only those it sets.
				if s.Value == `""` {
					continue
				}
				s.Path = rp + strings.TrimPrefix(s.Path, join(rp, "route"))
				s.Source = c.origins[s.Path]
			}
			out = append(out, s)
		}
	}
	return out
}

// explainDerived replaces, in out, the values and sources of the keys
// whose unset value is derived or chosen at start rather than a constant.
func (c *Config) explainDerived(out []Setting) {
	for i := range out {
		switch {
		case out[i].Path == "defaults.claim" && c.Defaults.Claim == nil:
			// Unset is a choice, not an absence: each type's claim
			// then follows its sender and the database (defaultClaim).
			out[i].Value = "(by sender: lock for brokers on postgres/mysql, else lease)"
		case out[i].Path == "database.wal.pause-limit" && c.Database.WAL.PauseLimit == 0:
			out[i].Source = SourceDefault + " (half of database.wal.sender-timeout)"
		case out[i].Path == "defaults.batch-size" && c.Defaults.BatchSize == nil && c.Database.Source == SourceWAL:
			out[i].Source = SourceDefault + " (claims; the stream's batches are database.wal.batch-size)"
		case out[i].Path == "cleanup.outbox-ttl" && c.Cleanup.OutboxTTL == nil:
			out[i].Source = SourceDefault + " (the longest retention of defaults and events)"
		case out[i].Path == "relay.instance-id" && c.Relay.InstanceID == "":
			out[i].Value = "(hostname-pid-random, made at start)"
		case out[i].Path == "database.table-prefix" && c.Database.TablePrefix == "":
			out[i].Value = store.DefaultTablePrefix
		case out[i].Path == "database.max-conns" && c.Database.MaxConns == 0:
			out[i].Value = "(the driver's default)"
			if c.Database.Dialect == DialectPostgres {
				out[i].Value = fmt.Sprintf("(pgx's default, at least %d for the lock claim)", c.LockConns())
			}
		case strings.HasSuffix(out[i].Path, ".max-message-bytes") && out[i].Value == "0":
			out[i].Value = "(the broker's max_message_size)"
		}
	}
}

// settingsOf appends the leaves of v under path.
func settingsOf(path string, v reflect.Value, src func(string) string, out *[]Setting) {
	if v.Type() == dsnType {
		val := v.Interface().(DSN).String()
		if val == "" {
			val = `""`
		}
		*out = append(*out, Setting{Path: path, Value: val, Source: src(path)})
		return
	}
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface:
		if v.IsNil() {
			*out = append(*out, Setting{Path: path, Value: "(unset)", Source: src(path)})
			return
		}
		settingsOf(path, v.Elem(), src, out)
		return
	case reflect.Struct:
		if v.Type() != durationType {
			for _, f := range keyFields(v.Type()) {
				settingsOf(join(path, f.name), v.FieldByIndex(f.index), src, out)
			}
			return
		}
	case reflect.Map:
		if v.Len() == 0 {
			*out = append(*out, Setting{Path: path, Value: "{}", Source: src(path)})
			return
		}
		keys := v.MapKeys()
		sort.Slice(keys, func(i, j int) bool { return fmt.Sprint(keys[i]) < fmt.Sprint(keys[j]) })
		for _, k := range keys {
			settingsOf(join(path, fmt.Sprint(k)), v.MapIndex(k), src, out)
		}
		return
	case reflect.Slice:
		items := make([]string, v.Len())
		for i := range items {
			items[i] = scalarString(v.Index(i))
		}
		*out = append(*out, Setting{Path: path, Value: "[" + strings.Join(items, ", ") + "]", Source: src(path)})
		return
	}
	*out = append(*out, Setting{Path: path, Value: scalarString(v), Source: src(path)})
}

// scalarString prints one value; strings go through RedactDSN, so a URL
// with a password or a token parameter prints redacted.
func scalarString(v reflect.Value) string {
	if v.Type() == durationType {
		return time.Duration(v.Int()).String()
	}
	if v.Kind() == reflect.String {
		s := RedactDSN(v.String())
		if s == "" {
			return `""`
		}
		return s
	}
	return fmt.Sprint(v.Interface())
}

// recordOrigins keeps, for Settings, where each key of the loaded
// configuration came from: the file's keys with their lines, then the
// environment and flag overrides.
func (c *Config) recordOrigins(d *decoder) {
	c.origins = make(map[string]string, len(d.lines)+len(d.sources))
	for p, line := range d.lines {
		c.origins[p] = fmt.Sprintf("file %s:%d", d.file, line)
	}
	for p, s := range d.sources {
		c.origins[p] = s
	}
	// A renamed key the file spelled the old way (renamedKeys) shows
	// under its new path, saying so.
	for p, old := range d.renamed {
		if o, ok := c.origins[old]; ok {
			c.origins[p] = o + " (deprecated key " + old + ")"
		}
	}
}

// shownWAL is database.wal as Settings shows it: as WAL mode uses it,
// whatever the source, so that the defaults show before a switch to wal
// (and docs/configuration.md lists them); with tenants in WAL mode the
// slot is the pattern of the slots of the tenants with databases of their
// own (TenantSlot), {tenant} for the name, unless every tenant listed is
// in a schema of database.dsn (they share the slot shown).
func (c *Config) shownWAL() WAL {
	w := c.effectiveWAL()
	if c.HasTenants() && c.Database.Source == SourceWAL {
		schemasOnly := c.TenantsQuery == ""
		for _, t := range c.Tenants {
			schemasOnly = schemasOnly && t.inSchema()
		}
		if !schemasOnly {
			w.Slot = c.TenantSlot(Tenant{Name: TenantPlaceholder, DSNEnv: TenantPlaceholder})
		}
	}
	return w
}

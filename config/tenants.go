package config

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/relay"
	"github.com/txbox/txbox/sender"
	"github.com/txbox/txbox/store"
)

// TenantPlaceholder, in a route field (defaults.route, events.<type>.route,
// events.<type>.routes), stands for the tenant's name: ForTenant replaces
// it, so one file sends each tenant's events to destinations of its own
// (topic "{tenant}.{event_type}"). Without tenants it is an error, since
// nothing would replace it.
const TenantPlaceholder = "{tenant}"

// MaxTenants bounds the tenants ResolveTenants returns, the list and the
// rows of tenants-query together: each tenant costs the process a pool of
// connections and pollers, and a query that returns far more rows than
// that (a missing WHERE) is a mistake better refused than served.
const MaxTenants = 10_000

// tenantNamePattern is the rule for a tenant's name. The name becomes a
// schema name, a metric label and a log attribute, so it is kept to what
// all three take without quoting.
var tenantNamePattern = regexp.MustCompile(`^[a-z][a-z0-9_]{0,62}$`)

// Tenant is one entry of tenants, or one row of tenants-query: a tenant
// the relay serves, whose outbox, dead-letter and inbox tables are in a
// database of its own (DSN or DSNEnv) or in a schema of database.dsn
// (Schema). docs/multi-tenant.md describes the keys.
type Tenant struct {
	// Name identifies the tenant in logs, metrics and {tenant} of the
	// routes. Required; it must match ^[a-z][a-z0-9_]{0,62}$, since it
	// is also usable as a schema name and a metric label.
	Name string `yaml:"name"`
	// DSN is the tenant's own database, of database.dialect. A DSN so
	// that a password in it prints redacted, as database.dsn does.
	DSN DSN `yaml:"dsn"`
	// DSNEnv names the environment variable that holds the tenant's DSN,
	// so that the file holds no password. Not beside DSN.
	DSNEnv string `yaml:"dsn-env"`
	// Schema is the schema holding the tenant's tables: in database.dsn
	// when neither DSN nor DSNEnv is set, else in the tenant's database.
	// On MySQL it is the database holding them (as database.schema);
	// SQLite has none.
	Schema string `yaml:"schema"`
	// MaxConns is the pool size of the tenant's connections. 0 (unset)
	// takes the tenant's even share of database.max-conns (ForTenant),
	// or the driver's default when that is unset too.
	MaxConns int `yaml:"max-conns"`
	// Events override the file's events for this tenant, per type and
	// key by key: a key the tenant's entry leaves unset is the file's
	// events.<type> key, then defaults. A busy tenant can get larger
	// batches without a file of its own.
	Events map[string]*relay.EventSettings `yaml:"events"`
}

// Where says where the tenant's tables are, for `txbox config check`:
// the database of its dsn-env variable or of its (redacted) dsn, or a
// schema of database.dsn.
func (t Tenant) Where() string {
	var db string
	switch {
	case t.DSNEnv != "":
		db = "database from dsn-env " + t.DSNEnv
	case t.DSN != "":
		db = "database " + t.DSN.String()
	default:
		db = "database.dsn"
	}
	if t.Schema == "" {
		return db
	}
	return "schema " + t.Schema + " in " + db
}

// HasTenants reports whether the file configures tenants: a tenants list
// or a tenants-query. The relay then serves each tenant's tables instead
// of database.dsn's own.
func (c *Config) HasTenants() bool { return len(c.Tenants) > 0 || c.TenantsQuery != "" }

// Tenant returns the name of the tenant ForTenant derived c for; "" for a
// configuration that is no tenant's.
func (c *Config) Tenant() string { return c.tenant }

// tenantSettings appends each tenant's keys for Settings, under
// tenants[i], and reports whether there were any: a tenant printed as one
// value of a list would be a Go struct, not keys.
func (c *Config) tenantSettings(src func(string) string, out *[]Setting) bool {
	for i := range c.Tenants {
		settingsOf(fmt.Sprintf("tenants[%d]", i), reflect.ValueOf(c.Tenants[i]), src, out)
	}
	return len(c.Tenants) > 0
}

// tenantProblem is one thing wrong with a tenant: the key (under the
// tenant; "" for the tenant as a whole) and what is wrong.
type tenantProblem struct{ key, msg string }

// checkTenant returns what is wrong with t in c (its dialect, and in WAL
// mode its slot: checkTenantWAL). It checks a tenant of the list and a
// row of tenants-query alike, so both follow one rule.
func (c *Config) checkTenant(t Tenant) []tenantProblem {
	dialect := c.Database.Dialect
	var out []tenantProblem
	add := func(key, format string, args ...any) {
		out = append(out, tenantProblem{key, fmt.Sprintf(format, args...)})
	}
	if !tenantNamePattern.MatchString(t.Name) {
		add("name", "%q must match %s: the name becomes a schema name, a metric label and a log attribute", clip(t.Name), tenantNamePattern)
	}
	switch {
	case t.DSN != "" && t.DSNEnv != "":
		add("dsn-env", "set dsn or dsn-env, not both")
	case t.DSN == "" && t.DSNEnv == "" && t.Schema == "":
		add("", "needs a dsn, a dsn-env or a schema: where its tables are")
	}
	if t.DSNEnv != "" && !validEnvName(t.DSNEnv) {
		add("dsn-env", "%q is not an environment variable name", clip(t.DSNEnv))
	}
	if dialect == DialectSQLite && (strings.Contains(t.DSN.Reveal(), "?") || t.DSN == ":memory:") {
		add("dsn", "sqlite takes a file path (WAL mode and timeouts are set by txbox), not a DSN with parameters or :memory:")
	}
	if t.Schema != "" {
		if dialect == DialectSQLite {
			add("schema", "sqlite has no schemas: give the tenant a dsn")
		} else if err := store.ValidateIdentifier(t.Schema); err != nil {
			add("schema", "%v", err)
		}
	}
	if t.MaxConns < 0 {
		add("max-conns", "must be ≥ 0")
	}
	if len(out) == 0 {
		out = c.checkTenantWAL(t)
	}
	return out
}

// validateTenants checks tenants, tenants-query and tenants-interval, and
// that no route uses {tenant} without tenants. The tenants' events are
// checked only when the rest of the file is valid, so that a mistake in
// an entry they inherit is reported once, where it is.
func (c *Config) validateTenants(d *decoder) {
	clean := len(d.errs) == 0
	if !c.HasTenants() {
		c.checkTenantPlaceholder(d)
		return
	}
	if strings.TrimSpace(c.TenantsQuery) == "" && c.TenantsQuery != "" {
		d.fail("tenants-query", nil, "must be a query, not blank")
	}
	if c.TenantsInterval < time.Second {
		d.fail("tenants-interval", nil, "must be ≥ 1s: each round re-reads the tenants and runs tenants-query")
	}
	if c.TenantsParkAfter < 0 || (c.TenantsParkAfter > 0 && c.TenantsParkAfter < time.Second) {
		d.fail("tenants-park-after", nil, "must be 0 (never park) or ≥ 1s, not %s", c.TenantsParkAfter)
	}
	if c.TenantsSweepInterval < time.Second {
		d.fail("tenants-sweep-interval", nil, "must be ≥ 1s: each sweep is a statement on every database with parked tenants")
	}
	if len(c.Tenants) > MaxTenants {
		d.fail("tenants", nil, "%d tenants, more than the %d one process serves", len(c.Tenants), MaxTenants)
	}
	seen := map[string]int{}
	sum := 0
	for i, t := range c.Tenants {
		p := fmt.Sprintf("tenants[%d]", i)
		for _, pr := range c.checkTenant(t) {
			if pr.key != "" {
				d.fail(join(p, pr.key), nil, "%s", pr.msg)
			} else {
				d.fail(p, nil, "%s", pr.msg)
			}
		}
		if j, dup := seen[t.Name]; dup {
			d.fail(join(p, "name"), nil, "%q is also tenants[%d]'s", clip(t.Name), j)
		} else {
			seen[t.Name] = i
		}
		sum += max(t.MaxConns, 0)
	}
	if i, j, slot := c.slotClash(c.Tenants); slot != "" {
		d.fail(fmt.Sprintf("tenants[%d].name", j), nil, "its WAL slot %q is also tenants[%d]'s: slots are one namespace per PostgreSQL cluster", slot, i)
	}
	if m := c.Database.MaxConns; m > 0 && sum > m {
		d.fail("tenants", nil, "the tenants' max-conns add up to %d, above database.max-conns (%d), the budget of the whole process", sum, m)
	}
	if clean && len(d.errs) == 0 {
		c.validateTenantEvents(d)
	}
}

// checkTenantPlaceholder reports each route field (and WAL slot or
// publication) that holds {tenant} while no tenants are configured:
// nothing would replace it, and the destination would be named "{tenant}"
// literally.
func (c *Config) checkTenantPlaceholder(d *decoder) {
	check := func(p string, r *sender.Route) {
		if r == nil {
			return
		}
		for _, f := range routeStrings(r) {
			if strings.Contains(*f.v, TenantPlaceholder) {
				d.fail(join(p, f.key), nil, "%s is only replaced for tenants, and neither tenants nor tenants-query is configured", TenantPlaceholder)
			}
		}
	}
	check("defaults.route", c.Defaults.Route)
	for key, name := range map[string]string{"slot": c.Database.WAL.Slot, "publication": c.Database.WAL.Publication} {
		if strings.Contains(name, TenantPlaceholder) {
			d.fail("database.wal."+key, nil, "%s is only replaced for tenants, and neither tenants nor tenants-query is configured", TenantPlaceholder)
		}
	}
	for _, t := range c.EventTypes() {
		ev := c.Events[t]
		if ev == nil {
			continue
		}
		p := join("events", t)
		check(join(p, "route"), ev.Route)
		for i := range ev.Routes {
			check(fmt.Sprintf("%s.routes[%d]", p, i), &ev.Routes[i].Route)
		}
	}
}

// routeField is one string field of a route and its key.
type routeField struct {
	key string
	v   *string
}

// routeStrings returns the string fields of r ({event_type} and {tenant}
// are replaced in each); its format is a fixed value, not a name.
func routeStrings(r *sender.Route) []routeField {
	return []routeField{{"topic", &r.Topic}, {"subject", &r.Subject}, {"exchange", &r.Exchange},
		{"routing-key", &r.RoutingKey}, {"url", &r.URL}, {"stream", &r.Stream}}
}

// validateTenantEvents checks each tenant's events entries as the file's
// own are checked (sender, route, routes, claim, the relay's bounds), on
// the settings the tenant gets: its entry over the file's. Errors name the
// tenant's keys: tenants[i].events.<type>.<key>.
func (c *Config) validateTenantEvents(d *decoder) {
	for i, t := range c.Tenants {
		if len(t.Events) == 0 {
			continue
		}
		tc := c.withTenantEvents(t)
		prefix := fmt.Sprintf("tenants[%d].", i)
		for _, typ := range sortedKeys(t.Events) {
			p := prefix + join("events", typ)
			if err := txbox.ValidateEventType(typ); err != nil {
				d.fail(p, nil, "%v", err)
				continue
			}
			ev := tc.Events[typ]
			tc.validateDestination(d, p, ev)
			tc.validateRoutes(d, p, ev)
			if c.Database.Dialect == DialectSQLite && ev.Claim != nil && *ev.Claim == txbox.ClaimLock {
				d.fail(join(p, "claim"), nil, "lock is not available on sqlite (one writer at a time): use lease")
			}
		}
		rc := tc.relayConfig()
		for typ := range rc.Events {
			if _, ok := t.Events[typ]; !ok || txbox.ValidateEventType(typ) != nil {
				delete(rc.Events, typ)
			}
		}
		for _, e := range rc.Validate(fileBounds) {
			if kp := keyPath(e.Field); strings.HasPrefix(kp, "events.") || strings.HasPrefix(kp, "events[") {
				d.fail(prefix+kp, nil, "%s", e.Reason)
			}
		}
	}
}

// withTenantEvents returns a copy of c whose events are t's entries over
// c's (mergeEvent), sharing no route with c, so that ForTenant may
// rewrite them.
func (c *Config) withTenantEvents(t Tenant) *Config {
	tc := *c
	if r := c.Defaults.Route; r != nil {
		tc.Defaults.Route = new(*r)
	}
	tc.Events = make(map[string]*relay.EventSettings, len(c.Events)+len(t.Events))
	for typ, ev := range c.Events {
		tc.Events[typ] = mergeEvent(nil, ev)
	}
	for typ, own := range t.Events {
		tc.Events[typ] = mergeEvent(own, c.Events[typ])
	}
	return &tc
}

// mergeEvent returns the tenant's entry own (nil: none) over the file's
// base (nil: none) as a new entry: each key own leaves unset is base's
// (relay.EventSettings.Inherit), the route key by key, as an event type's
// route inherits from defaults.route. The routes list is own's when it
// sets one, else base's unless own sets a route (a single route of the
// tenant replaces the file's fan-out).
func mergeEvent(own, base *relay.EventSettings) *relay.EventSettings {
	o, b := deref(own), deref(base)
	m := o.Inherit(b)
	// Inherit keeps a field unset in both unset, but folds the
	// deprecated OrderingFence into CommitHorizon; the route it takes
	// as a whole, and the routes list it does not inherit.
	if o.Route != nil && b.Route != nil {
		r := *b.Route
		for _, f := range routeStrings(o.Route) {
			if *f.v != "" {
				*fieldOf(&r, f.key) = *f.v
			}
		}
		if o.Route.Format != "" {
			r.Format = o.Route.Format
		}
		m.Route = &r
	}
	switch {
	case o.Routes != nil:
		m.Routes = slices.Clone(o.Routes)
		// The tenant's fan-out replaces the file's single route.
		m.Route = o.Route
	case o.Route == nil:
		m.Routes = slices.Clone(b.Routes)
	}
	return &m
}

// fieldOf returns the string field of r whose key is key.
func fieldOf(r *sender.Route, key string) *string {
	for _, f := range routeStrings(r) {
		if f.key == key {
			return f.v
		}
	}
	return nil
}

// ForTenant returns the configuration of tenant t, one of count tenants
// the process serves (count is the length of ResolveTenants' list):
//
//   - database: t's dsn or dsn-env replaces database.dsn and
//     database.dsn-env (a dsn-env tenant has no dsn), t's schema
//     replaces database.schema; the dialect, table prefix and the rest
//     are the file's;
//   - database.max-conns: t's max-conns when set, else, when
//     database.max-conns is set, the global budget split evenly:
//     max(2, database.max-conns / count); else 0 (the driver's default);
//   - events: t's entries over the file's, type by type and key by key;
//   - every route field's {tenant} replaced by t's name (defaults.route,
//     events.<type>.route, events.<type>.routes);
//   - in WAL mode (database.source wal), database.wal.slot is t's slot
//     (TenantSlot: its own for a tenant with a database of its own, the
//     one slot of database.dsn's schemas for a tenant in a schema), and
//     database.wal.publication is t's publication (tenantPublication).
//
// The result has no tenants of its own, and its Tenant method returns
// t's name. c is not changed. t is checked as the file's tenants are.
func (c *Config) ForTenant(t Tenant, count int) (*Config, error) {
	if probs := c.checkTenant(t); len(probs) > 0 {
		var errs Errors
		for _, pr := range probs {
			errs = append(errs, &Error{Path: strings.TrimSuffix("tenant "+strconv.Quote(t.Name)+"."+pr.key, "."), Msg: pr.msg})
		}
		return nil, errs
	}
	tc := c.withTenantEvents(t)
	db := &tc.Database
	switch {
	case t.DSN != "":
		db.DSN, db.DSNEnv = t.DSN, ""
	case t.DSNEnv != "":
		db.DSN, db.DSNEnv = "", t.DSNEnv
	}
	if t.Schema != "" {
		db.Schema = t.Schema
	}
	db.MaxConns = tenantMaxConns(t, c.Database.MaxConns, count)
	if c.Database.Source == SourceWAL {
		db.WAL.Slot, db.WAL.Publication = c.TenantSlot(t), c.tenantPublication(t)
		tc.walShared = t.inSchema()
	}
	tc.expandTenant(t.Name)
	tc.Tenants, tc.TenantsQuery, tc.tenant = nil, "", t.Name
	return tc, nil
}

// tenantMaxConns is the pool size of tenant t, one of count, within the
// process's budget (database.max-conns, 0 for none): t's own, else an
// even share of the budget but at least 2 (a poller and a job, so that
// neither waits for the other), else 0.
func tenantMaxConns(t Tenant, budget, count int) int {
	switch {
	case t.MaxConns > 0:
		return t.MaxConns
	case budget > 0:
		return max(2, budget/max(count, 1))
	}
	return 0
}

// expandTenant replaces {tenant} by name in every route of c; c's routes
// must be its own (withTenantEvents).
func (c *Config) expandTenant(name string) {
	expand := func(r *sender.Route) {
		if r == nil {
			return
		}
		for _, f := range routeStrings(r) {
			*f.v = strings.ReplaceAll(*f.v, TenantPlaceholder, name)
		}
	}
	expand(c.Defaults.Route)
	for _, ev := range c.Events {
		expand(ev.Route)
		for i := range ev.Routes {
			expand(&ev.Routes[i].Route)
		}
	}
}

// tenantColumns are the columns a row of tenants-query may have: the keys
// of a tenant that the database can give (events stay in the file).
var tenantColumns = []string{"name", "schema", "dsn", "dsn-env", "max-conns"}

// errColumns is the message of a query with a column that is no tenant key.
const errColumns = "(want name and one of schema, dsn, dsn-env; max-conns)"

// ResolveTenants returns the tenants to serve, sorted by name: the
// tenants list, and, when tenants-query is set, the rows of that query,
// run against database.dsn (database.dsn-env read from the environment
// Load was given). Columns are matched by name, case aside and with _ as
// -: name is required; schema, dsn, dsn-env and max-conns are optional,
// a NULL leaving the key unset; any other column is an error. A row is
// checked as a tenant of the list is, and may not repeat a name; an
// error names the row (1 for the first). More than MaxTenants tenants is
// an error.
func (c *Config) ResolveTenants(ctx context.Context) ([]Tenant, error) {
	out := slices.Clone(c.Tenants)
	if c.TenantsQuery != "" {
		cols, rows, err := c.queryTenants(ctx)
		if err != nil {
			return nil, err
		}
		got, err := tenantsFromRows(cols, rows, c.checkTenant)
		if err != nil {
			return nil, err
		}
		names := map[string]string{}
		for i, t := range c.Tenants {
			names[t.Name] = fmt.Sprintf("tenants[%d]", i)
		}
		for n, t := range got {
			if other, dup := names[t.Name]; dup {
				return nil, &Error{Path: fmt.Sprintf("tenants-query row %d", n+1), Msg: fmt.Sprintf("name %q is also %s's", t.Name, other)}
			}
			names[t.Name] = fmt.Sprintf("row %d", n+1)
		}
		out = append(out, got...)
	}
	if len(out) > MaxTenants {
		return nil, &Error{Path: "tenants-query", Msg: fmt.Sprintf("more than %d tenants", MaxTenants)}
	}
	if i, j, slot := c.slotClash(out); slot != "" {
		return nil, &Error{Path: "tenants-query", Msg: fmt.Sprintf("tenants %q and %q would share the WAL slot %q: slots are one namespace per PostgreSQL cluster", out[i].Name, out[j].Name, slot)}
	}
	slices.SortFunc(out, func(a, b Tenant) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// tenantsFromRows turns the rows of tenants-query (nil for NULL) into
// tenants, each checked by check.
func tenantsFromRows(cols []string, rows [][]*string, check func(Tenant) []tenantProblem) ([]Tenant, error) {
	named := false
	for i, col := range cols {
		cols[i] = strings.ReplaceAll(strings.ToLower(col), "_", "-")
		if !slices.Contains(tenantColumns, cols[i]) {
			return nil, &Error{Path: "tenants-query", Msg: fmt.Sprintf("column %q is not a tenant key %s", clip(col), errColumns)}
		}
		named = named || cols[i] == "name"
	}
	if !named {
		return nil, &Error{Path: "tenants-query", Msg: "no column name " + errColumns}
	}
	out := make([]Tenant, 0, len(rows))
	for n, row := range rows {
		path := fmt.Sprintf("tenants-query row %d", n+1)
		var t Tenant
		for i, col := range cols {
			v := row[i]
			if v == nil {
				if col == "name" {
					return nil, &Error{Path: path, Msg: "name is NULL"}
				}
				continue
			}
			switch col {
			case "name":
				t.Name = *v
			case "schema":
				t.Schema = *v
			case "dsn":
				t.DSN = DSN(*v)
			case "dsn-env":
				t.DSNEnv = *v
			case "max-conns":
				m, err := strconv.Atoi(strings.TrimSpace(*v))
				if err != nil {
					return nil, &Error{Path: path, Msg: fmt.Sprintf("max-conns: must be an integer, not %q", clip(*v))}
				}
				t.MaxConns = m
			}
		}
		if probs := check(t); len(probs) > 0 {
			pr := probs[0]
			msg := pr.msg
			if pr.key != "" {
				msg = pr.key + ": " + msg
			}
			return nil, &Error{Path: path, Msg: msg}
		}
		out = append(out, t)
	}
	return out, nil
}

// queryTenants runs tenants-query against database.dsn and returns its
// columns and at most MaxTenants+1 rows, each value a string or nil for
// NULL. Errors never contain the DSN's password.
func (c *Config) queryTenants(ctx context.Context) ([]string, [][]*string, error) {
	getenv := c.getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	dsn, err := c.DatabaseDSN(getenv)
	if err != nil {
		return nil, nil, err
	}
	secrets := append(c.Secrets(getenv), passwordsIn(dsn.Reveal())...)
	var (
		cols []string
		rows [][]*string
	)
	switch c.Database.Dialect {
	case DialectPostgres:
		cols, rows, err = queryPgx(ctx, dsn.Reveal(), c.TenantsQuery)
	case DialectMySQL:
		cols, rows, err = querySQL(ctx, "mysql", dsn.Reveal(), c.TenantsQuery)
	case DialectSQLite:
		path := strings.TrimPrefix(dsn.Reveal(), "file:")
		// Read-only: the query is the file's, and reads are all it may do.
		cols, rows, err = querySQL(ctx, "sqlite", "file:"+path+"?mode=ro&_pragma=busy_timeout(5000)", c.TenantsQuery)
	default:
		return nil, nil, &Error{Path: "database.dialect", Msg: fmt.Sprintf("unknown dialect %q", c.Database.Dialect)}
	}
	if err != nil {
		return nil, nil, Scrub(fmt.Errorf("tenants-query: %w", err), secrets)
	}
	if len(rows) > MaxTenants {
		return nil, nil, &Error{Path: "tenants-query", Msg: fmt.Sprintf("returned more than %d rows", MaxTenants)}
	}
	return cols, rows, nil
}

// queryPgx runs query on a connection of its own to PostgreSQL.
func queryPgx(ctx context.Context, dsn, query string) ([]string, [][]*string, error) {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return nil, nil, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	rs, err := conn.Query(ctx, query)
	if err != nil {
		return nil, nil, err
	}
	defer rs.Close()
	var cols []string
	for _, f := range rs.FieldDescriptions() {
		cols = append(cols, f.Name)
	}
	var rows [][]*string
	for rs.Next() && len(rows) <= MaxTenants {
		vals, err := rs.Values()
		if err != nil {
			return nil, nil, err
		}
		row := make([]*string, len(vals))
		for i, v := range vals {
			switch v := v.(type) {
			case nil:
			case string:
				row[i] = &v
			case []byte:
				row[i] = new(string(v))
			default:
				row[i] = new(fmt.Sprint(v))
			}
		}
		rows = append(rows, row)
	}
	rs.Close()
	return cols, rows, rs.Err()
}

// querySQL runs query on a database/sql pool of its own (MySQL, SQLite).
func querySQL(ctx context.Context, driver, dsn, query string) ([]string, [][]*string, error) {
	db, err := sql.Open(driver, dsn)
	if err != nil {
		return nil, nil, err
	}
	defer db.Close()
	rs, err := db.QueryContext(ctx, query)
	if err != nil {
		return nil, nil, err
	}
	defer rs.Close()
	cols, err := rs.Columns()
	if err != nil {
		return nil, nil, err
	}
	var rows [][]*string
	for rs.Next() && len(rows) <= MaxTenants {
		vals := make([]sql.NullString, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rs.Scan(ptrs...); err != nil {
			return nil, nil, err
		}
		row := make([]*string, len(cols))
		for i, v := range vals {
			if v.Valid {
				row[i] = new(v.String)
			}
		}
		rows = append(rows, row)
	}
	return cols, rows, rs.Err()
}

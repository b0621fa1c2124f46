package config

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	_ "modernc.org/sqlite"

	"github.com/txbox/txbox/internal/testenv"
)

// pgTenants is the head of a file with a PostgreSQL database and a nats
// sender, for the tenants' tests.
const pgTenants = "database: { dialect: postgres, dsn: 'postgres://u@h/db' }\nsenders: { n: { type: nats } }\n"

// TestTenantsRejects: each mistake in tenants, tenants-query,
// tenants-interval or a {tenant} without tenants is reported at its key
// path.
func TestTenantsRejects(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, yaml, want string
	}{
		{"name twice", pgTenants + "tenants: [{ name: acme, schema: a }, { name: b, schema: b }, { name: c, schema: c }, { name: acme, schema: d }]",
			`tenants[3].name: "acme" is also tenants[0]'s`},
		{"bad name", pgTenants + "tenants: [{ name: Acme, schema: a }]", `tenants[0].name: "Acme" must match ^[a-z][a-z0-9_]{0,62}$`},
		{"name too long", pgTenants + "tenants: [{ name: a" + strings.Repeat("b", 63) + ", schema: a }]", "tenants[0].name:"},
		{"no name", pgTenants + "tenants: [{ schema: a }]", `tenants[0].name: "" must match`},
		{"nowhere", pgTenants + "tenants: [{ name: acme }]", "tenants[0]: needs a dsn, a dsn-env or a schema"},
		{"dsn and dsn-env", pgTenants + "tenants: [{ name: acme, dsn: 'postgres://h/a', dsn-env: ACME }]", "tenants[0].dsn-env: set dsn or dsn-env, not both"},
		{"bad dsn-env", pgTenants + "tenants: [{ name: acme, dsn-env: 'A B' }]", `tenants[0].dsn-env: "A B" is not an environment variable name`},
		{"schema on sqlite", "tenants: [{ name: acme, schema: acme }]", "tenants[0].schema: sqlite has no schemas: give the tenant a dsn"},
		{"bad schema", pgTenants + "tenants: [{ name: acme, schema: 'a-b' }]", "tenants[0].schema: txbox: invalid identifier"},
		{"negative max-conns", pgTenants + "tenants: [{ name: acme, schema: a, max-conns: -1 }]", "tenants[0].max-conns: must be ≥ 0"},
		{"max-conns above the budget", "database: { dialect: postgres, dsn: x, max-conns: 10 }\ntenants: [{ name: a, schema: a, max-conns: 6 }, { name: b, schema: b, max-conns: 6 }]",
			"tenants: the tenants' max-conns add up to 12, above database.max-conns (10)"},
		{"interval too short", pgTenants + "tenants: [{ name: a, schema: a }]\ntenants-interval: 500ms", "tenants-interval: must be ≥ 1s"},
		{"unknown tenant key", pgTenants + "tenants: [{ name: a, shema: a }]", "tenants[0].shema: unknown key"},
		{"tenant event batch-size", pgTenants + "tenants: [{ name: a, schema: a, events: { orders: { batch-size: 0 } } }]",
			"tenants[0].events.orders.batch-size: must be between 1 and 10000"},
		{"tenant event sender", pgTenants + "tenants: [{ name: a, schema: a, events: { orders: { sender: nope } } }]",
			`tenants[0].events.orders.sender: no sender named "nope"`},
		{"tenant event type", pgTenants + "tenants: [{ name: a, schema: a, events: { 'a b': { batch-size: 5 } } }]",
			`tenants[0].events.a b: txbox: invalid event type`},
		{"tenant event lock on sqlite", "tenants: [{ name: a, dsn: a.db, events: { orders: { claim: lock } } }]",
			"tenants[0].events.orders.claim: lock is not available on sqlite"},
		{"tenant placeholder without tenants, defaults", "senders: { n: { type: nats } }\ndefaults: { route: { subject: '{tenant}.{event_type}' } }",
			"defaults.route.subject: {tenant} is only replaced for tenants"},
		{"tenant placeholder without tenants, route", "senders: { n: { type: nats } }\nevents: { a: { route: { subject: 't.{tenant}' } } }",
			"events.a.route.subject: {tenant} is only replaced for tenants"},
		{"tenant placeholder without tenants, routes", "senders: { n: { type: nats } }\nevents: { a: { routes: [{ subject: y }, { name: z, subject: 'z.{tenant}' }] } }",
			"events.a.routes[1].subject: {tenant} is only replaced for tenants"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := Load(Source{Name: "f.yaml", YAML: []byte(tc.yaml)})
			if err == nil {
				t.Fatalf("loaded; want an error containing %q", tc.want)
			}
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q does not contain %q", err, tc.want)
			}
		})
	}
}

// TestTenantsLoad: a valid tenants file loads, HasTenants says so,
// tenants-interval defaults to 30s, {tenant} is accepted with tenants, and
// config print lists each tenant key by key.
func TestTenantsLoad(t *testing.T) {
	t.Parallel()
	c, err := Load(Source{Name: "f.yaml", YAML: []byte(pgTenants + `
defaults: { route: { subject: "{tenant}.{event_type}" } }
tenants:
  - { name: acme,   dsn-env: ACME_DATABASE_URL }
  - { name: globex, schema: globex }
  - { name: initech, schema: initech, max-conns: 6, events: { orders: { batch-size: 50 } } }
`)})
	if err != nil {
		t.Fatal(err)
	}
	if !c.HasTenants() || c.TenantsInterval != DefaultTenantsInterval || len(c.Tenants) != 3 {
		t.Fatalf("HasTenants %v, interval %v, tenants %+v", c.HasTenants(), c.TenantsInterval, c.Tenants)
	}
	if Default().HasTenants() {
		t.Error("the default configuration has tenants")
	}
	got := map[string]string{}
	for _, s := range c.Settings() {
		got[s.Path] = s.Value + " (" + s.Source + ")"
	}
	for p, want := range map[string]string{
		"tenants[0].dsn-env":                    "ACME_DATABASE_URL (file f.yaml:6)",
		"tenants[2].max-conns":                  "6 (file f.yaml:8)",
		"tenants[2].events.orders.batch-size":   "50 (file f.yaml:8)",
		"tenants-interval":                      "30s (default)",
		"tenants[1].schema":                     "globex (file f.yaml:7)",
		"tenants[2].events.orders.max-attempts": "(unset) (default)",
	} {
		if got[p] != want {
			t.Errorf("%s: %q, want %q", p, got[p], want)
		}
	}
	c, err = Load(Source{Name: "f.yaml", YAML: []byte(pgTenants + "tenants-query: SELECT name, schema FROM tenants\ntenants-interval: 1m")})
	if err != nil || !c.HasTenants() || c.TenantsInterval != time.Minute {
		t.Fatalf("tenants-query alone: %v, %+v", err, c)
	}
}

// TestForTenant: the derived configuration has the tenant's database
// (dsn-env, dsn, schema), its share of the pool, its events over the
// file's, {tenant} replaced in every route, and leaves the file's alone.
func TestForTenant(t *testing.T) {
	t.Parallel()
	c, err := Load(Source{Name: "f.yaml", YAML: []byte(`
database: { dialect: postgres, dsn: 'postgres://u@h/db', schema: base, max-conns: 20 }
senders: { n: { type: nats }, w: { type: webhook } }
defaults: { sender: n, route: { subject: "{tenant}.{event_type}" }, batch-size: 100 }
events:
  orders: { batch-size: 300, max-attempts: 7, route: { subject: "orders.{tenant}" } }
  fan:
    routes:
      - { sender: n, subject: "fan.{tenant}" }
      - { sender: w, url: "https://h/{tenant}/hook" }
tenants:
  - { name: acme, dsn-env: ACME_DATABASE_URL }
  - { name: globex, schema: globex, events: { orders: { batch-size: 50, route: { format: cloudevents } }, other: { in-flight: 2 } } }
  - { name: initech, dsn: 'postgres://u:pw@h2/initech', max-conns: 6 }
`)})
	if err != nil {
		t.Fatal(err)
	}
	acme, err := c.ForTenant(c.Tenants[0], 3)
	if err != nil {
		t.Fatal(err)
	}
	if db := acme.Database; db.DSN != "" || db.DSNEnv != "ACME_DATABASE_URL" || db.Schema != "base" || db.MaxConns != 6 {
		t.Errorf("acme's database: %+v (want dsn-env, schema base, 20/3 = 6 conns)", db)
	}
	if acme.Tenant() != "acme" || c.Tenant() != "" || acme.HasTenants() {
		t.Errorf("Tenant %q, file's %q, HasTenants %v", acme.Tenant(), c.Tenant(), acme.HasTenants())
	}
	if s := acme.Effective("payments").Route.Subject; s != "acme.{event_type}" {
		t.Errorf("acme's defaults route: %q", s)
	}
	if s := acme.Effective("orders").Route.Subject; s != "orders.acme" {
		t.Errorf("acme's orders route: %q", s)
	}
	routes := acme.Events["fan"].Routes
	if len(routes) != 2 || routes[0].Subject != "fan.acme" || routes[1].URL != "https://h/acme/hook" {
		t.Errorf("acme's fan routes: %+v", routes)
	}
	// The file's own routes keep the placeholder.
	if c.Defaults.Route.Subject != "{tenant}.{event_type}" || c.Events["fan"].Routes[0].Subject != "fan.{tenant}" || c.Events["orders"].Route.Subject != "orders.{tenant}" {
		t.Errorf("ForTenant changed the file's routes: %+v %+v", c.Defaults.Route, c.Events["fan"].Routes)
	}

	globex, err := c.ForTenant(c.Tenants[1], 3)
	if err != nil {
		t.Fatal(err)
	}
	if db := globex.Database; db.DSN != "postgres://u@h/db" || db.Schema != "globex" || db.MaxConns != 6 {
		t.Errorf("globex's database: %+v", db)
	}
	o := globex.Effective("orders")
	if *o.BatchSize != 50 || *o.MaxAttempts != 7 || o.Route.Subject != "orders.globex" || o.Route.Format != "cloudevents" {
		t.Errorf("globex's orders: batch %d attempts %d route %+v (want 50, 7 inherited, orders.globex, cloudevents)", *o.BatchSize, *o.MaxAttempts, *o.Route)
	}
	if oth := globex.Effective("other"); *oth.InFlight != 2 || *oth.BatchSize != 100 || oth.Route.Subject != "globex.{event_type}" {
		t.Errorf("globex's other: in-flight %d batch %d route %+v", *oth.InFlight, *oth.BatchSize, *oth.Route)
	}
	if *c.Effective("orders").BatchSize != 300 || c.Events["other"] != nil {
		t.Error("ForTenant changed the file's events")
	}

	initech, err := c.ForTenant(c.Tenants[2], 3)
	if err != nil {
		t.Fatal(err)
	}
	if db := initech.Database; db.DSN != "postgres://u:pw@h2/initech" || db.DSNEnv != "" || db.MaxConns != 6 {
		t.Errorf("initech's database: %+v", db)
	}
	// The even share has a floor of 2; no budget is the driver's default.
	if got := tenantMaxConns(Tenant{}, 20, 100); got != 2 {
		t.Errorf("share of 20 among 100: %d, want 2", got)
	}
	if got := tenantMaxConns(Tenant{}, 0, 3); got != 0 {
		t.Errorf("no budget: %d, want 0", got)
	}
	if _, err := c.ForTenant(Tenant{Name: "Bad"}, 1); err == nil || !strings.Contains(err.Error(), `tenant "Bad".name`) {
		t.Errorf("a bad tenant: %v", err)
	}
}

// TestResolveTenantsPostgres: tenants-query's rows join the list, sorted
// by name; columns are matched by name; a column that is no tenant key, a
// NULL name, a bad row and a name the list has are errors naming the row.
func TestResolveTenantsPostgres(t *testing.T) {
	t.Parallel()
	admin, schema := postgresSchema(t)
	ctx := context.Background()
	if _, err := admin.ExecContext(ctx, fmt.Sprintf(`CREATE TABLE %s.tenants (name text, schema text, max_conns int, active bool, note text);
INSERT INTO %s.tenants VALUES ('zeta', 'zeta', 3, true, 'x'), ('beta', 'beta', NULL, true, NULL), ('off', 'off', NULL, false, NULL)`, schema, schema)); err != nil {
		t.Fatal(err)
	}
	load := func(query string) *Config {
		t.Helper()
		c, err := Load(Source{Name: "f.yaml", YAML: fmt.Appendf(nil, "database: { dialect: postgres, dsn: %q }\ntenants: [{ name: alpha, dsn-env: ALPHA_URL }]\ntenants-query: %q\n", testenv.PostgresURL, query)})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	got, err := load(fmt.Sprintf("SELECT name, schema, max_conns FROM %s.tenants WHERE active", schema)).ResolveTenants(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 || got[0].Name != "alpha" || got[1].Name != "beta" || got[1].Schema != "beta" || got[1].MaxConns != 0 ||
		got[2].Name != "zeta" || got[2].MaxConns != 3 {
		t.Fatalf("tenants: %+v", got)
	}
	for query, want := range map[string]string{
		"SELECT name, note FROM %s.tenants":                                       `tenants-query: column "note" is not a tenant key (want name and one of schema, dsn, dsn-env; max-conns)`,
		"SELECT schema FROM %s.tenants":                                           "tenants-query: no column name",
		"SELECT note AS name, schema FROM %s.tenants ORDER BY note NULLS LAST":    "tenants-query row 2: name is NULL",
		"SELECT name, schema FROM %s.tenants UNION ALL SELECT 'beta', 'b2'":       `tenants-query row 4: name "beta" is also row `,
		"SELECT 'alpha' AS name, 'a' AS schema FROM %s.tenants LIMIT 1":           `tenants-query row 1: name "alpha" is also tenants[0]'s`,
		"SELECT 'Bad' AS name, 'a' AS schema FROM %s.tenants LIMIT 1":             `tenants-query row 1: name: "Bad" must match`,
		"SELECT name FROM %s.tenants":                                             "tenants-query row 1: needs a dsn, a dsn-env or a schema",
		"SELECT name, schema FROM %s.nope":                                        "tenants-query: ",
		"SELECT 't' || g AS name, 's' AS schema FROM generate_series(1, 10001) g": "more than 10000",
	} {
		if strings.Contains(query, "%s") {
			query = fmt.Sprintf(query, schema)
		}
		if _, err := load(query).ResolveTenants(ctx); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", query, err, want)
		}
	}
}

// TestResolveTenantsSQLite: tenants-query runs against the SQLite file,
// read-only, with dsn_env as dsn-env.
func TestResolveTenantsSQLite(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "main.db")
	db, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`CREATE TABLE tenants (name TEXT, dsn TEXT, dsn_env TEXT, "max-conns" INTEGER);
INSERT INTO tenants VALUES ('b', 'b.db', NULL, 2), ('a', NULL, 'A_DB', NULL)`); err != nil {
		t.Fatal(err)
	}
	db.Close()
	c, err := Load(Source{Name: "f.yaml", YAML: fmt.Appendf(nil, "database: { dsn: %q }\ntenants-query: SELECT * FROM tenants\n", path)})
	if err != nil {
		t.Fatal(err)
	}
	got, err := c.ResolveTenants(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Name != "a" || got[0].DSNEnv != "A_DB" || got[0].DSN != "" || got[1].Name != "b" || got[1].DSN != "b.db" || got[1].MaxConns != 2 {
		t.Fatalf("tenants: %+v", got)
	}
	c.TenantsQuery = "DELETE FROM tenants RETURNING name"
	if _, err := c.ResolveTenants(context.Background()); err == nil {
		t.Error("a writing tenants-query ran")
	}
}

// TestTenantEventsRoutes: a tenant's routes list replaces the file's
// single route, a tenant's route the file's routes list, and an entry
// that sets neither keeps the file's list.
func TestTenantEventsRoutes(t *testing.T) {
	t.Parallel()
	c, err := Load(Source{Name: "f.yaml", YAML: []byte(pgTenants + `
events:
  single: { route: { subject: one } }
  fan: { routes: [{ subject: a }, { name: b, subject: b }] }
tenants:
  - name: acme
    schema: acme
    events:
      single: { routes: [{ subject: x }, { name: y, subject: y }] }
      fan: { route: { subject: z } }
  - { name: globex, schema: globex, events: { fan: { batch-size: 10 } } }
`)})
	if err != nil {
		t.Fatal(err)
	}
	acme, err := c.ForTenant(c.Tenants[0], 2)
	if err != nil {
		t.Fatal(err)
	}
	if ev := acme.Events["single"]; ev.Route != nil || len(ev.Routes) != 2 {
		t.Errorf("acme's single: route %+v routes %+v", ev.Route, ev.Routes)
	}
	if ev := acme.Events["fan"]; ev.Route == nil || ev.Route.Subject != "z" || len(ev.Routes) != 0 {
		t.Errorf("acme's fan: route %+v routes %+v", ev.Route, ev.Routes)
	}
	globex, err := c.ForTenant(c.Tenants[1], 2)
	if err != nil {
		t.Fatal(err)
	}
	if ev := globex.Events["fan"]; len(ev.Routes) != 2 || *ev.BatchSize != 10 {
		t.Errorf("globex's fan: %+v", ev)
	}
}

// TestTenantsOverrides: tenants-query and tenants-interval take an
// environment variable and --set like any key.
func TestTenantsOverrides(t *testing.T) {
	t.Parallel()
	c, err := Load(Source{Name: "f.yaml", YAML: []byte(pgTenants),
		Env: []string{"TXBOX_TENANTS_QUERY=SELECT name, schema FROM t"}, Set: []string{"tenants-interval=2m"}})
	if err != nil {
		t.Fatal(err)
	}
	if c.TenantsQuery != "SELECT name, schema FROM t" || c.TenantsInterval != 2*time.Minute || !c.HasTenants() {
		t.Fatalf("query %q interval %v", c.TenantsQuery, c.TenantsInterval)
	}
}

// TestResolveTenantsMySQL: tenants-query runs against MySQL/MariaDB too.
func TestResolveTenantsMySQL(t *testing.T) {
	t.Parallel()
	_, dsn := testenv.MySQLDatabase(t, func(dsn string) (*sql.DB, error) { return sql.Open("mysql", dsn) }, "")
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, q := range []string{"CREATE TABLE tenants (name VARCHAR(64), `schema` VARCHAR(64), max_conns INT)",
		"INSERT INTO tenants VALUES ('m2', 'db2', 5), ('m1', 'db1', NULL)"} {
		if _, err := db.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	c, err := Load(Source{Name: "f.yaml", YAML: fmt.Appendf(nil, "database: { dialect: mysql, dsn: %q }\ntenants-query: 'SELECT * FROM tenants'\n", dsn)})
	if err != nil {
		t.Fatal(err)
	}
	got, err := c.ResolveTenants(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Name != "m1" || got[0].Schema != "db1" || got[1].MaxConns != 5 {
		t.Fatalf("tenants: %+v", got)
	}
}

// TestResolveTenantsHidesPassword: a tenants-query that cannot connect
// names the server, never the password of database.dsn.
func TestResolveTenantsHidesPassword(t *testing.T) {
	t.Parallel()
	const canary = "Canary-PW-77z"
	c, err := Load(Source{Name: "f.yaml", YAML: []byte("database: { dialect: postgres, dsn: 'postgres://u:" + canary +
		"@127.0.0.1:1/db?connect_timeout=2' }\ntenants-query: SELECT name FROM t\n")})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.ResolveTenants(context.Background())
	if err == nil || strings.Contains(err.Error(), canary) || !strings.Contains(err.Error(), "tenants-query") {
		t.Fatalf("error %v", err)
	}
}

package config

import (
	"errors"
	"strings"
	"testing"
)

// pgWAL is the head of a file in WAL mode with a nats sender, for the
// tenants' WAL tests; %s is the rest of database.
const pgWAL = "senders: { n: { type: nats } }\ndatabase: { dialect: postgres, dsn: 'postgres://u@h/db', source: wal"

// TestTenantSlots (docs/multi-tenant.md, "WAL mode"): ForTenant gives each
// tenant its own slot: database.wal.slot with {tenant} replaced, else the
// slot (set or default) followed by _ and the tenant's name; a
// publication's {tenant} is replaced too. In table mode nothing changes.
func TestTenantSlots(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, db, tenant string
		slot, pub        string
	}{
		{"default", "", "{ name: acme, dsn-env: ACME }", "txbox_slot_acme", "txbox_pub"},
		{"default with database.schema", ", schema: billing", "{ name: acme, dsn-env: ACME }", "billing_txbox_slot_acme", "billing_txbox_pub"},
		{"default with the tenant's schema", ", schema: billing", "{ name: acme, dsn-env: ACME, schema: s1 }", "s1_txbox_slot_acme", "s1_txbox_pub"},
		{"default with a table prefix", ", table-prefix: ob_", "{ name: acme, dsn: 'postgres://h/a' }", "ob_slot_acme", "ob_pub"},
		{"a slot without {tenant}", ", wal: { slot: relay, publication: events }", "{ name: acme, dsn-env: ACME }", "relay_acme", "events"},
		{"{tenant}", ", wal: { slot: 'txbox_{tenant}_slot', publication: 'pub_{tenant}' }", "{ name: acme, dsn-env: ACME }", "txbox_acme_slot", "pub_acme"},
		{"{tenant} alone", ", wal: { slot: '{tenant}' }", "{ name: acme, dsn-env: ACME }", "acme", "txbox_pub"},
		// The tenants in schemas of database.dsn share one slot and one
		// publication.
		{"schema tenant", "", "{ name: globex, schema: globex }", "txbox_slot", "txbox_pub"},
		{"schema tenant with database.schema", ", schema: billing", "{ name: globex, schema: globex }", "billing_txbox_slot", "billing_txbox_pub"},
		{"schema tenant with names", ", wal: { slot: relay, publication: events }", "{ name: globex, schema: globex }", "relay", "events"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c, err := Load(Source{Name: "f.yaml", YAML: []byte(pgWAL + tc.db + " }\ntenants: [" + tc.tenant + "]\n")})
			if err != nil {
				t.Fatal(err)
			}
			if got := c.TenantSlot(c.Tenants[0]); got != tc.slot {
				t.Errorf("TenantSlot %q, want %q", got, tc.slot)
			}
			tcfg, err := c.ForTenant(c.Tenants[0], 1)
			if err != nil {
				t.Fatal(err)
			}
			if w := tcfg.effectiveWAL(); w.Slot != tc.slot || w.Publication != tc.pub {
				t.Errorf("the tenant's slot %q and publication %q, want %q and %q", w.Slot, w.Publication, tc.slot, tc.pub)
			}
			if shared := strings.Contains(tc.tenant, "schema:") && !strings.Contains(tc.tenant, "dsn"); tcfg.postgresWAL().Shared != shared {
				t.Errorf("the tenant's WAL Shared %v, want %v", tcfg.postgresWAL().Shared, shared)
			}
			// config print shows the pattern, the name as {tenant}.
			shown := ""
			for _, st := range c.Settings() {
				if st.Path == "database.wal.slot" {
					shown = st.Value
				}
			}
			if want := strings.ReplaceAll(tc.slot, "acme", TenantPlaceholder); shown != want && !strings.Contains(tc.tenant, "schema") {
				t.Errorf("Settings' database.wal.slot %q, want %q", shown, want)
			}
		})
	}
	c, err := Load(Source{Name: "f.yaml", YAML: []byte(pgTenants + "tenants: [{ name: acme, dsn-env: ACME }]\n")})
	if err != nil {
		t.Fatal(err)
	}
	if tcfg, err := c.ForTenant(c.Tenants[0], 1); err != nil || tcfg.Database.WAL != (WAL{}) {
		t.Errorf("table mode: the tenant's database.wal %+v (%v), want unset", tcfg.Database.WAL, err)
	}
}

// TestTenantsWALRejects: in WAL mode a schema tenant with {tenant} in the
// slot or publication (the schemas share one), a tenant whose slot
// would be no valid slot name, two tenants on one slot, and {tenant} in
// the slot without tenants are errors at their key path.
func TestTenantsWALRejects(t *testing.T) {
	t.Parallel()
	long := "a" + strings.Repeat("b", 59)
	for _, tc := range []struct{ name, yaml, want string }{
		{"schema tenant with {tenant} in the slot", pgWAL + ", wal: { slot: 's_{tenant}' } }\ntenants: [{ name: acme, dsn-env: ACME }, { name: globex, schema: globex }]",
			`tenants[1].schema: the tenants in schemas of database.dsn share one slot and one publication in WAL mode, and database.wal.slot ("s_{tenant}") holds {tenant}`},
		{"slot too long", pgWAL + " }\ntenants: [{ name: " + long + ", dsn-env: ACME }]",
			`tenants[0].name: the tenant's WAL slot "txbox_slot_` + long + `" (71 bytes) is not 1 to 63 lower-case letters, digits and underscores: shorten the name, or set a shorter database.wal.slot (with {tenant} where the name goes)`},
		{"publication too long", pgWAL + ", wal: { slot: 's_{tenant}', publication: 'publication_of_{tenant}' } }\ntenants: [{ name: " + long + ", dsn-env: ACME }]",
			`tenants[0].name: the tenant's WAL publication "publication_of_` + long + `" (75 bytes)`},
		{"bad slot template", pgWAL + ", wal: { slot: 'Slot_{tenant}' } }\ntenants: [{ name: acme, dsn-env: ACME }]",
			`database.wal.slot: must be 1 to 63 lower-case letters, digits and underscores (and {tenant} with tenants), not "Slot_{tenant}"`},
		{"{tenant} without tenants", pgWAL + ", wal: { slot: 's_{tenant}' } }",
			"database.wal.slot: {tenant} is only replaced for tenants, and neither tenants nor tenants-query is configured"},
		{"two tenants on one slot", pgWAL + " }\ntenants: [{ name: txbox_slot_x, dsn-env: A, schema: a }, { name: x, dsn-env: B, schema: a_txbox_slot }]",
			`tenants[1].name: its WAL slot "a_txbox_slot_txbox_slot_x" is also tenants[0]'s: slots are one namespace per PostgreSQL cluster`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := Load(Source{Name: "f.yaml", YAML: []byte(tc.yaml)})
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v does not contain %q", err, tc.want)
			}
		})
	}

	// tenants-query's rows and ForTenant follow the same rules.
	c, err := Load(Source{Name: "f.yaml", YAML: []byte(pgWAL + ", wal: { publication: 'p_{tenant}' } }\ntenants-query: SELECT name, schema FROM t\n")})
	if err != nil {
		t.Fatal(err)
	}
	_, err = tenantsFromRows([]string{"name", "schema"}, [][]*string{{new("globex"), new("globex")}}, c.checkTenant)
	if err == nil || !strings.Contains(err.Error(), "tenants-query row 1: schema: the tenants in schemas of database.dsn share one slot and one publication in WAL mode, and database.wal.publication") {
		t.Errorf("a schema row in WAL mode: %v", err)
	}
	if _, err := c.ForTenant(Tenant{Name: long, DSNEnv: "A"}, 1); err == nil || !strings.Contains(err.Error(), `tenant "`+long+`".name: the tenant's WAL slot`) {
		t.Errorf("ForTenant of a tenant whose slot is too long: %v", err)
	}
}

// TestTenantsWALSharedSlot: the tenants in schemas of database.dsn share
// one slot without a clash, next to tenants with databases of their own.
func TestTenantsWALSharedSlot(t *testing.T) {
	t.Parallel()
	c, err := Load(Source{Name: "f.yaml", YAML: []byte(pgWAL + " }\ntenants: [{ name: acme, dsn-env: ACME }, { name: globex, schema: globex }, { name: initech, schema: initech }]\n")})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"txbox_slot_acme", "txbox_slot", "txbox_slot"}
	for i, tn := range c.Tenants {
		if got := c.TenantSlot(tn); got != want[i] {
			t.Errorf("tenant %s: slot %q, want %q", tn.Name, got, want[i])
		}
	}
}

package config

import (
	"fmt"
	"strings"

	"github.com/txbox/txbox/store/postgres"
)

// WAL mode with tenants (docs/multi-tenant.md, "WAL mode"): each tenant
// with a database of its own streams its own replication slot, created in
// its database by `txbox migrate`. Slot names are one namespace per
// PostgreSQL cluster, and tenants' databases often share a cluster, so
// every tenant's slot gets a name of its own (TenantSlot). A tenant in a
// schema of database.dsn is refused in WAL mode: the schemas of one
// database would share one slot, which txbox does not do yet.

// TenantSlot returns the replication slot of tenant t in WAL mode:
// database.wal.slot with {tenant} replaced by t's name when it holds
// {tenant}, else database.wal.slot followed by "_" and t's name. With
// database.wal.slot unset, that is its default for the tenant's schema
// and table prefix: "txbox_slot_acme", or "billing_txbox_slot_acme" for
// a tenant whose tables are in schema billing. The name is not checked
// (the tenant's check is: a slot of more than 63 bytes is an error at the
// tenant's name).
func (c *Config) TenantSlot(t Tenant) string {
	slot := c.Database.WAL.Slot
	if slot == "" {
		schema := c.Database.Schema
		if t.Schema != "" {
			schema = t.Schema
		}
		slot = postgres.WALConfig{}.WithDefaults(schema, c.Database.TablePrefix).Slot
	}
	if strings.Contains(slot, TenantPlaceholder) {
		return strings.ReplaceAll(slot, TenantPlaceholder, t.Name)
	}
	return slot + "_" + t.Name
}

// tenantPublication returns the publication of tenant t in WAL mode:
// database.wal.publication with {tenant} replaced by t's name. A
// publication belongs to one database, so tenants with databases of their
// own need no names of their own; unset, it stays unset (the driver's
// default for the tenant's schema).
func (c *Config) tenantPublication(t Tenant) string {
	return strings.ReplaceAll(c.Database.WAL.Publication, TenantPlaceholder, t.Name)
}

// checkTenantWAL returns what is wrong with t in WAL mode: a schema of
// database.dsn (not supported yet), or a slot or publication name that
// the tenant's name makes invalid (too long).
func (c *Config) checkTenantWAL(t Tenant) []tenantProblem {
	if c.Database.Source != SourceWAL {
		return nil
	}
	if t.DSN == "" && t.DSNEnv == "" {
		return []tenantProblem{{"schema", "a tenant in a schema of database.dsn is not supported in WAL mode (database.source: wal) yet; " +
			"a tenant with a database of its own (dsn or dsn-env) is (docs/multi-tenant.md, \"WAL mode\")"}}
	}
	var out []tenantProblem
	for _, n := range []struct{ key, name string }{{"slot", c.TenantSlot(t)}, {"publication", c.tenantPublication(t)}} {
		if n.name != "" && !validSlotName(n.name) {
			out = append(out, tenantProblem{"name", fmt.Sprintf("the tenant's WAL %s %q (%d bytes) is not 1 to 63 lower-case letters, digits and underscores: "+
				"shorten the name, or set a shorter database.wal.%s (with {tenant} where the name goes)", n.key, n.name, len(n.name), n.key)})
		}
	}
	return out
}

// slotClash returns two tenants of ts, i before j, whose WAL slots would
// have the same name, and that name; "" when none do or not in WAL mode.
func (c *Config) slotClash(ts []Tenant) (i, j int, slot string) {
	if c.Database.Source != SourceWAL {
		return 0, 0, ""
	}
	seen := make(map[string]int, len(ts))
	for j, t := range ts {
		s := c.TenantSlot(t)
		if i, dup := seen[s]; dup && ts[i].Name != t.Name {
			return i, j, s
		}
		seen[s] = j
	}
	return 0, 0, ""
}

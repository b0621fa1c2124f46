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
// every such tenant's slot gets a name of its own (TenantSlot). The
// tenants in schemas of database.dsn share one slot and one publication,
// database.wal.slot and database.wal.publication as configured: one
// replication connection streams it for all of them, and each message's
// prefix names its schema (postgres.WALConfig.Shared).

// SharesWALSlot reports whether the configuration is a tenant's (ForTenant)
// whose WAL slot the schemas of database.dsn share.
func (c *Config) SharesWALSlot() bool { return c.walShared }

// inSchema reports whether t is a tenant in a schema of database.dsn.
func (t Tenant) inSchema() bool { return t.DSN == "" && t.DSNEnv == "" }

// TenantSlot returns the replication slot of tenant t in WAL mode. For a
// tenant in a schema of database.dsn, the slot its schema shares with the
// others: database.wal.slot, by default "txbox_slot" (with database.schema
// and the table prefix as for the file's own outbox). For a tenant with a
// database of its own: database.wal.slot with {tenant} replaced by t's name when it holds
// {tenant}, else database.wal.slot followed by "_" and t's name. With
// database.wal.slot unset, that is its default for the tenant's schema
// and table prefix: "txbox_slot_acme", or "billing_txbox_slot_acme" for
// a tenant whose tables are in schema billing. The name is not checked
// (the tenant's check is: a slot of more than 63 bytes is an error at the
// tenant's name).
func (c *Config) TenantSlot(t Tenant) string {
	if t.inSchema() {
		return c.sharedWAL().Slot
	}
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
// default for the tenant's schema). The tenants in schemas of
// database.dsn share database.wal.publication, by default "txbox_pub".
func (c *Config) tenantPublication(t Tenant) string {
	if t.inSchema() {
		return c.sharedWAL().Publication
	}
	return strings.ReplaceAll(c.Database.WAL.Publication, TenantPlaceholder, t.Name)
}

// checkTenantWAL returns what is wrong with t in WAL mode: a tenant in a
// schema while database.wal.slot or publication holds {tenant} (the
// schemas share one slot), or a slot or publication name that the
// tenant's name makes invalid (too long).
func (c *Config) checkTenantWAL(t Tenant) []tenantProblem {
	if c.Database.Source != SourceWAL {
		return nil
	}
	if t.inSchema() {
		for _, n := range []struct{ key, name string }{{"slot", c.Database.WAL.Slot}, {"publication", c.Database.WAL.Publication}} {
			if key, name := n.key, n.name; strings.Contains(name, TenantPlaceholder) {
				return []tenantProblem{{"schema", fmt.Sprintf("the tenants in schemas of database.dsn share one slot and one publication in WAL mode, "+
					"and database.wal.%s (%q) holds %s, which gives each tenant its own: a slot of their own works for tenants with a database of their own (dsn or dsn-env) only; "+
					"take %s out of database.wal.%s, or give the tenant a database (docs/multi-tenant.md, \"WAL mode\")", key, name, TenantPlaceholder, TenantPlaceholder, key)}}
			}
		}
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
		// The schemas of database.dsn share their slot on purpose.
		if i, dup := seen[s]; dup && ts[i].Name != t.Name && !(t.inSchema() && ts[i].inSchema()) {
			return i, j, s
		}
		seen[s] = j
	}
	return 0, 0, ""
}

// sharedWAL is database.wal with the slot and the publication that the
// tenants in schemas of database.dsn share: as configured, or the
// driver's defaults for database.schema and the table prefix.
func (c *Config) sharedWAL() postgres.WALConfig {
	return postgres.WALConfig{Slot: c.Database.WAL.Slot, Publication: c.Database.WAL.Publication}.WithDefaults(c.Database.Schema, c.Database.TablePrefix)
}

package main

import (
	"context"
	"fmt"
	"strconv"
	"text/tabwriter"

	"github.com/txbox/txbox/config"
	"github.com/txbox/txbox/relay"
)

// connectDatabase runs the --connect checks of database.dsn: it connects,
// checks WAL mode and the routes removed from the file, and returns types
// with those that have rows in the outbox. With tenants, database.dsn
// need hold no outbox of its own (each tenant's database is checked by
// tenants): only the connection is checked.
func (c *checker) connectDatabase(ctx context.Context, types []string) ([]string, error) {
	st, err := checkDatabase(ctx, c.cfg, c.e, c.stderr, c.log, c.timeout)
	if err != nil {
		return nil, err
	}
	defer st.Close()
	if c.cfg.HasTenants() {
		return types, nil
	}
	dbWarnings, err := databaseWarnings(ctx, c.cfg, st, c.e, c.timeout)
	if err != nil {
		return nil, err
	}
	c.warnings = append(c.warnings, dbWarnings...)
	return withDatabaseTypes(ctx, c.cfg, st, types)
}

// tenants prints the TENANT table of a configuration with tenants: each
// tenant, where its tables are, its pool size and in WAL mode its slot.
// Without --connect these are the tenants list's, and tenants-query is
// said not to have run; with it, the tenants are resolved (the query run)
// and each tenant's database is opened and pinged, and its schema looked
// up (and in WAL mode its stream checked), counting the failures.
func (c *checker) tenants(ctx context.Context, w *tabwriter.Writer) error {
	cfg := c.cfg
	if !cfg.HasTenants() {
		return nil
	}
	list := cfg.Tenants
	if c.connect {
		var err error
		c.progress("tenants: resolving (timeout %s)", c.timeout)
		rctx, cancel := context.WithTimeout(ctx, c.timeout)
		list, err = cfg.ResolveTenants(rctx)
		cancel()
		if err != nil {
			return fmt.Errorf("tenants: %w", config.Scrub(err, c.e.secrets))
		}
	}
	wal := cfg.Database.Source == config.SourceWAL
	slotCol := ""
	if wal {
		slotCol = "\tWAL SLOT"
	}
	fmt.Fprintf(w, "\nTENANT\tTABLES\tMAX-CONNS%s\tSTATUS\n", slotCol)
	var warnings []string
	for _, t := range list {
		status := "not checked (use --connect)"
		tc, err := cfg.ForTenant(t, len(list))
		switch {
		case err != nil:
			status = "ERROR: " + err.Error()
			c.tenantsFailed++
		case c.connect:
			status = c.tenant(ctx, tc, t)
		}
		conns := "driver default"
		if tc != nil && tc.Database.MaxConns > 0 {
			conns = strconv.Itoa(tc.Database.MaxConns)
		}
		slot := ""
		if wal {
			slot = "\t" + cfg.TenantSlot(t)
			if tc != nil && tc.SharesWALSlot() {
				slot += " (shared)"
			}
		}
		fmt.Fprintf(w, "%s\t%s\t%s%s\t%s\n", t.Name, t.Where(), conns, slot, status)
		if warn := tenantPoolWarning(t.Name, tc); warn != "" {
			warnings = append(warnings, warn)
		}
	}
	if err := w.Flush(); err != nil {
		return err
	}
	for _, warn := range warnings {
		fmt.Fprintln(c.e.stdout, warn)
	}
	if !c.connect && cfg.TenantsQuery != "" {
		fmt.Fprintln(c.e.stdout, "not verified: tenants-query (run with --connect); the pool shares above are over the tenants list alone")
	}
	return nil
}

// tenant opens and pings the database of tenant t (its configuration tc)
// and checks that its schema exists and, in WAL mode, the checks of its
// stream (streamChecks: wal_level, its slot, synchronous_standby_names,
// the failover verdict as a warning), and returns its status.
func (c *checker) tenant(ctx context.Context, tc *config.Config, t config.Tenant) string {
	// The schema is the tenant's, or database.schema that a tenant with
	// a database of its own keeps.
	key := "database.schema"
	if t.Schema != "" {
		key = c.tenantKey(t) + ".schema"
	}
	err := c.run(ctx, "tenant "+t.Name, func(ctx context.Context) error {
		st, err := tc.OpenStore(ctx, c.e.getenv, c.log)
		if err != nil {
			return err
		}
		defer st.Close()
		if err := st.Ping(ctx); err != nil {
			return err
		}
		if err := schemaExists(ctx, tc, st, key); err != nil || tc.Database.Source != config.SourceWAL {
			return err
		}
		_, warnings, err := streamChecks(ctx, st, c.timeout)
		if err != nil {
			return fmt.Errorf("source wal: %w", err)
		}
		for _, w := range warnings {
			c.warnings = append(c.warnings, "tenant "+t.Name+": "+w)
		}
		return nil
	})
	if err != nil {
		c.tenantsFailed++
		return "ERROR: " + err.Error()
	}
	if tc.Database.Source == config.SourceWAL {
		return "ok: connected; wal_level logical, the slot present and not invalidated, synchronous_standby_names clear"
	}
	return "ok: connected"
}

// tenantKey names tenant t in errors: tenants[i] for an entry of the
// list, else the tenants-query row's name.
func (c *checker) tenantKey(t config.Tenant) string {
	for i, s := range c.cfg.Tenants {
		if s.Name == t.Name {
			return fmt.Sprintf("tenants[%d]", i)
		}
	}
	return fmt.Sprintf("tenants-query tenant %q", t.Name)
}

// schemaExists checks that the schema of a tenant's configuration tc
// exists in its database (on MySQL, the database of that name): a
// schema tenant's schema is made by `txbox migrate`, and a relay started
// before it would fail each poll. key is the schema's key path.
func schemaExists(ctx context.Context, tc *config.Config, st *config.Store, key string) error {
	schema := tc.Database.Schema
	if schema == "" {
		return nil
	}
	var n int
	var err error
	switch {
	case st.Pool != nil:
		err = st.Pool.QueryRow(ctx, "SELECT count(*) FROM pg_namespace WHERE nspname = $1", schema).Scan(&n)
	case tc.Database.Dialect == config.DialectMySQL && st.DB != nil:
		err = st.DB.QueryRowContext(ctx, "SELECT COUNT(*) FROM information_schema.schemata WHERE schema_name = ?", schema).Scan(&n)
	default:
		return nil
	}
	if err != nil {
		return fmt.Errorf("%s: look up schema %q: %w", key, schema, err)
	}
	if n == 0 {
		return fmt.Errorf("%s: schema %q does not exist (run txbox migrate)", key, schema)
	}
	return nil
}

// tenantPoolWarning warns when the pool of a tenant (configuration tc) is
// smaller than its lock claims need to have every batch in flight
// (Config.LockConns: their in-flight bounds and the connections kept for
// everything else): its drain then runs with fewer batches in flight,
// down to one (docs/multi-tenant.md, "Fairness").
func tenantPoolWarning(name string, tc *config.Config) string {
	if tc == nil || tc.Database.MaxConns <= 0 {
		return ""
	}
	need := tc.LockConns()
	if need <= tc.Database.MaxConns {
		return ""
	}
	return fmt.Sprintf("warning: tenant %s: a pool of %d connections is below the %d its lock claims need to have every batch in flight "+
		"(their in-flight bounds + %d for everything else): raise database.max-conns or give the tenant max-conns (docs/multi-tenant.md)",
		name, tc.Database.MaxConns, need, relay.LockReserve)
}

package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/txbox/txbox/config"
	"github.com/txbox/txbox/store"
	"github.com/txbox/txbox/store/postgres"
)

// streamSetup is the part of a WAL-mode driver that migrate uses: the
// PostgreSQL driver creates the publication and the slot (a failover slot
// on PostgreSQL 17+), and drops the slot (docs/operations.md, "WAL mode").
type streamSetup interface {
	CreateStreamWith(ctx context.Context, p postgres.CreateStreamParams) (*postgres.StreamSetup, error)
	DropStream(ctx context.Context) error
	WAL() postgres.WALConfig
}

func runMigrate(ctx context.Context, e *env, args []string) error {
	if len(args) > 0 && args[0] == "get" {
		return runMigrateGet(ctx, e, args[1:])
	}
	fs := newFlagSet(e, "migrate", "migrate [--config txbox.yaml] [--dsn DSN] [--set key=value]... [--tenant NAME] [--stream-timeout 1m] [--require-failover-safe] [--drop-stream]\n   or: txbox "+migrateGetUsage)
	var cf configFlags
	cf.register(fs, e)
	cf.registerTenant(fs, true)
	streamTimeout := fs.Duration("stream-timeout", time.Minute, "WAL mode: how long creating or adopting the replication slot may wait for the transactions open in the cluster, "+
		"and how long migrate waits for the standbys' copies of a failover slot")
	requireSafe := fs.Bool("require-failover-safe", false, "WAL mode: fail unless the slot is shown to survive a failover (PostgreSQL 17+, every standby with a synced, persistent copy); "+
		"without it migrate only warns")
	dropStream := fs.Bool("drop-stream", false, "WAL mode: drop the replication slot (after every emit in flight) instead of migrating; the publication stays")
	if err := parse(fs, args); err != nil {
		return err
	}
	cfg, err := cf.load(e)
	if err != nil {
		return err
	}
	// Migrating the built-in default would create ./txbox.db: only when
	// asked (a file, the environment or a flag names the database).
	if err := cf.requireNamed("`txbox migrate --dialect sqlite` creates " + config.DefaultSQLitePath); err != nil {
		return err
	}
	params := postgres.CreateStreamParams{Timeout: *streamTimeout, RequireFailoverSafe: *requireSafe}
	if cfg.HasTenants() && cf.tenant == "" {
		if *dropStream {
			return usagef("--drop-stream drops one tenant's slot: name it with --tenant")
		}
		return migrateTenants(ctx, e, cfg, params)
	}
	if *dropStream && cfg.SharesWALSlot() {
		w, prefix := cfg.Database.WAL, cfg.Database.TablePrefix
		if prefix == "" {
			prefix = store.DefaultTablePrefix
		}
		return usagef("--drop-stream: tenant %s is in a schema of database.dsn, and those tenants share the slot %s: dropping it would stop them all; "+
			"to take this tenant's schema off the slot, run ALTER PUBLICATION %s DROP TABLE %s.%soutbox and DELETE FROM %s.%swal_state (docs/multi-tenant.md, \"WAL mode\")",
			cf.tenant, w.Slot, w.Publication, cfg.Database.Schema, prefix, cfg.Database.Schema, prefix)
	}
	st, err := cfg.OpenStore(ctx, e.getenv, cfg.NewLogger(e.stderr))
	if err != nil {
		return err
	}
	defer st.Close()
	setup, wal := st.Driver.(streamSetup)
	wal = wal && cfg.Database.Source == config.SourceWAL
	if *dropStream {
		if !wal {
			return errors.New("migrate: --drop-stream needs database.source: wal")
		}
		if err := setup.DropStream(ctx); err != nil {
			return err
		}
		fmt.Fprintln(e.stdout, "dropped the replication slot; emits fail until `txbox migrate` creates it again")
		return nil
	}
	if err := st.Migrate(ctx); err != nil {
		return err // the driver names the operation
	}
	v := ""
	if sv, ok := st.Driver.(interface {
		SchemaVersion(context.Context) (int, error)
	}); ok {
		if n, err := sv.SchemaVersion(ctx); err == nil {
			v = fmt.Sprintf(", schema version %d", n)
		}
	}
	fmt.Fprintf(e.stdout, "migrated %s%s\n", st.Dialect(), v)
	if wal {
		// Outside any writing transaction: creating a slot waits for every
		// transaction open in the cluster.
		return createStream(ctx, e, setup, params, "")
	}
	return nil
}

// createStream creates (or adopts) the publication and the slot of a
// WAL-mode store, outside any writing transaction (creating a slot waits
// for every transaction open in the cluster), and prints what it did;
// tenant, when set, names the tenant in each line.
func createStream(ctx context.Context, e *env, setup streamSetup, p postgres.CreateStreamParams, tenant string) error {
	res, err := setup.CreateStreamWith(ctx, p)
	if res != nil {
		printStreamSetup(e, res, tenant, setup.WAL().Slot)
	}
	return err
}

// printStreamSetup says what migrate did to the slot and whether the
// slot survives a failover; each warning on a line of its own. With a
// tenant, each line names it, and a first line names its slot.
func printStreamSetup(e *env, res *postgres.StreamSetup, tenant, slot string) {
	head := "WAL mode: "
	if tenant != "" {
		head = "tenant " + tenant + ": WAL mode: "
		fmt.Fprintf(e.stdout, "%sslot %s\n", head, slot)
	}
	for _, n := range res.Notes {
		fmt.Fprintf(e.stdout, "%s%s\n", head, n)
	}
	fmt.Fprintf(e.stdout, "%sthe publication and the replication slot are in place\n", head)
	f := res.Failover
	line := head + "failover: " + failoverText(f)
	if res.Waited > 0 {
		line += fmt.Sprintf(" (checked after %s)", res.Waited.Round(time.Millisecond))
	}
	fmt.Fprintln(e.stdout, line)
	for _, w := range res.Warnings {
		fmt.Fprintf(e.stdout, "warning: %s%s\n", strings.TrimSuffix(head, "WAL mode: "), w)
	}
}

// failoverText renders a failover verdict for people: the verdict in
// capitals unless safe, then why.
func failoverText(f store.StreamFailover) string {
	switch f.Verdict {
	case "":
		return "not judged"
	case store.FailoverSafe:
		return "safe: " + f.Note
	case store.FailoverNoStandby:
		return "no standby: " + f.Note
	}
	return strings.ToUpper(f.Verdict) + ": " + f.Note
}

// migrateTenants migrates every tenant of cfg (docs/multi-tenant.md), one
// after the other: a tenant that fails is reported and the others are
// migrated still; the command fails when any did.
func migrateTenants(ctx context.Context, e *env, cfg *config.Config, p postgres.CreateStreamParams) error {
	all, err := cfg.ResolveTenants(ctx)
	if err != nil {
		return err
	}
	log := cfg.NewLogger(e.stderr)
	var failed []string
	for _, t := range all {
		if err := migrateTenant(ctx, e, cfg, t, len(all), log, p); err != nil {
			fmt.Fprintf(e.stderr, "tenant %s: %v\n", t.Name, err)
			failed = append(failed, t.Name)
		}
	}
	if len(failed) > 0 {
		return fmt.Errorf("migrate: %d of %d tenants failed: %s", len(failed), len(all), strings.Join(failed, ", "))
	}
	return nil
}

// migrateTenant migrates one tenant's tables, and in WAL mode creates its
// publication and slot (p).
func migrateTenant(ctx context.Context, e *env, cfg *config.Config, t config.Tenant, count int, log *slog.Logger, p postgres.CreateStreamParams) error {
	tcfg, err := cfg.ForTenant(t, count)
	if err != nil {
		return err
	}
	st, err := tcfg.OpenStore(ctx, e.getenv, log.With("tenant", t.Name))
	if err != nil {
		return err
	}
	defer st.Close()
	if err := st.Migrate(ctx); err != nil {
		return err
	}
	v := ""
	if sv, ok := st.Driver.(store.SchemaVersioner); ok {
		if n, err := sv.SchemaVersion(ctx); err == nil {
			v = fmt.Sprintf(", schema version %d", n)
		}
	}
	fmt.Fprintf(e.stdout, "migrated tenant %s: %s%s\n", t.Name, st.Dialect(), v)
	if setup, ok := st.Driver.(streamSetup); ok && tcfg.Database.Source == config.SourceWAL {
		return createStream(ctx, e, setup, p, t.Name)
	}
	return nil
}

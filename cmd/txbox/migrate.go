package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/txbox/txbox/config"
)

// streamSetup is the part of a WAL-mode driver that migrate uses: the
// PostgreSQL driver creates the publication and the slot, and drops the
// slot (docs/operations.md, "WAL mode").
type streamSetup interface {
	CreateStream(ctx context.Context, timeout time.Duration) error
	DropStream(ctx context.Context) error
}

func runMigrate(ctx context.Context, e *env, args []string) error {
	fs := newFlagSet(e, "migrate", "migrate [--config txbox.yaml] [--dsn DSN] [--set key=value]... [--stream-timeout 1m] [--drop-stream]")
	var cf configFlags
	cf.register(fs, e)
	streamTimeout := fs.Duration("stream-timeout", time.Minute, "WAL mode: how long creating the replication slot may wait for the transactions open in the cluster")
	dropStream := fs.Bool("drop-stream", false, "WAL mode: drop the replication slot (after every emit in flight) instead of migrating; the publication stays")
	if err := parse(fs, args); err != nil {
		return err
	}
	cfg, err := cf.load(e)
	if err != nil {
		return err
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
		if err := setup.CreateStream(ctx, *streamTimeout); err != nil {
			return err
		}
		fmt.Fprintln(e.stdout, "WAL mode: the publication and the replication slot are in place")
	}
	return nil
}

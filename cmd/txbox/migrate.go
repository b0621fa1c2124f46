package main

import (
	"context"
	"fmt"
)

func runMigrate(ctx context.Context, e *env, args []string) error {
	fs := newFlagSet(e, "migrate", "migrate [--config txbox.yaml] [--dsn DSN] [--set key=value]...")
	var cf configFlags
	cf.register(fs, e)
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
	return nil
}

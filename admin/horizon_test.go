package admin_test

import (
	"testing"
	"time"

	"github.com/txbox/txbox/admin"
	"github.com/txbox/txbox/internal/storeharness"
	"github.com/txbox/txbox/internal/testenv"
	"github.com/txbox/txbox/store/postgres"
)

// TestOverviewNamesTheHorizonHolder: the overview names the oldest
// transaction that holds a transaction id (here one that read
// pg_current_xact_id() and stays open), which holds back the commit
// horizon, as horizon_holder and, for one release, as the deprecated
// fence_holder too (docs/upgrading.md); SQLite, which has no such horizon,
// names none.
func TestOverviewNamesTheHorizonHolder(t *testing.T) {
	t.Parallel()
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		b := setup(t, storeharness.Postgres(), nil)
		conn, err := b.store.(*postgres.Driver).Pool().Acquire(b.ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Release()
		app := testenv.UniqueName("pin_")
		if _, err := conn.Exec(b.ctx, `SELECT set_config('application_name', $1, false)`, app); err != nil {
			t.Fatal(err)
		}
		tx, err := conn.Begin(b.ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(b.ctx)
		var (
			pid int
			xid uint64
		)
		if err := tx.QueryRow(b.ctx, `SELECT pg_backend_pid(), pg_current_xact_id()::text::bigint`).Scan(&pid, &xid); err != nil {
			t.Fatal(err)
		}
		// On a shared server another test's transaction may be the
		// oldest for a while.
		var ov admin.Overview
		testenv.WaitFor(t, 2*time.Minute, "the pinning transaction named", func() bool {
			ov = admin.Overview{}
			b.getJSON("/api/v1/overview", &ov)
			return ov.HorizonHolder != nil && ov.HorizonHolder.PID == pid
		})
		if fh := ov.HorizonHolder; fh.XID != xid || fh.Application != app || fh.Name == "" || fh.State == "" {
			t.Fatalf("horizon holder %+v, want xid %d, application %s", fh, xid, app)
		}
		if old := ov.FenceHolder; old == nil || *old != *ov.HorizonHolder {
			t.Fatalf("fence_holder %+v, want the horizon holder %+v under its former name", old, ov.HorizonHolder)
		}
		if !ov.HorizonWatched {
			t.Fatal("horizon_watched = false with a horizon holder reported")
		}
		// Without an ordered type (NoCommitHorizon, as txbox relay sets
		// it), the same held horizon is not reported, and the overview
		// says it did not look, so the dashboard cannot say "not held".
		quiet := setup(t, storeharness.Postgres(), func(c *admin.Config) { c.NoCommitHorizon = true })
		ov = admin.Overview{}
		quiet.getJSON("/api/v1/overview", &ov)
		if ov.HorizonHolder != nil || ov.FenceHolder != nil || ov.HorizonWatched {
			t.Fatalf("NoCommitHorizon: holder %+v, watched %v; want none, false", ov.HorizonHolder, ov.HorizonWatched)
		}
	})
	t.Run("sqlite", func(t *testing.T) {
		t.Parallel()
		b := setup(t, storeharness.SQLite(), nil)
		var ov admin.Overview
		b.getJSON("/api/v1/overview", &ov)
		if ov.HorizonHolder != nil || ov.FenceHolder != nil || ov.HorizonWatched {
			t.Fatalf("horizon holder %+v (fence_holder %+v, watched %v) on SQLite", ov.HorizonHolder, ov.FenceHolder, ov.HorizonWatched)
		}
	})
}

package main

import (
	"context"
	"database/sql"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/txbox/txbox/internal/storeharness"
	"github.com/txbox/txbox/internal/testenv"
)

// TestRelayServesTenantsWAL (issue 31, "WAL mode per tenant database"):
// one relay in WAL mode serves 3 tenant databases listed by tenants-query.
// `txbox migrate` creates a slot per tenant database, named by
// database.wal.slot's {tenant}; every event published to a tenant is
// streamed to the webhook with its tenant's txbox-tenant header. A tenant
// removed at run time stops streaming and its slot stays, inactive,
// keeping what is emitted meanwhile; added again, it resumes from the
// slot and delivers those events. A tenant added before its slot exists
// has its stream retried until `txbox migrate --tenant` creates it.
func TestRelayServesTenantsWAL(t *testing.T) {
	t.Parallel()
	admin := storeharness.PostgresAdmin(t)
	base := testenv.PostgresSchema(t, admin)
	uniq := testenv.UniqueName("")
	dbs := map[string]string{} // tenant → its database
	dsns := map[string]string{}
	for _, tn := range []string{"d1", "d2", "d3", "d4"} {
		db := fmt.Sprintf("txw_%s_%s", uniq, tn)
		if _, err := admin.Exec("CREATE DATABASE " + db); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _, _ = admin.Exec("DROP DATABASE IF EXISTS " + db + " WITH (FORCE)") })
		dbs[tn], dsns[tn] = db, strings.Replace(testenv.PostgresURL, "/test?", "/"+db+"?", 1)
	}
	slotPrefix := "txw_" + uniq + "_"
	// Runs before the databases' drops: a database with a slot cannot be
	// dropped.
	t.Cleanup(func() { dropSlots(t, admin, slotPrefix) })
	if _, err := admin.Exec(fmt.Sprintf(`CREATE TABLE %s.tenants (name text, dsn text)`, base)); err != nil {
		t.Fatal(err)
	}
	for _, tn := range []string{"d1", "d2", "d3"} {
		if _, err := admin.Exec(fmt.Sprintf(`INSERT INTO %s.tenants VALUES ($1, $2)`, base), tn, dsns[tn]); err != nil {
			t.Fatal(err)
		}
	}
	hook := newTenantHook(t)
	yml := fmt.Sprintf(`database: { dialect: postgres, dsn: %q, source: wal, wal: { slot: "%s{tenant}", sender-timeout: 4s } }
senders: { hooks: { type: webhook, url: %q } }
defaults: { polling: { min-delay: 5ms, max-delay: 200ms } }
events: { orders: {} }
relay: { shutdown-timeout: 10s }
metrics: { listen: "127.0.0.1:0" }
tenants-query: "SELECT name, dsn FROM %s.tenants"
tenants-interval: 1s
`, testenv.PostgresURL, slotPrefix, hook.srv.URL+"/in", base)
	cfgPath := filepath.Join(t.TempDir(), "txbox.yaml")
	if err := os.WriteFile(cfgPath, []byte(yml), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, _, errOut := runInProcess(t, nil, "migrate", "--config", cfgPath, "--drop-stream"); code != exitUsage || !strings.Contains(errOut, "name it with --tenant") {
		t.Fatalf("migrate --drop-stream without --tenant: %d %s", code, errOut)
	}
	// Before migrate, each tenant's slot is missing: the check names it.
	code, out, errOut := runInProcess(t, nil, "config", "check", "--config", cfgPath, "--connect")
	if code != exitFailure || !strings.Contains(errOut, "3 tenant(s) failed") || lineOf(out, "d1", slotPrefix+"d1", "ERROR: source wal: ", slotPrefix+"d1") == "" {
		t.Fatalf("config check --connect before migrate: %d\n%s\n%s", code, out, errOut)
	}
	code, out, errOut = runInProcess(t, nil, "migrate", "--config", cfgPath)
	if code != exitOK || strings.Count(out, "migrated tenant ") != 3 || !strings.Contains(out, "tenant d2: WAL mode: slot "+slotPrefix+"d2\n") ||
		strings.Count(out, "WAL mode: the publication and the replication slot are in place") != 3 {
		t.Fatalf("migrate: %d\n%s\n%s", code, out, errOut)
	}
	code, out, errOut = runInProcess(t, nil, "config", "check", "--config", cfgPath, "--connect")
	if code != exitOK || strings.Count(out, "ok: connected; wal_level logical, the slot present") != 3 ||
		lineOf(out, "d3", "database ", slotPrefix+"d3", "ok: connected") == "" {
		t.Fatalf("config check --connect: %d\n%s\n%s", code, out, errOut)
	}

	stderr, _, stop := startRelay(t, "--config", cfgPath, "--migrate")
	want := map[string]string{}
	for _, tn := range []string{"d1", "d2", "d3"} {
		publishTo(t, cfgPath, tn, 3, want)
	}
	testenv.WaitFor(t, 20*time.Second, "every tenant's events at the webhook", func() bool { ok, _ := hook.has(want); return ok })
	if _, wrong := hook.has(want); wrong != "" {
		t.Fatal(wrong)
	}
	var metricsAddr string
	testenv.WaitFor(t, 10*time.Second, "the metrics listener", func() bool {
		metricsAddr = servingAddr(stderr.String(), "/metrics")
		return metricsAddr != ""
	})
	testenv.WaitFor(t, 10*time.Second, "each tenant's stream streaming in /metrics", func() bool {
		_, body := httpGet(t, "http://"+metricsAddr+"/metrics")
		return strings.Contains(body, `txbox_stream_state{state="streaming",tenant="d1"} 1`) &&
			strings.Contains(body, `txbox_stream_state{state="streaming",tenant="d2"} 1`) && strings.Contains(body, `txbox_stream_state{state="streaming",tenant="d3"} 1`)
	})
	wantSlots := map[string]string{slotPrefix + "d1": dbs["d1"], slotPrefix + "d2": dbs["d2"], slotPrefix + "d3": dbs["d3"]}
	testenv.WaitFor(t, 10*time.Second, "a streamed slot in each tenant's database", func() bool {
		return maps.Equal(slots(t, admin, slotPrefix, true), wantSlots)
	})

	// d3 leaves: its stream stops, its slot stays and keeps what is
	// emitted meanwhile; the others deliver.
	if _, err := admin.Exec(fmt.Sprintf(`DELETE FROM %s.tenants WHERE name = 'd3'`, base)); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 10*time.Second, "d3 stopped", func() bool {
		return strings.Contains(grepLines(stderr.String(), `msg="tenant stopped"`), "tenant=d3\n")
	})
	delete(wantSlots, slotPrefix+"d3")
	testenv.WaitFor(t, 10*time.Second, "d3's slot inactive, the others streamed", func() bool {
		return maps.Equal(slots(t, admin, slotPrefix, true), wantSlots) && slots(t, admin, slotPrefix, false)[slotPrefix+"d3"] == dbs["d3"]
	})
	held := map[string]string{}
	for range 3 {
		held[emitSQL(t, dsns["d3"])] = "d3"
	}
	more := map[string]string{}
	publishTo(t, cfgPath, "d1", 2, more)
	testenv.WaitFor(t, 20*time.Second, "d1's events while d3 is away", func() bool { ok, _ := hook.has(more); return ok })
	hook.mu.Lock()
	for id := range held {
		if _, ok := hook.got[id]; ok {
			t.Errorf("event %s of the removed tenant d3 was delivered", id)
		}
	}
	hook.mu.Unlock()

	// d3 comes back: it resumes from its slot.
	if _, err := admin.Exec(fmt.Sprintf(`INSERT INTO %s.tenants VALUES ('d3', $1)`, base), dsns["d3"]); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 20*time.Second, "d3's events emitted while it was away", func() bool { ok, _ := hook.has(held); return ok })
	if _, wrong := hook.has(held); wrong != "" {
		t.Fatal(wrong)
	}

	// d4 is added before its slot exists: relay --migrate makes its
	// tables, not its slot, so its stream fails and is retried; once
	// `txbox migrate --tenant d4` made the slot, it streams and delivers.
	if _, err := admin.Exec(fmt.Sprintf(`INSERT INTO %s.tenants VALUES ('d4', $1)`, base), dsns["d4"]); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 10*time.Second, "d4's stream failing for its missing slot", func() bool {
		return lineOf(stderr.String(), "cannot open the stream; retrying", "tenant=d4", "the slot "+slotPrefix+"d4 does not exist: run txbox migrate") != ""
	})
	if code, out, errOut := runInProcess(t, nil, "migrate", "--config", cfgPath, "--tenant", "d4"); code != exitOK || !strings.Contains(out, "replication slot are in place") {
		t.Fatalf("migrate --tenant d4: %d\n%s\n%s", code, out, errOut)
	}
	late := map[string]string{}
	publishTo(t, cfgPath, "d4", 2, late)
	testenv.WaitFor(t, 20*time.Second, "d4's events once its slot exists", func() bool { ok, _ := hook.has(late); return ok })
	if _, wrong := hook.has(late); wrong != "" {
		t.Fatal(wrong)
	}
	if code := stop(); code != exitOK {
		t.Fatalf("relay exit %d: %s", code, grepLines(stderr.String(), "stop"))
	}
}

// slots returns the replication slots whose name starts with prefix and
// whose active flag is active, each with its database.
func slots(t *testing.T, admin *sql.DB, prefix string, active bool) map[string]string {
	t.Helper()
	rows, err := admin.Query(`SELECT slot_name, database FROM pg_replication_slots WHERE starts_with(slot_name, $1) AND active = $2`, prefix, active)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]string{}
	for rows.Next() {
		var name, db string
		if err := rows.Scan(&name, &db); err != nil {
			t.Fatal(err)
		}
		out[name] = db
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// dropSlots drops the replication slots whose name starts with prefix,
// ending their walsenders first (a relay stopped by the test's cleanup
// may still hold one).
func dropSlots(t *testing.T, admin *sql.DB, prefix string) {
	t.Helper()
	if !testenv.Within(15*time.Second, 100*time.Millisecond, func() bool {
		_, _ = admin.Exec(`SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE starts_with(slot_name, $1) AND active_pid IS NOT NULL`, prefix)
		_, err := admin.Exec(`SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE starts_with(slot_name, $1)`, prefix)
		return err == nil
	}) {
		t.Errorf("the slots %s* could not be dropped", prefix)
	}
}

// emitSQL emits an orders event in the database of dsn with the SQL
// function txbox_emit, as a plain-SQL producer does, and returns its id.
func emitSQL(t *testing.T, dsn string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var id string
	if err := conn.QueryRow(ctx, `SELECT txbox_emit('orders', 'k', '{}'::bytea)::text`).Scan(&id); err != nil {
		t.Fatal(err)
	}
	return id
}

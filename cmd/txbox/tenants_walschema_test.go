package main

import (
	"context"
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

// TestRelayServesSchemaTenantsWAL (issue 31, "Schema-per-tenant in WAL
// mode shares one slot"): tenants in schemas of database.dsn, listed by
// tenants-query, share one slot and one publication. `txbox migrate`
// creates the slot for the first schema and joins the others to it; one
// relay streams it over one replication connection and delivers each
// schema's events with its tenant's header, a transaction that emitted
// into two schemas included; a tenant with a database of its own streams
// its own slot next to them. A tenant removed at run time holds the slot
// back at its position: what is emitted into its schema meanwhile is
// delivered when it comes back. A tenant added before migrate joined it
// streams once `txbox migrate --tenant` did. Every event is delivered
// exactly once, with its own tenant, and nothing else arrives. Then the
// shared walsender is terminated: every schema tenant reconnects, nothing
// is lost, and only events from before the fault may arrive twice.
func TestRelayServesSchemaTenantsWAL(t *testing.T) {
	t.Parallel()
	admin := storeharness.PostgresAdmin(t)
	base := testenv.PostgresSchema(t, admin)
	uniq := testenv.UniqueName("")
	schemas := map[string]string{}
	for _, tn := range []string{"s1", "s2", "s3", "s4"} {
		schemas[tn] = testenv.PostgresSchema(t, admin)
	}
	// d1 is a tenant with a database of its own, next to the schemas: it
	// streams a slot of its own (slot_d1).
	d1db := fmt.Sprintf("txs_%s_d1", uniq)
	if _, err := admin.Exec("CREATE DATABASE " + d1db); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = admin.Exec("DROP DATABASE IF EXISTS " + d1db + " WITH (FORCE)") })
	d1dsn := strings.Replace(testenv.PostgresURL, "/test?", "/"+d1db+"?", 1)
	slot, pub := "txs_"+uniq+"_slot", "txs_"+uniq+"_pub"
	t.Cleanup(func() {
		dropSlots(t, admin, slot)
		_, _ = admin.Exec("DROP PUBLICATION IF EXISTS " + pub)
	})
	if _, err := admin.Exec(fmt.Sprintf(`CREATE TABLE %s.tenants (name text, schema text, dsn text)`, base)); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Exec(fmt.Sprintf(`INSERT INTO %s.tenants VALUES ('d1', NULL, $1)`, base), d1dsn); err != nil {
		t.Fatal(err)
	}
	addTenant := func(tn string) {
		t.Helper()
		if _, err := admin.Exec(fmt.Sprintf(`INSERT INTO %s.tenants VALUES ($1, $2)`, base), tn, schemas[tn]); err != nil {
			t.Fatal(err)
		}
	}
	for _, tn := range []string{"s1", "s2", "s3"} {
		addTenant(tn)
	}
	hook := newTenantHook(t)
	yml := fmt.Sprintf(`database: { dialect: postgres, dsn: %q, source: wal, wal: { slot: %s, publication: %s, sender-timeout: 4s } }
senders: { hooks: { type: webhook, url: %q } }
defaults: { polling: { min-delay: 5ms, max-delay: 200ms } }
events: { orders: {} }
relay: { shutdown-timeout: 10s }
tenants-query: "SELECT name, schema, dsn FROM %s.tenants"
tenants-interval: 1s
`, testenv.PostgresURL, slot, pub, hook.srv.URL+"/in", base)
	cfgPath := filepath.Join(t.TempDir(), "txbox.yaml")
	if err := os.WriteFile(cfgPath, []byte(yml), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := runInProcess(t, nil, "migrate", "--config", cfgPath)
	if code != exitOK || strings.Count(out, "migrated tenant ") != 4 || strings.Count(out, "WAL mode: created the slot "+slot)-strings.Count(out, "created the slot "+slot+"_") != 1 ||
		strings.Count(out, "joined the shared slot "+slot) != 2 || !strings.Contains(out, "tenant d1: WAL mode: created the slot "+slot+"_d1") {
		t.Fatalf("migrate: %d\n%s\n%s", code, out, errOut)
	}
	code, out, errOut = runInProcess(t, nil, "config", "check", "--config", cfgPath, "--connect")
	if code != exitOK || strings.Count(out, "ok: connected; wal_level logical, the slot present") != 4 ||
		lineOf(out, "s2", slot+" (shared)", "ok: connected") == "" || lineOf(out, "d1", slot+"_d1", "ok: connected") == "" {
		t.Fatalf("config check --connect: %d\n%s\n%s", code, out, errOut)
	}

	// Dropping the shared slot through one schema tenant is refused.
	if code, _, errOut := runInProcess(t, nil, "migrate", "--config", cfgPath, "--tenant", "s2", "--drop-stream"); code != exitUsage ||
		!strings.Contains(errOut, "tenant s2 is in a schema of database.dsn, and those tenants share the slot "+slot) {
		t.Fatalf("migrate --tenant s2 --drop-stream: %d %s", code, errOut)
	}

	stderr, _, stop := startRelay(t, "--config", cfgPath, "--migrate")
	all := map[string]string{}
	want := map[string]string{}
	for _, tn := range []string{"s1", "s2", "s3", "d1"} {
		publishTo(t, cfgPath, tn, 3, want)
	}
	// One transaction emits into two schemas.
	maps.Copy(want, emitAcross(t, schemas, "s1", "s2"))
	maps.Copy(all, want)
	testenv.WaitFor(t, 30*time.Second, "every tenant's events at the webhook", func() bool { ok, _ := hook.has(want); return ok })
	if _, wrong := hook.has(want); wrong != "" {
		t.Fatal(wrong)
	}
	testenv.WaitFor(t, 10*time.Second, "one walsender streaming the shared slot, one d1's", func() bool {
		return maps.Equal(slots(t, admin, slot, true), map[string]string{slot: "test", slot + "_d1": d1db})
	})

	// s3 leaves: what is emitted into its schema meanwhile is kept (the
	// slot waits for it) and not delivered; the others deliver.
	if _, err := admin.Exec(fmt.Sprintf(`DELETE FROM %s.tenants WHERE name = 's3'`, base)); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 10*time.Second, "s3 stopped", func() bool {
		return strings.Contains(grepLines(stderr.String(), `msg="tenant stopped"`), "tenant=s3\n")
	})
	held := emitAcross(t, schemas, "s3", "s1")
	more := map[string]string{}
	publishTo(t, cfgPath, "s2", 2, more)
	for id, tn := range held {
		if tn == "s1" {
			more[id] = tn
			delete(held, id)
		}
	}
	maps.Copy(all, more)
	maps.Copy(all, held)
	testenv.WaitFor(t, 20*time.Second, "s1's and s2's events while s3 is away", func() bool { ok, _ := hook.has(more); return ok })
	hook.mu.Lock()
	for id := range held {
		if _, ok := hook.got[id]; ok {
			t.Errorf("event %s of the removed tenant s3 was delivered", id)
		}
	}
	hook.mu.Unlock()

	// s3 comes back and delivers what it missed.
	addTenant("s3")
	testenv.WaitFor(t, 30*time.Second, "s3's events emitted while it was away", func() bool { ok, _ := hook.has(held); return ok })

	// s4 is added before migrate joined it to the slot: its stream is
	// retried until `txbox migrate --tenant s4` did.
	addTenant("s4")
	testenv.WaitFor(t, 10*time.Second, "s4's stream failing for its missing state", func() bool {
		return lineOf(stderr.String(), "cannot open the stream; retrying", "tenant=s4", "run txbox migrate") != ""
	})
	if code, out, errOut := runInProcess(t, nil, "migrate", "--config", cfgPath, "--tenant", "s4"); code != exitOK || !strings.Contains(out, "joined the shared slot") {
		t.Fatalf("migrate --tenant s4: %d\n%s\n%s", code, out, errOut)
	}
	late := map[string]string{}
	publishTo(t, cfgPath, "s4", 2, late)
	publishTo(t, cfgPath, "s1", 1, late)
	maps.Copy(all, late)
	testenv.WaitFor(t, 30*time.Second, "s4's events once it joined the slot", func() bool { ok, _ := hook.has(late); return ok })
	// Up to here, no fault: every event exactly once.
	checkDelivered(t, hook, all, nil)

	// The shared walsender ends: every schema tenant's stream fails and
	// reconnects, and a new connection streams for them all. An event
	// acked and not yet confirmed may come again; nothing is lost.
	before := maps.Clone(all)
	if _, err := admin.Exec(`SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE slot_name = $1 AND active_pid IS NOT NULL`, slot); err != nil {
		t.Fatal(err)
	}
	after := map[string]string{}
	for _, tn := range []string{"s1", "s2", "s3", "s4"} {
		publishTo(t, cfgPath, tn, 2, after)
	}
	maps.Copy(all, after)
	testenv.WaitFor(t, 60*time.Second, "the events published after the walsender ended", func() bool { ok, _ := hook.has(after); return ok })
	if code := stop(); code != exitOK {
		t.Fatalf("relay exit %d: %s", code, grepLines(stderr.String(), "stop"))
	}
	checkDelivered(t, hook, all, before)
}

// checkDelivered is the delivery oracle: every event of all arrived, with
// its tenant, and nothing else; more than once only those of dupOK.
func checkDelivered(t *testing.T, hook *tenantHook, all, dupOK map[string]string) {
	t.Helper()
	if _, wrong := hook.has(all); wrong != "" {
		t.Fatal(wrong)
	}
	hook.mu.Lock()
	defer hook.mu.Unlock()
	dups := 0
	for id, got := range hook.got {
		if _, ok := all[id]; !ok {
			t.Errorf("unexpected event %s from %v", id, got)
		} else if _, ok := dupOK[id]; len(got) != 1 && !ok {
			t.Errorf("event %s delivered %d times", id, len(got))
		} else if len(got) > 1 {
			dups++
		}
	}
	if len(hook.got) != len(all) {
		t.Errorf("%d events delivered, %d published", len(hook.got), len(all))
	}
	t.Logf("oracle: %d events, 0 lost, 0 unexpected, %d delivered again", len(all), dups)
}

// emitAcross emits one orders event into each of the tenants' schemas in
// one transaction, with the SQL function txbox_emit, and returns their
// ids by tenant.
func emitAcross(t *testing.T, schemas map[string]string, tenants ...string) map[string]string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, testenv.PostgresURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, tn := range tenants {
		var id string
		if err := tx.QueryRow(ctx, `SELECT `+pgx.Identifier{schemas[tn], "txbox_emit"}.Sanitize()+`('orders', 'k', '{}'::bytea)::text`).Scan(&id); err != nil {
			t.Fatal(err)
		}
		out[id] = tn
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	return out
}

package main

import (
	"database/sql"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/internal/storeharness"
	"github.com/txbox/txbox/internal/testenv"
)

// TestRelayParksIdleTenants (issue 31, idle cost): six schema tenants in
// one database of their own. They start parked: the relay holds one
// connection to the database (the parked tenants' watch) and /readyz is
// ok. An event published with a notification wakes its tenant and is
// delivered; a row inserted with plain SQL and no notification is found
// by the sweep and delivered; both tenants park again once idle for
// tenants-park-after, and the relay is back to one connection.
func TestRelayParksIdleTenants(t *testing.T) {
	t.Parallel()
	admin := storeharness.PostgresAdmin(t)
	db := "txp_" + testenv.UniqueName("")
	if _, err := admin.Exec("CREATE DATABASE " + db); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = admin.Exec("DROP DATABASE IF EXISTS " + db + " WITH (FORCE)") })
	dsn := strings.Replace(testenv.PostgresURL, "/test?", "/"+db+"?", 1)
	hook := newTenantHook(t)
	var b strings.Builder
	fmt.Fprintf(&b, "database: { dialect: postgres, dsn: %q, max-conns: 24 }\n", dsn)
	fmt.Fprintf(&b, "senders: { hooks: { type: webhook, url: %q } }\n", hook.srv.URL+"/in")
	b.WriteString("defaults: { polling: { min-delay: 5ms, max-delay: 200ms } }\nevents: { orders: {} }\n")
	b.WriteString("relay: { shutdown-timeout: 10s }\nhealth: { listen: \"127.0.0.1:0\" }\n")
	b.WriteString("tenants-park-after: 2s\ntenants-sweep-interval: 1s\ntenants:\n")
	for i := 1; i <= 6; i++ {
		fmt.Fprintf(&b, "  - { name: s%d, schema: t_s%d }\n", i, i)
	}
	cfgPath := filepath.Join(t.TempDir(), "txbox.yaml")
	if err := os.WriteFile(cfgPath, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, out, errOut := runInProcess(t, nil, "migrate", "--config", cfgPath); code != exitOK || strings.Count(out, "migrated tenant ") != 6 {
		t.Fatalf("migrate: %d\n%s\n%s", code, out, errOut)
	}
	conns := func() int {
		var n int
		if err := admin.QueryRow(`SELECT count(*) FROM pg_stat_activity WHERE datname = $1`, db).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	stderr, _, stop := startRelay(t, "--config", cfgPath)
	var healthAddr string
	testenv.WaitFor(t, 60*time.Second, "the relay's probes", func() bool {
		healthAddr = servingAddr(stderr.String(), "/readyz")
		return healthAddr != ""
	})
	testenv.WaitFor(t, 30*time.Second, "six parked tenants and one connection", func() bool {
		return strings.Count(stderr.String(), `msg="tenant added, parked until it has work"`) == 6 && conns() == 1
	})
	if code, rep := readyz(t, healthAddr); code != http.StatusOK || rep.Status != txbox.HealthOK {
		t.Fatalf("readyz with every tenant parked: %d %+v", code, rep)
	}

	want := map[string]string{}
	publishTo(t, cfgPath, "s1", 2, want)
	id := txbox.NewID().String()
	direct, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	_, err = direct.Exec(`INSERT INTO t_s2.txbox_outbox (id, event_type, payload) VALUES ($1, 'orders', '{}')`, id)
	direct.Close()
	if err != nil {
		t.Fatal(err)
	}
	want[id] = "s2"
	testenv.WaitFor(t, 30*time.Second, "the woken tenants' events", func() bool { ok, _ := hook.has(want); return ok })
	if _, wrong := hook.has(want); wrong != "" {
		t.Fatal(wrong)
	}
	testenv.WaitFor(t, 30*time.Second, "s1 and s2 parked again, one connection", func() bool {
		parked := grepLines(stderr.String(), `msg="tenant parked: idle"`)
		return strings.Contains(parked, "tenant=s1 ") && strings.Contains(parked, "tenant=s2 ") && conns() == 1
	})
	if code, rep := readyz(t, healthAddr); code != http.StatusOK || rep.Status != txbox.HealthOK {
		t.Fatalf("readyz once parked again: %d %+v", code, rep)
	}
	if code := stop(); code != exitOK {
		t.Fatalf("relay exit %d: %s", code, grepLines(stderr.String(), "stop"))
	}
}

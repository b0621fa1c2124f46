package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/internal/storeharness"
	"github.com/txbox/txbox/internal/testenv"
)

// tenantHook is a webhook that records, per event id, the tenants whose
// relay sent it (the txbox-tenant header).
type tenantHook struct {
	srv *httptest.Server
	mu  sync.Mutex
	got map[string][]string
}

func newTenantHook(t *testing.T) *tenantHook {
	t.Helper()
	h := &tenantHook{got: map[string][]string{}}
	h.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		h.mu.Lock()
		id := r.Header.Get(txbox.HeaderEventID)
		h.got[id] = append(h.got[id], r.Header.Get(txbox.HeaderTenant))
		h.mu.Unlock()
	}))
	t.Cleanup(h.srv.Close)
	return h
}

// has reports whether every event of want (id → tenant) arrived, and
// returns the first that came from another tenant than its own.
func (h *tenantHook) has(want map[string]string) (all bool, wrong string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	all = true
	for id, tenant := range want {
		got, ok := h.got[id]
		if !ok {
			all = false
			continue
		}
		for _, g := range got {
			if g != tenant {
				return all, fmt.Sprintf("event %s of tenant %s came with %s %q", id, tenant, txbox.HeaderTenant, g)
			}
		}
	}
	return all, ""
}

// publishTo publishes n events to tenant through `txbox publish
// --tenant` and adds them to want.
func publishTo(t *testing.T, cfgPath, tenant string, n int, want map[string]string) {
	t.Helper()
	for range n {
		code, out, errOut := runInProcess(t, nil, "publish", "--config", cfgPath, "--tenant", tenant, "--type", "orders", "--payload", `{}`)
		if code != exitOK {
			t.Fatalf("publish --tenant %s: %s", tenant, errOut)
		}
		var res struct{ ID string }
		if err := json.Unmarshal([]byte(out), &res); err != nil || res.ID == "" {
			t.Fatalf("publish --tenant %s printed %q", tenant, out)
		}
		want[res.ID] = tenant
	}
}

// readyz returns the tenant relay's /readyz report.
func readyz(t *testing.T, addr string) (int, txbox.HealthReport) {
	t.Helper()
	code, body := httpGet(t, "http://"+addr+"/readyz")
	var rep txbox.HealthReport
	if err := json.Unmarshal([]byte(body), &rep); err != nil {
		t.Fatalf("readyz %d %q: %v", code, body, err)
	}
	return code, rep
}

// TestRelayServesTenantsPostgres (issue 31): one txbox relay serves 3
// tenant databases and 20 tenant schemas (10 listed in the file, 10 by
// tenants-query). Every event reaches the webhook with its tenant's
// txbox-tenant header; metrics carry the tenant. A tenant's database
// dropped mid-run degrades /readyz naming it while the others deliver; a
// tenant added to the query's table starts delivering and one removed is
// stopped, with no restart.
func TestRelayServesTenantsPostgres(t *testing.T) {
	t.Parallel()
	admin := storeharness.PostgresAdmin(t)
	base := testenv.PostgresSchema(t, admin)
	uniq := testenv.UniqueName("")
	var dbs []string
	for i := 1; i <= 3; i++ {
		name := fmt.Sprintf("txt_%s_d%d", uniq, i)
		if _, err := admin.Exec("CREATE DATABASE " + name); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _, _ = admin.Exec("DROP DATABASE IF EXISTS " + name + " WITH (FORCE)") })
		dbs = append(dbs, name)
	}
	var schemaTenants []string
	for i := 1; i <= 20; i++ {
		schemaTenants = append(schemaTenants, fmt.Sprintf("s%02d", i))
	}
	t.Cleanup(func() {
		for _, s := range append(schemaTenants, "s21") {
			_, _ = admin.Exec("DROP SCHEMA IF EXISTS " + base + "_" + s + " CASCADE")
		}
	})
	if _, err := admin.Exec(fmt.Sprintf(`CREATE TABLE %s.tenants (name text, schema text)`, base)); err != nil {
		t.Fatal(err)
	}
	for _, s := range schemaTenants[10:] {
		if _, err := admin.Exec(fmt.Sprintf(`INSERT INTO %s.tenants VALUES ($1, $2)`, base), s, base+"_"+s); err != nil {
			t.Fatal(err)
		}
	}
	hook := newTenantHook(t)
	var b strings.Builder
	fmt.Fprintf(&b, "database: { dialect: postgres, dsn: %q, max-conns: 120 }\n", testenv.PostgresURL)
	fmt.Fprintf(&b, "senders: { hooks: { type: webhook, url: %q } }\n", hook.srv.URL+"/in")
	b.WriteString("defaults: { polling: { min-delay: 5ms, max-delay: 200ms } }\nevents: { orders: {} }\n")
	b.WriteString("relay: { shutdown-timeout: 10s }\nhealth: { listen: \"127.0.0.1:0\" }\nmetrics: { listen: \"127.0.0.1:0\" }\n")
	fmt.Fprintf(&b, "tenants-query: \"SELECT name, schema FROM %s.tenants\"\ntenants-interval: 1s\ntenants:\n", base)
	for i, db := range dbs {
		fmt.Fprintf(&b, "  - { name: d%d, dsn: %q }\n", i+1, strings.Replace(testenv.PostgresURL, "/test?", "/"+db+"?", 1))
	}
	for _, s := range schemaTenants[:10] {
		fmt.Fprintf(&b, "  - { name: %s, schema: %s_%s }\n", s, base, s)
	}
	cfgPath := filepath.Join(t.TempDir(), "txbox.yaml")
	if err := os.WriteFile(cfgPath, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := runInProcess(t, nil, "migrate", "--config", cfgPath)
	if code != exitOK || strings.Count(out, "migrated tenant ") != 23 {
		t.Fatalf("migrate: %d\n%s\n%s", code, out, errOut)
	}
	stderr, _, stop := startRelay(t, "--config", cfgPath, "--migrate")
	var healthAddr, metricsAddr string
	testenv.WaitFor(t, 60*time.Second, "the relay's listeners", func() bool {
		healthAddr, metricsAddr = servingAddr(stderr.String(), "/readyz"), servingAddr(stderr.String(), "/metrics")
		return healthAddr != "" && metricsAddr != ""
	})

	want := map[string]string{}
	all := append([]string{"d1", "d2", "d3"}, schemaTenants...)
	for _, tn := range all {
		publishTo(t, cfgPath, tn, 2, want)
	}
	testenv.WaitFor(t, 60*time.Second, "every tenant's events at the webhook", func() bool { ok, _ := hook.has(want); return ok })
	if _, wrong := hook.has(want); wrong != "" {
		t.Fatal(wrong)
	}
	if code, rep := readyz(t, healthAddr); code != http.StatusOK || rep.Status != txbox.HealthOK {
		t.Fatalf("readyz with every tenant up: %d %+v", code, rep)
	}
	if _, body := httpGet(t, "http://"+metricsAddr+"/metrics"); !strings.Contains(body, `tenant="s20"`) || !strings.Contains(body, `tenant="d1"`) {
		t.Errorf("/metrics has no tenant label for s20 and d1")
	}

	// A tenant's database goes away: the others deliver, /readyz names it.
	if _, err := admin.Exec("DROP DATABASE " + dbs[2] + " WITH (FORCE)"); err != nil {
		t.Fatal(err)
	}
	more := map[string]string{}
	for _, tn := range []string{"d1", "s05", "s15"} {
		publishTo(t, cfgPath, tn, 3, more)
	}
	testenv.WaitFor(t, 30*time.Second, "the other tenants deliver", func() bool { ok, _ := hook.has(more); return ok })
	testenv.WaitFor(t, 30*time.Second, "readyz degraded naming d3", func() bool {
		code, rep := readyz(t, healthAddr)
		if code != http.StatusOK || rep.Status != txbox.HealthDegraded {
			return false
		}
		for _, r := range rep.Reasons {
			if r.Tenant == "d3" {
				return true
			}
		}
		return false
	})

	// Tenants come and go through the query's table, with no restart.
	if _, err := admin.Exec(fmt.Sprintf(`INSERT INTO %s.tenants VALUES ('s21', $1)`, base), base+"_s21"); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Exec(fmt.Sprintf(`DELETE FROM %s.tenants WHERE name = 's12'`, base)); err != nil {
		t.Fatal(err)
	}
	if !testenv.Within(30*time.Second, 50*time.Millisecond, func() bool {
		log := stderr.String()
		started := grepLines(log, `msg="tenant started"`) + grepLines(log, `msg="tenant added, parked until it has work"`)
		return strings.Contains(started, "tenant=s21\n") && strings.Contains(grepLines(log, `msg="tenant stopped"`), "tenant=s12")
	}) {
		t.Fatalf("s21 not started or s12 not stopped:\n%s", grepLines(stderr.String(), "tenant"))
	}
	added := map[string]string{}
	publishTo(t, cfgPath, "s21", 2, added)
	testenv.WaitFor(t, 30*time.Second, "the added tenant delivers", func() bool { ok, _ := hook.has(added); return ok })
	if code := stop(); code != exitOK {
		t.Fatalf("relay exit %d: %s", code, grepLines(stderr.String(), "stop"))
	}
}

// TestRelayServesTenantsOtherDialects: the same relay with two tenant
// databases on MariaDB and two SQLite files: every event arrives with its
// tenant's header.
func TestRelayServesTenantsOtherDialects(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, tc := range []struct {
		dialect string
		dsns    func(t *testing.T) []string
	}{
		{"mysql", func(t *testing.T) []string {
			var out []string
			for range 2 {
				_, dsn := storeharness.MySQLDatabase(t)
				out = append(out, dsn)
			}
			return out
		}},
		{"sqlite", func(*testing.T) []string {
			return []string{filepath.Join(dir, "acme.db"), filepath.Join(dir, "globex.db")}
		}},
	} {
		t.Run(tc.dialect, func(t *testing.T) {
			t.Parallel()
			hook := newTenantHook(t)
			dsns := tc.dsns(t)
			yml := fmt.Sprintf(`database: { dialect: %s, dsn: %q }
senders: { hooks: { type: webhook, url: %q } }
defaults: { polling: { min-delay: 5ms, max-delay: 200ms } }
events: { orders: {} }
relay: { shutdown-timeout: 10s }
tenants:
  - { name: acme, dsn: %q }
  - { name: globex, dsn: %q }
`, tc.dialect, dsns[0], hook.srv.URL+"/in", dsns[0], dsns[1])
			cfgPath := filepath.Join(t.TempDir(), "txbox.yaml")
			if err := os.WriteFile(cfgPath, []byte(yml), 0o600); err != nil {
				t.Fatal(err)
			}
			if code, out, errOut := runInProcess(t, nil, "migrate", "--config", cfgPath); code != exitOK || strings.Count(out, "migrated tenant ") != 2 {
				t.Fatalf("migrate: %d %s %s", code, out, errOut)
			}
			stderr, _, stop := startRelay(t, "--config", cfgPath)
			want := map[string]string{}
			publishTo(t, cfgPath, "acme", 3, want)
			publishTo(t, cfgPath, "globex", 3, want)
			testenv.WaitFor(t, 30*time.Second, "both tenants' events", func() bool { ok, _ := hook.has(want); return ok })
			if _, wrong := hook.has(want); wrong != "" {
				t.Fatal(wrong)
			}
			if code := stop(); code != exitOK {
				t.Fatalf("relay exit %d: %s", code, stderr.String())
			}
		})
	}
}

// grepLines returns the lines of s that contain sub.
func grepLines(s, sub string) string {
	var out strings.Builder
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out.WriteString(l + "\n")
		}
	}
	return out.String()
}

// TestTenantFlag: on a configuration with tenants the commands that work
// on one outbox need --tenant, which must name a tenant; on one without
// tenants --tenant is refused.
func TestTenantFlag(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	with := filepath.Join(dir, "tenants.yaml")
	yml := fmt.Sprintf("database: { dialect: sqlite, dsn: %q }\nsenders: { hooks: { type: webhook, url: \"http://127.0.0.1:1/in\" } }\n"+
		"tenants:\n  - { name: acme, dsn: %q }\n", filepath.Join(dir, "base.db"), filepath.Join(dir, "acme.db"))
	without := filepath.Join(dir, "plain.yaml")
	plain := fmt.Sprintf("database: { dialect: sqlite, dsn: %q }\nsenders: { hooks: { type: webhook, url: \"http://127.0.0.1:1/in\" } }\n", filepath.Join(dir, "base.db"))
	for path, body := range map[string]string{with: yml, without: plain} {
		if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if code, out, errOut := runInProcess(t, nil, "migrate", "--config", with); code != exitOK || !strings.Contains(out, "migrated tenant acme") {
		t.Fatalf("migrate: %d %s %s", code, out, errOut)
	}
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"status", "--config", with}, exitUsage, "name one with --tenant"},
		{[]string{"dlq", "list", "--config", with}, exitUsage, "name one with --tenant"},
		{[]string{"status", "--config", with, "--tenant", "globex"}, exitUsage, "--tenant globex: no such tenant"},
		{[]string{"status", "--config", without, "--tenant", "acme"}, exitUsage, "the configuration has no tenants"},
		{[]string{"publish", "--config", with, "--tenant", "acme", "--type", "orders", "--payload", "{}"}, exitOK, ""},
		{[]string{"status", "--config", with, "--tenant", "acme"}, exitOK, ""},
	} {
		code, out, errOut := runInProcess(t, nil, tc.args...)
		if code != tc.code || !strings.Contains(errOut, tc.want) {
			t.Errorf("%v: code %d, stderr %q (stdout %q); want %d and %q", tc.args, code, errOut, out, tc.code, tc.want)
		}
	}
}

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
	"testing"
	"time"

	"github.com/txbox/txbox/admin"
	"github.com/txbox/txbox/internal/storeharness"
	"github.com/txbox/txbox/internal/testenv"
)

const (
	tenantReadToken  = "tenant-read-token-0123456789abcdef"
	tenantAdminToken = "tenant-admin-token-0123456789abcdef"
)

// tenantAPI calls a tenant relay's admin API.
type tenantAPI struct {
	t    *testing.T
	base string
}

// do sends a request and returns the status, the Content-Type and the
// body, decoded into v when v is not nil and the status is 200.
func (c tenantAPI) do(method, path, token, body string, v any) (int, string, string) {
	c.t.Helper()
	req, err := http.NewRequest(method, c.base+path, strings.NewReader(body))
	if err != nil {
		c.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	if v != nil && res.StatusCode == http.StatusOK {
		if err := json.Unmarshal(b, v); err != nil {
			c.t.Fatalf("%s %s: %v\n%s", method, path, err, b)
		}
	}
	return res.StatusCode, res.Header.Get("Content-Type"), string(b)
}

// get is do for a GET with the read token that must answer 200.
func (c tenantAPI) get(path string, v any) {
	c.t.Helper()
	if code, _, body := c.do(http.MethodGet, path, tenantReadToken, "", v); code != http.StatusOK {
		c.t.Fatalf("GET %s: %d %s", path, code, body)
	}
}

// tenantsByName lists every tenant through GET /api/v1/tenants, following
// the cursor with pages of limit.
func (c tenantAPI) tenantsByName(limit int) (map[string]admin.TenantView, int) {
	c.t.Helper()
	out, pages, cursor := map[string]admin.TenantView{}, 0, ""
	for {
		var page admin.TenantPage
		c.get(fmt.Sprintf("/api/v1/tenants?limit=%d&cursor=%s", limit, cursor), &page)
		pages++
		if len(page.Tenants) > limit {
			c.t.Fatalf("a page of %d tenants with limit %d", len(page.Tenants), limit)
		}
		for _, v := range page.Tenants {
			out[v.Name] = v
		}
		if cursor = page.NextCursor; cursor == "" {
			return out, pages
		}
	}
}

// TestAdminServesTenantsPostgres (issue 31): txbox relay with three
// schema tenants and one whose database does not exist serves the admin
// API per tenant: GET /api/v1/tenants pages the tenants with their states
// and counts; each tenant's dead letters, overview and audit trail are
// its own; an action or a redrive on one tenant changes that tenant only
// and its audit names it; a route without a tenant, an unknown tenant and
// a tenant that does not run answer problem details.
func TestAdminServesTenantsPostgres(t *testing.T) {
	t.Parallel()
	pg := storeharness.PostgresAdmin(t)
	base := testenv.PostgresSchema(t, pg)
	names := []string{"acme", "globex", "initech"}
	t.Cleanup(func() {
		for _, n := range names {
			_, _ = pg.Exec("DROP SCHEMA IF EXISTS " + base + "_" + n + " CASCADE")
		}
	})
	hook := newTenantHook(t)
	bad := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		http.Error(w, "poison", http.StatusUnprocessableEntity)
	}))
	t.Cleanup(bad.Close)
	dir := t.TempDir()
	for f, tok := range map[string]string{"read": tenantReadToken, "admin": tenantAdminToken} {
		if err := os.WriteFile(filepath.Join(dir, f), []byte(tok), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "database: { dialect: postgres, dsn: %q }\n", testenv.PostgresURL)
	fmt.Fprintf(&b, "senders: { hooks: { type: webhook, url: %q }, bad: { type: webhook, url: %q } }\n", hook.srv.URL+"/in", bad.URL+"/in")
	b.WriteString("defaults: { sender: hooks, polling: { min-delay: 5ms, max-delay: 200ms } }\n")
	b.WriteString("events: { orders: { retention: 1h }, poison: { sender: bad, max-attempts: 1 } }\n")
	fmt.Fprintf(&b, "relay: { shutdown-timeout: 10s }\nadmin: { enabled: true, listen: \"127.0.0.1:0\", read-token-file: %q, admin-token-file: %q }\ntenants:\n",
		filepath.Join(dir, "read"), filepath.Join(dir, "admin"))
	for _, n := range names {
		fmt.Fprintf(&b, "  - { name: %s, schema: %s_%s }\n", n, base, n)
	}
	fmt.Fprintf(&b, "  - { name: zeta, dsn: %q }\n", strings.Replace(testenv.PostgresURL, "/test?", "/txbox_no_such_db?", 1))
	cfgPath := filepath.Join(dir, "txbox.yaml")
	if err := os.WriteFile(cfgPath, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	stderr, _, stop := startRelay(t, "--config", cfgPath, "--migrate")
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("relay log:\n%s", stderr.String())
		}
	})
	api := tenantAPI{t: t, base: "http://" + adminAddress(t, stderr)}

	want := map[string]string{}
	for _, n := range names {
		publishTo(t, cfgPath, n, 2, want)
	}
	poison := map[string]int{"acme": 3, "globex": 1}
	for n, k := range poison {
		for range k {
			if code, _, errOut := runInProcess(t, nil, "publish", "--config", cfgPath, "--tenant", n, "--type", "poison", "--payload", `{}`); code != exitOK {
				t.Fatalf("publish poison to %s: %s", n, errOut)
			}
		}
	}
	testenv.WaitFor(t, 60*time.Second, "every tenant's orders at the webhook", func() bool { ok, _ := hook.has(want); return ok })

	// The overview of the tenants, a page of 2 at a time.
	var all map[string]admin.TenantView
	testenv.WaitFor(t, 60*time.Second, "the tenants' dead letters counted, zeta failing", func() bool {
		all, _ = api.tenantsByName(2)
		return all["acme"].DeadLetters != nil && *all["acme"].DeadLetters == 3 && all["globex"].DeadLetters != nil &&
			*all["globex"].DeadLetters == 1 && all["zeta"].State == "failing"
	})
	if _, pages := api.tenantsByName(2); len(all) != 4 || pages != 2 {
		t.Fatalf("tenants %v in %d pages, want 4 in 2", all, pages)
	}
	if v := all["initech"]; !v.Running || v.DeadLetters == nil || *v.DeadLetters != 0 {
		t.Errorf("initech: %+v, want running with 0 dead letters", v)
	}
	if v := all["zeta"]; v.Running || v.Error == "" || v.DeadLetters != nil {
		t.Errorf("zeta: %+v, want not running, with its error and no counts", v)
	}

	checkTenantIsolation(t, api)
	checkTenantActions(t, api, stderr)
	checkTenantProblems(t, api)
	if code := stop(); code != exitOK {
		t.Fatalf("relay exit %d: %s", code, grepLines(stderr.String(), "stop"))
	}
}

// checkTenantIsolation: each tenant's dead letters and overview are its
// own; one tenant's dead letter is not found through another.
func checkTenantIsolation(t *testing.T, api tenantAPI) {
	t.Helper()
	lists := map[string]admin.DeadLetterPage{}
	for n, k := range map[string]int{"acme": 3, "globex": 1, "initech": 0} {
		var page admin.DeadLetterPage
		api.get("/api/v1/tenants/"+n+"/dead-letters", &page)
		if len(page.Items) != k {
			t.Fatalf("%s lists %d dead letters, want %d", n, len(page.Items), k)
		}
		lists[n] = page
		var ov admin.Overview
		api.get("/api/v1/tenants/"+n+"/overview", &ov)
		if ov.DeadLetters["unresolved"] != int64(k) {
			t.Errorf("%s's overview: %d unresolved dead letters, want %d", n, ov.DeadLetters["unresolved"], k)
		}
	}
	acmeID := lists["acme"].Items[0].ID
	api.get("/api/v1/tenants/acme/dead-letters/"+acmeID, nil)
	if code, ct, body := api.do(http.MethodGet, "/api/v1/tenants/globex/dead-letters/"+acmeID, tenantReadToken, "", nil); code != http.StatusNotFound || ct != "application/problem+json" {
		t.Errorf("acme's dead letter through globex: %d %s %s, want a 404 problem", code, ct, body)
	}
}

// checkTenantActions: resolving all of globex's dead letters leaves
// acme's; a redrive of acme's kept orders changes acme's only; the audit
// entries and lines name the tenant.
func checkTenantActions(t *testing.T, api tenantAPI, stderr *testenv.LogBuffer) {
	t.Helper()
	var res admin.BulkResult
	if code, _, body := api.do(http.MethodPost, "/api/v1/tenants/globex/dead-letters/resolve", tenantAdminToken, `{"all":true}`, &res); code != http.StatusOK || res.Changed != 1 {
		t.Fatalf("resolve all of globex: %d %s", code, body)
	}
	var n struct{ Count int64 }
	api.get("/api/v1/tenants/acme/dead-letters/count?status=unresolved", &n)
	if n.Count != 3 {
		t.Errorf("acme has %d unresolved dead letters after globex's resolve, want 3", n.Count)
	}
	var rd admin.RedriveResult
	if code, _, body := api.do(http.MethodPost, "/api/v1/tenants/acme/redrive", tenantAdminToken, `{"type":"orders"}`, &rd); code != http.StatusOK || rd.Changed != 2 {
		t.Fatalf("redrive of acme's orders: %d %s, want 2 changed", code, body)
	}
	if code, _, body := api.do(http.MethodPost, "/api/v1/tenants/initech/redrive", tenantAdminToken, `{"type":"orders","dry_run":true}`, &rd); code != http.StatusOK || rd.Matched != 2 {
		t.Fatalf("dry-run redrive of initech's orders: %d %s, want its own 2", code, body)
	}
	for tenant, action := range map[string]string{"globex": "resolve", "acme": "redrive"} {
		var audit admin.AuditPage
		api.get("/api/v1/tenants/"+tenant+"/audit?action="+action, &audit)
		if len(audit.Entries) != 1 || audit.Entries[0].Tenant != tenant || audit.Entries[0].Who != "admin-token" {
			t.Errorf("%s's audit of %s: %+v, want one entry naming the tenant", tenant, action, audit.Entries)
		}
	}
	var audit admin.AuditPage
	api.get("/api/v1/tenants/acme/audit?action=resolve", &audit)
	if len(audit.Entries) != 0 {
		t.Errorf("acme's audit has globex's resolve: %+v", audit.Entries)
	}
	if lines := grepLines(stderr.String(), "admin audit: dead-letter resolve"); !strings.Contains(lines, "tenant=globex") {
		t.Errorf("the resolve's audit line does not name globex:\n%s", lines)
	}
}

// checkTenantProblems: a route without a tenant, an unknown tenant and a
// tenant that does not run answer problem details naming the tenants'
// route; the read token still cannot act.
func checkTenantProblems(t *testing.T, api tenantAPI) {
	t.Helper()
	for _, tc := range []struct {
		method, path, token string
		code                int
		detail              string
	}{
		{"GET", "/api/v1/dead-letters", tenantReadToken, http.StatusBadRequest, "/api/v1/tenants/{tenant}/dead-letters"},
		{"GET", "/api/v1/overview", tenantReadToken, http.StatusBadRequest, "GET /api/v1/tenants lists them"},
		{"POST", "/api/v1/dead-letters/retry", tenantAdminToken, http.StatusBadRequest, "this relay serves tenants"},
		{"GET", "/api/v1/tenants/nope/overview", tenantReadToken, http.StatusNotFound, `no tenant "nope"`},
		{"GET", "/api/v1/tenants/zeta/dead-letters", tenantReadToken, http.StatusServiceUnavailable, `tenant "zeta" is not running (state failing)`},
		{"POST", "/api/v1/tenants/acme/dead-letters/retry", tenantReadToken, http.StatusForbidden, "admin token"},
		{"GET", "/api/v1/tenants?cursor=bogus", tenantReadToken, http.StatusBadRequest, "invalid parameters"},
	} {
		body := ""
		if tc.method == "POST" {
			body = `{"all":true}`
		}
		code, ct, body := api.do(tc.method, tc.path, tc.token, body, nil)
		var p admin.Problem
		if err := json.Unmarshal([]byte(body), &p); err != nil || code != tc.code || ct != "application/problem+json" || !strings.Contains(p.Detail, tc.detail) {
			t.Errorf("%s %s: %d %s %s, want %d and a problem saying %q", tc.method, tc.path, code, ct, body, tc.code, tc.detail)
		}
	}
}

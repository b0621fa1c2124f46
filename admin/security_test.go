package admin_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/admin"
	"github.com/txbox/txbox/internal/storeharness"
	"github.com/txbox/txbox/store"
)

// concrete turns a route pattern into a path that reaches it.
func concrete(path string, id txbox.ID) string {
	r := strings.NewReplacer("{id}", id.String(), "{file}", "app.js", "{$}", "", "{tenant}", "acme")
	return r.Replace(path)
}

// TestEveryRouteAuthMatrix walks every registered route (the handler's
// own registration list, and one mounted with Handle): without a token
// 401; the read token on a mutating route 403; a cross-site POST 403; a
// foreign Host 403. GET routes only read, mutating routes are POST, and
// walking every GET route with the admin token changes nothing. The same
// on a handler serving tenants, whose routes name the tenant acme.
func TestEveryRouteAuthMatrix(t *testing.T) {
	t.Parallel()
	t.Run("one store", func(t *testing.T) { t.Parallel(); routeAuthMatrix(t, nil, "") })
	t.Run("tenants", func(t *testing.T) {
		t.Parallel()
		routeAuthMatrix(t, func(cfg *admin.Config) {
			cfg.Tenants = &fakeTenants{list: []admin.TenantStatus{{Name: "acme", State: "running", Config: &admin.Config{Store: cfg.Store}}}}
			cfg.Store = nil
		}, "/tenants/acme")
	})
}

// routeAuthMatrix is TestEveryRouteAuthMatrix on the handler mod makes,
// whose API routes are under /api/v1 + prefix.
func routeAuthMatrix(t *testing.T, mod func(*admin.Config), prefix string) {
	b := setup(t, storeharness.Postgres(), mod)
	var extraHit atomic.Int32
	b.admin.Handle("/extra-probe", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		extraHit.Add(1)
		w.WriteHeader(http.StatusNoContent)
	}))
	id := b.deadLetter("matrix", "k", []byte(`{"n":1}`), "boom")
	b.publish(&txbox.Event{ID: txbox.NewID(), Type: "matrix", Payload: []byte("x")})

	routes := b.admin.Routes()
	if len(routes) < 15 {
		t.Fatalf("only %d routes registered: %+v", len(routes), routes)
	}
	send := func(method, path, token string, mod func(*http.Request)) int {
		t.Helper()
		req, err := http.NewRequestWithContext(b.ctx, method, b.srv.URL+path, strings.NewReader(`{"dry_run":true}`))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		if mod != nil {
			mod(req)
		}
		res, err := b.srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res.StatusCode
	}
	snapshot := func() string {
		t.Helper()
		n, err := b.store.DeadLetterCount(b.ctx, &store.DeadLetterFilter{Status: store.DeadLetterUnresolved})
		if err != nil {
			t.Fatal(err)
		}
		st, err := b.store.OutboxStats(b.ctx)
		if err != nil {
			t.Fatal(err)
		}
		return fmt.Sprint(n, st[0].EventType, st[0].Pending, st[0].InProcess, st[0].Failed)
	}
	before := snapshot()
	walked := map[string]bool{}
	for _, rt := range routes {
		name := rt.Method + " " + rt.Path
		walked[name] = true
		path := concrete(rt.Path, id)
		if rt.Method != http.MethodGet && rt.Method != http.MethodPost {
			t.Errorf("%s: method %q; routes are GET or POST", name, rt.Method)
		}
		if rt.Method == http.MethodGet && rt.Access != admin.AccessRead {
			t.Errorf("%s: a GET route needs %s access; GET must never change anything", name, rt.Access)
		}
		if st := send(rt.Method, path, "", nil); st != http.StatusUnauthorized {
			t.Errorf("%s without a token: %d, want 401", name, st)
		}
		if st := send(rt.Method, path, "not-a-token-at-all-xxxx", nil); st != http.StatusUnauthorized {
			t.Errorf("%s with a wrong token: %d, want 401", name, st)
		}
		if rt.Access == admin.AccessAdmin {
			if st := send(rt.Method, path, readToken, nil); st != http.StatusForbidden {
				t.Errorf("%s with the read token: %d, want 403", name, st)
			}
		}
		crossSite := func(r *http.Request) {
			r.Header.Set("Origin", "https://evil.example")
			r.Header.Set("Sec-Fetch-Site", "cross-site")
		}
		if st := send(http.MethodPost, path, adminToken, crossSite); st != http.StatusForbidden {
			t.Errorf("cross-site POST %s with the admin token: %d, want 403", path, st)
		}
		if st := send(rt.Method, path, adminToken, func(r *http.Request) { r.Host = "evil.example" }); st != http.StatusForbidden {
			t.Errorf("%s with Host evil.example and the admin token: %d, want 403", name, st)
		}
		if st := send(rt.Method, path, adminToken, func(r *http.Request) {
			r.Host = "attacker.test:" + strings.Split(b.srv.Listener.Addr().String(), ":")[1]
		}); st != http.StatusForbidden {
			t.Errorf("%s with a foreign Host and the right port: %d, want 403", name, st)
		}
		if rt.Method == http.MethodGet {
			if st := send(rt.Method, path, adminToken, nil); st >= 500 || st == http.StatusUnauthorized || st == http.StatusForbidden {
				t.Errorf("%s with the admin token: %d", name, st)
			}
		}
	}
	if !walked["GET /extra-probe"] || extraHit.Load() == 0 {
		t.Errorf("the route mounted with Handle was not walked or not served (hits %d)", extraHit.Load())
	}
	if after := snapshot(); after != before {
		t.Errorf("walking the routes changed the database: %s -> %s", before, after)
	}
	// Same-origin POST from the dashboard passes the cross-origin check.
	if st := send(http.MethodPost, "/api/v1"+prefix+"/dead-letters/retry", adminToken, func(r *http.Request) {
		r.Header.Set("Origin", b.srv.URL)
		r.Header.Set("Sec-Fetch-Site", "same-origin")
		r.Body = io.NopCloser(strings.NewReader(`{"all":true,"dry_run":true}`))
		r.ContentLength = -1
	}); st != http.StatusOK {
		t.Errorf("same-origin dry-run POST: %d, want 200", st)
	}
}

// TestSecurityHeaders: strict CSP and friends on every answer, errors
// included.
func TestSecurityHeaders(t *testing.T) {
	t.Parallel()
	b := setup(t, storeharness.SQLite(), nil)
	for _, c := range []struct{ path, token string }{{"/", readToken}, {"/", ""}, {"/api/v1/overview", readToken}, {"/nope", readToken}} {
		_, _, h := b.do(http.MethodGet, c.path, c.token, "")
		csp := h.Get("Content-Security-Policy")
		if !strings.Contains(csp, "default-src 'none'") || !strings.Contains(csp, "script-src 'self'") || strings.Contains(csp, "unsafe") {
			t.Errorf("GET %s: CSP %q", c.path, csp)
		}
		if h.Get("X-Content-Type-Options") != "nosniff" || h.Get("X-Frame-Options") != "DENY" {
			t.Errorf("GET %s: headers %v", c.path, h)
		}
	}
}

// TestLoginSetsSessionCookie: the dashboard's login form turns a token
// into an HttpOnly, SameSite=Strict cookie that is not the token; a wrong
// token is a 401; the cookie then reads but (read token) does not change.
func TestLoginSetsSessionCookie(t *testing.T) {
	t.Parallel()
	b := setup(t, storeharness.SQLite(), nil)
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	login := func(tok string) *http.Response {
		req, _ := http.NewRequest(http.MethodPost, b.srv.URL+"/login", strings.NewReader("token="+tok))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		res, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res
	}
	if res := login("wrong-wrong-wrong-wrong"); res.StatusCode != http.StatusUnauthorized || len(res.Cookies()) != 0 {
		t.Fatalf("wrong token: %d, cookies %v", res.StatusCode, res.Cookies())
	}
	res := login(readToken)
	if res.StatusCode != http.StatusSeeOther || len(res.Cookies()) != 1 {
		t.Fatalf("login: %d, cookies %v", res.StatusCode, res.Cookies())
	}
	c := res.Cookies()[0]
	if c.Name != admin.SessionCookie || !c.HttpOnly || c.SameSite != http.SameSiteStrictMode || strings.Contains(c.Value, readToken) {
		t.Fatalf("cookie %+v", c)
	}
	get := func(method, path string, cookie *http.Cookie) int {
		req, _ := http.NewRequest(method, b.srv.URL+path, strings.NewReader(`{"all":true,"dry_run":true}`))
		req.AddCookie(cookie)
		res, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res.StatusCode
	}
	if st := get(http.MethodGet, "/api/v1/overview", c); st != http.StatusOK {
		t.Fatalf("overview with the session cookie: %d", st)
	}
	if st := get(http.MethodPost, "/api/v1/dead-letters/retry", c); st != http.StatusForbidden {
		t.Fatalf("retry with the read session: %d, want 403", st)
	}
	forged := *c
	forged.Value = c.Value[:len(c.Value)-2] + "xx"
	if st := get(http.MethodGet, "/api/v1/overview", &forged); st != http.StatusUnauthorized {
		t.Fatalf("forged cookie: %d, want 401", st)
	}
	// The login page is what a browser gets for a 401.
	req, _ := http.NewRequest(http.MethodGet, b.srv.URL+"/", nil)
	req.Header.Set("Accept", "text/html")
	res, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusUnauthorized || !strings.HasPrefix(res.Header.Get("Content-Type"), "text/html") {
		t.Fatalf("browser without a session: %d %s", res.StatusCode, res.Header.Get("Content-Type"))
	}
}

// TestNewRefusesBadConfig: weak, equal or missing tokens.
func TestNewRefusesBadConfig(t *testing.T) {
	t.Parallel()
	d := storeharness.PostgresDriver(t)
	for name, cfg := range map[string]admin.Config{
		"no store":     {AdminToken: adminToken},
		"no token":     {Store: d},
		"short token":  {Store: d, AdminToken: "short"},
		"equal tokens": {Store: d, AdminToken: adminToken, ReadToken: adminToken},
		"white space":  {Store: d, AdminToken: "token with spaces inside"},
	} {
		if _, err := admin.New(cfg); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// TestServerTimeouts: NewServer bounds header reads, so a client that
// never finishes its headers is cut off.
func TestServerTimeouts(t *testing.T) {
	t.Parallel()
	srv := admin.NewServer("127.0.0.1:0", http.NotFoundHandler(), nil)
	if srv.ReadHeaderTimeout <= 0 || srv.ReadTimeout <= 0 || srv.MaxHeaderBytes <= 0 {
		t.Fatalf("server %+v", srv)
	}
	srv.ReadHeaderTimeout = 200 * time.Millisecond
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Shutdown(context.Background()) })
	conn, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte("GET / HTTP/1.1\r\nHost: localhost\r\n")); err != nil {
		t.Fatal(err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	buf := make([]byte, 512)
	_, err = conn.Read(buf)
	for err == nil {
		_, err = conn.Read(buf)
	}
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatal("the server kept a connection with unfinished headers open for 30s")
	}
}

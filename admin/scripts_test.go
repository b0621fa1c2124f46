package admin_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/txbox/txbox/internal/storeharness"
	"github.com/txbox/txbox/store"
)

// TestDashboardForScripts: a script or a headless
// browser reaches the dashboard without the login form by sending the
// read token as an Authorization: Bearer header on every request, as
// docs/operations.md says: the page itself (not the login page), its
// assets and its API answer 200; every mutation answers 403 and changes
// nothing; a token in the URL is never accepted (a URL ends up in logs
// and histories).
func TestDashboardForScripts(t *testing.T) {
	t.Parallel()
	b := setup(t, storeharness.Postgres(), nil)
	id := b.deadLetter("scripted", "k", []byte(`{"n":1}`), "boom")
	get := func(path, token, accept string) (int, string) {
		t.Helper()
		req, err := http.NewRequestWithContext(b.ctx, http.MethodGet, b.srv.URL+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Accept", accept)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		res, err := b.srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		var sb strings.Builder
		buf := make([]byte, 32<<10)
		for {
			n, err := res.Body.Read(buf)
			sb.Write(buf[:n])
			if err != nil {
				break
			}
		}
		return res.StatusCode, sb.String()
	}
	const html = "text/html,application/xhtml+xml"
	code, loginPage := get("/", "", html)
	if code != http.StatusUnauthorized {
		t.Fatalf("GET / without a token: %d, want 401 (the login page)", code)
	}
	code, page := get("/", readToken, html)
	if code != http.StatusOK || page == loginPage || !strings.Contains(page, "assets/app.js") {
		t.Fatalf("GET / with the read token as a bearer header: %d, want 200 and the dashboard\n%.300s", code, page)
	}
	for _, path := range []string{"/assets/app.js", "/assets/app.css", "/api/v1/overview", "/api/v1/dead-letters", "/api/v1/dead-letters/" + id.String()} {
		if code, body := get(path, readToken, "*/*"); code != http.StatusOK {
			t.Errorf("GET %s with the read bearer token: %d %.200s", path, code, body)
		}
	}
	before, err := b.store.DeadLetterCount(b.ctx, &store.DeadLetterFilter{Status: store.DeadLetterUnresolved})
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{
		"/api/v1/dead-letters/" + id.String() + "/retry", "/api/v1/dead-letters/" + id.String() + "/resolve",
		"/api/v1/dead-letters/" + id.String() + "/delete", "/api/v1/dead-letters/retry", "/api/v1/dead-letters/delete",
	} {
		if code, _, _ := b.do(http.MethodPost, path, readToken, `{"all":true}`); code != http.StatusForbidden {
			t.Errorf("POST %s with the read token: %d, want 403", path, code)
		}
	}
	after, err := b.store.DeadLetterCount(b.ctx, &store.DeadLetterFilter{Status: store.DeadLetterUnresolved})
	if err != nil {
		t.Fatal(err)
	}
	if after != before || before == 0 {
		t.Errorf("unresolved dead letters %d before the read token's POSTs, %d after", before, after)
	}
	for _, q := range []string{"?token=", "?access_token=", "?bearer="} {
		if code, _ := get("/api/v1/overview"+q+readToken, "", "application/json"); code != http.StatusUnauthorized {
			t.Errorf("the read token in the URL (%s…): %d, want 401", q, code)
		}
	}
}

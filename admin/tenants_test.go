package admin_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/txbox/txbox/admin"
	"github.com/txbox/txbox/internal/storeharness"
	"github.com/txbox/txbox/internal/testenv"
)

// fakeTenants is admin.Tenants over a sorted list; a tenant with a
// Config runs.
type fakeTenants struct {
	list []admin.TenantStatus
	// asked is the largest page a List call asked for.
	asked int
}

func (f *fakeTenants) List(after string, limit int) ([]admin.TenantStatus, string) {
	f.asked = max(f.asked, limit)
	i := sort.Search(len(f.list), func(i int) bool { return f.list[i].Name > after })
	return f.list[i:min(len(f.list), i+limit)], ""
}

func (f *fakeTenants) Tenant(name string) (admin.TenantStatus, bool) {
	for _, s := range f.list {
		if s.Name == name {
			return s, true
		}
	}
	return admin.TenantStatus{}, false
}

// TestTenantListPages: 3,000 tenants page through GET /api/v1/tenants
// by keyset, each once, in name order, the handler asking its source for
// one page (and one more) at a time; a bad limit is a 400 problem.
func TestTenantListPages(t *testing.T) {
	t.Parallel()
	src := &fakeTenants{}
	for i := range 3000 {
		src.list = append(src.list, admin.TenantStatus{Name: fmt.Sprintf("t%05d", i), State: "failing", Err: "no database"})
	}
	h, err := admin.New(admin.Config{Tenants: src, ReadToken: readToken, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	get := func(path string) (int, []byte) {
		req, _ := http.NewRequest(http.MethodGet, srv.URL+path, nil)
		req.Header.Set("Authorization", "Bearer "+readToken)
		res, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, err := io.ReadAll(res.Body)
		if err != nil {
			t.Fatal(err)
		}
		return res.StatusCode, b
	}
	var seen []string
	cursor, pages := "", 0
	for {
		code, body := get("/api/v1/tenants?limit=" + fmt.Sprint(admin.MaxTenantPage) + "&cursor=" + cursor)
		var page admin.TenantPage
		if code != http.StatusOK || json.Unmarshal(body, &page) != nil {
			t.Fatalf("page %d: %d %s", pages, code, body)
		}
		pages++
		for _, v := range page.Tenants {
			if v.Running || v.Error != "no database" || v.DeadLetters != nil {
				t.Fatalf("%+v: want not running, its error, no counts", v)
			}
			seen = append(seen, v.Name)
		}
		if cursor = page.NextCursor; cursor == "" {
			break
		}
	}
	if len(seen) != 3000 || !sort.StringsAreSorted(seen) || seen[0] != "t00000" || pages != 6 {
		t.Fatalf("%d tenants in %d pages (sorted %v), want 3000 in 6", len(seen), pages, sort.StringsAreSorted(seen))
	}
	if src.asked != admin.MaxTenantPage+1 {
		t.Errorf("the handler asked its source for %d tenants at once, want a page and one more (%d)", src.asked, admin.MaxTenantPage+1)
	}
	if code, body := get("/api/v1/tenants?limit=100000"); code != http.StatusBadRequest || !strings.Contains(string(body), `"param":"limit"`) {
		t.Errorf("limit 100000: %d %s, want a 400 naming limit", code, body)
	}
}

// TestDashboardTenantPicker: on a relay with tenants the dashboard lists
// the tenants with their states, and picking one in the tenant picker
// shows that tenant's dead letters, not the other's. With
// TXBOX_UPDATE_SCREENSHOTS=1 its screenshot goes to
// docs/images/dashboard-tenants.png.
func TestDashboardTenantPicker(t *testing.T) {
	t.Parallel()
	node := requireBrowser(t)
	acme, globex := setup(t, storeharness.Postgres(), nil), setup(t, storeharness.Postgres(), nil)
	acmeID := acme.deadLetter("orders", "k1", []byte(`{"n":1}`), "acme's failure")
	globexID := globex.deadLetter("orders", "k2", []byte(`{"n":2}`), "globex's failure")
	src := &fakeTenants{list: []admin.TenantStatus{
		{Name: "acme", State: "running", Config: &admin.Config{Store: acme.store}},
		{Name: "globex", State: "running", Config: &admin.Config{Store: globex.store}},
		{Name: "zeta", State: "failing", Err: "database does not exist"},
	}}
	h, err := admin.New(admin.Config{Tenants: src, ReadToken: readToken, AdminToken: adminToken, StatsTTL: time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(&testenv.LogBuffer{}, nil))})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	shots := t.TempDir()
	if os.Getenv("TXBOX_UPDATE_SCREENSHOTS") != "" {
		shots, _ = filepath.Abs(filepath.Join("..", "docs", "images"))
	}
	res, stderr, err := runDashboard(t, ctx, node, "ADMIN_URL="+srv.URL+"/", "ADMIN_TOKEN="+adminToken, "SHOT_DIR="+shots,
		"TENANT_PICK=globex", "DEAD_LETTER_ID="+globexID.String(), "OTHER_DEAD_LETTER_ID="+acmeID.String())
	if err != nil {
		t.Fatalf("dashboard script: %v\n%s\nresult %+v", err, stderr, res)
	}
	if res.TenantRows != 3 || !strings.Contains(res.TenantStates, "zeta failing") || !strings.Contains(res.TenantStates, "acme running") {
		t.Errorf("the tenants table: %d rows, %q; want 3 with acme running and zeta failing", res.TenantRows, res.TenantStates)
	}
	if res.TenantFirstDeadLetters != 1 || res.TenantPickedDeadLetter != 1 || res.TenantOtherDeadLetter != 0 {
		t.Errorf("acme's dead letter shown first %d times; after picking globex, globex's %d, acme's %d; want 1, 1, 0",
			res.TenantFirstDeadLetters, res.TenantPickedDeadLetter, res.TenantOtherDeadLetter)
	}
}

// TestTenantStoppingAnswers503: a tenant whose Hold refuses (its relay is
// stopping: parked, removed, changed) gets a 503 with Retry-After 1 on
// its routes and a counts error in the listing, never a request on its
// closing store; a held route releases its hold when it is answered.
func TestTenantStoppingAnswers503(t *testing.T) {
	t.Parallel()
	released := make(chan struct{}, 1)
	src := &fakeTenants{list: []admin.TenantStatus{
		{Name: "going", State: "running", Config: &admin.Config{}, Hold: func() (func(), bool) { return nil, false }},
		{Name: "here", State: "running", Config: &admin.Config{Store: storeharness.SQLiteDriver(t)},
			Hold: func() (func(), bool) { return func() { released <- struct{}{} }, true }},
	}}
	h, err := admin.New(admin.Config{Tenants: src, ReadToken: readToken, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	get := func(path string) (*http.Response, []byte) {
		req, _ := http.NewRequest(http.MethodGet, srv.URL+path, nil)
		req.Header.Set("Authorization", "Bearer "+readToken)
		res, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res, b
	}
	res, body := get("/api/v1/tenants/going/dead-letters")
	if res.StatusCode != http.StatusServiceUnavailable || res.Header.Get("Retry-After") != "1" || !strings.Contains(string(body), "stopping") {
		t.Errorf("a stopping tenant's route: %d Retry-After %q %s, want 503, Retry-After 1, stopping", res.StatusCode, res.Header.Get("Retry-After"), body)
	}
	res, body = get("/api/v1/tenants/here/dead-letters/count")
	if res.StatusCode != http.StatusOK {
		t.Fatalf("a held tenant's route: %d %s", res.StatusCode, body)
	}
	select {
	case <-released:
	default:
		t.Error("the held route did not release its hold")
	}
	_, body = get("/api/v1/tenants")
	var page admin.TenantPage
	if err := json.Unmarshal(body, &page); err != nil || len(page.Tenants) != 2 {
		t.Fatalf("listing: %v %s", err, body)
	}
	if page.Tenants[0].CountsError != "the tenant is stopping" || page.Tenants[0].DeadLetters != nil {
		t.Errorf("a stopping tenant in the listing: %+v, want a counts error and no counts", page.Tenants[0])
	}
	if page.Tenants[1].CountsError != "" || page.Tenants[1].DeadLetters == nil {
		t.Errorf("a held tenant in the listing: %+v, want its counts", page.Tenants[1])
	}
}

package admin_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/admin"
	"github.com/txbox/txbox/internal/storeharness"
	"github.com/txbox/txbox/internal/testenv"
	"github.com/txbox/txbox/relay"
	"github.com/txbox/txbox/relay/relaytest"
	"github.com/txbox/txbox/sender"
	"github.com/txbox/txbox/sender/webhook"
	"github.com/txbox/txbox/store"
)

// receiver is a webhook endpoint that refuses payloads containing
// "poison" (422, a permanent error: dead-lettered at once) until told to
// accept them.
type receiver struct {
	accept atomic.Bool
	mu     sync.Mutex
	got    map[string]int
}

func (rc *receiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	if bytes.Contains(body, []byte("hostile")) && !rc.accept.Load() {
		// A problem body whose text is markup: the dashboard must show
		// it as text (the failure group's title).
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(http.StatusUnprocessableEntity)
		_, _ = w.Write([]byte(`{"title":"<img src=x onerror=alert(1)>","detail":"order <script>alert(2)</script> unknown"}`))
		return
	}
	if bytes.Contains(body, []byte("poison")) && !rc.accept.Load() {
		w.WriteHeader(http.StatusUnprocessableEntity)
		return
	}
	rc.mu.Lock()
	rc.got[r.Header.Get("Idempotency-Key")]++
	rc.mu.Unlock()
	w.WriteHeader(http.StatusOK)
}

func (rc *receiver) delivered(id txbox.ID) bool {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return rc.got[id.String()] > 0
}

// e2eResult is what admin/e2e/dashboard.mjs prints.
type e2eResult struct {
	FirstStatus int      `json:"firstStatus"`
	SentBefore  int64    `json:"sentBefore"`
	SentAfter   int64    `json:"sentAfter"`
	ChartLines  int      `json:"chartLines"`
	Preview     string   `json:"preview"`
	ConfirmText string   `json:"confirmText"`
	Message     string   `json:"message"`
	PageErrors  []string `json:"pageErrors"`
	// Failover and FailoverClass are the WAL stream's failover line and
	// its class, with FAILOVER_WANT.
	Failover      string `json:"failover"`
	FailoverClass string `json:"failoverClass"`
	// GroupMessage, GroupMarkup, GroupConfirm and GroupResult are the
	// failure group of GROUP_TYPE: its title as text, the elements its
	// row holds (markup in the error text must not make any), the
	// confirmation of its retry and the progress line after it.
	GroupMessage string `json:"groupMessage"`
	GroupMarkup  int    `json:"groupMarkup"`
	GroupConfirm string `json:"groupConfirm"`
	GroupResult  string `json:"groupResult"`
	GroupAudit   string `json:"groupAudit"`
	// AuditRow is the cells of the retry's audit row; AuditWho and
	// AuditFilter the cells of the hostile entry, AuditElements the
	// elements the audit table holds that a hostile text would make.
	AuditRow      string `json:"auditRow"`
	AuditWho      string `json:"auditWho"`
	AuditFilter   string `json:"auditFilter"`
	AuditElements int    `json:"auditElements"`
	// With TENANT_PICK: the tenants table's rows and their name and
	// state cells; how many rows of OTHER_DEAD_LETTER_ID (the first
	// tenant's) the dead-letter table showed before the pick; and after
	// picking, the rows of DEAD_LETTER_ID and of OTHER_DEAD_LETTER_ID.
	TenantRows             int    `json:"tenantRows"`
	TenantStates           string `json:"tenantStates"`
	TenantFirstDeadLetters int    `json:"tenantFirstDeadLetters"`
	TenantPickedDeadLetter int    `json:"tenantPickedDeadLetter"`
	TenantOtherDeadLetter  int    `json:"tenantOtherDeadLetter"`
}

// requireBrowser finds node, the npm package and Chromium, which
// scripts/services.sh installs. Missing pieces fail the test under CI and
// skip it elsewhere.
func requireBrowser(t *testing.T) string {
	t.Helper()
	node, err := exec.LookPath("node")
	missing := ""
	switch {
	case err != nil:
		missing = "node"
	case !fileExists("/usr/bin/chromium"):
		missing = "/usr/bin/chromium (apt-get install chromium)"
	case !fileExists(filepath.Join("e2e", "node_modules", "playwright-core", "package.json")):
		missing = "admin/e2e/node_modules (npm ci --prefix admin/e2e)"
	}
	if missing != "" {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s is missing; scripts/services.sh installs it", missing)
		}
		t.Skipf("%s is missing; run scripts/services.sh", missing)
	}
	return node
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

// runDashboard runs the browser script and returns its result and error.
func runDashboard(t *testing.T, ctx context.Context, node string, env ...string) (e2eResult, string, error) {
	t.Helper()
	cmd := exec.CommandContext(ctx, node, "dashboard.mjs")
	cmd.Dir = "e2e"
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var res e2eResult
	if line := strings.TrimSpace(stdout.String()); line != "" {
		if jerr := json.Unmarshal([]byte(line[strings.LastIndexByte(line, '\n')+1:]), &res); jerr != nil {
			t.Fatalf("browser script printed %q: %v", stdout.String(), jerr)
		}
	}
	return res, stderr.String(), err
}

// TestDashboardInChromium drives the dashboard in headless Chromium
// against a relay delivering to a webhook on PostgreSQL: the page fails
// without the token; with it, the sent counter moves while events flow,
// and a dead letter retried from the page is delivered. With
// TXBOX_UPDATE_SCREENSHOTS=1 the screenshots go to docs/.
func TestDashboardInChromium(t *testing.T) {
	t.Parallel()
	node := requireBrowser(t)
	rc := &receiver{got: map[string]int{}}
	hook := httptest.NewServer(rc)
	t.Cleanup(hook.Close)
	ws, err := webhook.New(webhook.Config{})
	if err != nil {
		t.Fatal(err)
	}
	rec := &admin.Recorder{}
	b := setup(t, storeharness.Postgres(), func(c *admin.Config) {
		r := relaytest.Start(t, relay.Config{
			Store:   c.Store,
			Senders: map[string]sender.Sender{"hook": ws},
			Defaults: relay.EventSettings{
				Route:       &sender.Route{URL: hook.URL + "/events"},
				MaxAttempts: new(1),
				Polling:     &relay.PollingSettings{MinDelay: new(10 * time.Millisecond), MaxDelay: new(200 * time.Millisecond)},
			},
			DiscoverInterval:   100 * time.Millisecond,
			DeadLetterInterval: 50 * time.Millisecond,
			HeartbeatInterval:  time.Second,
			InstanceID:         "e2e-relay",
			Hooks:              []txbox.RelayHook{rec},
			Logger:             c.Logger,
		})
		c.Relay, c.Recorder = r, rec
		c.StatsTTL = 500 * time.Millisecond
	})
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	poison := &txbox.Event{ID: txbox.NewID(), Type: "orders", Key: "cust-7", Payload: []byte(`{"order":7,"note":"poison <b>not bold</b>"}`)}
	hostile := []*txbox.Event{
		{ID: txbox.NewID(), Type: "refunds", Payload: []byte(`{"refund":1,"note":"hostile"}`)},
		{ID: txbox.NewID(), Type: "refunds", Payload: []byte(`{"refund":2,"note":"hostile"}`)},
	}
	b.publish(append([]*txbox.Event{poison}, hostile...)...)
	testenv.WaitFor(t, time.Minute, "the poison and hostile events dead-lettered and fingerprinted", func() bool {
		n, err := b.store.DeadLetterCount(ctx, &store.DeadLetterFilter{})
		if err != nil || n != 3 {
			return false
		}
		gs, err := b.store.DeadLetterGroups(ctx, &store.DeadLetterGroupsParams{Limit: 10})
		return err == nil && len(gs) == 2
	})
	// Events keep flowing while the browser watches.
	flow, stopFlow := context.WithCancel(ctx)
	var producer sync.WaitGroup
	producer.Add(1)
	go func() {
		defer producer.Done()
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-flow.Done():
				return
			case <-tick.C:
			}
			evs := []*txbox.Event{
				{ID: txbox.NewID(), Type: "orders", Payload: []byte(`{"n":1}`)},
				{ID: txbox.NewID(), Type: "payments", Payload: []byte(`{"n":2}`)},
			}
			tx := b.h.Begin(t, b.store)
			if err := b.store.OutboxInsert(flow, tx.Native(), &store.OutboxInsertParams{Events: evs}); err != nil {
				_ = tx.Rollback()
				return
			}
			_ = tx.Commit()
		}
	}()
	defer func() { stopFlow(); producer.Wait() }()

	url := b.srv.URL + "/"
	// Without the token the script cannot get past the login page.
	res, stderr, err := runDashboard(t, ctx, node, "ADMIN_URL="+url, "ADMIN_TOKEN=not-the-token-at-all", "STEP_TIMEOUT_MS=5000")
	if err == nil {
		t.Fatalf("the dashboard script passed without a valid token: %+v", res)
	}
	if res.FirstStatus != http.StatusUnauthorized {
		t.Fatalf("page without a session: status %d, want 401 (stderr %s)", res.FirstStatus, stderr)
	}

	// An entry of the audit trail with hostile texts, as a CLI user name
	// and a filter may be: the audit view must show them as text.
	hostileWho := `cli:<img src=x onerror=alert(1)>`
	hostileFilter := `{"error":"<script>alert(2)</script><b>x</b>"}`
	if err := b.store.AuditAppend(ctx, &store.AuditEntry{Who: hostileWho, Action: "resolve", Selector: store.AuditSelectorFilter, Filter: hostileFilter, Matched: 1}); err != nil {
		t.Fatal(err)
	}

	rc.accept.Store(true)
	shots := t.TempDir()
	if os.Getenv("TXBOX_UPDATE_SCREENSHOTS") != "" {
		shots, _ = filepath.Abs(filepath.Join("..", "docs", "images"))
		if err := os.MkdirAll(shots, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	res, stderr, err = runDashboard(t, ctx, node, "ADMIN_URL="+url, "ADMIN_TOKEN="+adminToken,
		"DEAD_LETTER_ID="+poison.ID.String(), "EVENT_TYPE=orders", "SHOT_DIR="+shots, "GROUP_TYPE=refunds", "AUDIT_HOSTILE="+hostileWho)
	if err != nil {
		t.Fatalf("dashboard script: %v\n%s\nresult %+v", err, stderr, res)
	}
	if res.SentAfter <= res.SentBefore || res.ChartLines < 2 {
		t.Fatalf("the numbers did not move: %+v", res)
	}
	if !strings.Contains(res.Preview, "poison <b>not bold</b>") || !strings.Contains(res.ConfirmText, poison.ID.String()) {
		t.Fatalf("preview %q, confirmation %q", res.Preview, res.ConfirmText)
	}
	if !strings.Contains(res.AuditRow, "admin-token | retry |  | ids |") || !strings.Contains(res.AuditRow, poison.ID.String()) ||
		!strings.HasSuffix(res.AuditRow, "| 1 | 1 | ") {
		t.Errorf("the retry's audit row: %q", res.AuditRow)
	}
	if res.AuditWho != hostileWho || res.AuditFilter != hostileFilter || res.AuditElements != 0 {
		t.Errorf("hostile audit entry: who %q, filter %q, %d elements made of them", res.AuditWho, res.AuditFilter, res.AuditElements)
	}
	testenv.WaitFor(t, time.Minute, "the retried dead letter delivered", func() bool { return rc.delivered(poison.ID) })
	// The failure group: its title is the receiver's markup as text, and
	// its retry from the page delivers exactly its two dead letters.
	if !strings.Contains(res.GroupMessage, "<img src=x onerror=alert(<n>)>") || !strings.Contains(res.GroupMessage, "<script>alert(<n>)</script>") || res.GroupMarkup != 0 {
		t.Errorf("group title %q with %d elements inside, want the markup as text", res.GroupMessage, res.GroupMarkup)
	}
	if !strings.Contains(res.GroupConfirm, "retry the 2 dead letters of the group") || !strings.Contains(res.GroupResult, "retry: 2 of 2 changed.") {
		t.Errorf("group retry: confirmation %q, result %q", res.GroupConfirm, res.GroupResult)
	}
	if !strings.Contains(res.GroupAudit, `| group | {"group":"`) || !strings.Contains(res.GroupAudit, "| 2 | 2 |") {
		t.Errorf("the group retry's audit row: %q", res.GroupAudit)
	}
	for _, ev := range hostile {
		testenv.WaitFor(t, time.Minute, "the retried group delivered", func() bool { return rc.delivered(ev.ID) })
	}
	if _, err := b.store.DeadLetterGet(ctx, poison.ID); err == nil {
		t.Fatal("the retried event is still in the dead-letter table")
	}
	for _, f := range []string{"dashboard.png", "dashboard-dead-letter.png", "dashboard-confirm.png", "dashboard-audit.png"} {
		if st, err := os.Stat(filepath.Join(shots, f)); err != nil || st.Size() < 1000 {
			t.Errorf("screenshot %s: %v", f, err)
		}
	}
	if !strings.Contains(b.logs.String(), "who=admin-token action=retry dry_run=false selector=ids matched=1 changed=1") {
		t.Errorf("no audit line for the retry:\n%s", b.logs)
	}
}

package admin_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/admin"
	"github.com/txbox/txbox/store/postgres"
	"github.com/txbox/txbox/store/sqlite"
)

// TestAuditAPI runs the audit trail on PostgreSQL and SQLite: every
// action, dry runs included, writes an entry naming the token, what it
// selected and how many it matched and changed; GET /api/v1/audit lists
// them newest first in cursor pages, with the read token, and refuses bad
// parameters with 400 problems; an entry that cannot be written is a
// WARN line, never a failed action.
func TestAuditAPI(t *testing.T) {
	t.Parallel()
	for name, h := range dialects() {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, h, nil)
			for i := range 3 {
				b.deadLetter("orders", "", []byte(`{}`), fmt.Sprintf("503 upstream %d", i))
			}
			other := b.deadLetter("payments", "", []byte(`{}`), "402")

			// Two dry runs, a filtered retry, a resolve by ids (one unknown)
			// and a single delete.
			hostile := `<img src=x onerror=alert(1)>`
			b.post("/api/v1/dead-letters/delete", `{"filter":{"type":"orders","error":"`+hostile+`"},"dry_run":true}`, 200, nil)
			b.post("/api/v1/dead-letters/retry", `{"filter":{"type":"orders"},"dry_run":true}`, 200, nil)
			b.post("/api/v1/dead-letters/retry", `{"filter":{"type":"orders"}}`, 200, nil)
			b.post("/api/v1/dead-letters/resolve", `{"ids":["`+other.String()+`","`+txbox.NewID().String()+`"]}`, 200, nil)
			b.post("/api/v1/dead-letters/"+other.String()+"/delete", ``, 200, nil)

			var page admin.AuditPage
			b.getJSON("/api/v1/audit", &page)
			if len(page.Entries) != 5 || page.NextCursor != "" {
				t.Fatalf("audit: %+v", page)
			}
			type want struct {
				action, selector string
				dryRun           bool
				matched, changed int64
				filter           string
			}
			for i, w := range []want{
				{"delete", "ids", false, 1, 1, `{"ids":["` + other.String() + `"],"matched":1}`},
				{"resolve", "ids", false, 1, 1, `{"ids":["` + other.String() + `"],"matched":1}`},
				{"retry", "filter", false, 3, 3, `{"type":"orders"}`},
				{"retry", "filter", true, 3, 3, `{"type":"orders"}`},
				{"delete", "filter", true, 0, 0, ""},
			} {
				e := page.Entries[i]
				if e.Who != "admin-token" || e.Action != w.action || e.Selector != w.selector || e.DryRun != w.dryRun || e.At.IsZero() || e.Error != "" {
					t.Errorf("entry %d: %+v, want %+v", i, e, w)
				}
				if w.filter != "" && (e.Matched != w.matched || e.Changed != w.changed || e.Filter != w.filter) {
					t.Errorf("entry %d: matched %d changed %d filter %s, want %d %d %s", i, e.Matched, e.Changed, e.Filter, w.matched, w.changed, w.filter)
				}
				if i > 0 && e.ID >= page.Entries[i-1].ID {
					t.Errorf("entry %d: id %d not below %d", i, e.ID, page.Entries[i-1].ID)
				}
			}
			// The first dry run matched nothing (no dead letter has that
			// error); its filter keeps the hostile text as is.
			e := page.Entries[4]
			var f map[string]string
			if err := json.Unmarshal([]byte(e.Filter), &f); err != nil || f["error"] != hostile || f["type"] != "orders" || e.Matched != 0 || e.Changed != 0 {
				t.Errorf("hostile dry run %+v: %v", e, err)
			}

			// Cursor pages of 1 and one action.
			var got []int64
			for cursor := ""; ; {
				q := url.Values{"limit": {"1"}}
				if cursor != "" {
					q.Set("cursor", cursor)
				}
				var p admin.AuditPage
				b.getJSON("/api/v1/audit?"+q.Encode(), &p)
				for _, e := range p.Entries {
					got = append(got, e.ID)
				}
				if cursor = p.NextCursor; cursor == "" || len(got) > 10 {
					break
				}
			}
			if len(got) != 5 || got[0] != page.Entries[0].ID || got[4] != page.Entries[4].ID {
				t.Errorf("paged ids %v", got)
			}
			b.getJSON("/api/v1/audit?action=retry&limit=1", &page)
			if len(page.Entries) != 1 || page.Entries[0].Action != "retry" || page.Entries[0].DryRun || page.NextCursor == "" {
				t.Errorf("retries: %+v", page)
			}
			var second admin.AuditPage
			b.getJSON("/api/v1/audit?action=retry&cursor="+page.NextCursor, &second)
			if len(second.Entries) != 1 || second.Entries[0].Action != "retry" || !second.Entries[0].DryRun || second.NextCursor != "" {
				t.Errorf("retries, second page: %+v", second)
			}

			// Reading needs a token, the read token is enough.
			if st, _, _ := b.do(http.MethodGet, "/api/v1/audit", "", ""); st != http.StatusUnauthorized {
				t.Errorf("no token: %d", st)
			}
			if st, _, _ := b.do(http.MethodPost, "/api/v1/audit", adminToken, "{}"); st != http.StatusMethodNotAllowed {
				t.Errorf("POST: %d", st)
			}
			for _, c := range []struct{ query, param string }{
				{"limit=0", "limit"}, {"limit=501", "limit"}, {"limit=x", "limit"},
				{"cursor=%ff", "cursor"}, {"cursor=AAAA", "cursor"}, {"cursor=" + deadLetterCursor(t, b), "cursor"},
				{"action=Retry", "action"}, {"action=" + strings.Repeat("a", 33), "action"}, {"action=a&action=b", "action"},
				{"who=me", "who"},
			} {
				st, body, hd := b.do(http.MethodGet, "/api/v1/audit?"+c.query, readToken, "")
				var p admin.Problem
				if st != http.StatusBadRequest || hd.Get("Content-Type") != "application/problem+json" ||
					json.Unmarshal(body, &p) != nil || len(p.Errors) == 0 || p.Errors[0].Param != c.param {
					t.Errorf("?%s: %d %s %s, want a 400 problem naming %s", c.query, st, hd.Get("Content-Type"), body, c.param)
				}
			}

			// The audit table gone: the action still succeeds, a WARN says
			// the entry was not written.
			switch d := b.store.(type) {
			case *postgres.Driver:
				tb := d.Tables()
				if _, err := d.Pool().Exec(b.ctx, "DROP TABLE "+pgx.Identifier{tb.Schema, tb.Audit}.Sanitize()); err != nil {
					t.Fatal(err)
				}
			case *sqlite.Driver:
				if _, err := d.DB().ExecContext(b.ctx, `DROP TABLE "`+d.Tables().Audit+`"`); err != nil {
					t.Fatal(err)
				}
			}
			// (The orders were retried above: a new dead letter to resolve.)
			late := b.deadLetter("late", "", []byte(`{}`), "late")
			var res admin.BulkResult
			b.post("/api/v1/dead-letters/resolve", `{"ids":["`+late.String()+`"]}`, 200, &res)
			if res.Changed != 1 {
				t.Errorf("resolve after the drop: %+v", res)
			}
			if logs := b.logs.String(); !strings.Contains(logs, "level=WARN") || !strings.Contains(logs, "the audit entry was not written") {
				t.Errorf("no WARN for the lost audit entry:\n%s", logs)
			}
		})
	}
}

// deadLetterCursor returns a cursor of the dead-letter listing: the audit
// listing must refuse it.
func deadLetterCursor(t *testing.T, b *bundle) string {
	t.Helper()
	var p admin.DeadLetterPage
	b.getJSON("/api/v1/dead-letters?status=resolved&limit=1", &p)
	if p.NextCursor == "" {
		b.deadLetter("cursor", "", []byte(`{}`), "x")
		b.deadLetter("cursor", "", []byte(`{}`), "x")
		b.getJSON("/api/v1/dead-letters?type=cursor&limit=1", &p)
	}
	if p.NextCursor == "" {
		t.Fatal("no dead-letter cursor")
	}
	return p.NextCursor
}

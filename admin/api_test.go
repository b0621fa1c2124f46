package admin_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/admin"
	"github.com/txbox/txbox/store"
)

// TestDeadLetterAPI runs the dead-letter routes on PostgreSQL and SQLite:
// filters, cursor pages, count, a safe preview, the full body, retry,
// resolve and delete with dry runs, and one audit line per mutation.
func TestDeadLetterAPI(t *testing.T) {
	t.Parallel()
	for name, h := range dialects() {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, h, func(c *admin.Config) { c.PreviewBytes = 16 })
			var ids []txbox.ID
			for i := range 5 {
				ids = append(ids, b.deadLetter("orders", fmt.Sprintf("k%d", i%2), []byte(fmt.Sprintf(`{"n":%d}`, i)), fmt.Sprintf("503 upstream %d", i)))
			}
			xss := b.deadLetter("hostile", "", []byte(`<script>alert("x")</script><img src=x onerror=alert(1)>`), "rejected <b>bold</b>")
			bin := b.deadLetter("binary", "", []byte{0xff, 0xfe, 0x00, 0x01, 0x80}, "bad")

			// Listing: newest failure first, filters, cursor pages.
			var page admin.DeadLetterPage
			b.getJSON("/api/v1/dead-letters?type=orders&limit=2", &page)
			if len(page.Items) != 2 || page.NextCursor == "" || page.Items[0].ID != ids[4].String() || page.Items[0].Payload.Preview != nil {
				t.Fatalf("first page %+v", page)
			}
			seen := map[string]bool{}
			for cursor := ""; ; {
				q := url.Values{"type": {"orders"}, "limit": {"2"}}
				if cursor != "" {
					q.Set("cursor", cursor)
				}
				var p admin.DeadLetterPage
				b.getJSON("/api/v1/dead-letters?"+q.Encode(), &p)
				for _, it := range p.Items {
					if seen[it.ID] {
						t.Fatalf("%s on two pages", it.ID)
					}
					seen[it.ID] = true
				}
				if cursor = p.NextCursor; cursor == "" {
					break
				}
			}
			if len(seen) != 5 {
				t.Fatalf("pages held %d dead letters, want 5", len(seen))
			}
			b.getJSON("/api/v1/dead-letters?key=k1&status=UNRESOLVED&error=upstream", &page)
			if len(page.Items) != 2 {
				t.Fatalf("key k1: %d items", len(page.Items))
			}
			future := url.QueryEscape(time.Now().Add(time.Hour).UTC().Format(time.RFC3339))
			b.getJSON("/api/v1/dead-letters?failed_after="+future, &page)
			if len(page.Items) != 0 {
				t.Fatalf("failed after an hour from now: %d", len(page.Items))
			}
			var count struct{ Count int64 }
			b.getJSON("/api/v1/dead-letters/count?error=upstream+3", &count)
			if count.Count != 1 {
				t.Fatalf("count = %d", count.Count)
			}

			// Get: a preview that is text, never markup; the full body on
			// request; the download is never rendered.
			st, raw, _ := b.do(http.MethodGet, "/api/v1/dead-letters/"+xss.String(), readToken, "")
			if st != http.StatusOK || strings.Contains(string(raw), "<script>") || strings.Contains(string(raw), "<b>") {
				t.Fatalf("hostile dead letter: %d %s", st, raw)
			}
			var dl admin.DeadLetter
			if err := json.Unmarshal(raw, &dl); err != nil {
				t.Fatal(err)
			}
			if dl.Payload.Size != 55 || !dl.Payload.Truncated || *dl.Payload.Preview != `<script>alert("x` || dl.Payload.Encoding != "utf-8" || dl.Headers["tenant"] != "acme" {
				t.Fatalf("preview %+v", dl.Payload)
			}
			var full, binary admin.DeadLetter
			b.getJSON("/api/v1/dead-letters/"+xss.String()+"?full=true", &full)
			if full.Payload.Truncated || len(*full.Payload.Preview) != 55 {
				t.Fatalf("full %+v", full.Payload)
			}
			b.getJSON("/api/v1/dead-letters/"+bin.String(), &binary)
			if binary.Payload.Encoding != "base64" || *binary.Payload.Preview != "//4AAYA=" {
				t.Fatalf("binary %+v", binary.Payload)
			}
			st, raw, hd := b.do(http.MethodGet, "/api/v1/dead-letters/"+xss.String()+"/payload", readToken, "")
			if st != http.StatusOK || hd.Get("Content-Type") != "application/octet-stream" || !strings.HasPrefix(hd.Get("Content-Disposition"), "attachment") || !strings.HasPrefix(string(raw), "<script>") {
				t.Fatalf("download %d %v", st, hd)
			}

			// Retry one: a dry run changes nothing, then it goes back to the
			// outbox with its id.
			var res admin.BulkResult
			b.post("/api/v1/dead-letters/"+ids[0].String()+"/retry", `{"dry_run":true}`, http.StatusOK, &res)
			if res.Matched != 1 || res.Changed != 1 || !res.DryRun {
				t.Fatalf("dry run %+v", res)
			}
			if _, err := b.store.DeadLetterGet(b.ctx, ids[0]); err != nil {
				t.Fatalf("the dry run moved it: %v", err)
			}
			b.post("/api/v1/dead-letters/"+ids[0].String()+"/retry", "", http.StatusOK, &res)
			if res.Matched != 1 || res.Changed != 1 || res.DryRun {
				t.Fatalf("retry %+v", res)
			}
			rows, err := b.store.OutboxClaim(b.ctx, &store.OutboxClaimParams{EventType: "orders", Limit: 10, LeaseDuration: time.Hour})
			if err != nil || len(rows) != 1 || rows[0].ID != ids[0] {
				t.Fatalf("retried row not claimable: %v, %v", rows, err)
			}
			b.post("/api/v1/dead-letters/"+ids[0].String()+"/retry", "", http.StatusNotFound, nil)

			// Bulk by filter: resolve key k1's; the dry run counts first.
			b.post("/api/v1/dead-letters/resolve", `{"filter":{"type":"orders","key":"k1"},"dry_run":true}`, http.StatusOK, &res)
			if res.Matched != 2 || res.Changed != 2 || res.Selector != "filter" {
				t.Fatalf("dry resolve %+v", res)
			}
			b.post("/api/v1/dead-letters/resolve", `{"filter":{"type":"orders","key":"k1"}}`, http.StatusOK, &res)
			if res.Changed != 2 {
				t.Fatalf("resolve %+v", res)
			}
			b.post("/api/v1/dead-letters/resolve", `{"filter":{"type":"orders","key":"k1"},"dry_run":true}`, http.StatusOK, &res)
			if res.Matched != 2 || res.Changed != 0 {
				t.Fatalf("resolving again would change %+v", res)
			}
			// Bulk by ids: delete, an unknown id is not counted.
			body := fmt.Sprintf(`{"ids":[%q,%q,%q]}`, ids[2], ids[4], txbox.NewID())
			b.post("/api/v1/dead-letters/delete", body, http.StatusOK, &res)
			if res.Matched != 2 || res.Changed != 2 || res.Selector != "ids" {
				t.Fatalf("delete %+v", res)
			}
			b.post("/api/v1/dead-letters/retry", `{"all":true,"dry_run":true}`, http.StatusOK, &res)
			if res.Matched != 4 {
				t.Fatalf("all: %+v (left: %s, %s, hostile, binary)", res, ids[1], ids[3])
			}

			logs := b.logs.String()
			for _, want := range []string{
				`who=admin-token action=retry dry_run=true selector=ids matched=1 changed=1`,
				`who=admin-token action=retry dry_run=false selector=ids matched=1 changed=1`,
				`action=resolve dry_run=false selector=filter matched=2 changed=2`,
				`filter.type=orders filter.key=k1 ids`,
				`action=delete dry_run=false selector=ids matched=2 changed=2`,
			} {
				if !strings.Contains(logs, want) {
					t.Errorf("audit log lacks %q:\n%s", want, logs)
				}
			}
		})
	}
}

// TestBadInputIsA4xx: malformed parameters and bodies get a problem
// details answer with a 4xx naming the parameter, never a 500.
func TestBadInputIsA4xx(t *testing.T) {
	t.Parallel()
	for name, h := range dialects() {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, h, func(c *admin.Config) { c.MaxBodyBytes = 4096 })
			id := b.deadLetter("bad", "", []byte("x"), "x")
			for _, c := range []struct {
				method, path, body string
				status             int
				param              string
			}{
				{"GET", "/api/v1/dead-letters?limit=0", "", 400, "limit"},
				{"GET", "/api/v1/dead-letters?limit=abc", "", 400, "limit"},
				{"GET", "/api/v1/dead-letters?limit=100000", "", 400, "limit"},
				{"GET", "/api/v1/dead-letters?status=dead", "", 400, "status"},
				{"GET", "/api/v1/dead-letters?type=" + url.QueryEscape(`x"; DROP TABLE t;--`), "", 400, "type"},
				{"GET", "/api/v1/dead-letters?failed_after=yesterday", "", 400, "failed_after"},
				{"GET", "/api/v1/dead-letters?failed_after=2026-01-02T00:00:00Z&failed_before=2026-01-01T00:00:00Z", "", 400, "failed_before"},
				{"GET", "/api/v1/dead-letters?cursor=%ff%fe", "", 400, "cursor"},
				{"GET", "/api/v1/dead-letters?cursor=AAAA", "", 400, "cursor"},
				{"GET", "/api/v1/dead-letters?stauts=resolved", "", 400, "stauts"},
				{"GET", "/api/v1/dead-letters?type=a&type=b", "", 400, "type"},
				{"GET", "/api/v1/dead-letters?key=" + strings.Repeat("k", 1001), "", 400, "key"},
				{"GET", "/api/v1/dead-letters?error=%00", "", 400, "error"},
				{"GET", "/api/v1/dead-letters?route=" + url.QueryEscape("a b"), "", 400, "route"},
				{"GET", "/api/v1/dead-letters?route=" + strings.Repeat("r", 65), "", 400, "route"},
				{"GET", "/api/v1/dead-letters/count?route=%27--", "", 400, "route"},
				{"GET", "/api/v1/dead-letters?route=a&route=b", "", 400, "route"},
				{"GET", "/api/v1/dead-letters/count?limit=5", "", 400, "limit"},
				{"GET", "/api/v1/dead-letters/not-a-uuid", "", 400, "id"},
				{"GET", "/api/v1/dead-letters/" + id.String() + "?full=maybe", "", 400, "full"},
				{"GET", "/api/v1/dead-letters/" + txbox.NewID().String(), "", 404, ""},
				{"GET", "/api/v1/overview?x=1", "", 400, "x"},
				{"GET", "/api/v1/parked-keys?limit=-1", "", 400, "limit"},
				{"GET", "/api/v1/no-such-route", "", 404, ""},
				{"DELETE", "/api/v1/dead-letters/" + id.String(), "", 405, ""},
				{"POST", "/api/v1/dead-letters/retry", "", 400, "body"},
				{"POST", "/api/v1/dead-letters/retry", `{}`, 400, "body"},
				{"POST", "/api/v1/dead-letters/retry", `{"filter":{}}`, 400, "body"},
				{"POST", "/api/v1/dead-letters/retry", `{"ids":["x"]}`, 400, "ids[0]"},
				{"POST", "/api/v1/dead-letters/retry", `{"ids":[],"all":true,"filter":{"type":"a"}}`, 400, "body"},
				{"POST", "/api/v1/dead-letters/retry", `{"filter":{"status":"gone"}}`, 400, "filter.status"},
				{"POST", "/api/v1/dead-letters/retry", `{"filter":{"route":"no/route"}}`, 400, "filter.route"},
				{"POST", "/api/v1/dead-letters/retry", `{"all":true,"bogus":1}`, 400, "body"},
				{"POST", "/api/v1/dead-letters/retry", `{"all":true} {"all":true}`, 400, "body"},
				{"POST", "/api/v1/dead-letters/retry", `[1,2]`, 400, "body"},
				{"POST", "/api/v1/dead-letters/retry", `{"ids":["` + strings.Repeat("a", 5000) + `"]}`, 413, ""},
				{"POST", "/api/v1/dead-letters/not-a-uuid/retry", "", 400, "id"},
			} {
				st, body, hd := b.do(c.method, c.path, adminToken, c.body)
				if st != c.status {
					t.Errorf("%s %s %.60s: %d %s, want %d", c.method, c.path, c.body, st, body, c.status)
					continue
				}
				if hd.Get("Content-Type") != "application/problem+json" {
					t.Errorf("%s %s: Content-Type %q", c.method, c.path, hd.Get("Content-Type"))
				}
				var p admin.Problem
				if err := json.Unmarshal(body, &p); err != nil || p.Status != st || p.Title == "" {
					t.Errorf("%s %s: problem %s (%v)", c.method, c.path, body, err)
				}
				if c.param != "" && (len(p.Errors) == 0 || p.Errors[0].Param != c.param) {
					t.Errorf("%s %s: errors %+v, want one naming %s", c.method, c.path, p.Errors, c.param)
				}
			}
			if strings.Contains(b.logs.String(), "admin request failed") {
				t.Errorf("bad input was logged as a failure:\n%s", b.logs)
			}
		})
	}
}

// TestOverview: per-type backlog split into due and scheduled, lag,
// instances with heartbeats and parked keys of ordered types only.
func TestOverview(t *testing.T) {
	t.Parallel()
	for name, h := range dialects() {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, h, func(c *admin.Config) {
				c.Ordered = func(typ string) bool { return typ == "ledger" }
				c.Recorder = &admin.Recorder{}
			})
			held := b.deadLetter("ledger", "acct-1", []byte("x"), "overdrawn")
			b.deadLetter("orders", "o-1", []byte("x"), "not ordered, not parked")
			b.publish(&txbox.Event{ID: txbox.NewID(), Type: "orders", Payload: []byte("a")},
				&txbox.Event{ID: txbox.NewID(), Type: "orders", Payload: []byte("b"), NotBefore: time.Now().Add(time.Hour)})
			b.publish(&txbox.Event{ID: txbox.NewID(), Type: "ledger", Key: "acct-1", Payload: []byte("y")})
			if err := b.store.(store.Instances).InstanceHeartbeat(b.ctx, &store.InstanceHeartbeatParams{ID: "relay-1", TTL: time.Minute, Info: "v1"}); err != nil {
				t.Fatal(err)
			}
			var ov admin.Overview
			b.getJSON("/api/v1/overview", &ov)
			byType := map[string]admin.TypeView{}
			for _, tv := range ov.Types {
				byType[tv.EventType] = tv
			}
			o := byType["orders"]
			if o.Due != 1 || o.Scheduled != 1 || o.OldestDueAgeSeconds <= 0 || o.NextDueInSeconds < 3000 || o.SentTotal == nil || *o.SentTotal != 0 {
				t.Fatalf("orders %+v", o)
			}
			if ov.DeadLetters["unresolved"] != 2 || ov.ParkedKeys != 1 || len(ov.Instances) != 1 || ov.Instances[0].ID != "relay-1" || ov.Instances[0].Expired {
				t.Fatalf("overview %+v", ov)
			}
			var parked struct {
				ParkedKeys []admin.ParkedKeyView `json:"parked_keys"`
			}
			b.getJSON("/api/v1/parked-keys", &parked)
			if len(parked.ParkedKeys) != 1 || parked.ParkedKeys[0].DeadLetterID != held.String() || parked.ParkedKeys[0].Waiting != 1 {
				t.Fatalf("parked %+v", parked)
			}
			var inst struct{ Instances []admin.InstanceView }
			b.getJSON("/api/v1/instances", &inst)
			if len(inst.Instances) != 1 || inst.Instances[0].Info != "v1" {
				t.Fatalf("instances %+v", inst)
			}
		})
	}
}

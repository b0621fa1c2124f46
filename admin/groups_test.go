package admin_test

import (
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

// TestDeadLetterGroupsAPI: three causes make three groups, largest first,
// fingerprinted by the first listing (the relay has not run); a group's
// retry (throttled, dry run first) changes exactly its dead letters; the
// group filter lists them; bad parameters are 400 problems.
func TestDeadLetterGroupsAPI(t *testing.T) {
	t.Parallel()
	for name, h := range dialects() {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, h, nil)
			var unknown, refused []txbox.ID
			for i := range 6 {
				unknown = append(unknown, b.deadLetter("orders", "", []byte(fmt.Sprintf(`{"order":%d}`, i)), fmt.Sprintf("HTTP 422 Unprocessable Entity: order %d unknown", 1000+i)))
			}
			for i := range 3 {
				refused = append(refused, b.deadLetter("orders", "", []byte(`{}`), fmt.Sprintf("dial tcp 10.0.0.%d:8080: connection refused", i)))
			}
			hostile := b.deadLetter("hostile", "", []byte(`<script>alert(1)</script>`), `<img src=x onerror=alert(1)> rejected`)

			var page admin.GroupPage
			b.getJSON("/api/v1/dead-letters/groups", &page)
			if !page.Complete || len(page.Groups) != 3 {
				t.Fatalf("groups %+v, want 3, complete", page)
			}
			g := page.Groups[0]
			if g.Count != 6 || g.Message != "HTTP 422 Unprocessable Entity: order <n> unknown" || g.Class != store.FailureClassOf("", 1, 0) ||
				len(g.EventTypes) != 1 || g.EventTypes[0] != "orders" || g.Sample.ID != unknown[5].String() ||
				g.Sample.Payload.Preview == nil || *g.Sample.Payload.Preview != `{"order":5}` {
				t.Errorf("largest group %+v", g)
			}
			if page.Groups[1].Count != 3 || page.Groups[2].Count != 1 || page.Groups[2].Sample.ID != hostile.String() {
				t.Errorf("other groups %+v", page.Groups[1:])
			}

			// Pages of one, by cursor, hold the same groups.
			var keys []string
			for cursor := ""; ; {
				q := url.Values{"limit": {"1"}}
				if cursor != "" {
					q.Set("cursor", cursor)
				}
				var p admin.GroupPage
				b.getJSON("/api/v1/dead-letters/groups?"+q.Encode(), &p)
				for _, g := range p.Groups {
					keys = append(keys, g.Fingerprint)
				}
				if cursor = p.NextCursor; cursor == "" || len(keys) > 3 {
					break
				}
			}
			if len(keys) != 3 || keys[0] != g.Fingerprint {
				t.Errorf("paged fingerprints %v", keys)
			}

			// The group filter lists exactly the group.
			var list admin.DeadLetterPage
			b.getJSON("/api/v1/dead-letters?group="+page.Groups[1].Fingerprint, &list)
			if len(list.Items) != 3 {
				t.Errorf("group filter listed %d, want 3", len(list.Items))
			}

			// Dry run, then a throttled retry of the largest group.
			var res admin.BulkResult
			b.post("/api/v1/dead-letters/retry", `{"filter":{"group":"`+g.Fingerprint+`"},"dry_run":true}`, http.StatusOK, &res)
			if res.Matched != 6 || res.Changed != 6 {
				t.Fatalf("dry run %+v", res)
			}
			b.post("/api/v1/dead-letters/retry", `{"filter":{"group":"`+g.Fingerprint+`"},"rate":20}`, http.StatusOK, &res)
			if res.Matched != 6 || res.Changed != 6 || res.More {
				t.Fatalf("retry %+v", res)
			}
			for _, id := range unknown {
				if _, err := b.store.DeadLetterGet(b.ctx, id); err == nil {
					t.Errorf("%s still dead-lettered after its group's retry", id)
				}
			}
			for _, id := range refused {
				if _, err := b.store.DeadLetterGet(b.ctx, id); err != nil {
					t.Errorf("%s of another group: %v", id, err)
				}
			}
			// A rate of 2/s paces pages of 2: 3 dead letters take >= 0.5 s.
			start := time.Now()
			b.post("/api/v1/dead-letters/resolve", `{"filter":{"group":"`+page.Groups[1].Fingerprint+`"},"rate":2}`, http.StatusOK, &res)
			if res.Changed != 3 || time.Since(start) < 400*time.Millisecond {
				t.Errorf("throttled resolve %+v in %s", res, time.Since(start))
			}

			for _, bad := range []string{"limit=0", "limit=101", "status=done", "cursor=xyz", "group=1", "stauts=x"} {
				code, body, _ := b.do("GET", "/api/v1/dead-letters/groups?"+bad, readToken, "")
				if bad == "group=1" {
					code, body, _ = b.do("GET", "/api/v1/dead-letters?"+bad, readToken, "")
				}
				if code != http.StatusBadRequest || !strings.Contains(string(body), "invalid-params") && !strings.Contains(string(body), "param") {
					t.Errorf("%s: %d %s", bad, code, body)
				}
			}
			for _, bad := range []string{`{"all":true,"rate":-1}`, `{"all":true,"rate":1e9}`} {
				code, body, _ := b.do("POST", "/api/v1/dead-letters/retry", adminToken, bad)
				if code != http.StatusBadRequest || !strings.Contains(string(body), "rate") {
					t.Errorf("%s: %d %s", bad, code, body)
				}
			}
		})
	}
}

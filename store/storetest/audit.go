package storetest

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/txbox/txbox/store"
)

// testAudit: appended entries get increasing ids and the database's time,
// list newest first in keyset pages (with and without an action), and keep
// hostile texts as they were.
func testAudit(t *testing.T, e *env) {
	if got, err := e.d.AuditList(e.ctx, &store.AuditListParams{Limit: 10}); err != nil || len(got) != 0 {
		t.Fatalf("empty trail lists %d entries, %v", len(got), err)
	}
	hostile := `<img src=x onerror="alert(1)">'; DROP TABLE x;-- ` + "\u202e"
	filter := store.AuditFilterJSON(&store.DeadLetterFilter{EventType: "orders", Status: store.DeadLetterUnresolved, ErrorContains: hostile})
	start := time.Now()
	var appended []*store.AuditEntry
	for i, a := range []string{"retry", "resolve", "retry", "delete", "retry"} {
		en := &store.AuditEntry{Who: "admin-token", Action: a, Selector: store.AuditSelectorFilter, Filter: filter,
			DryRun: i == 1, Matched: int64(10 + i), Changed: int64(i)}
		if i == 3 {
			en.Who, en.Selector, en.Filter, en.Error = hostile, store.AuditSelectorIDs, "", "dead-letter delete: connection reset"
		}
		if err := e.d.AuditAppend(e.ctx, en); err != nil {
			t.Fatalf("append %d: %v", i, err)
		}
		if en.ID <= 0 || (i > 0 && en.ID <= appended[i-1].ID) {
			t.Fatalf("append %d: id %d does not increase", i, en.ID)
		}
		// The database's clock, close to the test's.
		if d := en.At.Sub(start); d < -5*time.Second || d > time.Minute {
			t.Fatalf("append %d: at %s, the test started at %s", i, en.At, start)
		}
		appended = append(appended, en)
	}

	// Pages of 2, newest first, to the end.
	var got []*store.AuditEntry
	after := int64(0)
	for page := 0; ; page++ {
		p, err := e.d.AuditList(e.ctx, &store.AuditListParams{After: after, Limit: 2})
		if err != nil {
			t.Fatalf("list page %d: %v", page, err)
		}
		got = append(got, p...)
		if len(p) < 2 {
			break
		}
		after = p[len(p)-1].ID
		if page > 5 {
			t.Fatal("the listing does not end")
		}
	}
	if len(got) != len(appended) {
		t.Fatalf("listed %d entries, want %d", len(got), len(appended))
	}
	for i, g := range got {
		w := appended[len(appended)-1-i]
		if g.ID != w.ID || g.Who != w.Who || g.Action != w.Action || g.Selector != w.Selector || g.Filter != w.Filter ||
			g.DryRun != w.DryRun || g.Matched != w.Matched || g.Changed != w.Changed || g.Error != w.Error {
			t.Fatalf("entry %d:\n got %+v\nwant %+v", i, g, w)
		}
		if d := g.At.Sub(w.At); d < -time.Millisecond || d > time.Millisecond {
			t.Fatalf("entry %d: at %s, appended at %s", i, g.At, w.At)
		}
	}

	// One action, paged.
	retries, err := e.d.AuditList(e.ctx, &store.AuditListParams{Action: "retry", Limit: 2})
	if err != nil || len(retries) != 2 || retries[0].ID != appended[4].ID || retries[1].ID != appended[2].ID {
		t.Fatalf("retries, first page: %v %v", auditIDs(retries), err)
	}
	retries, err = e.d.AuditList(e.ctx, &store.AuditListParams{Action: "retry", Limit: 2, After: retries[1].ID})
	if err != nil || len(retries) != 1 || retries[0].ID != appended[0].ID {
		t.Fatalf("retries, second page: %v %v", auditIDs(retries), err)
	}
	if none, err := e.d.AuditList(e.ctx, &store.AuditListParams{Action: "redrive", Limit: 10}); err != nil || len(none) != 0 {
		t.Fatalf("redrive: %v %v", auditIDs(none), err)
	}

}

// testAuditClip: over-long and invalid texts are clipped, never refused
// (the action already happened); a bad action, negative counts and bad
// listing parameters are refused with ErrInvalidParams.
func testAuditClip(t *testing.T, e *env) {
	long := &store.AuditEntry{Who: strings.Repeat("w", 1000), Action: "retry", Selector: strings.Repeat("s", 100),
		Filter: strings.Repeat("é", 5000), Error: "bad\x00byte\xff" + strings.Repeat("e", 5000)}
	if err := e.d.AuditAppend(e.ctx, long); err != nil {
		t.Fatalf("append long texts: %v", err)
	}
	back, err := e.d.AuditList(e.ctx, &store.AuditListParams{Limit: 1})
	if err != nil || len(back) != 1 {
		t.Fatalf("list: %v %v", auditIDs(back), err)
	}
	b := back[0]
	if len(b.Who) > store.MaxAuditWho || len(b.Selector) > store.MaxAuditSelector || len(b.Filter) > store.MaxAuditFilter ||
		len(b.Error) > store.MaxAuditError || !strings.HasSuffix(b.Filter, "…") || strings.ContainsRune(b.Error, 0) ||
		!strings.HasPrefix(b.Error, "bad") || !strings.HasPrefix(b.Who, "www") {
		t.Fatalf("clipped entry: who %d bytes, selector %d, filter %d (%q…), error %d (%q…)",
			len(b.Who), len(b.Selector), len(b.Filter), b.Filter[:8], len(b.Error), b.Error[:8])
	}

	for _, bad := range []*store.AuditEntry{
		nil, {Who: "x"}, {Who: "x", Action: "Retry"}, {Who: "x", Action: "re try"}, {Who: "x", Action: strings.Repeat("a", 33)},
		{Who: "x", Action: "retry", Matched: -1}, {Who: "x", Action: "retry", Changed: -1},
	} {
		if err := e.d.AuditAppend(e.ctx, bad); !errors.Is(err, store.ErrInvalidParams) {
			t.Errorf("append %+v: %v, want ErrInvalidParams", bad, err)
		}
	}
	for _, bad := range []*store.AuditListParams{
		nil, {}, {Limit: store.MaxAuditPageSize + 1}, {Limit: 1, After: -1}, {Limit: 1, Action: "x'; --"},
	} {
		if _, err := e.d.AuditList(e.ctx, bad); !errors.Is(err, store.ErrInvalidParams) {
			t.Errorf("list %+v: %v, want ErrInvalidParams", bad, err)
		}
	}
}

// testAuditCleanup: entries older than the TTL go, oldest first, Limit at
// a time; fresh ones stay.
func testAuditCleanup(t *testing.T, e *env) {
	before := time.Now()
	for range 3 {
		if err := e.d.AuditAppend(e.ctx, &store.AuditEntry{Who: "cli:ops", Action: "resolve", Selector: store.AuditSelectorIDs}); err != nil {
			t.Fatal(err)
		}
	}
	at := time.Now()
	checkCleanupTTL(t, "audit cleanup", func(p *store.CleanupParams) (int, error) { return e.d.AuditCleanup(e.ctx, p) }, before, at, 3)
	fresh := &store.AuditEntry{Who: "cli:ops", Action: "delete"}
	if err := e.d.AuditAppend(e.ctx, fresh); err != nil {
		t.Fatal(err)
	}
	if n, err := e.d.AuditCleanup(e.ctx, &store.CleanupParams{OlderThan: time.Hour, Limit: 10}); err != nil || n != 0 {
		t.Fatalf("cleanup of a fresh entry: %d %v", n, err)
	}
	left, err := e.d.AuditList(e.ctx, &store.AuditListParams{Limit: 10})
	if err != nil || len(left) != 1 || left[0].ID != fresh.ID {
		t.Fatalf("left after cleanup: %v %v", auditIDs(left), err)
	}
	for _, bad := range []*store.CleanupParams{nil, {OlderThan: time.Hour}, {OlderThan: -time.Second, Limit: 1}} {
		if _, err := e.d.AuditCleanup(e.ctx, bad); !errors.Is(err, store.ErrInvalidParams) {
			t.Errorf("cleanup %+v: %v, want ErrInvalidParams", bad, err)
		}
	}
}

func auditIDs(es []*store.AuditEntry) []int64 {
	out := make([]int64, len(es))
	for i, en := range es {
		out[i] = en.ID
	}
	return out
}

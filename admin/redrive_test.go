package admin_test

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/admin"
	"github.com/txbox/txbox/relay"
	"github.com/txbox/txbox/store"
)

// wakeRecorder stands in for the relay of the handler's process: it
// records the wake-ups the handler sends (the store under it is real).
type wakeRecorder struct {
	mu    sync.Mutex
	types []string
}

func (w *wakeRecorder) Health() relay.Health { return relay.Health{} }

func (w *wakeRecorder) Wake(eventTypes ...string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.types = append(w.types, eventTypes...)
}

func (w *wakeRecorder) woken() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.types)
}

// retention is the admin.Config.Retention of the tests: "kept" and
// "paced" keep rows for an hour, "nokeep" is configured without, every
// other type is unknown.
func retention(t string) (time.Duration, bool) {
	switch t {
	case "kept", "paced":
		return time.Hour, true
	case "nokeep":
		return 0, true
	}
	return 0, false
}

// deliver publishes evs and acks them in one finish; it returns their ids
// sorted, the order a redrive sends them in.
func (b *bundle) deliver(evs ...*txbox.Event) []string {
	b.t.Helper()
	b.publish(evs...)
	rows, err := b.store.OutboxClaim(b.ctx, &store.OutboxClaimParams{EventType: evs[0].Type, Limit: len(evs), LeaseDuration: time.Hour})
	if err != nil || len(rows) != len(evs) {
		b.t.Fatalf("claim: %d rows, %v", len(rows), err)
	}
	items := make([]store.OutboxFinishItem, len(rows))
	for i, r := range rows {
		items[i] = store.OutboxFinishItem{ID: r.ID, LeaseToken: r.LeaseToken, Outcome: store.OutcomeAcked}
	}
	if _, err := b.store.OutboxFinish(b.ctx, &store.OutboxFinishParams{Items: items}); err != nil {
		b.t.Fatal(err)
	}
	ids := make([]string, len(evs))
	for i, ev := range evs {
		ids[i] = ev.ID.String()
	}
	slices.Sort(ids)
	return ids
}

func newEvents(typ string, n int) []*txbox.Event {
	out := make([]*txbox.Event, n)
	for i := range out {
		out[i] = &txbox.Event{ID: txbox.NewID(), Type: typ, Payload: []byte(`{"n":1}`)}
	}
	return out
}

// claimIDs claims every due row of typ and returns the ids, sorted.
func (b *bundle) claimIDs(typ string) []string {
	b.t.Helper()
	rows, err := b.store.OutboxClaim(b.ctx, &store.OutboxClaimParams{EventType: typ, Limit: 1000, LeaseDuration: time.Hour})
	if err != nil {
		b.t.Fatal(err)
	}
	ids := make([]string, len(rows))
	for i, r := range rows {
		ids[i] = r.ID.String()
	}
	slices.Sort(ids)
	return ids
}

// TestRedriveAPI: a dry run changes nothing, a time window re-pends
// exactly the events delivered in it with their ids, a cursor goes on
// after it, the relay in process is woken, and the action is audited.
func TestRedriveAPI(t *testing.T) {
	t.Parallel()
	for name, h := range dialects() {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			wr := &wakeRecorder{}
			b := setup(t, h, func(c *admin.Config) { c.Retention = retention; c.Relay = wr })
			first := b.deliver(newEvents("kept", 3)...)
			time.Sleep(5 * time.Millisecond)
			cut := time.Now().UTC()
			time.Sleep(5 * time.Millisecond)
			second := b.deliver(newEvents("kept", 4)...)

			var dry admin.RedriveResult
			b.post("/api/v1/redrive", `{"type":"kept","dry_run":true}`, http.StatusOK, &dry)
			all := slices.Sorted(slices.Values(append(slices.Clone(first), second...)))
			if dry.Matched != 7 || dry.Changed != 0 || !slices.Equal(dry.IDs, all) || dry.More || !dry.DryRun {
				t.Fatalf("dry run: %+v", dry)
			}
			if dry.OldestProcessedAt == nil || dry.NewestProcessedAt == nil || !dry.OldestProcessedAt.Before(cut) || !dry.NewestProcessedAt.After(cut) {
				t.Fatalf("dry run processed span: %v to %v around %s", dry.OldestProcessedAt, dry.NewestProcessedAt, cut)
			}
			if got := b.claimIDs("kept"); len(got) != 0 || len(wr.woken()) != 0 {
				t.Fatalf("a dry run made %v claimable, woke %v", got, wr.woken())
			}

			var res admin.RedriveResult
			b.post("/api/v1/redrive", `{"type":"kept","processed_after":"`+cut.Format(time.RFC3339Nano)+`"}`, http.StatusOK, &res)
			if res.Matched != 4 || res.Changed != 4 || !slices.Equal(res.IDs, second) || res.Pages != 1 {
				t.Fatalf("redrive of the second window: %+v, want ids %v", res, second)
			}
			if got := b.claimIDs("kept"); !slices.Equal(got, second) {
				t.Fatalf("claimable after the redrive: %v, want %v", got, second)
			}
			if !slices.Equal(wr.woken(), []string{"kept"}) {
				t.Fatalf("woken: %v, want [kept]", wr.woken())
			}

			// A cursor goes on after its id: the first window's last two.
			b.post("/api/v1/redrive", `{"type":"kept","processed_before":"`+cut.Format(time.RFC3339Nano)+`","cursor":"`+first[0]+`"}`, http.StatusOK, &res)
			if res.Matched != 2 || res.Changed != 2 || !slices.Equal(res.IDs, first[1:]) {
				t.Fatalf("redrive after a cursor: %+v, want %v", res, first[1:])
			}
			logs := b.logs.String()
			if !strings.Contains(logs, "action=redrive") || !strings.Contains(logs, `\"type\":\"kept\"`) || !strings.Contains(logs, "changed=4") {
				t.Fatalf("no audit line for the redrive:\n%s", logs)
			}
			entries, err := b.store.AuditList(b.ctx, &store.AuditListParams{Action: "redrive", Limit: 1})
			if err != nil || len(entries) != 1 || entries[0].Who != "admin-token" || entries[0].Changed != 2 ||
				!strings.Contains(entries[0].Filter, `"type":"kept"`) || !strings.Contains(entries[0].Filter, `"processed_before":`) {
				t.Fatalf("audit entry of the last redrive: %+v, %v", entries, err)
			}

			// Nothing kept: a type with retention and no rows matches 0.
			var none admin.RedriveResult
			b.post("/api/v1/redrive", `{"type":"paced"}`, http.StatusOK, &none)
			if none.Matched != 0 || none.Changed != 0 || none.More {
				t.Fatalf("redrive of a type without rows: %+v", none)
			}
		})
	}
}

// TestRedriveRate: rate throttles between pages (a page is at most a
// second's worth of events).
func TestRedriveRate(t *testing.T) {
	t.Parallel()
	b := setup(t, dialects()["sqlite"], func(c *admin.Config) { c.Retention = retention })
	ids := b.deliver(newEvents("paced", 7)...)
	start := time.Now()
	var res admin.RedriveResult
	b.post("/api/v1/redrive", `{"type":"paced","rate":5}`, http.StatusOK, &res)
	took := time.Since(start)
	if res.Changed != 7 || res.Pages != 2 || !slices.Equal(res.IDs, ids) {
		t.Fatalf("throttled redrive: %+v", res)
	}
	// 5 events, then a pause until 5 events at 5/s are due (1s), then 2.
	if took < 900*time.Millisecond || took > 10*time.Second {
		t.Fatalf("7 events at 5/s took %s, want about 1s", took)
	}
}

// TestRedriveBadInput: every mistake is a 4xx problem naming the field.
func TestRedriveBadInput(t *testing.T) {
	t.Parallel()
	b := setup(t, dialects()["sqlite"], func(c *admin.Config) { c.Retention = retention })
	b.deliver(newEvents("kept", 1)...)
	tooMany := `"` + strings.Repeat(txbox.NewID().String()+`","`, store.MaxFilterIDs) + txbox.NewID().String() + `"`
	for _, c := range []struct {
		body   string
		status int
		param  string
	}{
		{``, 400, "type"},
		{`{}`, 400, "type"},
		{`{"type":"a b"}`, 400, "type"},
		{`{"type":"unknown"}`, 422, "type"},
		{`{"type":"nokeep"}`, 422, "type"},
		{`{"type":"kept","processed_after":"yesterday"}`, 400, "processed_after"},
		{`{"type":"kept","processed_before":"10000-01-01T00:00:00Z"}`, 400, "processed_before"},
		{`{"type":"kept","processed_after":"2026-01-02T00:00:00Z","processed_before":"2026-01-01T00:00:00Z"}`, 400, "processed_before"},
		{`{"type":"kept","ids":["x"]}`, 400, "ids[0]"},
		{`{"type":"kept","ids":[` + tooMany + `]}`, 400, "ids"},
		{`{"type":"kept","rate":-1}`, 400, "rate"},
		{`{"type":"kept","cursor":"AAAA"}`, 400, "cursor"},
		{`{"type":"kept","key":"` + strings.Repeat("k", 1001) + `"}`, 400, "key"},
		{`{"type":"kept","bogus":1}`, 400, "body"},
		{`{"type":"kept"} {}`, 400, "body"},
	} {
		st, body, hd := b.do(http.MethodPost, "/api/v1/redrive", adminToken, c.body)
		if st != c.status || hd.Get("Content-Type") != "application/problem+json" {
			t.Errorf("%.80s: %d %s (%s), want %d", c.body, st, body, hd.Get("Content-Type"), c.status)
			continue
		}
		var p admin.Problem
		if err := json.Unmarshal(body, &p); err != nil || len(p.Errors) == 0 || p.Errors[0].Param != c.param {
			t.Errorf("%.80s: problem %s, want one naming %s", c.body, body, c.param)
		}
	}
	if st, _, _ := b.do(http.MethodPost, "/api/v1/redrive", readToken, `{"type":"kept"}`); st != http.StatusForbidden {
		t.Errorf("redrive with the read token: %d, want 403", st)
	}
	if got := b.claimIDs("kept"); len(got) != 0 {
		t.Fatalf("bad requests re-pended %v", got)
	}
	if strings.Contains(b.logs.String(), "admin request failed") {
		t.Errorf("bad input was logged as a failure:\n%s", b.logs)
	}
}

package admin_test

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
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
	"github.com/txbox/txbox/store/storetest"
)

// causeReceiver is a webhook that refuses the events of three causes
// with three different errors, each carrying the event's own number, until
// it accepts one cause; it records when each event arrived.
type causeReceiver struct {
	mu      sync.Mutex
	accept  string
	arrived map[string]time.Time
}

func (rc *causeReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	rc.mu.Lock()
	defer rc.mu.Unlock()
	for cause, status := range map[string]int{"unknown": 422, "conflict": 409, "gone": 410} {
		if !bytes.Contains(body, []byte(`"cause":"`+cause+`"`)) || rc.accept == cause {
			continue
		}
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(status)
		fmt.Fprintf(w, `{"title":"refused","detail":"%s: item %d at %s"}`, cause, len(body), time.Now().Format(time.RFC3339Nano))
		return
	}
	rc.arrived[r.Header.Get("Idempotency-Key")] = time.Now()
}

// TestFailureGroupsEndToEnd, on PostgreSQL, MariaDB and SQLite: a relay
// delivering to a webhook dead-letters the events of three causes, and
// its dead_letter_fingerprint job puts them in three groups; once the
// receiver accepts one cause, the retry of that group through the API
// sends exactly its events, through the wake-up alone (the type's poll
// delay is an hour and discovery a day), and the audit trail records it.
// The time from the retry to the last delivery is logged.
func TestFailureGroupsEndToEnd(t *testing.T) {
	t.Parallel()
	for name, h := range map[string]storetest.Harness{"postgres": storeharness.Postgres(), "mariadb": storeharness.MySQL(), "sqlite": storeharness.SQLite()} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			rc := &causeReceiver{arrived: map[string]time.Time{}}
			hook := httptest.NewServer(rc)
			t.Cleanup(hook.Close)
			ws, err := webhook.New(webhook.Config{})
			if err != nil {
				t.Fatal(err)
			}
			b := setup(t, h, func(c *admin.Config) {
				rcfg := relay.Config{
					Store:   c.Store,
					Senders: map[string]sender.Sender{"hook": ws},
					Defaults: relay.EventSettings{
						Route:       &sender.Route{URL: hook.URL + "/events"},
						MaxAttempts: new(1),
						Polling:     &relay.PollingSettings{MinDelay: new(10 * time.Millisecond), MaxDelay: new(time.Hour)},
					},
					DiscoverInterval:    100 * time.Millisecond,
					DiscoverMaxInterval: 24 * time.Hour,
					DeadLetterInterval:  50 * time.Millisecond,
					Logger:              c.Logger,
				}
				r := relaytest.Start(t, rcfg)
				c.Relay, c.Fingerprinter = r, r.Fingerprinter()
			})
			byCause := map[string][]txbox.ID{}
			var evs []*txbox.Event
			for i, cause := range []string{"unknown", "unknown", "unknown", "unknown", "conflict", "conflict", "conflict", "gone", "gone"} {
				ev := &txbox.Event{ID: txbox.NewID(), Type: "orders", Payload: []byte(fmt.Sprintf(`{"cause":"%s","n":%d%s}`, cause, i, strings.Repeat(" ", i)))}
				evs = append(evs, ev)
				byCause[cause] = append(byCause[cause], ev.ID)
			}
			b.publish(evs...)
			var groups []*store.DeadLetterGroup
			testenv.WaitFor(t, time.Minute, "9 dead letters in 3 groups", func() bool {
				groups, err = b.store.DeadLetterGroups(b.ctx, &store.DeadLetterGroupsParams{Limit: 10})
				n := int64(0)
				for _, g := range groups {
					n += g.Count
				}
				return err == nil && len(groups) == 3 && n == 9
			})
			var page admin.GroupPage
			b.getJSON("/api/v1/dead-letters/groups", &page)
			if len(page.Groups) != 3 || page.Groups[0].Count != 4 || page.Groups[1].Count != 3 || page.Groups[2].Count != 2 {
				t.Fatalf("groups %+v", page.Groups)
			}
			conflict := page.Groups[1]
			if !strings.Contains(conflict.Message, "409 Conflict: refused: conflict: item <n> at <time>") || conflict.Destinations[0] != "hook url="+hook.URL+"/events" {
				t.Fatalf("conflict group %+v", conflict)
			}

			rc.mu.Lock()
			rc.accept = "conflict"
			rc.mu.Unlock()
			// Let the poller's delay grow past anything but a wake-up.
			time.Sleep(500 * time.Millisecond)
			start := time.Now()
			var res admin.BulkResult
			b.post("/api/v1/dead-letters/retry", `{"filter":{"group":"`+conflict.Fingerprint+`"}}`, http.StatusOK, &res)
			if res.Matched != 3 || res.Changed != 3 || res.Selector != "filter" {
				t.Fatalf("retry %+v", res)
			}
			var last time.Time
			testenv.WaitFor(t, 30*time.Second, "the conflict group delivered", func() bool {
				rc.mu.Lock()
				defer rc.mu.Unlock()
				for _, id := range byCause["conflict"] {
					at, ok := rc.arrived[id.String()]
					if !ok {
						return false
					}
					if at.After(last) {
						last = at
					}
				}
				return true
			})
			t.Logf("%s: the group's 3 events delivered %s after the retry began", name, last.Sub(start).Round(time.Millisecond))
			time.Sleep(200 * time.Millisecond)
			rc.mu.Lock()
			if len(rc.arrived) != 3 {
				t.Errorf("the receiver got %d events, want the group's 3", len(rc.arrived))
			}
			rc.mu.Unlock()
			if n, err := b.store.DeadLetterCount(b.ctx, &store.DeadLetterFilter{}); err != nil || n != 6 {
				t.Errorf("%d dead letters left (%v), want the other groups' 6", n, err)
			}

			var audit admin.AuditPage
			b.getJSON("/api/v1/audit?action=retry&limit=5", &audit)
			var real *admin.AuditEntry
			for i := range audit.Entries {
				if !audit.Entries[i].DryRun {
					real = &audit.Entries[i]
					break
				}
			}
			if real == nil || real.Who != "admin-token" || real.Selector != store.AuditSelectorGroup || real.Matched != 3 || real.Changed != 3 ||
				!strings.Contains(real.Filter, conflict.Fingerprint) {
				t.Errorf("audit entries %+v, want the group's retry", audit.Entries)
			}
		})
	}
}

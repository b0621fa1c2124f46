package admin_test

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/admin"
	"github.com/txbox/txbox/health"
	"github.com/txbox/txbox/internal/pgcluster"
	"github.com/txbox/txbox/internal/testenv"
	"github.com/txbox/txbox/relay"
	"github.com/txbox/txbox/relay/relaytest"
	"github.com/txbox/txbox/sender"
	"github.com/txbox/txbox/sender/webhook"
	"github.com/txbox/txbox/store"
	"github.com/txbox/txbox/store/postgres"
)

// TestFailoverShown: a relay streams the failover slot of a PostgreSQL 17
// primary with a standby, both in its multi-host DSN. The admin overview
// says the slot is safe and /readyz has no failover reason; with
// synchronized_standby_slots unset on the primary the overview says
// unsafe and why, /readyz is degraded (slot_not_failover_safe), and the
// dashboard in Chromium shows it in the error style.
func TestFailoverShown(t *testing.T) {
	t.Parallel()
	node := requireBrowser(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	p := pgcluster.Start(t, pgcluster.V17, pgcluster.Options{})
	s := pgcluster.AddStandby(t, p, pgcluster.StandbyOptions{Synchronous: true, FailoverSlots: true})
	pool, err := pgxpool.New(ctx, pgcluster.MultiHostDSN("test", s, p))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	logs := &testenv.LogBuffer{}
	logger := slog.New(slog.NewTextHandler(logs, nil))
	d, err := postgres.New(pool, postgres.Config{Source: postgres.SourceWAL, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if err := d.CreateStream(ctx, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {}))
	t.Cleanup(hook.Close)
	ws, err := webhook.New(webhook.Config{})
	if err != nil {
		t.Fatal(err)
	}
	r := relaytest.Start(t, relay.Config{
		Store:    d,
		Senders:  map[string]sender.Sender{"hook": ws},
		Defaults: relay.EventSettings{Route: &sender.Route{URL: hook.URL}},
		Stream:   relay.StreamConfig{Enabled: true, StandbyInterval: 50 * time.Millisecond, StatusPoll: 100 * time.Millisecond},
		Logger:   logger,
	})
	a, err := admin.New(admin.Config{Store: d, Relay: r, ReadToken: readToken, AdminToken: adminToken, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(a)
	t.Cleanup(srv.Close)
	b := &bundle{t: t, store: d, admin: a, srv: srv, logs: logs, ctx: ctx}
	ready, err := health.New(health.Config{Store: d, Relay: r, CacheFor: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	overview := func() store.StreamFailover {
		var ov struct {
			Stream *struct {
				Slot *store.StreamStatus `json:"slot"`
			} `json:"stream"`
		}
		b.getJSON("/api/v1/overview", &ov)
		if ov.Stream == nil || ov.Stream.Slot == nil {
			return store.StreamFailover{}
		}
		return ov.Stream.Slot.Failover
	}
	failoverReason := func() *txbox.HealthReason {
		for _, rs := range ready.Check(ctx).Reasons {
			if rs.Kind == txbox.ReasonFailoverUnsafe {
				return &rs
			}
		}
		return nil
	}

	testenv.WaitFor(t, 30*time.Second, "the overview saying safe", func() bool { return overview().Verdict == store.FailoverSafe })
	if rs := failoverReason(); rs != nil {
		t.Fatalf("/readyz with a safe slot: %+v", rs)
	}

	p.Exec(t, "postgres", `ALTER SYSTEM SET synchronized_standby_slots = ''`)
	p.Exec(t, "postgres", `SELECT pg_reload_conf()`)
	testenv.WaitFor(t, 30*time.Second, "the overview saying unsafe", func() bool { return overview().Verdict == store.FailoverUnsafe })
	if f := overview(); !strings.Contains(f.Note, "synchronized_standby_slots is not set on the primary") || len(f.Replicas) != 1 || !f.SlotFailover {
		t.Errorf("overview: %+v", f)
	}
	rs := failoverReason()
	if rs == nil || rs.Subject != "txbox_slot" || !strings.Contains(rs.Detail, "synchronized_standby_slots is not set") {
		t.Fatalf("/readyz reason: %+v", rs)
	}
	if rep := ready.Check(ctx); rep.Status != txbox.HealthDegraded || !rep.Ready {
		t.Errorf("/readyz: %+v", rep)
	}

	res, stderr, err := runDashboard(t, ctx, node, "ADMIN_URL="+srv.URL+"/", "ADMIN_TOKEN="+adminToken, "FAILOVER_WANT=failover: NOT SAFE")
	if err != nil {
		t.Fatalf("dashboard script: %v\n%s\nresult %+v", err, stderr, res)
	}
	if !strings.Contains(res.Failover, "synchronized_standby_slots is not set on the primary") || res.FailoverClass != "err" {
		t.Errorf("the dashboard's failover line: %q (class %q)", res.Failover, res.FailoverClass)
	}
}

package health_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/health"
	"github.com/txbox/txbox/internal/storeharness"
	"github.com/txbox/txbox/internal/testenv"
	"github.com/txbox/txbox/outbox"
	"github.com/txbox/txbox/relay"
	"github.com/txbox/txbox/relay/relaytest"
	"github.com/txbox/txbox/sender"
	"github.com/txbox/txbox/store/postgres"
)

// get requests path from h and decodes the report.
func get(t *testing.T, h http.Handler, method, path string) (int, txbox.HealthReport, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(method, path, nil))
	var rep txbox.HealthReport
	body := rec.Body.String()
	if path == "/readyz" && method == http.MethodGet && rec.Code != http.StatusMethodNotAllowed {
		if err := json.Unmarshal(rec.Body.Bytes(), &rep); err != nil {
			t.Fatalf("readyz body %q: %v", body, err)
		}
	}
	return rec.Code, rep, body
}

func newChecker(t *testing.T, cfg health.Config) *health.Checker {
	t.Helper()
	c, err := health.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func hasReason(rep txbox.HealthReport, kind, subject string) bool {
	for _, r := range rep.Reasons {
		if r.Kind == kind && strings.Contains(r.Subject, subject) {
			return true
		}
	}
	return false
}

// flakySender acks while up, and fails every batch as an outage while
// down.
type flakySender struct{ down atomic.Bool }

func (s *flakySender) Send(context.Context, []*sender.Message) error {
	if s.down.Load() {
		return txbox.Transient(errors.New("connection refused"))
	}
	return nil
}

func (*flakySender) Close(context.Context) error { return nil }

func startRelay(t *testing.T, d *postgres.Driver, snd sender.Sender) *relay.Relay {
	t.Helper()
	return relaytest.Start(t, relay.Config{
		Store:    d,
		Senders:  map[string]sender.Sender{"bus": snd},
		Defaults: relay.EventSettings{Polling: &relay.PollingSettings{MinDelay: new(10 * time.Millisecond), MaxDelay: new(50 * time.Millisecond)}},
		Events:   map[string]relay.EventSettings{"order": {}},
		Circuit:  relay.CircuitConfig{CoolDown: 50 * time.Millisecond, MaxCoolDown: 200 * time.Millisecond},
		Logger:   slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
}

func TestReadyWithARunningRelayThenDegradedByAnOpenCircuit(t *testing.T) {
	t.Parallel()
	d := storeharness.PostgresDriver(t)
	snd := &flakySender{}
	r := startRelay(t, d, snd)
	c := newChecker(t, health.Config{Store: d, Relay: r, CacheFor: time.Millisecond})
	h := c.Handler()

	if code, _, body := get(t, h, http.MethodGet, "/livez"); code != http.StatusOK || body != "ok\n" {
		t.Errorf("livez = %d %q", code, body)
	}
	code, rep, body := get(t, h, http.MethodGet, "/readyz")
	if code != http.StatusOK || rep.Status != txbox.HealthOK || !rep.Ready || len(rep.Reasons) != 0 {
		t.Fatalf("readyz of a migrated database and a running relay = %d %s", code, body)
	}
	if rep.SchemaVersion == 0 || rep.SchemaVersion != rep.LatestSchemaVersion {
		t.Errorf("schema versions %d/%d", rep.SchemaVersion, rep.LatestSchemaVersion)
	}

	snd.down.Store(true)
	storeharness.PostgresPublish(t, d, newPublisher(t, d), txbox.Event{Type: "order", Payload: []byte(`{}`)})
	testenv.WaitFor(t, 20*time.Second, "readyz degraded by the open circuit", func() bool {
		code, rep, _ := get(t, h, http.MethodGet, "/readyz")
		return code == http.StatusOK && rep.Status == txbox.HealthDegraded && hasReason(rep, txbox.ReasonCircuitOpen, "bus")
	})
	strict := newChecker(t, health.Config{Store: d, Relay: r, FailWhenDegraded: true})
	if code, rep, _ := get(t, strict.Handler(), http.MethodGet, "/readyz"); code != http.StatusServiceUnavailable || rep.Status != txbox.HealthDegraded {
		t.Errorf("FailWhenDegraded readyz = %d %s, want 503 degraded", code, rep.Status)
	}
	snd.down.Store(false)
	testenv.WaitFor(t, 20*time.Second, "readyz ok again once the circuit closed", func() bool {
		_, rep, _ := get(t, h, http.MethodGet, "/readyz")
		return rep.Status == txbox.HealthOK
	})

	stop, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := r.Stop(stop); err != nil {
		t.Fatal(err)
	}
	if code, rep, _ := get(t, h, http.MethodGet, "/readyz"); code != http.StatusServiceUnavailable || !hasReason(rep, txbox.ReasonRelayStopped, "") {
		t.Errorf("readyz of a stopped relay = %d %+v, want 503 relay_not_running", code, rep)
	}
}

func TestNotReadyWhenNotMigrated(t *testing.T) {
	t.Parallel()
	pool := storeharness.PostgresPool(t, 2)
	d, err := postgres.New(pool, postgres.Config{Schema: storeharness.PostgresSchema(t)})
	if err != nil {
		t.Fatal(err)
	}
	c := newChecker(t, health.Config{Store: d, CacheFor: time.Millisecond})
	code, rep, body := get(t, c.Handler(), http.MethodGet, "/readyz")
	if code != http.StatusServiceUnavailable || rep.Ready || rep.Status != txbox.HealthUnavailable || len(rep.Reasons) != 1 {
		t.Fatalf("readyz of an empty schema = %d %s, want 503 with one reason", code, body)
	}
	if k := rep.Reasons[0].Kind; k != txbox.ReasonDatabase && k != txbox.ReasonMigrations {
		t.Errorf("reason %q", k)
	}
	if err := d.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 10*time.Second, "ready once migrated", func() bool {
		code, _, _ := get(t, c.Handler(), http.MethodGet, "/readyz")
		return code == http.StatusOK
	})
}

func TestNotReadyWhenTheDatabaseIsUnreachable(t *testing.T) {
	t.Parallel()
	d := storeharness.PostgresDriver(t)
	c := newChecker(t, health.Config{Store: d, CacheFor: time.Millisecond})
	if code, _, body := get(t, c.Handler(), http.MethodGet, "/readyz"); code != http.StatusOK {
		t.Fatalf("readyz = %d %s", code, body)
	}
	d.Pool().Close()
	testenv.WaitFor(t, 10*time.Second, "503 once the pool is closed", func() bool {
		code, rep, _ := get(t, c.Handler(), http.MethodGet, "/readyz")
		return code == http.StatusServiceUnavailable && hasReason(rep, txbox.ReasonDatabase, "")
	})
	// Liveness does not depend on the database.
	if code, _, _ := get(t, c.Handler(), http.MethodGet, "/livez"); code != http.StatusOK {
		t.Errorf("livez = %d with the database gone", code)
	}
}

func TestDegradedByLagButNotByScheduledEvents(t *testing.T) {
	t.Parallel()
	d := storeharness.PostgresDriver(t)
	storeharness.PostgresPublish(t, d, newPublisher(t, d), txbox.Event{Type: "later", Payload: []byte(`{}`), NotBefore: time.Now().Add(time.Hour)})
	storeharness.PostgresPublish(t, d, newPublisher(t, d), txbox.Event{Type: "stuck", Payload: []byte(`{}`)})
	c := newChecker(t, health.Config{Store: d, Stats: d, LagThreshold: 100 * time.Millisecond, CacheFor: time.Millisecond})
	testenv.WaitFor(t, 10*time.Second, "degraded by the lag of stuck", func() bool {
		code, rep, _ := get(t, c.Handler(), http.MethodGet, "/readyz")
		return code == http.StatusOK && rep.Status == txbox.HealthDegraded && hasReason(rep, txbox.ReasonLag, "stuck")
	})
	if _, rep, _ := get(t, c.Handler(), http.MethodGet, "/readyz"); hasReason(rep, txbox.ReasonLag, "later") {
		t.Errorf("a scheduled event counted as lag: %+v", rep.Reasons)
	}
}

// countingStore counts schema-version queries.
type countingStore struct {
	*postgres.Driver
	n atomic.Int64
}

func (c *countingStore) SchemaVersion(ctx context.Context) (int, error) {
	c.n.Add(1)
	return c.Driver.SchemaVersion(ctx)
}

func TestProbesShareCachedChecksAndRefuseOtherMethods(t *testing.T) {
	t.Parallel()
	d := &countingStore{Driver: storeharness.PostgresDriver(t)}
	c := newChecker(t, health.Config{Store: d, CacheFor: time.Hour})
	h := c.Handler()
	for range 20 {
		if code, _, _ := get(t, h, http.MethodGet, "/readyz"); code != http.StatusOK {
			t.Fatalf("readyz = %d", code)
		}
	}
	if n := d.n.Load(); n != 1 {
		t.Errorf("20 probes ran %d schema queries, want 1", n)
	}
	for _, m := range []string{http.MethodPost, http.MethodPut, http.MethodDelete} {
		for _, p := range []string{"/livez", "/readyz"} {
			if code, _, _ := get(t, h, m, p); code != http.StatusMethodNotAllowed {
				t.Errorf("%s %s = %d, want 405", m, p, code)
			}
		}
	}
	if code, _, _ := get(t, h, http.MethodHead, "/readyz"); code != http.StatusOK {
		t.Errorf("HEAD /readyz = %d", code)
	}
	if code, _, _ := get(t, h, http.MethodGet, "/metrics"); code != http.StatusNotFound {
		t.Errorf("GET /metrics on the health handler = %d, want 404", code)
	}
	if _, err := health.New(health.Config{}); err == nil {
		t.Error("New without a store did not fail")
	}
}

// newPublisher returns a default publisher on d.
func newPublisher(t *testing.T, d *postgres.Driver) *outbox.Publisher {
	t.Helper()
	pub, err := outbox.NewPublisher(d, outbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	return pub
}

// TestDegradedByAnXidHoldingTransaction is the commit horizon pin: a
// transaction that holds a transaction id (a read-only snapshot holds none
// and does not pin the commit horizon) makes /readyz degraded past the threshold,
// named by its pid, application and xid, and the reason goes once it
// ends.
func TestDegradedByAnXidHoldingTransaction(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := storeharness.PostgresDriver(t)
	conn, err := d.Pool().Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	app := testenv.UniqueName("pin_")
	if _, err := conn.Exec(ctx, `SELECT set_config('application_name', $1, false)`, app); err != nil {
		t.Fatal(err)
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var (
		pid int
		xid string
	)
	if err := tx.QueryRow(ctx, `SELECT pg_backend_pid(), pg_current_xact_id()::text`).Scan(&pid, &xid); err != nil {
		t.Fatal(err)
	}
	c := newChecker(t, health.Config{Store: d, Horizon: d, HorizonThreshold: 50 * time.Millisecond, CacheFor: time.Millisecond})
	// The oldest holder of the cluster is named: on a shared server
	// another test's transaction may be older for a while.
	subject := fmt.Sprintf("pid %d (", pid)
	testenv.WaitFor(t, 2*time.Minute, "degraded by the pinning transaction", func() bool {
		code, rep, _ := get(t, c.Handler(), http.MethodGet, "/readyz")
		for _, r := range rep.Reasons {
			if r.Kind == txbox.ReasonHorizonHeld && strings.HasPrefix(r.Subject, subject) {
				if !strings.Contains(r.Subject, "application "+app) || !strings.Contains(r.Detail, "transaction id "+xid+" ") {
					t.Fatalf("reason %+v does not name application %s and xid %s", r, app, xid)
				}
				return code == http.StatusOK && rep.Status == txbox.HealthDegraded
			}
		}
		return false
	})
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 2*time.Minute, "the reason gone with the transaction", func() bool {
		_, rep, _ := get(t, c.Handler(), http.MethodGet, "/readyz")
		for _, r := range rep.Reasons {
			if r.Kind == txbox.ReasonHorizonHeld && strings.HasPrefix(r.Subject, subject) {
				return false
			}
		}
		return true
	})
}

package config

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/internal/testenv"
	"github.com/txbox/txbox/relay"
	"github.com/txbox/txbox/sender"
	"github.com/txbox/txbox/sender/webhook"
	"github.com/txbox/txbox/store"
)

// TestPlainSQLProducerDeliveredFromYAML is the non-Go producer contract on
// PostgreSQL: rows inserted with plain SQL giving only event_type and
// payload are delivered by a relay built entirely from a YAML file, here to
// an HTTP webhook that verifies the HMAC signature from hmac-secret-env.
// The DSN carries a password (trust auth ignores it) that must appear in no
// log line.
func TestPlainSQLProducerDeliveredFromYAML(t *testing.T) {
	t.Parallel()
	admin, schema := postgresSchema(t)

	const secret = "hook-secret-Zq81"
	type hit struct {
		id, typ, body, path string
	}
	var (
		mu   sync.Mutex
		hits []hit
	)
	got := make(chan struct{}, 16)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if err := webhook.Verify(secret, r.Header.Get("Txbox-Signature"), body, time.Minute); err != nil {
			http.Error(w, err.Error(), http.StatusUnauthorized)
			return
		}
		mu.Lock()
		hits = append(hits, hit{r.Header.Get(txbox.HeaderEventID), r.Header.Get(txbox.HeaderEventType), string(body), r.URL.Path})
		mu.Unlock()
		got <- struct{}{}
	}))
	t.Cleanup(srv.Close)

	const canary = "Canary-PW-55x"
	dsn := strings.Replace(testenv.PostgresURL, "postgres@", "postgres:"+canary+"@", 1)
	if dsn == testenv.PostgresURL {
		t.Fatalf("cannot put a password into %s", testenv.PostgresURL)
	}
	yml := fmt.Sprintf(`
database: { dialect: postgres, dsn-env: APP_DSN, schema: %s }
senders:
  hooks: { type: webhook, url: "%s/events/default", hmac-secret-env: HOOK_SECRET, timeout: 5s }
defaults:
  polling: { min-delay: 10ms, max-delay: 200ms }
events:
  invoice-paid: { route: { url: "%s/events/invoices" } }
relay: { discover-interval: 100ms }
log: { level: debug }
`, schema, srv.URL, srv.URL)
	environ := map[string]string{"APP_DSN": dsn, "HOOK_SECRET": secret}
	getenv := func(k string) string { return environ[k] }
	c, err := Load(Source{Name: "txbox.yaml", YAML: []byte(yml)})
	if err != nil {
		t.Fatal(err)
	}
	var logs testenv.LogBuffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	ctx := context.Background()
	st := openMigrated(t, c, getenv, log)
	senders, err := c.OpenSenders(ctx, getenv, log)
	if err != nil {
		t.Fatal(err)
	}
	r, err := relay.New(c.RelayConfig(st, senders, log))
	if err != nil {
		t.Fatal(err)
	}

	// The non-Go producer: plain SQL, two columns, its own transaction.
	for _, q := range []string{
		fmt.Sprintf(`INSERT INTO %s.txbox_outbox (event_type, payload) VALUES ('invoice-paid', '{"invoice":1}')`, schema),
		fmt.Sprintf(`INSERT INTO %s.txbox_outbox (event_type, payload) VALUES ('legacy.thing', 'raw bytes')`, schema),
	} {
		if _, err := admin.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.Start(ctx); err != nil {
		t.Fatal(err)
	}
	deadline := time.After(30 * time.Second)
	for n := 0; n < 2; n++ {
		select {
		case <-got:
		case <-deadline:
			t.Fatalf("only %d of 2 plain-SQL events delivered; logs:\n%s", n, logs.String())
		}
	}
	stopAll(t, r, senders)

	mu.Lock()
	defer mu.Unlock()
	byType := map[string]hit{}
	for _, h := range hits {
		byType[h.typ] = h
	}
	if h := byType["invoice-paid"]; h.body != `{"invoice":1}` || h.path != "/events/invoices" {
		t.Errorf("invoice-paid = %+v", h)
	}
	if h := byType["legacy.thing"]; h.body != "raw bytes" || h.path != "/events/default" {
		t.Errorf("legacy.thing = %+v", h)
	}
	for _, h := range hits {
		if _, err := txbox.ParseID(h.id); err != nil {
			t.Errorf("event %s arrived without a database-assigned id: %v", h.typ, err)
		}
	}
	if len(hits) != 2 {
		t.Errorf("got %d deliveries, want 2: %+v", len(hits), hits)
	}
	// Secrets canary over everything the relay and the driver logged.
	if logs.String() == "" {
		t.Fatal("no logs captured: the canary check would prove nothing")
	}
	if strings.Contains(logs.String(), canary) || strings.Contains(logs.String(), secret) {
		t.Fatalf("a secret leaked into the logs:\n%s", logs.String())
	}
}

// TestOpenStoreErrorHidesPassword: a connection failure names the server,
// never the password.
func TestOpenStoreErrorHidesPassword(t *testing.T) {
	t.Parallel()
	const canary = "Canary-PW-66y"
	for _, dialect := range []string{"postgres", "mysql"} {
		dsn := "postgres://u:" + canary + "@127.0.0.1:1/db?connect_timeout=2"
		if dialect == "mysql" {
			dsn = "u:" + canary + "@tcp(127.0.0.1:1)/db?timeout=2s"
		}
		c, err := Load(Source{Set: []string{"database.dialect=" + dialect, "database.dsn=" + dsn}})
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		st, err := c.OpenStore(ctx, nil, slog.New(slog.DiscardHandler))
		if err == nil {
			// Pools connect lazily: the first use fails instead.
			err = st.Migrate(ctx)
			st.Close()
		}
		if err == nil {
			t.Fatalf("%s: connecting to a closed port succeeded", dialect)
		}
		if strings.Contains(err.Error(), canary) {
			t.Errorf("%s: the password is in the error: %v", dialect, err)
		}
	}
}

// postgresSchema opens an admin connection to the test PostgreSQL and
// gives the test a schema of its own.
func postgresSchema(t *testing.T) (*sql.DB, string) {
	t.Helper()
	testenv.RequireTCP(t, "PostgreSQL", testenv.PostgresAddr)
	admin, err := sql.Open("pgx", testenv.PostgresURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Close() })
	return admin, testenv.PostgresSchema(t, admin)
}

// openMigrated opens c's store, migrated, closed when the test ends.
func openMigrated(t *testing.T, c *Config, getenv func(string) string, log *slog.Logger) *Store {
	t.Helper()
	st, err := c.OpenStore(context.Background(), getenv, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if err := st.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	return st
}

// stopAll stops r within 10s, then closes its senders.
func stopAll(t *testing.T, r *relay.Relay, senders map[string]sender.Sender) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := r.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	for _, s := range senders {
		_ = s.Close(context.Background())
	}
}

// TestOpenSendersEveryType builds one sender of each type from YAML (none
// connects before its first Send) and checks the env-held secrets.
func TestOpenSendersEveryType(t *testing.T) {
	t.Parallel()
	yml := `
senders:
  n: { type: nats, url: "nats://127.0.0.1:1" }
  w: { type: webhook, url: "http://127.0.0.1:1/h", hmac-secret-env: HOOK }
  k: { type: kafka, brokers: ["127.0.0.1:1"] }
  r: { type: rabbitmq, url: "amqp://guest:guest@127.0.0.1:1/" }
  s: { type: redis, addr: "127.0.0.1:1", password-env: REDIS_PW }
defaults: { sender: n }
`
	c, err := Load(Source{YAML: []byte(yml)})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	env := map[string]string{"HOOK": "s3cret", "REDIS_PW": "pw"}
	senders, err := c.OpenSenders(ctx, func(k string) string { return env[k] }, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"n", "w", "k", "r", "s"} {
		if senders[name] == nil {
			t.Errorf("sender %s missing", name)
		}
	}
	for _, s := range senders {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_ = s.Close(cctx)
		cancel()
	}
	delete(env, "HOOK")
	_, err = c.OpenSenders(ctx, func(k string) string { return env[k] }, nil)
	if err == nil || !strings.Contains(err.Error(), "senders.w.hmac-secret-env: environment variable HOOK is empty") {
		t.Fatalf("empty secret env: %v", err)
	}
}

// TestDefaultClaimMatchesTheSenders keeps config's list of broker sender
// types (the lock claim by default) true to the senders themselves: a
// type is in quickAckTypes exactly when its sender implements
// sender.QuickAcker and says so. A new sender type that acks quickly but
// is missing from the list would make config check and the pool size
// disagree with the relay.
func TestDefaultClaimMatchesTheSenders(t *testing.T) {
	t.Parallel()
	yml := `
database: { dialect: postgres, dsn: "postgres://127.0.0.1:1/x" }
senders:
  nats: { type: nats, url: "nats://127.0.0.1:1" }
  webhook: { type: webhook, url: "http://127.0.0.1:1/h" }
  kafka: { type: kafka, brokers: ["127.0.0.1:1"] }
  rabbitmq: { type: rabbitmq, url: "amqp://guest:guest@127.0.0.1:1/" }
  redis: { type: redis, addr: "127.0.0.1:1" }
defaults: { sender: nats }
events:
  a.nats: { sender: nats }
  a.webhook: { sender: webhook }
  a.kafka: { sender: kafka }
  a.rabbitmq: { sender: rabbitmq }
  a.redis: { sender: redis }
  a.kept: { sender: nats, claim: lease }
`
	c, err := Load(Source{YAML: []byte(yml)})
	if err != nil {
		t.Fatal(err)
	}
	senders, err := c.OpenSenders(context.Background(), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, s := range senders {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_ = s.Close(ctx)
			cancel()
		}
	}()
	for name, s := range senders {
		want := txbox.ClaimLease
		if sender.AcksQuickly(s) {
			want = txbox.ClaimLock
		}
		if got := *c.Effective("a." + name).Claim; got != want {
			t.Errorf("%s: config's default claim %q, the sender implies %q", name, got, want)
		}
	}
	if got := *c.Effective("a.kept").Claim; got != txbox.ClaimLease {
		t.Errorf("a type that sets claim: lease got %q", got)
	}
	if n := c.LockConns(); n != 4*5+4 {
		t.Errorf("LockConns = %d, want 24 (defaults and the four broker types in lock mode, 4 in flight each, + 4)", n)
	}
}

// cleanupHook counts the rows the outbox cleanup deleted.
type cleanupHook struct {
	txbox.NopRelayHook
	deleted chan int
}

func (h cleanupHook) OnMaintenance(ev txbox.MaintenanceEvent) {
	if ev.Job == txbox.JobOutboxCleanup && ev.Err == nil && ev.Count > 0 {
		h.deleted <- ev.Count
	}
}

// TestCleanupKeepsTheLongestRetention: with a type
// kept for 720h and no cleanup.outbox-ttl, the relay built from the file
// keeps processed rows for 720h, not the built-in 24h. A row processed
// 48h ago survives the cleanup round that deletes one processed 800h ago.
func TestCleanupKeepsTheLongestRetention(t *testing.T) {
	t.Parallel()
	admin, schema := postgresSchema(t)
	yml := fmt.Sprintf(`
database: { dialect: postgres, dsn: %q, schema: %s }
senders:
  hooks: { type: webhook, url: "http://127.0.0.1:9/unused" }
events:
  audit: { retention: 720h }
relay: { discover-interval: 1h }
`, testenv.PostgresURL, schema)
	c, err := Load(Source{Name: "txbox.yaml", YAML: []byte(yml)})
	if err != nil {
		t.Fatal(err)
	}
	if c.Cleanup.OutboxTTL != nil {
		t.Fatalf("cleanup.outbox-ttl = %v although the file does not set it", *c.Cleanup.OutboxTTL)
	}
	ctx := context.Background()
	log := slog.New(slog.DiscardHandler)
	st := openMigrated(t, c, nil, log)
	var keep, old txbox.ID
	for _, age := range []struct {
		id    *txbox.ID
		hours int
	}{{&keep, 48}, {&old, 800}} {
		*age.id = txbox.NewID()
		q := fmt.Sprintf(`INSERT INTO %s.txbox_outbox (id, event_type, payload, status, processed_at)
			VALUES ($1, 'audit', 'x', 'PROCESSED', now() - make_interval(hours => $2))`, schema)
		if _, err := admin.ExecContext(ctx, q, age.id.String(), age.hours); err != nil {
			t.Fatal(err)
		}
	}
	senders, err := c.OpenSenders(ctx, nil, log)
	if err != nil {
		t.Fatal(err)
	}
	hook := cleanupHook{deleted: make(chan int, 16)}
	rc := c.RelayConfig(st, senders, log)
	rc.Hooks = []txbox.RelayHook{hook}
	r, err := relay.New(rc)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Start(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-hook.deleted:
	case <-time.After(30 * time.Second):
		t.Fatal("no cleanup round deleted the row processed 800h ago")
	}
	stopAll(t, r, senders)
	var left []string
	rows, err := admin.QueryContext(ctx, fmt.Sprintf(`SELECT id::text FROM %s.txbox_outbox`, schema))
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		left = append(left, id)
	}
	if len(left) != 1 || left[0] != keep.String() {
		t.Fatalf("rows left after cleanup: %v; want only %s (processed 48h ago, retention 720h)", left, keep)
	}
}

// TestRelayConfigKeepsWakeUps: the relay built from a PostgreSQL store
// that OpenStore opened gets LISTEN/NOTIFY wake-ups (store.Waker). The
// *Store wrapper hides the driver's optional interfaces, so without
// unwrapping `txbox relay` only ever polled (pickup ~0.7 s at 100 events/s
// instead of milliseconds).
func TestRelayConfigKeepsWakeUps(t *testing.T) {
	t.Parallel()
	_, schema := postgresSchema(t)
	c, err := Load(Source{Set: []string{"database.dialect=postgres", "database.dsn=" + testenv.PostgresURL, "database.schema=" + schema}})
	if err != nil {
		t.Fatal(err)
	}
	st := openMigrated(t, c, nil, slog.New(slog.DiscardHandler))
	rc := c.RelayConfig(st, nil, nil)
	if _, ok := rc.Store.(store.Waker); !ok {
		t.Fatalf("the relay's store %T has no wake-ups (store.Waker)", rc.Store)
	}
}

// TestRelayConfigCarriesTheStreamKeys checks that every database.wal key
// of the relay's stream reaches relay.StreamConfig: a key that was
// validated and then dropped would run the relay on a silent default.
func TestRelayConfigCarriesTheStreamKeys(t *testing.T) {
	t.Parallel()
	c, err := Load(Source{YAML: []byte(`database: { dialect: postgres, dsn: x, source: wal, wal: { window: 7000, window-bytes: 1048576, lane-queue: 3000, batch-size: 400, status-interval: 2s, standby-interval: 3s, pause-limit: 1s, lag-threshold: 4096 } }`)})
	if err != nil {
		t.Fatal(err)
	}
	got := c.relayConfig().Stream
	want := relay.StreamConfig{Enabled: true, Window: 7000, WindowBytes: 1 << 20, LaneQueue: 3000, BatchSize: 400,
		StatusInterval: 2 * time.Second, StandbyInterval: 3 * time.Second, PauseLimit: time.Second, LagThreshold: 4096}
	if got != want {
		t.Errorf("relay.StreamConfig = %+v\nwant %+v", got, want)
	}
}

// TestRelayConfigLeavesBatchSizeUnset: a type whose batch-size neither
// its entry nor defaults set reaches the relay unset, so that WAL mode's
// stream batches of it are database.wal.batch-size (they were 200, the
// claims' default, whatever database.wal.batch-size said); a batch-size
// the file sets, in the entry or in defaults, reaches it set and sizes
// the stream's batches too.
func TestRelayConfigLeavesBatchSizeUnset(t *testing.T) {
	t.Parallel()
	const (
		wal     = "database: { dialect: postgres, dsn: x, source: wal }\n"
		wal700  = "database: { dialect: postgres, dsn: x, source: wal, wal: { batch-size: 700 } }\n"
		senders = "senders: { n: { type: nats } }\nevents: { a: {}, b: { batch-size: 50 } }\n"
	)
	for _, tc := range []struct {
		name, yaml     string
		defaults, a, b *int // the relay's batch sizes; nil: unset
		// StreamBatchSize of a, b and the other types; a's claims.
		streamA, streamB, streamOther, claimA int
	}{
		{"none set", wal + senders, nil, nil, new(50), 1000, 50, 1000, 200},
		{"wal.batch-size set", wal700 + senders, nil, nil, new(50), 700, 50, 700, 200},
		{"defaults set", wal + senders + "defaults: { batch-size: 300 }\n", new(300), new(300), new(50), 300, 50, 300, 300},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c, err := Load(Source{YAML: []byte(tc.yaml)})
			if err != nil {
				t.Fatal(err)
			}
			rc := c.RelayConfig(nil, nil, nil)
			for _, bs := range []struct {
				what      string
				got, want *int
			}{{"defaults", rc.Defaults.BatchSize, tc.defaults}, {"a", rc.Events["a"].BatchSize, tc.a}, {"b", rc.Events["b"].BatchSize, tc.b}} {
				if (bs.got == nil) != (bs.want == nil) || (bs.got != nil && *bs.got != *bs.want) {
					t.Errorf("%s: the relay's batch-size %s, want %s", bs.what, fmtPtr(bs.got), fmtPtr(bs.want))
				}
			}
			if a, b, o := c.StreamBatchSize("a"), c.StreamBatchSize("b"), c.StreamBatchSize(""); a != tc.streamA || b != tc.streamB || o != tc.streamOther {
				t.Errorf("StreamBatchSize a %d, b %d, other types %d; want %d, %d, %d", a, b, o, tc.streamA, tc.streamB, tc.streamOther)
			}
			if got := *c.Effective("a").BatchSize; got != tc.claimA {
				t.Errorf("a's claims take %d rows, want %d", got, tc.claimA)
			}
		})
	}
}

// fmtPtr prints *p, or (unset).
func fmtPtr(p *int) string {
	if p == nil {
		return "(unset)"
	}
	return fmt.Sprint(*p)
}

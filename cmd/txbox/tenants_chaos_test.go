package main

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/config"
	"github.com/txbox/txbox/internal/natstest"
	"github.com/txbox/txbox/internal/storeharness"
	"github.com/txbox/txbox/internal/testenv"
	"github.com/txbox/txbox/relay"
)

// tenantOracle is the delivery oracle of one tenant (docs/testing.md,
// "The delivery oracle"): the ids its publisher committed and rolled
// back, and the arrivals on its subjects. Safe for concurrent use.
type tenantOracle struct {
	name       string
	mu         sync.Mutex
	committed  map[string]bool
	rolledBack map[string]bool
	received   map[string]int
}

// tenantReport is a tenant oracle's verdict.
type tenantReport struct {
	committed, rolledBack, lost, unexpected, rolledBackArrived, duplicated, extra int
}

func (r tenantReport) String() string {
	return fmt.Sprintf("committed %d, rolled back %d: lost %d, unexpected %d (rolled back %d), duplicated %d (extra arrivals %d)",
		r.committed, r.rolledBack, r.lost, r.unexpected, r.rolledBackArrived, r.duplicated, r.extra)
}

// add adds o's counts to r's.
func (r *tenantReport) add(o tenantReport) {
	r.committed += o.committed
	r.rolledBack += o.rolledBack
	r.rolledBackArrived += o.rolledBackArrived
	r.duplicated += o.duplicated
	r.extra += o.extra
	r.lost += o.lost
	r.unexpected += o.unexpected
}

// streamRead waits until the consumer (total, misrouted: of
// consumeTenants) read every message on the stream, fails the test on a
// misrouted one, and returns how many the stream holds.
func streamRead(t *testing.T, ctx context.Context, stream jetstream.Stream, total func() int, misrouted func() []string) uint64 {
	t.Helper()
	info, err := stream.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 30*time.Second, "the consumer at the stream's end", func() bool { return uint64(total()) >= info.State.Msgs })
	if bad := misrouted(); len(bad) > 0 {
		t.Errorf("%d messages with a subject and a %s header of different tenants, e.g. %s", len(bad), txbox.HeaderTenant, bad[0])
	}
	return info.State.Msgs
}

func newTenantOracle(name string) *tenantOracle {
	return &tenantOracle{name: name, committed: map[string]bool{}, rolledBack: map[string]bool{}, received: map[string]int{}}
}

// published records ids of a transaction that committed (ok) or rolled back.
func (o *tenantOracle) published(ids []txbox.ID, ok bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, id := range ids {
		if ok {
			o.committed[id.String()] = true
		} else {
			o.rolledBack[id.String()] = true
		}
	}
}

func (o *tenantOracle) receive(id string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.received[id]++
}

// snapshot returns the ids committed so far.
func (o *tenantOracle) snapshot() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	ids := make([]string, 0, len(o.committed))
	for id := range o.committed {
		ids = append(ids, id)
	}
	return ids
}

// arrived counts the distinct ids that arrived.
func (o *tenantOracle) arrived() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.received)
}

// missing counts the ids of ids that have not arrived.
func (o *tenantOracle) missing(ids []string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	n := 0
	for _, id := range ids {
		if o.received[id] == 0 {
			n++
		}
	}
	return n
}

func (o *tenantOracle) report() tenantReport {
	o.mu.Lock()
	defer o.mu.Unlock()
	r := tenantReport{committed: len(o.committed), rolledBack: len(o.rolledBack)}
	for id := range o.committed {
		if n := o.received[id]; n == 0 {
			r.lost++
		} else if n > 1 {
			r.duplicated++
			r.extra += n - 1
		}
	}
	for id := range o.received {
		if !o.committed[id] {
			r.unexpected++
			if o.rolledBack[id] {
				r.rolledBackArrived++
			}
		}
	}
	return r
}

// chaosRelay is a `txbox relay` process of TestChaosTenants; its
// connections carry the application_name app, so that its claim
// transactions can be told from the other relays'.
type chaosRelay struct {
	app    string
	cmd    *exec.Cmd
	stderr *testenv.LogBuffer
	exited chan error
}

// chaosTenantsSetup is the fixture of TestChaosTenants: 7 schema tenants
// in the test database and 3 tenants with a database of their own.
type chaosTenantsSetup struct {
	admin   *sql.DB
	cfgPath string
	names   []string          // tenants, sorted
	dbs     map[string]string // tenant → its database
	leased  map[string]string // tenants with lease claims → their schema
	schemas map[string]string // tenant → its schema
	uniq    string
}

// dsn is the DSN of database db (the test database when "") with the
// application_name app.
func (s *chaosTenantsSetup) dsn(db, app string) string {
	u := testenv.PostgresURL
	if db != "" {
		u = strings.Replace(u, "/test?", "/"+db+"?", 1)
	}
	return u + "&application_name=" + app
}

// env is the environment of a process (or the test's publishers) whose
// connections are named app: the file's dsn-env variables.
func (s *chaosTenantsSetup) env(app string) map[string]string {
	m := map[string]string{"TXBOX_CHAOS_DSN": s.dsn("", app)}
	for tn, db := range s.dbs {
		m["TXBOX_CHAOS_DSN_"+strings.ToUpper(tn)] = s.dsn(db, app)
	}
	return m
}

func (s *chaosTenantsSetup) environ(app string) []string {
	var out []string
	for k, v := range s.env(app) {
		out = append(out, k+"="+v)
	}
	return out
}

// newChaosTenants creates the databases and the configuration (lease
// claims for 4 tenants, lock claims, the NATS default, for the others;
// a 3s lease, recovered within 2s of its expiry; a tenant idle for 1s
// parked, the parked ones swept every 1s), and migrates.
func newChaosTenants(t *testing.T, ctx context.Context, prefix string) *chaosTenantsSetup {
	t.Helper()
	s := &chaosTenantsSetup{admin: storeharness.PostgresAdmin(t), dbs: map[string]string{}, leased: map[string]string{}, schemas: map[string]string{}, uniq: testenv.UniqueName("")}
	base := testenv.PostgresSchema(t, s.admin)
	var b strings.Builder
	fmt.Fprintf(&b, `database: { dialect: postgres, dsn-env: TXBOX_CHAOS_DSN, max-conns: 30 }
senders: { main: { type: nats, url: %q } }
defaults:
  route: { subject: "%s.{tenant}.{event_type}" }
  lease: 3s
  batch-size: 50
  polling: { min-delay: 5ms, max-delay: 100ms }
events: { orders: {} }
relay: { discover-interval: 100ms, recover-interval: 1s, recover-max-interval: 2s, shutdown-timeout: 15s }
cleanup: { interval: 1s }
tenants-park-after: 1s
tenants-sweep-interval: 1s
tenants:
`, testenv.NATSURL, prefix)
	lease := " events: { orders: { claim: lease } },"
	for i := 1; i <= 3; i++ {
		tn, db := fmt.Sprintf("d%d", i), fmt.Sprintf("txc_%s_d%d", s.uniq, i)
		if _, err := s.admin.ExecContext(ctx, "CREATE DATABASE "+db); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _, _ = s.admin.Exec("DROP DATABASE IF EXISTS " + db + " WITH (FORCE)") })
		s.dbs[tn] = db
		s.names = append(s.names, tn)
		s.schemas[tn] = "public"
		if i == 3 {
			s.leased[tn] = "public"
		}
		fmt.Fprintf(&b, "  - { name: %s,%s dsn-env: TXBOX_CHAOS_DSN_%s }\n", tn, map[bool]string{true: lease}[i == 3], strings.ToUpper(tn))
	}
	for i := 1; i <= 7; i++ {
		tn := fmt.Sprintf("s%d", i)
		t.Cleanup(func() { _, _ = s.admin.Exec("DROP SCHEMA IF EXISTS " + base + "_" + tn + " CASCADE") })
		s.names = append(s.names, tn)
		s.schemas[tn] = base + "_" + tn
		if i >= 5 {
			s.leased[tn] = base + "_" + tn
		}
		fmt.Fprintf(&b, "  - { name: %s,%s schema: %s_%s }\n", tn, map[bool]string{true: lease}[i >= 5], base, tn)
	}
	sort.Strings(s.names)
	s.cfgPath = filepath.Join(t.TempDir(), "txbox.yaml")
	if err := os.WriteFile(s.cfgPath, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	mig, out, errOut := child(t, ctx, "migrate", "--config", s.cfgPath)
	mig.Env = append(mig.Env, s.environ("txbox_migrate")...)
	if err := mig.Run(); err != nil || strings.Count(out.String(), "migrated tenant ") != len(s.names) {
		t.Fatalf("migrate: %v\n%s\n%s", err, out, errOut)
	}
	return s
}

// startRelay starts relay process n; it is killed when the test ends,
// whatever state it is in.
func (s *chaosTenantsSetup) startRelay(t *testing.T, ctx context.Context, n int) *chaosRelay {
	t.Helper()
	app := fmt.Sprintf("txc_%s_r%d", s.uniq, n)
	return startChaosRelay(t, ctx, app, s.cfgPath, s.environ(app))
}

// startChaosRelay starts `txbox relay --config cfgPath` named app, with
// env added to its environment; it is killed when the test ends,
// whatever state it is in.
func startChaosRelay(t *testing.T, ctx context.Context, app, cfgPath string, env []string) *chaosRelay {
	t.Helper()
	cmd, _, stderr := child(t, ctx, "relay", "--config", cfgPath)
	cmd.Env = append(cmd.Env, env...)
	r := &chaosRelay{app: app, cmd: cmd, stderr: stderr, exited: make(chan error, 1)}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { r.exited <- cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill() // SIGKILL ends a stopped process too
		<-done
	})
	return r
}

// openClaims counts relay r's lock claims open at the server holding
// rows: a lock claim's transaction idles while its batch is sent, and
// has a transaction id only once FOR UPDATE locked a row (an empty claim
// has none).
func (s *chaosTenantsSetup) openClaims(t *testing.T, r *chaosRelay) int {
	t.Helper()
	var n int
	if err := s.admin.QueryRow(`SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND state LIKE 'idle in transaction%' AND backend_xid IS NOT NULL`, r.app).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// staleLeases counts, in the lease-claim tenants, the rows still
// claimed whose lease ends within the next left: run at a time d after a
// SIGSTOP, with left the lease minus d, these are the rows claimed before
// the stop and unfinished, the stopped relay's (the others finish theirs
// in milliseconds).
func (s *chaosTenantsSetup) staleLeases(t *testing.T, ctx context.Context, stores map[string]*config.Store, left time.Duration) int {
	t.Helper()
	n := 0
	for _, c := range s.staleLeasesBy(t, ctx, stores, left) {
		n += c
	}
	return n
}

// staleLeasesBy is staleLeases per tenant.
func (s *chaosTenantsSetup) staleLeasesBy(t *testing.T, ctx context.Context, stores map[string]*config.Store, left time.Duration) map[string]int {
	t.Helper()
	n := map[string]int{}
	for tn, schema := range s.leased {
		var c int
		if err := stores[tn].Pool.QueryRow(ctx, `SELECT count(*) FROM `+schema+`.txbox_outbox
			WHERE status = 'IN_PROCESS' AND lease_until < now() + make_interval(secs => $1)`, left.Seconds()).Scan(&c); err != nil {
			t.Fatal(err)
		}
		n[tn] = c
	}
	return n
}

// liveLeases counts, in the lease-claim tenants, the rows still claimed
// under a lease that has not run out and ends within the next left: with
// left the time until a stop plus the lease, the rows the stopped relay
// holds.
func (s *chaosTenantsSetup) liveLeases(t *testing.T, ctx context.Context, stores map[string]*config.Store, left time.Duration) int {
	t.Helper()
	n := 0
	for tn, schema := range s.leased {
		var c int
		if err := stores[tn].Pool.QueryRow(ctx, `SELECT count(*) FROM `+schema+`.txbox_outbox
			WHERE status = 'IN_PROCESS' AND lease_until > now() AND lease_until < now() + make_interval(secs => $1)`, max(left, 0).Seconds()).Scan(&c); err != nil {
			t.Fatal(err)
		}
		n += c
	}
	return n
}

// stopMidBatch stops r with SIGSTOP while it holds a lock claim and,
// if 40 tries manage it, lease-claimed rows too; a stop that landed
// between batches is undone and tried again.
func (s *chaosTenantsSetup) stopMidBatch(t *testing.T, ctx context.Context, r *chaosRelay, stores map[string]*config.Store) (stoppedAt time.Time) {
	t.Helper()
	for try := 1; ; try++ {
		testenv.WaitForEvery(t, 30*time.Second, time.Millisecond, "relay "+r.app+" with a claim open", func() bool { return s.openClaims(t, r) > 0 })
		if err := r.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		stoppedAt = time.Now()
		var locks, leases int
		// Polled for a short while, from 400ms after the stop on: the
		// other relays finish the batches they had in flight in
		// milliseconds (some hundreds on a loaded machine), the stopped
		// one's stay.
		testenv.Within(600*time.Millisecond, 10*time.Millisecond, func() bool {
			locks, leases = s.openClaims(t, r), s.staleLeases(t, ctx, stores, 3*time.Second-time.Since(stoppedAt))
			return time.Since(stoppedAt) > 400*time.Millisecond && locks > 0 && leases > 0
		})
		if locks > 0 && (leases > 0 || try > 40) {
			t.Logf("SIGSTOPped %s holding %d lock claims and about %d lease-claimed rows (try %d)", r.app, locks, leases, try)
			return stoppedAt
		}
		if try == 60 {
			t.Fatal("60 stops all landed between batches")
		}
		if err := r.cmd.Process.Signal(syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
	}
}

// openTenantStores opens each tenant's outbox in the test, its
// connections named app.
func (s *chaosTenantsSetup) openTenantStores(t *testing.T, ctx context.Context, app string) map[string]*config.Store {
	t.Helper()
	env := s.env(app)
	getenv := func(k string) string { return env[k] }
	cfg, err := config.LoadFile(s.cfgPath, nil)
	if err != nil {
		t.Fatal(err)
	}
	tenants, err := cfg.ResolveTenants(ctx)
	if err != nil {
		t.Fatal(err)
	}
	stores := map[string]*config.Store{}
	for _, tn := range tenants {
		tc, err := cfg.ForTenant(tn, len(tenants))
		if err != nil {
			t.Fatal(err)
		}
		st, err := tc.OpenStore(ctx, getenv, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = st.Close() })
		stores[tn.Name] = st
	}
	return stores
}

// chaosStream is testStream with JetStream's deduplication window at the
// server's minimum: the sender's Nats-Msg-Id (the event id) would
// otherwise absorb the redeliveries, and the oracle would see none.
func chaosStream(t *testing.T, ctx context.Context) (jetstream.Stream, string) {
	t.Helper()
	js := natstest.JetStream(t, testenv.NATSURL)
	subj := testenv.UniqueName("cli")
	stream, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: strings.ToUpper(subj), Subjects: []string{subj + ".>"},
		Storage: jetstream.MemoryStorage, Duplicates: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = js.DeleteStream(context.Background(), strings.ToUpper(subj)) })
	return stream, subj
}

// consumeTenants reads the stream from its start, giving each message to
// the oracle of the tenant its subject names; a message whose
// txbox-tenant header is not that tenant, or whose subject names no
// tenant, is recorded in misrouted.
func consumeTenants(t *testing.T, ctx context.Context, stream jetstream.Stream, prefix string, oracles map[string]*tenantOracle) (total func() int, misrouted func() []string) {
	t.Helper()
	cons, err := stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var n int
	var bad []string
	cc, err := cons.Consume(func(m jetstream.Msg) {
		tn, _, _ := strings.Cut(strings.TrimPrefix(m.Subject(), prefix+"."), ".")
		h, id := m.Headers().Get(txbox.HeaderTenant), m.Headers().Get(txbox.HeaderEventID)
		mu.Lock()
		defer mu.Unlock()
		n++
		o := oracles[tn]
		if o == nil || h != tn {
			bad = append(bad, fmt.Sprintf("%s on %s with %s %q", id, m.Subject(), txbox.HeaderTenant, h))
			return
		}
		o.receive(id)
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cc.Stop)
	return func() int { mu.Lock(); defer mu.Unlock(); return n },
		func() []string { mu.Lock(); defer mu.Unlock(); return append([]string(nil), bad...) }
}

// TestChaosTenants (issue 31): three relay processes serve ten tenants
// (three databases, seven schemas; lock claims and lease claims) while
// the test publishes to every tenant, some transactions rolled back,
// to six of them in bursts (two with plain SQL, no NOTIFY) so that they
// park and wake many times (tenants-park-after and the sweep 1s). One
// relay is SIGKILLed and replaced; another is SIGSTOPped with claims
// open, past its 3s lease, and resumed. Per tenant, the oracle finds
// nothing lost and nothing unexpected (no rolled-back event arrives);
// each message's subject and txbox-tenant header name the same tenant;
// the bursty tenants parked and woke at least 3 times each.
func TestChaosTenants(t *testing.T) {
	if !chaosTenantsServices(t) {
		return
	}
	began := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	stream, prefix := chaosStream(t, ctx)
	s := newChaosTenants(t, ctx, prefix)
	oracles := map[string]*tenantOracle{}
	for _, tn := range s.names {
		oracles[tn] = newTenantOracle(tn)
	}
	total, misrouted := consumeTenants(t, ctx, stream, prefix, oracles)
	relays := []*chaosRelay{s.startRelay(t, ctx, 1), s.startRelay(t, ctx, 2), s.startRelay(t, ctx, 3)}

	stores := s.openTenantStores(t, ctx, "txc_"+s.uniq+"_pub")
	stop := make(chan struct{})
	errs := make(chan error, len(stores))
	var wg sync.WaitGroup
	pubs := map[string]*chaosPublisher{}
	for tn, st := range stores {
		p := &chaosPublisher{st: st, o: oracles[tn], mode: chaosModes[tn], schema: s.schemas[tn]}
		pubs[tn] = p
		wg.Go(func() { errs <- p.run(ctx, stop) })
	}
	stopPublishing := sync.OnceFunc(func() { close(stop); wg.Wait() })
	t.Cleanup(stopPublishing)

	all := chaosTenantsFaults(t, s, ctx, relays, oracles, stores, pubs)
	published := drainTenants(t, began, stopPublishing, errs, oracles)
	for _, r := range relays {
		sigterm(t, r.cmd, r.exited, 30*time.Second, r.stderr)
	}
	chaosTenantsVerdict(t, ctx, stream, s, oracles, stores, total, misrouted)
	chaosTenantsParked(t, s, all)
	t.Logf("published for %s, run took %s", published.Round(time.Second), time.Since(began).Round(time.Second))
}

// drainTenants stops the publishers (stopPublishing, which waits for
// them), fails the test on an error one of them sent on errs, and waits
// until every tenant's committed events arrived. It returns how long
// publishing went on since began.
func drainTenants(t *testing.T, began time.Time, stopPublishing func(), errs chan error, oracles map[string]*tenantOracle) time.Duration {
	t.Helper()
	stopPublishing()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("publish: %v", err)
		}
	}
	published := time.Since(began)
	testenv.WaitForEvery(t, 2*time.Minute, 100*time.Millisecond, "every tenant's committed events on the stream", func() bool {
		for _, o := range oracles {
			if o.report().lost > 0 {
				return false
			}
		}
		return true
	})
	return published
}

// chaosTenantsServices gates a tenants chaos test on TXBOX_CHAOS
// (testenv.Chaos) and requires PostgreSQL and NATS; false: the test
// returns.
func chaosTenantsServices(t *testing.T) bool {
	t.Helper()
	if !testenv.Chaos(t, "long chaos run") {
		return false
	}
	testenv.RequireTCP(t, "PostgreSQL", testenv.PostgresAddr)
	testenv.RequireTCP(t, "NATS", strings.TrimPrefix(testenv.NATSURL, "nats://"))
	return true
}

// chaosTenantsFaults SIGKILLs relays[0] while it holds a claim and
// starts a replacement, then SIGSTOPs relays[1] with claims open; while
// it is stopped, with publishing held, every event
// committed before the stop must arrive (its claims taken over once its
// 3s lease ran out, by relays that parked the tenant and were woken by
// their sweep), and then it is SIGCONTed. It returns every relay process
// of the run, the killed one too.
func chaosTenantsFaults(t *testing.T, s *chaosTenantsSetup, ctx context.Context, relays []*chaosRelay, oracles map[string]*tenantOracle,
	stores map[string]*config.Store, pubs map[string]*chaosPublisher) (all []*chaosRelay) {
	testenv.WaitForEvery(t, 60*time.Second, 50*time.Millisecond, "deliveries under way in every tenant", func() bool {
		for tn, o := range oracles {
			if o.arrived() < map[bool]int{true: 200, false: 60}[chaosModes[tn] == publishSteady] {
				return false
			}
		}
		return true
	})
	testenv.WaitForEvery(t, 30*time.Second, time.Millisecond, "relay "+relays[0].app+" with a claim open", func() bool { return s.openClaims(t, relays[0]) > 0 })
	if err := relays[0].cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	<-relays[0].exited
	t.Logf("SIGKILLed %s holding a claim", relays[0].app)
	all = append(all, relays[0])
	relays[0] = s.startRelay(t, ctx, 4)
	all = append(all, relays...)
	testenv.WaitForEvery(t, 30*time.Second, time.Millisecond, "the replacement "+relays[0].app+" claiming", func() bool { return s.openClaims(t, relays[0]) > 0 })
	// The killed relay's lease-claimed rows taken back first, so that
	// the rows claimed before the stop below are the stopped relay's.
	testenv.WaitForEvery(t, 30*time.Second, 50*time.Millisecond, "the killed relay's lease-claimed rows recovered", func() bool {
		return s.staleLeases(t, ctx, stores, 3*time.Second-time.Since(killed)) == 0
	})
	stopped := s.stopMidBatch(t, ctx, relays[1], stores)
	release := holdAll(pubs)
	defer release()
	others := []*chaosRelay{relays[0], relays[2]}
	marks := []int{len(others[0].stderr.String()), len(others[1].stderr.String())}
	held := s.staleLeasesBy(t, ctx, stores, 3*time.Second-time.Since(stopped))
	t.Logf("publishing held %s after the stop; the stopped relay's lease-claimed rows: %v", time.Since(stopped).Round(10*time.Millisecond), held)
	before := map[string][]string{}
	for tn, o := range oracles {
		before[tn] = o.snapshot()
	}
	testenv.WaitForEvery(t, 30*time.Second, 50*time.Millisecond, "the events committed before the SIGSTOP, delivered by the other relays", func() bool {
		for tn, o := range oracles {
			if o.missing(before[tn]) > 0 {
				return false
			}
		}
		return true
	})
	t.Logf("every event committed before the SIGSTOP arrived %s after it", time.Since(stopped).Round(100*time.Millisecond))
	// The stopped relay's lease-claimed rows (sent or not) are taken
	// back by another relay once their lease ran out.
	testenv.WaitForEvery(t, 30*time.Second, 50*time.Millisecond, "the stopped relay's lease-claimed rows recovered by another relay", func() bool {
		return s.staleLeases(t, ctx, stores, 3*time.Second-time.Since(stopped)) == 0
	})
	t.Logf("the stopped relay's lease-claimed rows recovered %s after the stop", time.Since(stopped).Round(100*time.Millisecond))
	recovered := []int{len(others[0].stderr.String()), len(others[1].stderr.String())}
	leaseWakes(t, held, others, marks, recovered)
	release()
	// Stopped until every lease it held ran out, whatever the takeover
	// took: no row claimed before the stop is still under a live lease.
	testenv.WaitForEvery(t, 30*time.Second, 50*time.Millisecond, "the stopped relay's leases run out", func() bool {
		return s.liveLeases(t, ctx, stores, 3*time.Second-time.Since(stopped)+200*time.Millisecond) == 0
	})
	if err := relays[1].cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	t.Logf("SIGCONTed %s after %s", relays[1].app, time.Since(stopped).Round(100*time.Millisecond))
	// It resumes (its late finishes fenced) and claims again while
	// publishing goes on.
	testenv.WaitForEvery(t, 30*time.Second, time.Millisecond, "the resumed "+relays[1].app+" claiming again", func() bool { return s.openClaims(t, relays[1]) > 0 })
	return all
}

// leaseWakes checks that each lease-claim tenant in which the stopped
// relay held rows (held) was woken from parked by one of the other
// relays after the stop (their logs from marks on): with publishing
// held, no notification wakes it, only the sweep (the stopped relay's
// leases running out). A tenant that one of the others ran from the stop
// until its rows were recovered (their logs up to recovered), never
// parked in between, needed no wake: that relay's own lease recovery took
// the rows back (its publishing had stopped less than a park-after
// before, or the lease ran out first).
func leaseWakes(t *testing.T, held map[string]int, others []*chaosRelay, marks, recovered []int) {
	t.Helper()
	n := 0
	for tn, rows := range held {
		if rows == 0 {
			continue
		}
		n++
		woken, lines := false, ""
		for i, r := range others {
			log := r.stderr.String()
			woken = woken || wokenAfter(log, marks[i], tn) || ranThrough(log[:recovered[i]], marks[i], tn)
			lines += tenantLines(log, marks[i], tn)
		}
		t.Logf("tenant %s: the stopped relay held %d lease-claimed rows; woken from parked by another relay: %v", tn, rows, woken)
		if !woken {
			t.Errorf("tenant %s: no other relay woke it from parked while the stopped relay's leases ran out; their lines since the stop:\n%s", tn, lines)
		}
	}
	if n == 0 {
		t.Log("the stopped relay held no lease-claimed rows: the lease wake-up was not exercised in this run")
	}
}

// chaosTenantsParked checks that the tenants published in bursts parked
// and woke at least 3 times (those of plain SQL woken by the sweep only),
// and logs every tenant's parks and wakes.
func chaosTenantsParked(t *testing.T, s *chaosTenantsSetup, all []*chaosRelay) {
	t.Helper()
	parks, wakes, desc := parkCounts(s.names, all)
	t.Logf("parks/wakes per tenant:%s", desc)
	for _, tn := range s.names {
		if chaosModes[tn] != publishSteady && (parks[tn] < 3 || wakes[tn] < 3) {
			t.Errorf("tenant %s (%v): parked %d and woken %d times, want at least 3 each", tn, chaosModes[tn], parks[tn], wakes[tn])
		}
	}
}

// chaosTenantsVerdict reads what is left on the stream and judges each
// tenant: nothing lost, nothing unexpected, nothing misrouted, no row
// left pending or claimed.
func chaosTenantsVerdict(t *testing.T, ctx context.Context, stream jetstream.Stream, s *chaosTenantsSetup, oracles map[string]*tenantOracle,
	stores map[string]*config.Store, total func() int, misrouted func() []string) {
	msgs := streamRead(t, ctx, stream, total, misrouted)
	var sum tenantReport
	for _, tn := range s.names {
		r := oracles[tn].report()
		t.Logf("tenant %s: %v", tn, r)
		if r.lost != 0 || r.unexpected != 0 || r.committed == 0 {
			t.Errorf("tenant %s: %v", tn, r)
		}
		stats, err := stores[tn].Driver.OutboxStats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, st := range stats {
			if st.Pending+st.InProcess != 0 {
				t.Errorf("tenant %s: %d pending and %d claimed %s rows after the drain", tn, st.Pending, st.InProcess, st.EventType)
			}
		}
		sum.add(r)
	}
	t.Logf("all tenants: %v; %d messages on the stream", sum, msgs)
	// Redeliveries come from the two faults only (a parked tenant's relay
	// is stopped gracefully, its batches finished): at most what the
	// faulted relay had claimed, per tenant its in-flight batches of 50.
	if bound := 2 * len(s.names) * relay.DefaultInFlight * 50; sum.extra > bound {
		t.Errorf("%d extra arrivals, more than the two faulted relays' claims could hold (%d)", sum.extra, bound)
	}
}

package main

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/internal/storeharness"
	"github.com/txbox/txbox/internal/testenv"
)

// walChaosSenderTimeout is database.wal.sender-timeout of
// TestChaosSchemaTenantsWAL: the server ends a stopped relay's walsender
// after it, and a standby relay takes the slot.
const walChaosSenderTimeout = 3 * time.Second

// walChaosWindow is database.wal.window of the run's relays: a tenant's
// view holds up to twice as many events read and unconfirmed, which
// bounds what a fault can deliver again.
const walChaosWindow = 1000

// walChaosSetup is the fixture of TestChaosSchemaTenantsWAL: schema
// tenants of the test database in WAL mode, on one shared slot, and one
// configuration file per relay process. The files differ only in
// database.wal.application-name, the name of the relay's replication
// connection, so that the walsender of the slot (pg_stat_replication)
// names the relay that streams it.
type walChaosSetup struct {
	admin     *sql.DB
	uniq      string
	slot      string
	prefix    string // the NATS subjects' prefix
	names     []string
	schemas   map[string]string
	dir       string
	mu        sync.Mutex
	listed    []string // the tenants the files list now
	relayApps []string // the relays' application names, each with its file
	watch     *holderWatch
}

// newWALChaos creates 5 schemas, the configuration and migrates: the
// slot created for the first schema, the others joined to it.
func newWALChaos(t *testing.T, prefix string) *walChaosSetup {
	t.Helper()
	s := &walChaosSetup{admin: storeharness.PostgresAdmin(t), uniq: testenv.UniqueName(""), prefix: prefix, schemas: map[string]string{}, dir: t.TempDir()}
	s.slot = "txw_" + s.uniq + "_slot"
	pub := "txw_" + s.uniq + "_pub"
	t.Cleanup(func() {
		dropSlots(t, s.admin, s.slot)
		_, _ = s.admin.Exec("DROP PUBLICATION IF EXISTS " + pub)
	})
	for i := 1; i <= 5; i++ {
		tn := fmt.Sprintf("s%d", i)
		s.names = append(s.names, tn)
		s.schemas[tn] = testenv.PostgresSchema(t, s.admin)
	}
	s.listed = slices.Clone(s.names)
	mig := s.write(t, "txw_"+s.uniq+"_migrate")
	code, out, errOut := runInProcess(t, nil, "migrate", "--config", mig)
	if code != exitOK || strings.Count(out, "migrated tenant ") != len(s.names) || strings.Count(out, "joined the shared slot "+s.slot) != len(s.names)-1 {
		t.Fatalf("migrate: %d\n%s\n%s", code, out, errOut)
	}
	return s
}

// yaml is the configuration of the process whose replication connection
// is named app, listing the tenants s.listed (s.mu held). Its slot and
// publication are database.wal's, shared by the schema tenants.
func (s *walChaosSetup) yaml(app string) string {
	var b strings.Builder
	fmt.Fprintf(&b, `database:
  dialect: postgres
  dsn: %q
  max-conns: 30
  source: wal
  wal: { slot: %s, publication: %s, sender-timeout: %s, standby-interval: 200ms, window: %d, application-name: %s }
senders: { main: { type: nats, url: %q } }
defaults:
  route: { subject: "%s.{tenant}.{event_type}" }
  lease: 3s
  batch-size: 50
  polling: { min-delay: 5ms, max-delay: 100ms }
events: { orders: {} }
relay: { shutdown-timeout: 15s }
tenants:
`, testenv.PostgresURL, s.slot, "txw_"+s.uniq+"_pub", walChaosSenderTimeout, walChaosWindow, app, testenv.NATSURL, s.prefix)
	for _, tn := range s.listed {
		fmt.Fprintf(&b, "  - { name: %s, schema: %s }\n", tn, s.schemas[tn])
	}
	return b.String()
}

// write writes app's configuration file and returns its path.
func (s *walChaosSetup) write(t *testing.T, app string) string {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	path := filepath.Join(s.dir, app+".yaml")
	// Written aside and renamed: a relay re-reading it on its own
	// tenants-interval never reads half a file.
	if err := os.WriteFile(path+".new", []byte(s.yaml(app)), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path+".new", path); err != nil {
		t.Fatal(err)
	}
	return path
}

// relist makes every relay's file list tenants and returns.
func (s *walChaosSetup) relist(t *testing.T, tenants []string) {
	t.Helper()
	s.mu.Lock()
	s.listed = slices.Clone(tenants)
	apps := slices.Clone(s.relayApps)
	s.mu.Unlock()
	for _, app := range apps {
		s.write(t, app)
	}
}

// startRelay starts relay process n on a file of its own; it is killed
// when the test ends, whatever state it is in.
func (s *walChaosSetup) startRelay(t *testing.T, ctx context.Context, n int) *chaosRelay {
	t.Helper()
	app := fmt.Sprintf("txw_%s_r%d", s.uniq, n)
	s.mu.Lock()
	s.relayApps = append(s.relayApps, app)
	s.mu.Unlock()
	return startChaosRelay(t, ctx, app, s.write(t, app), nil)
}

// holder is the application name of the relay whose walsender streams
// the shared slot, and the walsender's pid; "" and 0 while none does.
func (s *walChaosSetup) holder(t *testing.T) (app string, pid int) {
	t.Helper()
	app, pid, err := s.queryHolder()
	if err != nil {
		t.Fatal(err)
	}
	return app, pid
}

func (s *walChaosSetup) queryHolder() (app string, pid int, err error) {
	err = s.admin.QueryRow(`SELECT r.application_name, r.pid FROM pg_replication_slots s JOIN pg_stat_replication r ON r.pid = s.active_pid
		WHERE s.slot_name = $1`, s.slot).Scan(&app, &pid)
	if errors.Is(err, sql.ErrNoRows) {
		return "", 0, nil
	}
	return app, pid, err
}

// holderWatch records, every 20ms, each change of the walsender
// streaming the slot, and the test's marks (its faults), one a line.
type holderWatch struct {
	mu        sync.Mutex
	log       strings.Builder
	handovers int // the slot went from one relay to another
	start     time.Time
	done      chan struct{}
	stopped   chan struct{}
}

// watchHolder starts a holderWatch; stop ends it (and the test's end).
func (s *walChaosSetup) watchHolder(t *testing.T) *holderWatch {
	w := &holderWatch{start: time.Now(), done: make(chan struct{}), stopped: make(chan struct{})}
	go func() {
		defer close(w.stopped)
		last, lastApp := "", ""
		for {
			var app string
			var pid int
			err := s.admin.QueryRow(`SELECT coalesce(r.application_name, '(no pg_stat_replication row)'), coalesce(s.active_pid, 0)
				FROM pg_replication_slots s LEFT JOIN pg_stat_replication r ON r.pid = s.active_pid WHERE s.slot_name = $1`, s.slot).Scan(&app, &pid)
			if pid == 0 {
				app = ""
			}
			now := fmt.Sprintf("%s %d", app, pid)
			switch {
			case err != nil:
				w.mark(err.Error())
			case now != last:
				w.mark(fmt.Sprintf("%s (walsender %d)", cmp.Or(app, "none"), pid))
				w.mu.Lock()
				if strings.HasPrefix(app, "txw_") && lastApp != "" && app != lastApp {
					w.handovers++
				}
				w.mu.Unlock()
				last = now
				if strings.HasPrefix(app, "txw_") {
					lastApp = app
				}
			}
			select {
			case <-w.done:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	t.Cleanup(w.stop)
	return w
}

// mark adds a line to the record.
func (w *holderWatch) mark(what string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	fmt.Fprintf(&w.log, "  %8s: %s\n", time.Since(w.start).Round(10*time.Millisecond), what)
}

// stop ends the watch; it may be called again.
func (w *holderWatch) stop() {
	select {
	case <-w.done:
	default:
		close(w.done)
	}
	<-w.stopped
}

// record is the record and how many handovers it holds.
func (w *holderWatch) record() (string, int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.log.String(), w.handovers
}

// crossPublisher emits, every 100ms, one transaction into two schemas
// with the SQL function txbox_emit (the tenants' pairs in turn), every
// fourth rolled back, and tells each tenant's oracle.
type crossPublisher struct {
	s       *walChaosSetup
	oracles map[string]*tenantOracle
}

func (p crossPublisher) run(ctx context.Context, stop <-chan struct{}) error {
	conn, err := pgx.Connect(ctx, testenv.PostgresURL+"&application_name=txw_"+p.s.uniq+"_cross")
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	for j := 0; ; j++ {
		select {
		case <-stop:
			return nil
		case <-time.After(100 * time.Millisecond):
		}
		a, b := p.s.names[j%len(p.s.names)], p.s.names[(j+1+j/len(p.s.names))%len(p.s.names)]
		if a == b {
			b = p.s.names[(j+1)%len(p.s.names)]
		}
		if err := p.emit(ctx, conn, j%4 != 3, a, b); err != nil {
			return err
		}
	}
}

// emit emits one event into each tenant's schema in one transaction,
// committed or rolled back.
func (p crossPublisher) emit(ctx context.Context, conn *pgx.Conn, commit bool, tenants ...string) error {
	tx, err := conn.Begin(ctx)
	if err != nil {
		return err
	}
	ids := map[string]txbox.ID{}
	for _, tn := range tenants {
		var s string
		if err = tx.QueryRow(ctx, `SELECT `+pgx.Identifier{p.s.schemas[tn], "txbox_emit"}.Sanitize()+`('orders', 'x', '{"cross":true}'::bytea)::text`).Scan(&s); err != nil {
			break
		}
		if ids[tn], err = txbox.ParseID(s); err != nil {
			break
		}
	}
	if err := endTx(ctx, tx, err, commit); err != nil {
		return err
	}
	for tn, id := range ids {
		p.oracles[tn].published([]txbox.ID{id}, commit)
	}
	return nil
}

// TestChaosSchemaTenantsWAL (issue 31, docs/multi-tenant.md "WAL mode"):
// five schema tenants in WAL mode share one slot; three relay processes
// on the same tenants, one streaming the slot for all of them over one
// replication connection, the others standing by. While the test
// publishes into every schema (the Go publisher, transactions of 10
// events, every fourth rolled back) and transactions span two schemas
// (txbox_emit), the relay streaming the slot is SIGKILLed (another takes
// the slot; a replacement is started), then the new holder is
// SIGSTOPped past database.wal.sender-timeout (another takes it) and
// SIGCONTed; then a tenant is removed from every relay's list (SIGHUP):
// what is emitted into its schema meanwhile is not delivered, and is
// once it is listed again. Per tenant, the oracle finds nothing lost
// and nothing unexpected; duplicates are reported and bounded by what
// the relays that lost the slot held read and unconfirmed. The slot's
// holders over the run are logged; a handover with no fault is reported
// (a NOTE with the relays' stream lines) and does not fail the test.
func TestChaosSchemaTenantsWAL(t *testing.T) {
	if !chaosTenantsServices(t) {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	stream, prefix := chaosStream(t, ctx)
	s := newWALChaos(t, prefix)
	oracles := map[string]*tenantOracle{}
	for _, tn := range s.names {
		oracles[tn] = newTenantOracle(tn)
	}
	total, misrouted := consumeTenants(t, ctx, stream, prefix, oracles)
	relays := []*chaosRelay{s.startRelay(t, ctx, 1), s.startRelay(t, ctx, 2), s.startRelay(t, ctx, 3)}

	// The publishers' stores, from the migrate's file (its DSN is
	// literal: no dsn-env to fill in).
	stores := (&chaosTenantsSetup{cfgPath: filepath.Join(s.dir, "txw_"+s.uniq+"_migrate.yaml")}).openTenantStores(t, ctx, "")
	began := time.Now()
	stop := make(chan struct{})
	errs := make(chan error, len(stores)+1)
	var wg sync.WaitGroup
	for tn, st := range stores {
		p := &chaosPublisher{st: st, o: oracles[tn], mode: publishSteady}
		wg.Go(func() { errs <- p.run(ctx, stop) })
	}
	wg.Go(func() { errs <- crossPublisher{s: s, oracles: oracles}.run(ctx, stop) })
	stopPublishing := sync.OnceFunc(func() { close(stop); wg.Wait() })
	t.Cleanup(stopPublishing)

	s.watch = s.watchHolder(t)
	live := walChaosFaults(t, s, ctx, relays, oracles)
	testenv.WaitForEvery(t, 2*time.Minute, 100*time.Millisecond, "75s of publishing", func() bool { return time.Since(began) > 75*time.Second })
	published := drainTenants(t, began, stopPublishing, errs, oracles)
	s.watch.stop()
	walChaosHandovers(t, s.watch, live)
	for _, r := range live {
		sigterm(t, r.cmd, r.exited, 30*time.Second, r.stderr)
	}
	walChaosVerdict(t, ctx, stream, s, oracles, total, misrouted)
	t.Logf("published for %s; %s from the publishers' start to the verdict", published.Round(time.Second), time.Since(began).Round(time.Second))
}

// walChaosFaults SIGKILLs the relay streaming the slot and starts a
// replacement, SIGSTOPs the next holder past the sender timeout and
// SIGCONTs it, then removes a tenant and lists it again. It returns the
// relays still running.
func walChaosFaults(t *testing.T, s *walChaosSetup, ctx context.Context, relays []*chaosRelay, oracles map[string]*tenantOracle) []*chaosRelay {
	t.Helper()
	byApp := map[string]*chaosRelay{}
	for _, r := range relays {
		byApp[r.app] = r
	}
	waitArrivals(t, oracles, 300, "deliveries under way in every tenant")
	killed, _ := walChaosTakeover(t, s, byApp, syscall.SIGKILL)
	<-killed.exited
	delete(byApp, killed.app)
	r4 := s.startRelay(t, ctx, 4)
	s.watch.mark("test: started " + r4.app)
	byApp[r4.app] = r4
	waitArrivals(t, oracles, 300, "deliveries after the SIGKILL")
	t.Logf("extra arrivals so far (the SIGKILL): %d", extraArrivals(oracles))

	stopped, stoppedAt := walChaosTakeover(t, s, byApp, syscall.SIGSTOP)
	// Stopped until the new holder delivers, and past twice the sender
	// timeout: the stopped relay wakes to a slot another relay streams.
	waitArrivals(t, oracles, 300, "deliveries by the new holder while "+stopped.app+" is stopped")
	testenv.WaitForEvery(t, 2*walChaosSenderTimeout+time.Second, 50*time.Millisecond, "twice the sender timeout", func() bool {
		return time.Since(stoppedAt) > 2*walChaosSenderTimeout
	})
	cont := len(stopped.stderr.String())
	if err := stopped.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	s.watch.mark("test: SIGCONT " + stopped.app)
	t.Logf("SIGCONTed %s after %s", stopped.app, time.Since(stoppedAt).Round(100*time.Millisecond))
	// Each of its tenants' streams notices the pause (past
	// database.wal.pause-limit, half the sender timeout), drops the
	// events it holds unsent, and opens again.
	testenv.WaitFor(t, 30*time.Second, "the resumed relay's streams noticing the pause", func() bool {
		n := countTenantLines(stopped.stderr.String()[cont:], "the process was paused")
		return !slices.ContainsFunc(s.names, func(tn string) bool { return n[tn] == 0 })
	})
	waitArrivals(t, oracles, 300, "deliveries after the SIGCONT")
	t.Logf("extra arrivals so far (the SIGKILL, the SIGSTOP): %d; the resumed relay's stream lines since the SIGCONT:\n%s",
		extraArrivals(oracles), grepLines(stopped.stderr.String()[cont:], "source=stream"))
	if app, _ := s.holder(t); app == stopped.app {
		t.Logf("note: the resumed %s streams the slot again", app)
	}

	var live []*chaosRelay
	for _, r := range byApp {
		live = append(live, r)
	}
	walChaosRemoveTenant(t, s, live, oracles, "s3")
	t.Logf("extra arrivals so far (and the tenant removed and listed again): %d", extraArrivals(oracles))
	return live
}

// waitArrivals waits until every tenant has n more distinct events
// arrived than now.
func waitArrivals(t *testing.T, oracles map[string]*tenantOracle, n int, what string) {
	t.Helper()
	from := map[string]int{}
	for tn, o := range oracles {
		from[tn] = o.arrived()
	}
	testenv.WaitForEvery(t, 90*time.Second, 50*time.Millisecond, what, func() bool {
		for tn, o := range oracles {
			if o.arrived() < from[tn]+n {
				return false
			}
		}
		return true
	})
}

// extraArrivals sums the tenants' arrivals of an event already arrived.
func extraArrivals(oracles map[string]*tenantOracle) int {
	n := 0
	for _, o := range oracles {
		n += o.report().extra
	}
	return n
}

// walChaosTakeover sends sig to the relay streaming the slot and waits
// until another relay streams it, and logs how long that took; it
// returns the signalled relay and when it was signalled.
func walChaosTakeover(t *testing.T, s *walChaosSetup, byApp map[string]*chaosRelay, sig syscall.Signal) (*chaosRelay, time.Time) {
	t.Helper()
	var app string
	var pid int
	testenv.WaitFor(t, 30*time.Second, "a relay of the run streaming the slot", func() bool {
		app, pid = s.holder(t)
		return byApp[app] != nil
	})
	r := byApp[app]
	if err := r.cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
	at := time.Now()
	s.watch.mark(fmt.Sprintf("test: %s %s", map[syscall.Signal]string{syscall.SIGKILL: "SIGKILL", syscall.SIGSTOP: "SIGSTOP"}[sig], app))
	var next string
	var nextPID int
	testenv.WaitForEvery(t, 60*time.Second, 10*time.Millisecond, "another relay streaming the slot after "+sig.String(), func() bool {
		next, nextPID = s.holder(t)
		return next != "" && next != app
	})
	took := time.Since(at)
	t.Logf("%s of %s (walsender %d): %s streams the slot (walsender %d) %s after the signal (sender timeout %s)",
		map[syscall.Signal]string{syscall.SIGKILL: "SIGKILL", syscall.SIGSTOP: "SIGSTOP"}[sig], app, pid, next, nextPID, took.Round(time.Millisecond), walChaosSenderTimeout)
	return r, at
}

// walChaosRemoveTenant takes tn off every relay's list (SIGHUP) and,
// once each relay stopped it and tn's publisher committed 200 more
// events, checks that none of these arrived; then lists it again and
// waits for them.
func walChaosRemoveTenant(t *testing.T, s *walChaosSetup, live []*chaosRelay, oracles map[string]*tenantOracle, tn string) {
	t.Helper()
	hup := func(tenants []string, msg string) {
		t.Helper()
		marks := make([]int, len(live))
		for i, r := range live {
			marks[i] = len(r.stderr.String())
		}
		s.relist(t, tenants)
		s.watch.mark(fmt.Sprintf("test: SIGHUP, tenants %v", tenants))
		for _, r := range live {
			if err := r.cmd.Process.Signal(syscall.SIGHUP); err != nil {
				t.Fatal(err)
			}
		}
		testenv.WaitForEvery(t, 30*time.Second, 20*time.Millisecond, fmt.Sprintf("%s logged by every relay for %s", msg, tn), func() bool {
			for i, r := range live {
				if countTenantLines(r.stderr.String()[marks[i]:], msg)[tn] == 0 {
					return false
				}
			}
			return true
		})
	}
	at := time.Now()
	hup(slices.DeleteFunc(slices.Clone(s.names), func(n string) bool { return n == tn }), `msg="tenant stopped"`)
	before := map[string]bool{}
	for _, id := range oracles[tn].snapshot() {
		before[id] = true
	}
	testenv.WaitForEvery(t, 60*time.Second, 20*time.Millisecond, "200 events committed into "+tn+"'s schema while it is not listed", func() bool {
		return len(oracles[tn].snapshot()) >= len(before)+200
	})
	var held []string
	for _, id := range oracles[tn].snapshot() {
		if !before[id] {
			held = append(held, id)
		}
	}
	if n := len(held) - oracles[tn].missing(held); n > 0 {
		t.Errorf("%d of the %d events committed into %s's schema while it was not listed were delivered", n, len(held), tn)
	}
	t.Logf("tenant %s stopped by every relay %s after the SIGHUP; %d events committed into its schema meanwhile", tn, time.Since(at).Round(10*time.Millisecond), len(held))
	at = time.Now()
	hup(s.names, `msg="tenant started"`)
	testenv.WaitForEvery(t, 60*time.Second, 20*time.Millisecond, "the events emitted into "+tn+"'s schema while it was not listed", func() bool {
		return oracles[tn].missing(held) == 0
	})
	t.Logf("tenant %s listed again: the %d events held for it arrived %s after the SIGHUP", tn, len(held), time.Since(at).Round(10*time.Millisecond))
}

// walChaosVerdict reads what is left on the stream and judges each
// tenant: nothing lost, nothing unexpected, nothing misrouted, and
// duplicates (logged) at most what the relays that lost the slot held
// read and unconfirmed: up to twice the window per tenant each time.
func walChaosVerdict(t *testing.T, ctx context.Context, stream jetstream.Stream, s *walChaosSetup, oracles map[string]*tenantOracle, total func() int, misrouted func() []string) {
	t.Helper()
	msgs := streamRead(t, ctx, stream, total, misrouted)
	var sum tenantReport
	for _, tn := range s.names {
		r := oracles[tn].report()
		t.Logf("tenant %s: %v", tn, r)
		if r.lost != 0 || r.unexpected != 0 || r.committed == 0 {
			t.Errorf("tenant %s: %v", tn, r)
		}
		// Each time the slot changes hands, the new holder may deliver
		// again what the old one read and had not confirmed.
		if _, n := s.watch.record(); r.extra > max(n, 2)*2*walChaosWindow {
			t.Errorf("tenant %s: %d extra arrivals, more than %d handovers of the slot could deliver again (%d events each)", tn, r.extra, max(n, 2), 2*walChaosWindow)
		}
		sum.add(r)
	}
	t.Logf("all tenants: %v; %d messages on the stream", sum, msgs)
}

// walChaosHandovers logs the slot's holders over the run (the relays
// named by their application_name, the times since the publishers
// started, the faults marked). The two faults move the slot twice; a
// handover more moved it with no fault, which the test reports, with
// the relays' stream lines, and does not fail: nothing was lost.
func walChaosHandovers(t *testing.T, w *holderWatch, live []*chaosRelay) {
	t.Helper()
	log, n := w.record()
	t.Logf("the slot's holders over the run (%d handovers, 2 of them the faults'):\n%s", n, log)
	if n <= 2 {
		return
	}
	for _, r := range live {
		var lines strings.Builder
		for line := range strings.Lines(r.stderr.String()) {
			if strings.Contains(line, "starting it again") || strings.Contains(line, "source=stream") && (strings.Contains(line, "level=WARN") || strings.Contains(line, `msg=streaming`)) {
				lines.WriteString(line)
			}
		}
		t.Logf("NOTE: the slot changed hands %d times without a fault; %s's stream lines:\n%s", n-2, r.app, lines.String())
	}
}

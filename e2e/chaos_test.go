package e2e

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/internal/testenv"
	"github.com/txbox/txbox/relay"
	"github.com/txbox/txbox/relay/relaytest"
	"github.com/txbox/txbox/store"
	"github.com/txbox/txbox/store/postgres"
)

// errorHook counts the database errors the relay reported.
type errorHook struct {
	txbox.NopRelayHook
	claimErrs, finishErrs atomic.Int64
}

func (h *errorHook) OnPoll(ev txbox.PollEvent) {
	if ev.Err != nil {
		h.claimErrs.Add(1)
	}
}

func (h *errorHook) OnBatch(ev txbox.BatchEvent) {
	if ev.FinishErr != nil {
		h.finishErrs.Add(1)
	}
}

// TestDatabaseConnectionsKilled (scenario 6): the relay's PostgreSQL
// connections are terminated over and over while it drains a backlog. It
// reports the errors, backs off, reconnects and finishes: nothing lost,
// nothing unexpected, duplicates only for batches whose finish was lost
// (bounded by the in-flight batches).
func TestDatabaseConnectionsKilled(t *testing.T) {
	t.Parallel()
	kind := postgresKind
	ns := kind.newNamespace(t)
	d := openStore(t, kind, ns, 4)
	st := newStream(t)
	o := newOracle()
	publisher{kind: kind, d: d, o: o, eventType: "orders", txSize: 100}.run(t, 3000, 2)

	errs := &errorHook{}
	// The destination's latency keeps the drain going for about 3s (60
	// batches, 2 in flight, 100ms each), longer than the kills below: on a
	// quiet machine an undelayed relay drained the backlog in 0.7s, before
	// the kills could hit a claim or a finish.
	snd := slowSender{Sender: newNATSSender(t, testenv.NATSURL), delay: 100 * time.Millisecond}
	// The relay and its driver log to one recorder: the driver reports the
	// loss it noticed first (often the listener's, which notices a kill at
	// once) and resets its pool, so the claims may never meet a dead
	// connection.
	logs := testenv.NewLogRecorder()
	rd, closeRD, err := openPostgresWith(ns, 6, postgres.Config{Logger: logs.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(closeRD)
	claimOf.Store(rd, kind.claim)
	t.Cleanup(func() { claimOf.Delete(rd) })
	cfg := relayConfig(rd, snd, st.prefix, 0)
	cfg.Defaults.BatchSize = new(50)
	cfg.Defaults.InFlight = new(2)
	cfg.Defaults.LeaseDuration = new(2 * time.Second)
	cfg.Hooks = []txbox.RelayHook{errs}
	cfg.Logger = logs.Logger()
	cfg.Cleanup.Interval, cfg.Cleanup.MaxInterval = 100*time.Millisecond, 200*time.Millisecond
	r := relaytest.Start(t, cfg)

	killer, closeKiller, err := openPostgres("", 1)
	if err != nil {
		t.Fatal(err)
	}
	defer closeKiller()
	pool := killer.(*postgres.Driver).Pool()
	degraded := false
	killed := 0
	for i := 0; i < 10 && st.count(t) < 3000; i++ {
		var n int
		err := pool.QueryRow(context.Background(),
			`SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = $1`, appName(ns)).Scan(&n)
		if err != nil {
			t.Fatal(err)
		}
		killed += n
		// Sample health through the pause between kills.
		testenv.Within(150*time.Millisecond, 5*time.Millisecond, func() bool {
			degraded = degraded || r.Health().Degraded
			return false
		})
	}
	// The first query on a killed connection fails and resets the pool,
	// so the claims, finishes and background jobs that run next get fresh
	// connections: which of them meets the kill is a race. Whichever does
	// must report it as a lost connection.
	lost := 0
	for _, rec := range logs.Records("") {
		if rec.Level >= slog.LevelWarn && strings.Contains(rec.Attrs["error"], store.ErrConnectionLost.Error()) {
			lost++
		}
	}
	t.Logf("terminated %d connections; relay saw %d claim and %d finish errors, logged %d lost connections; degraded seen: %v",
		killed, errs.claimErrs.Load(), errs.finishErrs.Load(), lost, degraded)
	if killed == 0 {
		t.Fatal("no connection was terminated: the test did not test anything")
	}
	if lost == 0 {
		t.Errorf("the relay reported no lost connection while its connections were killed; its log:\n%s", logs)
	}
	if len(logs.Records("database reachable again")) == 0 {
		t.Errorf("the driver never said the database was reachable again; its log:\n%s", logs)
	}
	// The kills also hit d's pooled connections (same application name);
	// check the backlog through a pool opened after the last kill.
	after := openStore(t, kind, ns, 2)
	testenv.WaitFor(t, 60*time.Second, "backlog drained after the kills", func() bool { return outboxSettled(t, after) })
	for _, m := range st.readAll(t) {
		o.receivedIDs(m.id)
	}
	rep := o.report()
	t.Logf("oracle: %v", rep)
	if len(rep.Lost) != 0 || len(rep.Unexpected) != 0 || rep.extra() > 10*2*50 {
		t.Errorf("oracle: %v", rep)
	}
	// Every job's next round succeeds again (cleanup runs every 200ms at
	// most here), so health recovers.
	testenv.WaitFor(t, 10*time.Second, "health no longer degraded", func() bool { return !r.Health().Degraded })
}

// TestChaosSIGKILLRelayProcess (scenario 2): three relay processes drain
// while events are published; one is SIGKILLed mid-run and a replacement
// starts. No event is lost or unexpected; duplicates are bounded by what
// the killed relay had in flight.
func TestChaosSIGKILLRelayProcess(t *testing.T) {
	if !testenv.Chaos(t, "long chaos run") {
		return
	}
	for _, kind := range withLockKinds() {
		t.Run(kind.name, func(t *testing.T) {
			ns := kind.newNamespace(t)
			st := newStream(t)
			lease := envLease + "=3s"
			var children []*child
			for range multiRelays {
				children = append(children, startChild(t, kind, ns, st.prefix, 0, lease))
			}
			d := openStore(t, kind, ns, 4)
			o := newOracle()
			done := make(chan struct{})
			go func() {
				defer close(done)
				publisher{kind: kind, d: d, o: o, eventType: "orders", txSize: txSize, rollbackEvery: rollbackEvery}.run(t, kind.events(30_000), 2)
			}()
			testenv.WaitFor(t, 60*time.Second, "deliveries under way", func() bool { return st.count(t) >= uint64(kind.events(3000)) })
			if err := children[0].cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			<-children[0].done
			t.Logf("SIGKILLed relay 0 at %d messages in the stream", st.count(t))
			children[0] = startChild(t, kind, ns, st.prefix, 0, lease)
			<-done
			testenv.WaitFor(t, 5*time.Minute, "everything delivered", func() bool { return st.count(t) >= uint64(o.expected()) })
			testenv.WaitFor(t, 60*time.Second, "outbox settled", func() bool { return outboxSettled(t, d) })
			for _, c := range children {
				c.stop(t)
			}
			for _, m := range st.readAll(t) {
				o.receivedIDs(m.id)
			}
			rep := o.report()
			t.Logf("oracle: %v", rep)
			// The killed relay's claimed batches come again. With one
			// writer at a time (SQLite) a live relay's finish can also
			// wait past the 3s lease for the write lock, and its batch
			// is recovered and sent again: at least once, bounded by one
			// round of batches per relay.
			bound := relay.DefaultInFlight * relay.DefaultBatchSize
			if kind.serialWriter {
				bound *= multiRelays
			}
			if len(rep.Lost) != 0 || len(rep.Unexpected) != 0 || rep.extra() > bound {
				t.Errorf("oracle: %v (duplicate bound %d)", rep, bound)
			}
		})
	}
}

// stopMidBatch stops c with SIGSTOP while it has a batch in flight:
// inFlight counts its claims unfinished (a lease claim's IN_PROCESS rows,
// a lock claim's open transactions). The count is read again once the
// process is stopped, when nothing of it can change: a stop that landed
// between batches is undone (SIGCONT) and tried again.
func stopMidBatch(t *testing.T, c *child, inFlight func() int) {
	t.Helper()
	for try := 1; ; try++ {
		testenv.WaitFor(t, 60*time.Second, "a batch in flight", func() bool { return inFlight() > 0 })
		if err := c.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		// The signal is delivered at once, but a lock claim committed
		// just before it may still be in the server's hands.
		time.Sleep(200 * time.Millisecond)
		n := inFlight()
		if n > 0 {
			t.Logf("stopped with %d claims in flight (try %d)", n, try)
			return
		}
		if try == 10 {
			t.Fatal("10 stops all landed between batches")
		}
		if err := c.cmd.Process.Signal(syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
	}
}

// TestChaosSIGSTOPStaleRelay (scenario 5): a relay process is paused with
// SIGSTOP while batches are in flight, past its lease; another relay
// recovers and delivers its rows. When it resumes, its finishes are
// fenced: they change nothing, and the newer owner's result stands.
func TestChaosSIGSTOPStaleRelay(t *testing.T) {
	if !testenv.Chaos(t, "long chaos run") {
		return
	}
	for _, kind := range withLockKinds() {
		t.Run(kind.name, func(t *testing.T) {
			ns := kind.newNamespace(t)
			st := newStream(t)
			lease := envLease + "=2s"
			// The whole backlog is written before the stale relay starts:
			// a relay started first drained most of SQLite's smaller
			// backlog while it was still being written, and the pause
			// could land with nothing left in flight. A slow destination
			// keeps the stale relay's batches in flight most of the time,
			// and stopMidBatch checks, once the process is stopped, that
			// some are claimed and unfinished.
			d := openStore(t, kind, ns, 4)
			o := newOracle()
			publisher{kind: kind, d: d, o: o, eventType: "orders", txSize: txSize}.run(t, kind.events(20_000), 2)
			stale := startChild(t, kind, ns, st.prefix, 0, lease, envDelay+"=300ms")
			testenv.WaitFor(t, 60*time.Second, "deliveries under way", func() bool { return st.count(t) >= uint64(kind.events(1000)) })
			stopMidBatch(t, stale, func() int {
				if kind.claim == txbox.ClaimLock {
					return openClaimTransactions(t, d, ns)
				}
				_, inProcess := outboxCounts(t, d)
				return int(inProcess)
			})
			t.Logf("SIGSTOPped the relay at %d messages in the stream", st.count(t))
			other := startChild(t, kind, ns, st.prefix, 0, lease)
			// The other relay recovers the paused relay's claimed batches
			// once their lease expires and delivers everything, except on
			// dialects whose claim is a multi-statement transaction (MySQL
			// SELECT … FOR UPDATE then UPDATE; SQLite BEGIN IMMEDIATE): a
			// relay paused inside that transaction keeps its row locks (or,
			// on SQLite, the write lock) until it resumes or its connection
			// dies. Those rows are delayed, never lost; the test then
			// resumes the relay and checks the rest.
			testenv.Within(90*time.Second, 50*time.Millisecond, func() bool { return st.count(t) >= uint64(o.expected()) })
			if left := uint64(o.expected()) - min(st.count(t), uint64(o.expected())); left > 0 {
				if kind.name == "postgres" || kind.claim == txbox.ClaimLock {
					// With the lock claim the session's bound (the lease)
					// ends the paused relay's transactions on both dialects.
					t.Errorf("%d events not delivered while the stale relay was paused: a one-statement claim, or a bounded lock claim, holds no lock across a pause", left)
				} else {
					t.Logf("%d events held by the paused relay's open claim transaction until it resumes (%s)", left, kind.name)
				}
			}
			if err := stale.cmd.Process.Signal(syscall.SIGCONT); err != nil {
				t.Fatal(err)
			}
			testenv.WaitFor(t, 2*time.Minute, "everything delivered", func() bool { return st.count(t) >= uint64(o.expected()) })
			testenv.WaitFor(t, 60*time.Second, "outbox settled", func() bool { return outboxSettled(t, d) })
			stale.stop(t)
			other.stop(t)
			b, err := os.ReadFile(stale.stats)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("stale relay: %s", strings.TrimSpace(string(b)))
			var fenced, finishErrs int
			if _, err := fmt.Sscanf(string(b), "fenced=%d finish-errors=%d", &fenced, &finishErrs); err != nil {
				t.Fatalf("stale relay stats %q: %v", b, err)
			}
			switch {
			case kind.claim == txbox.ClaimLock && finishErrs == 0:
				// The database ended its transactions during the pause:
				// every batch it had in flight fails to commit.
				t.Error("no finish of the stale relay failed after resuming: SIGSTOP did not land mid-batch, the bound was not exercised")
			case kind.claim != txbox.ClaimLock && fenced == 0:
				t.Error("the stale relay finished no batch after resuming: SIGSTOP did not land mid-batch, the fence was not exercised")
			}
			stats, err := d.OutboxStats(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range stats {
				if s.Pending+s.InProcess+s.Failed != 0 {
					t.Errorf("after the stale relay resumed: %+v", s)
				}
			}
			for _, m := range st.readAll(t) {
				o.receivedIDs(m.id)
			}
			rep := o.report()
			t.Logf("oracle: %v", rep)
			// Duplicates: the paused relay's in-flight batches, and, with
			// a 2s lease on a loaded machine, batches of the other relay
			// that outlived their own lease: at most both relays'
			// in-flight rows.
			if len(rep.Lost) != 0 || len(rep.Unexpected) != 0 || rep.extra() > 2*relay.DefaultInFlight*relay.DefaultBatchSize {
				t.Errorf("oracle: %v", rep)
			}
		})
	}
}

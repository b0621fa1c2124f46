package e2e

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/internal/testenv"
	"github.com/txbox/txbox/relay"
	"github.com/txbox/txbox/store"
	"github.com/txbox/txbox/store/postgres"
)

// Scenario 27 (docs/testing.md, "Failure scenarios"): a network
// partition, not a crash. Relay A is a child process that reaches
// PostgreSQL through a testenv.CutProxy the test cuts: A's connections stay
// open and hear nothing, no FIN and no RST, until the link returns. NATS
// stays direct, so A can go on sending while it is cut off from its
// database. Relay B reaches PostgreSQL directly.
//
// The proxy rather than a network namespace with a veth pair: A would need
// PostgreSQL and NATS on an address outside loopback (the shared server's
// configuration changed for one test) and a firewall rule or a link taken
// down, state outside the test process that a killed test leaves behind.
// What the relay and the server can observe is the same silence; the one
// difference (the proxy's kernel acknowledges A's bytes, so TCP keepalives
// and TCP_USER_TIMEOUT do not fire) leaves only the application's timeouts
// to notice the cut, and those are what the scenario is about.

// steadyPublisher publishes a transaction of steadyTxSize events every
// steadyEvery from one goroutine until stopped, every fifth also once
// rolled back. One publisher and one transaction at a time: commit order
// is publish order, so it knows each key's commit order.
type steadyPublisher struct {
	d    store.Driver
	pub  func(ctx context.Context, d store.Driver, evs []*txbox.Event, commit bool) error
	o    *oracle
	keys int

	mu    sync.Mutex
	place map[txbox.ID]keyPlace

	stop chan struct{}
	done chan error
}

// keyPlace is an event's key and its place in the key's commit order.
type keyPlace struct {
	key string
	n   int
}

const (
	steadyTxSize = 10
	steadyEvery  = 20 * time.Millisecond // 500 events a second
)

// startSteadyPublisher starts publishing events of type "orders" with
// keys k0..k(keys-1) in turn on d; it stops when t ends at the latest.
func startSteadyPublisher(t *testing.T, kind storeKind, d store.Driver, o *oracle, keys int) *steadyPublisher {
	t.Helper()
	p := &steadyPublisher{d: d, pub: kind.publish, o: o, keys: keys, place: map[txbox.ID]keyPlace{},
		stop: make(chan struct{}), done: make(chan error, 1)}
	go func() { p.done <- p.run() }()
	t.Cleanup(func() { p.halt() })
	return p
}

func (p *steadyPublisher) run() error {
	tick := time.NewTicker(steadyEvery) // the publishing pace
	defer tick.Stop()
	next := map[string]int{}
	for tx := 0; ; tx++ {
		select {
		case <-p.stop:
			return nil
		case <-tick.C:
		}
		evs := make([]*txbox.Event, steadyTxSize)
		ids := make([]txbox.ID, steadyTxSize)
		for i := range evs {
			ids[i] = txbox.NewID()
			evs[i] = &txbox.Event{ID: ids[i], Type: "orders", Key: fmt.Sprintf("k%d", (tx*steadyTxSize+i)%p.keys), Payload: []byte(`{"e2e":true}`)}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err := p.pub(ctx, p.d, evs, true)
		cancel()
		if err != nil {
			return fmt.Errorf("publish: %w", err)
		}
		p.mu.Lock()
		for _, ev := range evs {
			p.place[ev.ID] = keyPlace{key: ev.Key, n: next[ev.Key]}
			next[ev.Key]++
		}
		p.mu.Unlock()
		p.o.committedIDs(ids...)
		if tx%5 == 0 {
			back := make([]*txbox.Event, steadyTxSize)
			backIDs := make([]txbox.ID, steadyTxSize)
			for i := range back {
				backIDs[i] = txbox.NewID()
				back[i] = &txbox.Event{ID: backIDs[i], Type: "orders", Key: "k0", Payload: []byte(`{"e2e":false}`)}
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			err := p.pub(ctx, p.d, back, false)
			cancel()
			if err != nil {
				return fmt.Errorf("publish (rolled back): %w", err)
			}
			p.o.rolledBackIDs(backIDs...)
		}
	}
}

// halt stops publishing and returns the publisher's error, once.
func (p *steadyPublisher) halt() error {
	select {
	case <-p.stop:
		return nil
	default:
	}
	close(p.stop)
	return <-p.done
}

// finish stops publishing; the test fails if a publish failed.
func (p *steadyPublisher) finish(t *testing.T) {
	t.Helper()
	if err := p.halt(); err != nil {
		t.Fatal(err)
	}
}

// orderViolations counts the events whose first arrival in msgs (stream
// order) came after the first arrival of a later event of their key, and
// describes the first few.
func (p *steadyPublisher) orderViolations(msgs []received) (int, []string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	seen := map[txbox.ID]bool{}
	last := map[string]int{}
	n := 0
	var first []string
	for _, m := range msgs {
		pl, ok := p.place[m.id]
		if !ok || seen[m.id] {
			continue // not committed (the oracle's), or a redelivery
		}
		seen[m.id] = true
		if prev, ok := last[pl.key]; ok && pl.n < prev {
			n++
			if len(first) < 3 {
				first = append(first, fmt.Sprintf("key %s: event #%d (%s) first arrived after #%d", pl.key, pl.n, m.id, prev))
			}
			continue
		}
		last[pl.key] = pl.n
	}
	return n, first
}

// waitFor is testenv.WaitFor that, when the wait times out, fails with
// diag's account of the run.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool, diag func() string) {
	t.Helper()
	if !testenv.Within(timeout, 5*time.Millisecond, cond) {
		t.Fatalf("timed out after %v waiting for %s\n%s", timeout, what, diag())
	}
}

// unsettledIDs returns those of ids whose rows are still PENDING or
// IN_PROCESS.
func unsettledIDs(t testing.TB, d store.Driver, ids []txbox.ID) []txbox.ID {
	t.Helper()
	pd := d.(*postgres.Driver)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	strs := make([]string, len(ids))
	for i, id := range ids {
		strs[i] = id.String()
	}
	rows, err := pd.Pool().Query(ctx, fmt.Sprintf("SELECT id::text FROM %s.%s WHERE id = ANY($1::uuid[]) AND status IN ('PENDING', 'IN_PROCESS')",
		pd.Tables().Schema, pd.Tables().Outbox), strs)
	if err != nil {
		t.Fatalf("read the rows' status: %v", err)
	}
	defer rows.Close()
	var out []txbox.ID
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		id, err := txbox.ParseID(s)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, id)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// proxiedTx returns the pids of the server sessions behind proxy (a child
// relay's, reaching the server through it) that have a transaction open.
func proxiedTx(t testing.TB, d store.Driver, proxy *testenv.CutProxy) []int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rows, err := d.(*postgres.Driver).Pool().Query(ctx,
		`SELECT pid FROM pg_stat_activity WHERE client_addr = '127.0.0.1' AND client_port = ANY($1) AND xact_start IS NOT NULL`, proxy.UpstreamPorts())
	if err != nil {
		t.Fatalf("read the sessions behind the proxy: %v", err)
	}
	pids, err := pgx.CollectRows(rows, pgx.RowTo[int])
	if err != nil {
		t.Fatalf("read the sessions behind the proxy: %v", err)
	}
	return pids
}

// childStats reads a stopped child's stats file (childRelay).
func childStats(t testing.TB, c *child) (line string, fenced, finishErrs int64) {
	t.Helper()
	b, err := os.ReadFile(c.stats)
	if err != nil {
		t.Fatal(err)
	}
	line = strings.TrimSpace(string(b))
	if _, err := fmt.Sscanf(line, "fenced=%d finish-errors=%d", &fenced, &finishErrs); err != nil {
		t.Fatalf("child stats %q: %v", line, err)
	}
	return line, fenced, finishErrs
}

// missingIDs counts the committed events that are not in msgs.
func missingIDs(o *oracle, msgs []received) int {
	got := make(map[txbox.ID]bool, len(msgs))
	for _, m := range msgs {
		got[m.id] = true
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	n := 0
	for id := range o.committed {
		if !got[id] {
			n++
		}
	}
	return n
}

// TestChaosNetworkCutTable (scenario 27, table mode): A (behind the proxy,
// a slow destination so that it has batches in flight) and B share a
// table under steady publishing. The link is cut while a send of A is
// under way: A's claimed rows are freed within the bound (the lease claim:
// their lease expires; the lock claim: the server ends A's idle claim
// transaction after idle_in_transaction_session_timeout, set to the lease)
// and B delivers them while A is still cut off. When the link returns,
// A's late finish changes nothing (the lease claim: fenced; the lock
// claim: its commit fails). Nothing lost or unexpected; the duplicates are
// A's batches in flight at the cut, plus at most one round of B's.
func TestChaosNetworkCutTable(t *testing.T) {
	if !testenv.Chaos(t, "long chaos run") {
		return
	}
	for _, kind := range []storeKind{postgresKind, lockKind(postgresKind)} {
		t.Run(kind.name, func(t *testing.T) { networkCutTable(t, kind) })
	}
}

func networkCutTable(t *testing.T, kind storeKind) {
	const lease = 3 * time.Second
	ns := kind.newNamespace(t)
	st := newStream(t)
	d := openStore(t, kind, ns, 4)
	proxy := testenv.StartCutProxy(t, postgresAddr(t))
	aSends := t.TempDir() + "/a-sends"
	leaseEnv := envLease + "=" + lease.String()
	a := startChild(t, kind, ns, st.prefix, 0, leaseEnv, envDelay+"=300ms", envSendLog+"="+aSends, postgresVia(t, proxy.Addr()))
	b := startChild(t, kind, ns, st.prefix, 0, leaseEnv)
	o := newOracle()
	pub := startSteadyPublisher(t, kind, d, o, 7)
	al := newSendLogReader(aSends)
	diag := func() string {
		al.read(t)
		pending, inProcess := outboxCounts(t, d)
		return fmt.Sprintf("A: %s\nstream: %d messages, %d committed\noutbox: %d pending, %d in process", al.summary(), st.count(t), o.expected(), pending, inProcess)
	}

	// Cut while a send of A that began less than 100ms ago is under way:
	// with its 300ms delay, the cut lands between A's claim and its
	// finish.
	waitFor(t, time.Minute, "deliveries under way and a send of A just begun", func() bool {
		al.read(t)
		return st.count(t) >= 1000 && al.underWaySince(time.Now().Add(-100*time.Millisecond))
	}, diag)
	proxy.Cut()
	cutAt := time.Now()
	al.read(t)
	held := unsettledIDs(t, d, al.idsBegunBefore(cutAt))
	if len(held) == 0 {
		t.Fatalf("no row A sent before the cut is still claimed: the cut did not land mid-batch\n%s", diag())
	}
	t.Logf("cut A's link with %d of the rows it sent still claimed (%s)", len(held), al.summary())

	// The server ends A's open transactions within the bound: the lock
	// claim's transactions after idle_in_transaction_session_timeout (the
	// lease). The lease claim holds none across a send.
	openTx := proxiedTx(t, d, proxy)
	t.Logf("A's sessions with a transaction open at the cut: %d", len(openTx))
	if kind.claim == txbox.ClaimLock {
		if len(openTx) == 0 {
			t.Fatalf("A has no claim transaction open at the cut: the cut did not land mid-batch\n%s", diag())
		}
		waitFor(t, lease+15*time.Second, "the server to end A's claim transactions", func() bool {
			return len(proxiedTx(t, d, proxy)) == 0
		}, diag)
		ended := time.Since(cutAt)
		t.Logf("the server ended A's claim transactions %s after the cut (bound %s)", ended.Round(time.Millisecond), lease)
		if ended > lease+2*time.Second {
			t.Errorf("the server ended A's claim transactions %s after the cut, over the bound %s (+2s)", ended, lease)
		}
	}

	// B delivers A's rows while A is cut off: only B can finish them now
	// (or a statement of A's that reached the server just before the
	// cut). With the lease claim they are due again when the lease
	// expires. With the lock claim they are free once the server ended
	// A's transaction, but below the claim cursor of B, which moved on
	// while they were locked: B finds them at its next full scan, within
	// ClaimRescanInterval.
	pickup := lease + 5*time.Second
	if kind.claim == txbox.ClaimLock {
		pickup += postgres.DefaultClaimRescanInterval
	}
	waitFor(t, pickup+15*time.Second, "B to finish the rows A had claimed at the cut", func() bool {
		return len(unsettledIDs(t, d, held)) == 0
	}, diag)
	took := time.Since(cutAt)
	t.Logf("A's claimed rows finished by B %s after the cut (bound %s)", took.Round(time.Millisecond), pickup)
	if took > pickup {
		t.Errorf("A's rows took %s to be finished by B, over the bound %s", took, pickup)
	}
	al.read(t)
	cutSends, cutEvents, _ := al.between(cutAt, time.Now())

	proxy.Restore()
	restoredAt := time.Now()
	waitFor(t, time.Minute, "A to send again after the link returned", func() bool {
		al.read(t)
		n, _, _ := al.between(restoredAt, time.Now().Add(time.Hour))
		return n > 0
	}, diag)
	pub.finish(t)
	waitFor(t, 3*time.Minute, "everything delivered and the outbox settled", func() bool {
		return st.count(t) >= uint64(o.expected()) && outboxSettled(t, d)
	}, diag)
	a.stop(t)
	b.stop(t)

	stats, fenced, finishErrs := childStats(t, a)
	t.Logf("A: %s; %d sends (%d events) began while cut off", stats, cutSends, cutEvents)
	switch {
	case kind.claim == txbox.ClaimLock && finishErrs == 0:
		// The server ended A's claim transactions during the cut: every
		// batch A had in flight fails to commit once the link returns.
		t.Error("no finish of A failed after the link returned: its claim transaction outlived the cut, or no batch was in flight")
	case kind.claim != txbox.ClaimLock && fenced == 0:
		// A's send was under way at the cut; its finish waited in the
		// proxy and ran after B had finished the rows.
		t.Error("A's late finish was not fenced: it had a batch in flight at the cut, and B finished those rows first")
	}
	msgs := st.readAll(t)
	for _, m := range msgs {
		o.receivedIDs(m.id)
	}
	rep := o.report()
	isHeld := map[txbox.ID]bool{}
	for _, id := range held {
		isHeld[id] = true
	}
	ofA := 0
	for id := range rep.Duplicated {
		if isHeld[id] {
			ofA++
		}
	}
	t.Logf("oracle: %v; %d of the duplicated events were A's rows claimed at the cut", rep, ofA)
	bound := len(held) + relay.DefaultInFlight*relay.DefaultBatchSize
	if len(rep.Lost) != 0 || len(rep.Unexpected) != 0 || rep.extra() > bound {
		t.Errorf("oracle: %v (duplicate bound %d: A's %d claimed rows and a round of B's batches)", rep, bound, len(held))
	}
}

// TestChaosNetworkCutWAL (scenario 27, WAL mode): A streams the slot
// through the proxy, with a slow destination so that it holds a queue of
// read, unsent events; B stands by, direct. Ordered by key, four keys,
// steady publishing. The link is cut: the server ends A's walsender after
// wal_sender_timeout and B takes the slot. A must have stopped sending by
// then (a Send begun after B's takeover while A is still cut off is a
// duplicate that can overtake B's delivery of its key) and its health must
// stop saying "streaming" before the link returns. Nothing lost or
// unexpected, per-key commit order holds in the first arrivals, and the
// duplicates are at most what A sent around the cut.
func TestChaosNetworkCutWAL(t *testing.T) {
	if !testenv.Chaos(t, "long chaos run") {
		return
	}
	const (
		keys = 4
		// A sends a wave of at most one event per key every 20ms, about
		// 170 a second, below the 500 published: its queue grows. Batches
		// of 40 are 10 waves, so a batch in flight ends within about
		// 250ms, well before the server can free the slot.
		delay = "20ms"
		batch = "40"
		// The queue A holds at the cut: over 10s of its sends, so that a
		// relay that goes on sending its queue is still at it seconds
		// after B's takeover, and under the lane's 5,000, so nothing
		// spills into the table.
		heldAtCut = 2000
	)
	kind := walKind
	ns := kind.newNamespace(t)
	st := newStream(t)
	d := openStore(t, kind, ns, 4)
	proxy := testenv.StartCutProxy(t, postgresAddr(t))
	dir := t.TempDir()
	aSends, aHealth := dir+"/a-sends", dir+"/a-health"
	common := []string{envOrdering + "=key", envBatch + "=" + batch}
	a := startChild(t, kind, ns, st.prefix, 0, append(common, envDelay+"="+delay, envSendLog+"="+aSends,
		envHealthLog+"="+aHealth, postgresVia(t, proxy.Addr()))...)
	al, ah := newSendLogReader(aSends), newHealthLogReader(aHealth)
	o := newOracle()
	diag := func() string {
		al.read(t)
		ah.read(t)
		h := ah.last()
		return fmt.Sprintf("A: %s; stream %q holding %d (as of %s ago)\nslot's walsender pid %d\nstream: %d messages, %d committed\noutbox rows: %d",
			al.summary(), h.state, h.held, time.Since(h.at).Round(time.Millisecond), slotActivePID(t, d), st.count(t), o.expected(), outboxRows(t, d))
	}
	waitFor(t, 30*time.Second, "A to stream", func() bool {
		ah.read(t)
		return ah.last().state == string(relay.StreamStreaming) && slotActivePID(t, d) != 0
	}, diag)
	pidA := slotActivePID(t, d)
	b := startChild(t, kind, ns, st.prefix, 0, common...)
	pub := startSteadyPublisher(t, kind, d, o, keys)
	waitFor(t, 2*time.Minute, fmt.Sprintf("A streaming with %d events held", heldAtCut), func() bool {
		ah.read(t)
		h := ah.last()
		return h.state == string(relay.StreamStreaming) && h.held >= heldAtCut
	}, diag)

	proxy.Cut()
	cutAt := time.Now()
	var freedAt, takeoverAt time.Time
	waitFor(t, walSenderTimeout+10*time.Second, "the server to free A's slot", func() bool {
		if slotActivePID(t, d) != pidA {
			freedAt = time.Now()
			return true
		}
		return false
	}, diag)
	waitFor(t, 10*time.Second, "B to take the slot", func() bool {
		if p := slotActivePID(t, d); p != 0 && p != pidA {
			takeoverAt = time.Now()
			return true
		}
		return false
	}, diag)
	took := takeoverAt.Sub(cutAt)
	t.Logf("the cut: A held %d events; the server freed its slot %s after, B streamed %s after",
		ah.last().held, freedAt.Sub(cutAt).Round(time.Millisecond), took.Round(time.Millisecond))
	if bound := walSenderTimeout + 3*time.Second; took > bound {
		t.Errorf("B took the slot %s after the cut, over %s (wal_sender_timeout + 3s)", took, bound)
	}
	// A's health must leave "streaming" while it is cut off; a relay that
	// keeps sending shows it here too, so the wait also keeps the link cut
	// long enough to see that.
	notStreaming := testenv.Within(walSenderTimeout, 20*time.Millisecond, func() bool {
		ah.read(t)
		_, ok := ah.firstOtherAfter(cutAt, string(relay.StreamStreaming))
		return ok
	})
	n := st.count(t)
	waitFor(t, time.Minute, "B to deliver after the takeover", func() bool { return st.count(t) >= n+1000 }, diag)
	proxy.Restore()
	restoredAt := time.Now()
	pub.finish(t)
	waitSlowly := func(timeout time.Duration, what string, cond func() bool) {
		if !testenv.Within(timeout, time.Second, cond) {
			t.Fatalf("timed out after %v waiting for %s\n%s", timeout, what, diag())
		}
	}
	waitSlowly(3*time.Minute, "every committed event delivered", func() bool {
		return st.count(t) >= uint64(o.expected()) && missingIDs(o, st.readAll(t)) == 0
	})
	waitFor(t, time.Minute, "the outbox table empty", func() bool { return outboxRows(t, d) == 0 }, diag)
	a.stop(t)
	b.stop(t)
	al.read(t)
	ah.read(t)

	stats, _, _ := childStats(t, a)
	beforeFree, beforeFreeEv, _ := al.between(cutAt, freedAt)
	beforeTake, beforeTakeEv, _ := al.between(freedAt, takeoverAt)
	after, afterEv, lastAfter := al.between(takeoverAt, restoredAt)
	t.Logf("A's sends: %d (%d events) between the cut and the slot's freeing, %d (%d) until B's takeover, %d (%d) after it while cut off; A: %s",
		beforeFree, beforeFreeEv, beforeTake, beforeTakeEv, after, afterEv, stats)
	if after > 0 {
		t.Errorf("A began %d sends (%d events) after B took the slot and before the link returned, the last %s after the takeover: a relay that lost its stream went on sending what it held",
			after, afterEv, lastAfter.Sub(takeoverAt).Round(time.Millisecond))
	}
	if h, ok := ah.firstOtherAfter(cutAt, string(relay.StreamStreaming)); ok && h.at.Before(restoredAt) {
		t.Logf("A's stream said %q %s after the cut (B took the slot %s after it)", h.state, h.at.Sub(cutAt).Round(time.Millisecond), took.Round(time.Millisecond))
	} else {
		t.Errorf("A's stream still said %q %s after B took its slot, when the link returned (waited %v: %v)",
			relay.StreamStreaming, restoredAt.Sub(takeoverAt).Round(time.Millisecond), walSenderTimeout, notStreaming)
	}

	msgs := st.readAll(t)
	violations, first := pub.orderViolations(msgs)
	for _, m := range msgs {
		o.receivedIDs(m.id)
	}
	rep := o.report()
	// The duplicates: what A sent and the server did not hear confirmed,
	// its sends from shortly before the cut (its last status update) on,
	// which B streams again.
	_, aroundCut, _ := al.between(cutAt.Add(-2*time.Second), time.Now().Add(time.Hour))
	t.Logf("oracle: %v; per-key order violations %d; A sent %d events from 2s before the cut on", rep, violations, aroundCut)
	if violations > 0 {
		t.Errorf("%d per-key order violations in the first arrivals: %s", violations, strings.Join(first, "; "))
	}
	if len(rep.Lost) != 0 || len(rep.Unexpected) != 0 || rep.extra() > aroundCut {
		t.Errorf("oracle: %v (duplicate bound %d: what A sent from 2s before the cut on)", rep, aroundCut)
	}
}

package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/internal/testenv"
	"github.com/txbox/txbox/relay"
	"github.com/txbox/txbox/relay/relaytest"
	"github.com/txbox/txbox/sender"
	"github.com/txbox/txbox/store"
	"github.com/txbox/txbox/store/postgres"
)

// WAL mode (docs/concepts.md, "WAL mode") against the real PostgreSQL and
// NATS: the delivery oracle with emitted, captured and delayed events,
// commit order, spills and their return, a dead letter parking its key, the
// slot's health; under TXBOX_CHAOS also SIGKILL and SIGSTOP of the
// streaming relay and an immediate PostgreSQL restart.

// walSenderTimeout is the e2e relays' wal_sender_timeout: short, so a
// SIGSTOPped relay loses the slot quickly.
const walSenderTimeout = 4 * time.Second

// walKind is PostgreSQL in WAL mode: publishers emit, relays stream.
var walKind = storeKind{
	name:  "postgres-wal",
	claim: txbox.ClaimLease,
	newNamespace: func(t testing.TB) string {
		t.Helper()
		ns := postgresKind.newNamespace(t)
		d, closeFn, err := openPostgresWAL(ns, 2)
		if err != nil {
			t.Fatal(err)
		}
		defer closeFn()
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		defer cancel()
		if err := d.(*postgres.Driver).CreateStream(ctx, 60*time.Second); err != nil {
			t.Fatalf("create the stream: %v", err)
		}
		// Registered after the schema's drop, so it runs before it: the
		// slot goes first (its walsender ended), then the schema.
		t.Cleanup(func() {
			d, closeFn, err := openPostgresWAL(ns, 2)
			if err != nil {
				t.Error(err)
				return
			}
			defer closeFn()
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			if err := d.(*postgres.Driver).DropStream(ctx); err != nil {
				t.Errorf("drop the stream: %v", err)
			}
		})
		return ns
	},
	open:    openPostgresWAL,
	publish: postgresKind.publish,
}

func openPostgresWAL(schema string, conns int) (store.Driver, func(), error) {
	return openPostgresWith(schema, conns, postgres.Config{Source: postgres.SourceWAL, WAL: postgres.WALConfig{SenderTimeout: walSenderTimeout}})
}

// walStreamConfig is the stream of the e2e relays: fast standby and
// slot reads, a pause limit below walSenderTimeout.
func walStreamConfig() relay.StreamConfig {
	return relay.StreamConfig{Enabled: true, StandbyInterval: 300 * time.Millisecond, StatusPoll: 500 * time.Millisecond,
		PauseLimit: walSenderTimeout / 2}
}

// newDedupStream is newStream with a dedup window long enough to hold a
// whole test: the broker drops a replayed event, so "NATS duplicates 0"
// can be asserted.
func newDedupStream(t testing.TB) *jsStream {
	t.Helper()
	st := newStream(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	info, err := st.s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cfg := info.Config
	cfg.Duplicates = 10 * time.Minute
	s, err := st.js.UpdateStream(ctx, cfg)
	if err != nil {
		t.Fatalf("update stream: %v", err)
	}
	st.s = s
	return st
}

// slotActivePID is the backend pid streaming ns's slot, 0 when none.
func slotActivePID(t testing.TB, d store.Driver) int {
	t.Helper()
	pd := d.(*postgres.Driver)
	var pid *int
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := pd.Pool().QueryRow(ctx, "SELECT active_pid FROM pg_replication_slots WHERE slot_name = $1", pd.WAL().Slot).Scan(&pid); err != nil {
		t.Fatalf("read the slot: %v", err)
	}
	if pid == nil {
		return 0
	}
	return *pid
}

// insertPlainSQL inserts n rows into the outbox table with plain SQL, as
// a producer that predates WAL mode does; the publication captures them.
func insertPlainSQL(t testing.TB, d store.Driver, typ string, n int, o *oracle) {
	t.Helper()
	pd := d.(*postgres.Driver)
	ids := make([]txbox.ID, n)
	for i := range ids {
		ids[i] = txbox.NewID()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	q := fmt.Sprintf("INSERT INTO %s.%s (id, event_type, payload) SELECT unnest($1::uuid[]), $2, '\\x7b7d'::bytea", pd.Tables().Schema, pd.Tables().Outbox)
	uuids := make([]string, n)
	for i, id := range ids {
		uuids[i] = id.String()
	}
	if _, err := pd.Pool().Exec(ctx, q, uuids, typ); err != nil {
		t.Fatalf("plain-SQL insert: %v", err)
	}
	o.committedIDs(ids...)
}

// outboxRows counts the rows left in the outbox table.
func outboxRows(t testing.TB, d store.Driver) int {
	t.Helper()
	pd := d.(*postgres.Driver)
	var n int
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := pd.Pool().QueryRow(ctx, fmt.Sprintf("SELECT count(*) FROM %s.%s", pd.Tables().Schema, pd.Tables().Outbox)).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestWALDelivery: two relays in WAL mode (one streams, one stands by);
// emitted events in transactions that commit or roll back, rows a
// plain-SQL producer inserts into the table, and events with a future
// not-before. Every committed event arrives once, nothing rolled back
// arrives, the captured rows are deleted, and the table ends empty.
func TestWALDelivery(t *testing.T) {
	kind := walKind
	ns := kind.newNamespace(t)
	st := newDedupStream(t)
	d := openStore(t, kind, ns, 4)
	var relays []*relay.Relay
	var acks []*ackCounter
	for range 2 {
		nc := newNATSSender(t, testenv.NATSURL)
		a := newAckCounter(nc)
		acks = append(acks, a)
		rd := openStore(t, kind, ns, 6)
		relays = append(relays, relaytest.Start(t, relayConfig(rd, a, st.prefix, 0)))
	}
	o := newOracle()
	publisher{kind: kind, d: d, o: o, eventType: "orders", txSize: txSize, rollbackEvery: rollbackEvery}.run(t, 5000, 2)
	insertPlainSQL(t, d, "orders", 500, o)
	later := make([]*txbox.Event, 20)
	ids := make([]txbox.ID, len(later))
	for i := range later {
		ids[i] = txbox.NewID()
		later[i] = &txbox.Event{ID: ids[i], Type: "orders", Payload: []byte("{}"), NotBefore: time.Now().Add(2 * time.Second)}
	}
	if err := kind.publish(context.Background(), d, later, true); err != nil {
		t.Fatal(err)
	}
	o.committedIDs(ids...)
	// One id emitted twice, in one batch's reach: nothing stops a
	// producer from doing so in WAL mode (no primary key), and the relay
	// must finish both.
	twice := txbox.NewID()
	for range 2 {
		if err := kind.publish(context.Background(), d, []*txbox.Event{{ID: twice, Type: "orders", Payload: []byte("{}")}}, true); err != nil {
			t.Fatal(err)
		}
	}
	o.committedIDs(twice)
	testenv.WaitFor(t, 2*time.Minute, "everything delivered", func() bool { return st.count(t) >= uint64(o.expected()) })
	testenv.WaitFor(t, 30*time.Second, "the outbox table empty", func() bool { return outboxRows(t, d) == 0 })
	testenv.WaitFor(t, 30*time.Second, "every transaction confirmed", func() bool {
		for _, r := range relays {
			if h := r.Health().Stream; h.Held != 0 || h.Transactions != 0 {
				return false
			}
		}
		return true
	})

	streaming, standby := 0, 0
	for _, r := range relays {
		switch r.Health().Stream.State {
		case relay.StreamStreaming:
			streaming++
		case relay.StreamStandby:
			standby++
		}
	}
	if streaming != 1 || standby != 1 {
		t.Errorf("%d relays streaming and %d standing by, want 1 and 1", streaming, standby)
	}
	for _, m := range st.readAll(t) {
		o.receivedIDs(m.id)
	}
	rep := o.report()
	t.Logf("oracle: %v", rep)
	if !rep.clean() {
		t.Errorf("oracle: %v", rep)
	}
	// The relay-side view: each event was acknowledged once (the one id
	// emitted twice, twice), so nothing came back through the stream.
	acked := map[txbox.ID]int{}
	for _, a := range acks {
		for _, id := range a.ids() {
			acked[id]++
		}
	}
	for id, n := range acked {
		if want := map[bool]int{true: 2, false: 1}[id == twice]; n != want {
			t.Errorf("event %s acknowledged %d times, want %d", id, n, want)
		}
	}
}

// TestWALCommitOrder (the oracle): two transactions write one key;
// the one with the smaller id commits last. WAL mode delivers the key in
// commit order.
func TestWALCommitOrder(t *testing.T) {
	kind := walKind
	ns := kind.newNamespace(t)
	st := newDedupStream(t)
	d := openStore(t, kind, ns, 4)
	nc := newNATSSender(t, testenv.NATSURL)
	cfg := relayConfig(openStore(t, kind, ns, 6), nc, st.prefix, 0)
	cfg.Defaults.Ordering = new(txbox.OrderingKey)
	relaytest.Start(t, cfg)

	pool := d.(*postgres.Driver).Pool()
	ctx := context.Background()
	const rounds = 20
	var want []txbox.ID
	for i := range rounds {
		early, late := txbox.NewID(), txbox.NewID() // early < late
		key := fmt.Sprint("k", i%3)
		txEarly, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := d.OutboxInsert(ctx, txEarly, &store.OutboxInsertParams{Events: []*txbox.Event{{ID: early, Type: "orders", Key: key, Payload: []byte("{}")}}}); err != nil {
			t.Fatal(err)
		}
		txLate, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := d.OutboxInsert(ctx, txLate, &store.OutboxInsertParams{Events: []*txbox.Event{{ID: late, Type: "orders", Key: key, Payload: []byte("{}")}}}); err != nil {
			t.Fatal(err)
		}
		if err := txLate.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		if err := txEarly.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		want = append(want, late, early)
	}
	testenv.WaitFor(t, time.Minute, "everything delivered", func() bool { return st.count(t) >= 2*rounds })
	keyOf := map[txbox.ID]string{}
	wantByKey := map[string][]txbox.ID{}
	for i, id := range want {
		k := fmt.Sprint("k", (i/2)%3)
		keyOf[id] = k
		wantByKey[k] = append(wantByKey[k], id)
	}
	got := map[string][]txbox.ID{}
	for _, m := range st.readAll(t) {
		got[keyOf[m.id]] = append(got[keyOf[m.id]], m.id)
	}
	for k, w := range wantByKey {
		if !slices.Equal(got[k], w) {
			t.Errorf("key %s delivered %v, want commit order %v", k, got[k], w)
		}
	}
}

// flakySender fails every message of the types in down, transiently,
// until they are brought up; it counts the sends of each id.
type flakySender struct {
	sender.Sender
	mu    sync.Mutex
	down  map[string]bool
	perm  map[txbox.ID]bool
	sends map[txbox.ID]int
}

func (f *flakySender) Send(ctx context.Context, msgs []*sender.Message) error {
	f.mu.Lock()
	errs := make([]error, len(msgs))
	var pass []*sender.Message
	var at []int
	for i, m := range msgs {
		f.sends[m.ID]++
		switch {
		case f.perm[m.ID]:
			errs[i] = txbox.Permanent(fmt.Errorf("poison %s", m.ID))
		case f.down[m.EventType]:
			errs[i] = fmt.Errorf("refused while down")
		default:
			pass, at = append(pass, m), append(at, i)
		}
	}
	f.mu.Unlock()
	if len(pass) > 0 {
		res := sender.Results(f.Sender.Send(ctx, pass), len(pass))
		for j, i := range at {
			errs[i] = res[j]
		}
	}
	for _, e := range errs {
		if e != nil {
			return &sender.BatchError{Errs: errs}
		}
	}
	return nil
}

func (f *flakySender) setDown(typ string, down bool) {
	f.mu.Lock()
	f.down[typ] = down
	f.mu.Unlock()
}

// TestWALSpillAndReturn: a type whose destination refuses its messages
// spills them into the table while the other type flows; once the
// destination accepts again the poller delivers the spills, an ordered
// key in its commit order. A permanent failure is dead-lettered and parks
// its ordered key: the key's later events wait in the table until the
// dead letter is retried.
func TestWALSpillAndReturn(t *testing.T) {
	kind := walKind
	ns := kind.newNamespace(t)
	st := newDedupStream(t)
	d := openStore(t, kind, ns, 4)
	nc := newNATSSender(t, testenv.NATSURL)
	fs := &flakySender{Sender: nc, down: map[string]bool{"ordered": true, "plain": true}, perm: map[txbox.ID]bool{}, sends: map[txbox.ID]int{}}
	rd := openStore(t, kind, ns, 6)
	cfg := relayConfig(rd, fs, st.prefix, 0)
	cfg.Events = map[string]relay.EventSettings{"ordered": {Ordering: new(txbox.OrderingKey)}, "plain": {}, "flowing": {}}
	cfg.Defaults.MaxAttempts = new(1000)
	r := relaytest.Start(t, cfg)

	o := newOracle()
	var orderedIDs []txbox.ID
	publishOrdered := func(n int, poison bool) {
		for i := range n {
			id := txbox.NewID()
			if poison && i == 0 {
				fs.mu.Lock()
				fs.perm[id] = true
				fs.mu.Unlock()
			} else {
				o.committedIDs(id)
			}
			orderedIDs = append(orderedIDs, id)
			if err := kind.publish(context.Background(), d, []*txbox.Event{{ID: id, Type: "ordered", Key: "k", Payload: []byte("{}")}}, true); err != nil {
				t.Fatal(err)
			}
		}
	}
	publishOrdered(20, false)
	publishN(t, kind, d, "plain", 200, o)
	flowing := publishN(t, kind, d, "flowing", 200, o)
	testenv.WaitFor(t, time.Minute, "the flowing type delivered while the others fail", func() bool { return st.count(t) >= uint64(len(flowing)) })
	testenv.WaitFor(t, time.Minute, "the failing types spilled", func() bool {
		h := r.Health().Stream
		return h != nil && h.Spilled >= 220
	})
	fs.setDown("ordered", false)
	fs.setDown("plain", false)
	testenv.WaitFor(t, time.Minute, "the spills delivered", func() bool { return st.count(t) >= uint64(o.expected()) })

	// A poison event parks its key: the key's later events wait.
	publishOrdered(5, true)
	testenv.WaitFor(t, time.Minute, "the poison event dead-lettered", func() bool {
		n, err := d.DeadLetterCount(context.Background(), &store.DeadLetterFilter{Status: store.DeadLetterUnresolved})
		return err == nil && n == 1
	})
	// The key stays parked: for 2s (the relay's polls every 200ms at
	// the most, spilled-key reloads every 5s after the last one) no event
	// behind the dead letter may arrive.
	want := uint64(o.expected() - 4)
	if testenv.Within(2*time.Second, 50*time.Millisecond, func() bool { return st.count(t) != want }) {
		t.Fatalf("%d messages while the key is parked, want %d: the events behind the dead letter were delivered", st.count(t), want)
	}
	poison := orderedIDs[len(orderedIDs)-5]
	fs.mu.Lock()
	delete(fs.perm, poison)
	fs.mu.Unlock()
	o.committedIDs(poison)
	if n, err := d.DeadLetterRetry(context.Background(), []txbox.ID{poison}); err != nil || n != 1 {
		t.Fatalf("retry the dead letter: %d, %v", n, err)
	}
	testenv.WaitFor(t, time.Minute, "the parked key delivered", func() bool { return st.count(t) >= uint64(o.expected()) })
	testenv.WaitFor(t, 30*time.Second, "the outbox table empty", func() bool { return outboxRows(t, d) == 0 })

	var orderedGot []txbox.ID
	for _, m := range st.readAll(t) {
		o.receivedIDs(m.id)
		if m.subject == st.prefix+".ordered" {
			orderedGot = append(orderedGot, m.id)
		}
	}
	if rep := o.report(); !rep.clean() {
		t.Errorf("oracle: %v", rep)
	}
	if !slices.Equal(orderedGot, orderedIDs) {
		t.Errorf("the ordered key arrived as %v, want %v", orderedGot, orderedIDs)
	}
	// Each event was sent by the stream at most once and by the poller
	// for its retries: the relay's own writes never came back through
	// the stream to be sent again while the destination accepted.
	fs.mu.Lock()
	defer fs.mu.Unlock()
	for _, id := range flowing {
		if fs.sends[id] != 1 {
			t.Errorf("flowing event %s sent %d times, want 1", id, fs.sends[id])
		}
	}
}

// TestWALSlotHealth: a slot past its lag threshold turns health degraded.
func TestWALSlotHealth(t *testing.T) {
	kind := walKind
	ns := kind.newNamespace(t)
	st := newDedupStream(t)
	nc := newNATSSender(t, testenv.NATSURL)
	d := openStore(t, kind, ns, 4)
	cfg := relayConfig(openStore(t, kind, ns, 6), nc, st.prefix, 0)
	cfg.Stream.LagThreshold = 1 // any WAL written after the slot's position
	r := relaytest.Start(t, cfg)
	testenv.WaitFor(t, 30*time.Second, "streaming", func() bool { return r.Health().Stream.State == relay.StreamStreaming })
	// WAL the stream never confirms past: another database's writes are
	// not this slot's, and the slot's confirmed position stays behind
	// them until a keepalive with nothing in flight.
	pool := d.(*postgres.Driver).Pool()
	if _, err := pool.Exec(context.Background(), "CREATE TEMP TABLE wal_filler AS SELECT g, repeat('x', 200) AS pad FROM generate_series(1, 20000) g"); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 30*time.Second, "degraded over the lag threshold", func() bool {
		h := r.Health()
		return h.Degraded && h.Stream.Lagging && h.Stream.Slot != nil && h.Stream.Slot.FlushLag > 1
	})
	if r.Health().Stream.Slot.Slot != d.(*postgres.Driver).WAL().Slot {
		t.Errorf("slot %q, want %q", r.Health().Stream.Slot.Slot, d.(*postgres.Driver).WAL().Slot)
	}
}

// TestWALChaosTakeover (SIGKILL and SIGSTOP of the streaming relay): a
// standby streams within 5s of a SIGKILL, and within wal_sender_timeout
// (plus its standby interval) of a SIGSTOP; the resumed relay drops what
// it held. 0 lost, nothing unexpected, no duplicate in NATS.
func TestWALChaosTakeover(t *testing.T) {
	if !testenv.Chaos(t, "long chaos run") {
		return
	}
	for _, sig := range []syscall.Signal{syscall.SIGKILL, syscall.SIGSTOP} {
		t.Run(sig.String(), func(t *testing.T) {
			kind := walKind
			ns := kind.newNamespace(t)
			st := newDedupStream(t)
			d := openStore(t, kind, ns, 4)
			// Spills the killed relay's table poller had claimed wait out
			// their lease before a standby delivers them: a short one.
			lease := envLease + "=3s"
			first := startChild(t, kind, ns, st.prefix, 0, envDelay+"=100ms", lease)
			testenv.WaitFor(t, 30*time.Second, "the first relay streams", func() bool { return slotActivePID(t, d) != 0 })
			pid := slotActivePID(t, d)
			second := startChild(t, kind, ns, st.prefix, 0, lease)
			o := newOracle()
			done := make(chan struct{})
			go func() {
				defer close(done)
				publisher{kind: kind, d: d, o: o, eventType: "orders", txSize: txSize, rollbackEvery: rollbackEvery}.run(t, 20_000, 2)
			}()
			testenv.WaitFor(t, time.Minute, "deliveries under way", func() bool { return st.count(t) >= 2000 })
			if err := first.cmd.Process.Signal(sig); err != nil {
				t.Fatal(err)
			}
			at := time.Now()
			testenv.WaitFor(t, 30*time.Second, "another relay streams", func() bool {
				p := slotActivePID(t, d)
				return p != 0 && p != pid
			})
			took := time.Since(at)
			bound := 5 * time.Second
			if sig == syscall.SIGSTOP {
				bound = walSenderTimeout + 3*time.Second
			}
			t.Logf("%s: a standby streams %s after the signal (bound %s)", sig, took.Round(time.Millisecond), bound)
			if took > bound {
				t.Errorf("takeover took %s, over %s", took, bound)
			}
			if sig == syscall.SIGSTOP {
				// Resume the stopped relay once the new one delivers, so
				// that it wakes to a stream another relay holds.
				n := st.count(t)
				testenv.WaitFor(t, 30*time.Second, "the new relay delivers", func() bool {
					c := st.count(t)
					return c > n || c >= uint64(o.expected())
				})
				if err := first.cmd.Process.Signal(syscall.SIGCONT); err != nil {
					t.Fatal(err)
				}
			}
			<-done
			if !testenv.Within(3*time.Minute, 50*time.Millisecond, func() bool { return st.count(t) >= uint64(o.expected()) }) {
				walDiagnose(t, d, st, o)
			}
			if !testenv.Within(time.Minute, 50*time.Millisecond, func() bool { return outboxRows(t, d) == 0 }) {
				walDiagnose(t, d, st, o)
			}
			if sig == syscall.SIGSTOP {
				first.stop(t)
				walPausedSendsBounded(t, first)
			}
			second.stop(t)
			for _, m := range st.readAll(t) {
				o.receivedIDs(m.id)
			}
			rep := o.report()
			t.Logf("oracle: %v", rep)
			if !rep.clean() {
				t.Errorf("oracle: %v", rep)
			}
		})
	}
}

// walPausedSendsBounded reads the stats of a relay that was stopped and
// resumed: it must have noticed the pause, and sent afterwards at most the
// batches it had in flight when it stopped (their sends were under way),
// not the events it held queued.
func walPausedSendsBounded(t *testing.T, c *child) {
	t.Helper()
	b, err := os.ReadFile(c.stats)
	if err != nil {
		t.Fatal(err)
	}
	var fenced, finishErrs, pauses, dropped, sent, streamSent, streamUnsent int64
	if _, err := fmt.Sscanf(string(b), "fenced=%d finish-errors=%d pauses=%d pause-dropped=%d sent-after-pause=%d stream-sent-after-pause=%d stream-unsent-after-pause=%d",
		&fenced, &finishErrs, &pauses, &dropped, &sent, &streamSent, &streamUnsent); err != nil {
		t.Fatalf("stats %q: %v", b, err)
	}
	t.Logf("the resumed relay: %d pause(s), %d events dropped, %d events sent after the resume (its table pollers' included), %d in stream batches begun after the pause, %d in stream batches that reached the send after it and sent nothing",
		pauses, dropped, sent, streamSent, streamUnsent)
	if pauses < 1 {
		t.Errorf("the resumed relay did not notice its pause")
	}
	if streamSent > 0 {
		t.Errorf("the resumed relay began stream batches of %d events after the pause: it sent what it held", streamSent)
	}
}

// TestWALChaosPostgresRestart: PostgreSQL restarts with -m immediate (a
// crash: the slot's confirmed position as last saved) while the relay
// streams; the relay reconnects and resumes at its own persisted
// position. 0 lost, nothing unexpected, no duplicate in NATS.
func TestWALChaosPostgresRestart(t *testing.T) {
	if !testenv.Chaos(t, "long chaos run") {
		return
	}
	kind := walKind
	ns := kind.newNamespace(t)
	st := newDedupStream(t)
	d := openStore(t, kind, ns, 4)
	c := startChild(t, kind, ns, st.prefix, 0, envDelay+"=50ms", envLease+"=3s")
	o := newOracle()
	publisher{kind: kind, d: d, o: o, eventType: "orders", txSize: txSize, rollbackEvery: rollbackEvery}.run(t, 10_000, 2)
	testenv.WaitFor(t, time.Minute, "deliveries under way", func() bool { return st.count(t) >= 1000 })
	restartPostgresImmediate(t)
	testenv.WaitFor(t, 3*time.Minute, "everything delivered", func() bool { return st.count(t) >= uint64(o.expected()) })
	c.stop(t)
	for _, m := range st.readAll(t) {
		o.receivedIDs(m.id)
	}
	rep := o.report()
	t.Logf("oracle: %v", rep)
	if !rep.clean() {
		t.Errorf("oracle: %v", rep)
	}
}

// restartPostgresImmediate restarts the local cluster with -m immediate
// and waits until it answers.
func restartPostgresImmediate(t *testing.T) {
	t.Helper()
	entries, err := os.ReadDir("/etc/postgresql")
	if err != nil || len(entries) == 0 {
		t.Fatalf("no PostgreSQL cluster under /etc/postgresql: %v", err)
	}
	out, err := exec.Command("pg_ctlcluster", "--skip-systemctl-redirect", entries[0].Name(), "main", "restart", "-m", "immediate").CombinedOutput()
	if err != nil {
		t.Fatalf("restart PostgreSQL: %v: %s", err, out)
	}
	testenv.WaitFor(t, time.Minute, "PostgreSQL answers", func() bool {
		d, closeFn, err := openPostgres("", 1)
		if err != nil {
			return false
		}
		defer closeFn()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		return d.(*postgres.Driver).Pool().Ping(ctx) == nil
	})
}

// slowTypeSender delays the sends of one event type.
type slowTypeSender struct {
	sender.Sender
	slow  string
	delay time.Duration
}

func (s slowTypeSender) Send(ctx context.Context, msgs []*sender.Message) error {
	if len(msgs) > 0 && msgs[0].EventType == s.slow {
		select {
		case <-time.After(s.delay):
		case <-ctx.Done():
		}
	}
	return s.Sender.Send(ctx, msgs)
}

// TestWALSlowDestinationSpills: a type whose destination is slower than
// the stream fills its lane; its events then spill into the table instead
// of holding back the other type, which is delivered meanwhile. Everything
// arrives once.
func TestWALSlowDestinationSpills(t *testing.T) {
	kind := walKind
	ns := kind.newNamespace(t)
	st := newDedupStream(t)
	d := openStore(t, kind, ns, 4)
	snd := slowTypeSender{Sender: newNATSSender(t, testenv.NATSURL), slow: "slow", delay: time.Second}
	cfg := relayConfig(openStore(t, kind, ns, 6), snd, st.prefix, 0)
	cfg.Events = map[string]relay.EventSettings{"slow": {BatchSize: new(10), InFlight: new(2)}, "fast": {}}
	cfg.Stream.LaneQueue = 20
	r := relaytest.Start(t, cfg)
	o := newOracle()
	for range 10 {
		publishN(t, kind, d, "slow", 10, o)
		publishN(t, kind, d, "fast", 20, o)
	}
	start := time.Now()
	testenv.WaitFor(t, 30*time.Second, "the fast type delivered", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		info, err := st.s.Info(ctx, jetstream.WithSubjectFilter(st.prefix+".fast"))
		if err != nil {
			t.Fatal(err)
		}
		return info.State.Subjects[st.prefix+".fast"] >= 200
	})
	took := time.Since(start)
	t.Logf("the fast type was delivered in %s beside a destination taking 1s a batch", took.Round(time.Millisecond))
	if took > 10*time.Second {
		t.Errorf("the fast type took %s: the slow destination held it back", took)
	}
	// The spill is counted once its write commits, which the stream does
	// not wait for: it may land after the fast type is delivered.
	if !testenv.Within(30*time.Second, 10*time.Millisecond, func() bool { return r.Health().Stream.Spilled > 0 }) {
		t.Error("nothing spilled: the slow type's lane never overflowed")
	}
	testenv.WaitFor(t, 2*time.Minute, "everything delivered", func() bool { return st.count(t) >= uint64(o.expected()) })
	for _, m := range st.readAll(t) {
		o.receivedIDs(m.id)
	}
	if rep := o.report(); !rep.clean() {
		t.Errorf("oracle: %v", rep)
	}
}

// walDiagnose fails the test with what a WAL-mode run that did not
// deliver everything left behind: the missing events and where they are.
func walDiagnose(t *testing.T, d store.Driver, st *jsStream, o *oracle) {
	t.Helper()
	for _, m := range st.readAll(t) {
		o.receivedIDs(m.id)
	}
	rep := o.report()
	pd := d.(*postgres.Driver)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var states, slot, walState string
	_ = pd.Pool().QueryRow(ctx, fmt.Sprintf("SELECT coalesce(string_agg(status || ':' || n, ' '), 'empty') FROM (SELECT status, count(*) n FROM %s.%s GROUP BY status) s",
		pd.Tables().Schema, pd.Tables().Outbox)).Scan(&states)
	_ = pd.Pool().QueryRow(ctx, "SELECT format('active %s pid %s confirmed_flush %s restart %s wal_status %s', active, active_pid, confirmed_flush_lsn, restart_lsn, wal_status) FROM pg_replication_slots WHERE slot_name = $1",
		pd.WAL().Slot).Scan(&slot)
	_ = pd.Pool().QueryRow(ctx, "SELECT format('confirmed_lsn %s at %s, current %s', confirmed_lsn, confirmed_at, pg_current_wal_lsn()) FROM "+
		pd.Tables().Schema+".txbox_wal_state").Scan(&walState)
	var sample []string
	for i, id := range rep.Lost {
		if i == 5 {
			break
		}
		var where string
		if err := pd.Pool().QueryRow(ctx, fmt.Sprintf("SELECT status || ' attempts ' || attempts || ' due ' || due_at || ' stream_pos ' || coalesce(stream_pos::text, 'null') FROM %s.%s WHERE id = $1",
			pd.Tables().Schema, pd.Tables().Outbox), id.String()).Scan(&where); err != nil {
			where = "not in the outbox table"
		}
		sample = append(sample, id.String()+": "+where)
	}
	var rowsLeft string
	_ = pd.Pool().QueryRow(ctx, fmt.Sprintf("SELECT coalesce(string_agg(format('%%s %%s att %%s due %%s lease %%s pos %%s err %%s', id, status, attempts, due_at, lease_until, stream_pos, last_error), E'\\n'), '') FROM (SELECT * FROM %s.%s LIMIT 5) x",
		pd.Tables().Schema, pd.Tables().Outbox)).Scan(&rowsLeft)
	t.Logf("rows left (first 5):\n%s", rowsLeft)
	t.Fatalf("not everything delivered or finished: %v\noutbox rows: %s\nslot: %s\nstate: %s\nlost (first 5): %v", rep, states, slot, walState, sample)
}

// batchRecorder passes batches on and records the largest per event
// type; the first slowSends of a type are held for a while, so that the
// lane fills up behind them and later batches can be as large as allowed.
type batchRecorder struct {
	sender.Sender
	mu      sync.Mutex
	largest map[string]int
	sends   map[string]int
}

const slowSends = 4

func (b *batchRecorder) Send(ctx context.Context, msgs []*sender.Message) error {
	typ := msgs[0].EventType
	b.mu.Lock()
	b.largest[typ] = max(b.largest[typ], len(msgs))
	b.sends[typ]++
	slow := b.sends[typ] <= slowSends
	b.mu.Unlock()
	if slow {
		time.Sleep(200 * time.Millisecond)
	}
	return b.Sender.Send(ctx, msgs)
}

// TestWALBatchSize: a lane's batches are database.wal.batch-size events
// at most for a type without a batch-size of its own (larger than table
// mode's claims, there being no claim to pay for), and the type's own
// batch-size where it has one.
func TestWALBatchSize(t *testing.T) {
	kind := walKind
	ns := kind.newNamespace(t)
	st := newDedupStream(t)
	d := openStore(t, kind, ns, 4)
	o := newOracle()
	publishN(t, kind, d, "wide", 4000, o)
	publishN(t, kind, d, "narrow", 1000, o)

	rec := &batchRecorder{Sender: newNATSSender(t, testenv.NATSURL), largest: map[string]int{}, sends: map[string]int{}}
	rd := openStore(t, kind, ns, 6)
	cfg := relayConfig(rd, rec, st.prefix, 0)
	cfg.Stream.BatchSize = 700
	cfg.Events = map[string]relay.EventSettings{"wide": {}, "narrow": {BatchSize: new(50)}}
	relaytest.Start(t, cfg)
	testenv.WaitFor(t, time.Minute, "every event delivered", func() bool { return st.count(t) >= uint64(o.expected()) })
	for _, m := range st.readAll(t) {
		o.receivedIDs(m.id)
	}
	if rep := o.report(); !rep.clean() {
		t.Errorf("oracle: %v", rep)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	// The wide lane queued thousands behind its held sends: its later
	// batches are full ones of the stream's size, over the 200 a claim
	// takes by default.
	if got := rec.largest["wide"]; got != 700 {
		t.Errorf("largest batch of the type without a batch-size: %d, want database.wal.batch-size (700)", got)
	}
	if got := rec.largest["narrow"]; got != 50 {
		t.Errorf("largest batch of the type with batch-size 50: %d, want 50", got)
	}
}

package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	mrand "math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/config"
	"github.com/txbox/txbox/outbox"
	"github.com/txbox/txbox/relay"
	"github.com/txbox/txbox/store"
)

// Demo defaults.
const (
	demoDefaultDuration = 10 * time.Second
	demoDefaultRate     = 500
	// demoRollbackEvery: one business transaction in this many is rolled
	// back on purpose, after its event was written.
	demoRollbackEvery = 10
	demoStream        = "TXBOX_DEMO"
	demoSubjectPrefix = "demo."
)

type demoOptions struct {
	duration     time.Duration
	rate         int
	dialect, dsn string
	drainTimeout time.Duration
	refresh      time.Duration
	// dropLiveEvery makes the live consumer ignore every n-th message
	// (tests of the final re-read); 0 ignores none.
	dropLiveEvery int
}

func runDemo(ctx context.Context, e *env, args []string) error {
	fs := newFlagSet(e, "demo", "demo [--duration 10s] [--rate 500] [--database-dialect postgres|mysql|sqlite --dsn DSN]")
	o := demoOptions{refresh: 500 * time.Millisecond}
	fs.DurationVar(&o.duration, "duration", demoDefaultDuration, "how long the simulated service publishes")
	fs.IntVar(&o.rate, "rate", demoDefaultRate, "business transactions per second to attempt")
	fs.StringVar(&o.dialect, "database-dialect", config.DialectSQLite, "database: sqlite (a file in a temp dir), postgres or mysql")
	fs.StringVar(&o.dsn, "dsn", "", "DSN for postgres or mysql; the demo's tables get a unique prefix and are dropped at the end")
	fs.DurationVar(&o.drainTimeout, "drain-timeout", 30*time.Second, "how long to wait for the backlog to drain after publishing stops")
	if err := parse(fs, args); err != nil {
		return err
	}
	switch {
	case o.duration <= 0:
		return usagef("--duration must be > 0")
	case o.rate < 1 || o.rate > 100_000:
		return usagef("--rate must be between 1 and 100000")
	case o.drainTimeout <= 0:
		return usagef("--drain-timeout must be > 0")
	case o.dialect != config.DialectSQLite && o.dsn == "":
		return usagef("--dsn is required with --database-dialect %s", o.dialect)
	case o.dialect == config.DialectSQLite && o.dsn != "":
		return usagef("--dsn is only for postgres and mysql; sqlite uses a file in a temp dir")
	}
	e.secrets = append(e.secrets, config.DSN(o.dsn).Secrets()...)
	return demo(ctx, e, o)
}

// demoState is the oracle: what the simulated service committed or rolled
// back, and what the consumer received.
type demoState struct {
	mu         sync.Mutex
	committed  map[txbox.ID]time.Time // id → commit time
	rolledBack map[txbox.ID]bool
	// uncertain holds the events of transactions whose COMMIT failed:
	// the outcome is unknown, so they may or may not arrive.
	uncertain  map[txbox.ID]bool
	received   map[txbox.ID]int // id → times received
	latencies  []time.Duration  // commit → receipt, first receipt only
	unexpected int              // received, never committed
	rbSeen     int              // received, rolled back
	dups       int
	txFailed   int
	// orders counts committed business transactions; ordersCreated the
	// delivered order-created events. With the orders table's row count
	// they show the business data and the events agree.
	orders        int
	ordersCreated map[txbox.ID]bool
	ordersInTable int64
}

func demo(ctx context.Context, e *env, o demoOptions) (err error) {
	out := e.stdout
	dir, err := os.MkdirTemp("", "txbox-demo-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)

	// 1. An embedded NATS server with JetStream, on a random port.
	ns, stream, stopNATS, err := startDemoNATS(ctx, dir)
	if err != nil {
		return err
	}
	defer stopNATS()

	// 2. The database: the configuration is built the same way as for
	// `txbox relay`, through the config package.
	prefix := "demo_" + randHex(4) + "_"
	cfg, err := demoConfig(e, o, dir, prefix, ns.ClientURL())
	if err != nil {
		return err
	}
	log := cfg.NewLogger(e.stderr)
	st, orders, closeStore, err := openDemoStore(ctx, e, o, cfg, prefix, log)
	if err != nil {
		return err
	}
	defer closeStore()

	// 3. The relay, with its senders, woken in-process by the publisher.
	r, pub, closeSenders, err := openDemoRelay(ctx, e, cfg, st, log)
	if err != nil {
		return err
	}
	defer closeSenders()

	// 4. The consumer: a durable JetStream consumer acking each message.
	s := newDemoState()
	cc, err := s.consume(ctx, stream, o.dropLiveEvery)
	if err != nil {
		return err
	}
	defer cc.Stop()

	if err := r.Start(context.WithoutCancel(ctx)); err != nil {
		return err
	}
	relayStopped := false
	stopRelay := func() error {
		if relayStopped {
			return nil
		}
		relayStopped = true
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.Relay.ShutdownTimeout)
		defer cancel()
		return r.Stop(sctx)
	}
	defer stopRelay()

	where := "SQLite in " + dir
	if o.dialect != config.DialectSQLite {
		where = o.dialect + " " + config.RedactDSN(o.dsn) + " (tables " + prefix + "*)"
	}
	fmt.Fprintf(out, "txbox demo: %s → relay → NATS JetStream (embedded, %s)\n", where, ns.ClientURL())
	fmt.Fprintf(out, "publishing ~%d business transactions/s for %s; 1 in %d is rolled back on purpose\n\n", o.rate, o.duration, demoRollbackEvery)

	// 5. The simulated service and the progress display.
	start := time.Now()
	prodErr, interrupted := s.run(ctx, e, o, start, func(ctx context.Context) error { return s.produce(ctx, st, pub, orders, o.rate) })
	if err := stopRelay(); err != nil {
		fmt.Fprintf(e.stderr, "relay stop: %v\n", err)
	}
	cc.Stop()
	return s.finish(ctx, e, st, stream, orders, prodErr, start, interrupted)
}

// startDemoNATS starts an embedded NATS server with JetStream on a random
// port and creates the demo's stream. stop shuts it down.
func startDemoNATS(ctx context.Context, dir string) (ns *natsserver.Server, stream jetstream.Stream, stop func(), err error) {
	ns, err = natsserver.NewServer(&natsserver.Options{
		Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: filepath.Join(dir, "jetstream"),
		NoLog: true, NoSigs: true, DisableJetStreamBanner: true,
	})
	if err != nil {
		return nil, nil, nil, fmt.Errorf("start embedded NATS: %w", err)
	}
	go ns.Start()
	stopServer := func() { ns.Shutdown(); ns.WaitForShutdown() }
	if !ns.ReadyForConnections(10 * time.Second) {
		stopServer()
		return nil, nil, nil, errors.New("embedded NATS did not start within 10s")
	}
	nc, err := natsgo.Connect(ns.ClientURL())
	if err != nil {
		stopServer()
		return nil, nil, nil, fmt.Errorf("connect to embedded NATS: %w", err)
	}
	stop = func() { nc.Close(); stopServer() }
	js, err := jetstream.New(nc)
	if err != nil {
		stop()
		return nil, nil, nil, err
	}
	stream, err = js.CreateStream(ctx, jetstream.StreamConfig{Name: demoStream, Subjects: []string{demoSubjectPrefix + ">"}, Storage: jetstream.FileStorage})
	if err != nil {
		stop()
		return nil, nil, nil, fmt.Errorf("create stream: %w", err)
	}
	return ns, stream, stop, nil
}

// demoConfig builds the demo's configuration through the config package,
// as `txbox relay` does: the chosen database with the demo's table prefix,
// one NATS sender to natsURL.
func demoConfig(e *env, o demoOptions, dir, prefix, natsURL string) (*config.Config, error) {
	set := []string{
		"database.dialect=" + o.dialect,
		"database.table-prefix=" + prefix,
		"senders.nats.type=nats",
		"senders.nats.url=" + natsURL,
		"defaults.route.subject=" + demoSubjectPrefix + "{event_type}",
		"defaults.polling.max-delay=1s",
		"defaults.retention=0s",
		"relay.discover-interval=1s",
		"relay.shutdown-timeout=10s",
		"log.level=warn",
	}
	if o.dialect == config.DialectSQLite {
		set = append(set, "database.dsn="+filepath.Join(dir, "demo.db"))
	} else {
		set = append(set, "database.dsn="+o.dsn)
	}
	cfg, err := config.Load(config.Source{Name: "demo", Set: set})
	if err != nil {
		return nil, err
	}
	e.secrets = append(e.secrets, cfg.Secrets(e.getenv)...)
	return cfg, nil
}

// openDemoStore opens and migrates the database and creates the orders
// table. closeStore drops what the demo created in a shared database
// (postgres, mysql), then closes the store.
func openDemoStore(ctx context.Context, e *env, o demoOptions, cfg *config.Config, prefix string, log *slog.Logger) (st *config.Store, orders string, closeStore func(), err error) {
	st, err = cfg.OpenStore(ctx, e.getenv, log)
	if err != nil {
		return nil, "", nil, err
	}
	if err := st.Migrate(ctx); err != nil {
		st.Close()
		return nil, "", nil, fmt.Errorf("migrate: %w", err)
	}
	orders = prefix + "orders"
	if err := demoExec(ctx, st, `CREATE TABLE `+orders+` (id VARCHAR(36) PRIMARY KEY, customer VARCHAR(64) NOT NULL, amount_cents BIGINT NOT NULL)`); err != nil {
		st.Close()
		return nil, "", nil, fmt.Errorf("create orders table: %w", err)
	}
	closeStore = func() {
		if o.dialect != config.DialectSQLite {
			// A shared database: leave it as it was.
			demoDropTables(context.WithoutCancel(ctx), st, prefix, orders)
		}
		st.Close()
	}
	return st, orders, closeStore, nil
}

// openDemoRelay opens the senders and builds the relay and a publisher
// that wakes it. closeSenders closes the senders.
func openDemoRelay(ctx context.Context, e *env, cfg *config.Config, st *config.Store, log *slog.Logger) (r *relay.Relay, pub *outbox.Publisher, closeSenders func(), err error) {
	senders, err := cfg.OpenSenders(ctx, e.getenv, log)
	if err != nil {
		return nil, nil, nil, err
	}
	closeSenders = func() {
		for _, s := range senders {
			_ = s.Close(context.WithoutCancel(ctx))
		}
	}
	r, err = relay.New(cfg.RelayConfig(st, senders, log))
	if err != nil {
		closeSenders()
		return nil, nil, nil, config.RelayError(err)
	}
	pub, err = outbox.NewPublisher(st, outbox.Config{OnPublish: func(types []string) { r.Wake(types...) }})
	if err != nil {
		closeSenders()
		return nil, nil, nil, err
	}
	return r, pub, closeSenders, nil
}

func newDemoState() *demoState {
	return &demoState{committed: map[txbox.ID]time.Time{}, rolledBack: map[txbox.ID]bool{}, uncertain: map[txbox.ID]bool{}, ordersCreated: map[txbox.ID]bool{}, received: map[txbox.ID]int{}}
}

// consume starts a durable JetStream consumer on stream that records and
// acks each message; it ignores every dropLiveEvery-th one (0: none).
func (s *demoState) consume(ctx context.Context, stream jetstream.Stream, dropLiveEvery int) (jetstream.ConsumeContext, error) {
	cons, err := stream.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{Durable: "demo", AckPolicy: jetstream.AckExplicitPolicy})
	if err != nil {
		return nil, fmt.Errorf("create consumer: %w", err)
	}
	var seen atomic.Int64
	cc, err := cons.Consume(func(m jetstream.Msg) {
		if n := seen.Add(1); dropLiveEvery == 0 || n%int64(dropLiveEvery) != 0 {
			s.receive(m.Headers().Get(txbox.HeaderEventID), time.Now())
		}
		_ = m.Ack()
	})
	if err != nil {
		return nil, fmt.Errorf("consume: %w", err)
	}
	return cc, nil
}

// run runs produce for o.duration while it shows the progress, then waits
// for the backlog to drain (at most o.drainTimeout). It returns produce's
// error and whether ctx ended (an interrupt) first.
func (s *demoState) run(ctx context.Context, e *env, o demoOptions, start time.Time, produce func(context.Context) error) (prodErr error, interrupted bool) {
	prodCtx, stopProd := context.WithTimeout(ctx, o.duration)
	defer stopProd()
	prodDone := make(chan error, 1)
	go func() { prodDone <- produce(prodCtx) }()

	p := &progress{w: e.stdout, tty: e.isTTY, start: start}
	tick := time.NewTicker(o.refresh)
	defer tick.Stop()
	producing := true
	var drainDeadline <-chan time.Time
loop:
	for {
		select {
		case prodErr = <-prodDone:
			producing = false
			drainDeadline = time.After(o.drainTimeout)
			if prodErr != nil {
				break loop
			}
		case <-tick.C:
			p.show(s.snapshot(), producing)
			if !producing && s.drained() {
				break loop
			}
		case <-drainDeadline:
			break loop
		case <-ctx.Done():
			interrupted = true
			if producing {
				stopProd()
				prodErr = <-prodDone
			}
			break loop
		}
	}
	p.show(s.snapshot(), false)
	p.done()
	return prodErr, interrupted
}

// finish runs once the relay and the consumer stopped: it re-reads the
// stream for what the live consumer missed, counts the orders table and
// prints the summary.
func (s *demoState) finish(ctx context.Context, e *env, st *config.Store, stream jetstream.Stream, orders string, prodErr error, start time.Time, interrupted bool) error {
	if !s.drained() {
		// The live consumer may have fallen behind (a very busy machine):
		// read the stream once more from its start before calling any
		// event lost, so "lost" means "never reached the broker".
		n, err := s.reconcile(context.WithoutCancel(ctx), stream)
		if err != nil {
			fmt.Fprintf(e.stderr, "re-reading the stream: %v\n", err)
		} else if n > 0 {
			fmt.Fprintf(e.stdout, "re-read the stream: %d events the live consumer had not seen yet\n", n)
		}
	}
	if prodErr != nil && !errors.Is(prodErr, context.Canceled) {
		return fmt.Errorf("simulated service: %w", prodErr)
	}
	var inTable int64
	if err := demoQueryInt(context.WithoutCancel(ctx), st, "SELECT count(*) FROM "+orders, &inTable); err != nil {
		return fmt.Errorf("count orders: %w", err)
	}
	s.mu.Lock()
	s.ordersInTable = inTable
	s.mu.Unlock()
	return s.summary(e.stdout, time.Since(start), interrupted)
}

// reconcile reads the whole stream with an ordered consumer and records
// every event the live consumer missed. It returns how many it found.
func (s *demoState) reconcile(ctx context.Context, stream jetstream.Stream) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	oc, err := stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	if err != nil {
		return 0, err
	}
	info, err := stream.Info(ctx)
	if err != nil {
		return 0, err
	}
	found, read := 0, uint64(0)
	for read < info.State.Msgs {
		batch, err := oc.Fetch(1000, jetstream.FetchMaxWait(2*time.Second))
		if err != nil {
			return found, err
		}
		n := 0
		for m := range batch.Messages() {
			n++
			read++
			id, err := txbox.ParseID(m.Headers().Get(txbox.HeaderEventID))
			if err != nil {
				continue // counted as unexpected by the live consumer
			}
			s.mu.Lock()
			if s.received[id] == 0 {
				found++
				s.receiveLocked(id, time.Time{})
			}
			s.mu.Unlock()
		}
		if n == 0 || ctx.Err() != nil {
			return found, batch.Error()
		}
	}
	return found, nil
}

func demoQueryInt(ctx context.Context, st *config.Store, q string, dst *int64) error {
	if st.Pool != nil {
		return st.Pool.QueryRow(ctx, q).Scan(dst)
	}
	return st.DB.QueryRowContext(ctx, q).Scan(dst)
}

func demoExec(ctx context.Context, st *config.Store, q string) error {
	if st.Pool != nil {
		_, err := st.Pool.Exec(ctx, q)
		return err
	}
	_, err := st.DB.ExecContext(ctx, q)
	return err
}

// demoDropTables removes what the demo created in a shared database.
func demoDropTables(ctx context.Context, st *config.Store, prefix, orders string) {
	tables, err := store.NewTables("", prefix)
	if err != nil {
		return
	}
	all := []string{orders, tables.Outbox, tables.DeadLetter, tables.Inbox, tables.Lease, tables.Instance, tables.Audit, tables.SchemaVersion}
	if st.Dialect() == "postgres" {
		// PostgreSQL's schema has the WAL mode tables (version 6) too.
		all = append(all, prefix+"wal_state", prefix+"wal_guard")
	}
	for _, t := range all {
		_ = demoExec(ctx, st, "DROP TABLE IF EXISTS "+t)
	}
	if st.Dialect() == "postgres" {
		// And its functions, after the tables whose defaults use them.
		for _, f := range []string{"emit", "wal_check", "outbox_notify", "uuidv7"} { // emit's id default uses uuidv7
			_ = demoExec(ctx, st, "DROP FUNCTION IF EXISTS "+prefix+f)
		}
	}
}

// produce runs business transactions at rate per second until ctx ends:
// each inserts an order and publishes order-created (and, for large
// orders, order-flagged) in the same transaction, and one in
// demoRollbackEvery is rolled back after both writes.
func (s *demoState) produce(ctx context.Context, st *config.Store, pub *outbox.Publisher, orders string, rate int) error {
	start := time.Now()
	interval := time.Second / time.Duration(rate)
	insert := fmt.Sprintf("INSERT INTO %s (id, customer, amount_cents) VALUES (%s, %s, %s)", orders, st.Placeholder(1), st.Placeholder(2), st.Placeholder(3))
	for n := 0; ; n++ {
		// Pace by the schedule, not by a fixed sleep, so a slow
		// transaction is caught up rather than lost from the rate.
		if wait := time.Until(start.Add(time.Duration(n) * interval)); wait > 0 {
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(wait):
			}
		}
		if ctx.Err() != nil {
			return nil
		}
		// The transaction itself is not cancelled with ctx: a COMMIT cut
		// short by a cancelled context has an unknown outcome, and the
		// oracle needs to know what was committed.
		if err := s.oneOrder(context.WithoutCancel(ctx), st, pub, insert, n); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			s.mu.Lock()
			s.txFailed++
			failed := s.txFailed
			s.mu.Unlock()
			// A busy database may refuse an odd transaction; keep going,
			// but not forever.
			if failed > 100 {
				return err
			}
		}
	}
}

func (s *demoState) oneOrder(ctx context.Context, st *config.Store, pub *outbox.Publisher, insert string, n int) (err error) {
	orderID := txbox.NewID().String()
	customer := fmt.Sprintf("customer-%03d", mrand.IntN(200))
	amount := 100 + mrand.IntN(50_000)
	tx, err := st.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback(context.WithoutCancel(ctx))
		}
	}()
	if err := tx.Exec(ctx, insert, orderID, customer, amount); err != nil {
		return err
	}
	payload, _ := json.Marshal(map[string]any{"order_id": orderID, "customer": customer, "amount_cents": amount})
	events := []txbox.Event{{Type: "order-created", Key: customer, Payload: payload, Headers: map[string]string{"content-type": "application/json"}}}
	if amount > 40_000 {
		events = append(events, txbox.Event{Type: "order-flagged", Key: customer, Payload: payload})
	}
	ids, err := pub.Publish(ctx, tx.Native(), events...)
	if err != nil {
		return err
	}
	orderEvent := ids[0]
	if n%demoRollbackEvery == demoRollbackEvery-1 {
		// The business logic changes its mind: the order and its events
		// vanish together.
		if err := tx.Rollback(ctx); err != nil {
			return err
		}
		s.mu.Lock()
		for _, id := range ids {
			s.rolledBack[id] = true
		}
		s.mu.Unlock()
		return nil
	}
	// Record before commit: a fast relay may deliver the event before
	// Commit returns. On a failed commit the ids move to rolled back.
	now := time.Now()
	s.mu.Lock()
	for _, id := range ids {
		s.committed[id] = now
	}
	s.ordersCreated[orderEvent] = true
	s.orders++
	s.mu.Unlock()
	if err := tx.Commit(ctx); err != nil {
		s.mu.Lock()
		for _, id := range ids {
			delete(s.committed, id)
			s.uncertain[id] = true
		}
		delete(s.ordersCreated, orderEvent)
		s.orders--
		s.mu.Unlock()
		return err
	}
	return nil
}

func (s *demoState) receive(idText string, at time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	id, err := txbox.ParseID(idText)
	if err != nil {
		s.unexpected++
		return
	}
	s.receiveLocked(id, at)
}

// receiveLocked records one receipt of id at time at (zero: found late by
// reconcile, so no latency is recorded).
func (s *demoState) receiveLocked(id txbox.ID, at time.Time) {
	s.received[id]++
	switch {
	case s.received[id] > 1:
		s.dups++
	case s.rolledBack[id]:
		s.rbSeen++
	case s.uncertain[id]:
	default:
		if t, ok := s.committed[id]; ok {
			if !at.IsZero() {
				s.latencies = append(s.latencies, at.Sub(t))
			}
		} else {
			s.unexpected++
		}
	}
}

type demoSnapshot struct {
	committed, rolledBack, delivered, pending, unexpected, dups int
	oldestPending                                               time.Duration
}

func (s *demoState) snapshot() demoSnapshot {
	s.mu.Lock()
	defer s.mu.Unlock()
	snap := demoSnapshot{committed: len(s.committed), rolledBack: len(s.rolledBack), unexpected: s.unexpected + s.rbSeen, dups: s.dups}
	now := time.Now()
	for id, t := range s.committed {
		if s.received[id] > 0 {
			snap.delivered++
		} else if age := now.Sub(t); age > snap.oldestPending {
			snap.oldestPending = age
		}
	}
	snap.pending = snap.committed - snap.delivered
	return snap
}

func (s *demoState) drained() bool {
	snap := s.snapshot()
	return snap.pending == 0
}

// progress draws the live status line: redrawn in place on a terminal,
// one line per refresh otherwise.
type progress struct {
	w             io.Writer
	tty           bool
	start         time.Time
	lastDelivered int
	lastAt        time.Time
	drawn         bool
}

func (p *progress) show(s demoSnapshot, producing bool) {
	now := time.Now()
	rate := 0.0
	if !p.lastAt.IsZero() {
		if dt := now.Sub(p.lastAt).Seconds(); dt > 0 {
			rate = float64(s.delivered-p.lastDelivered) / dt
		}
	}
	p.lastDelivered, p.lastAt = s.delivered, now
	phase := "publishing"
	if !producing {
		phase = "draining"
	}
	line := fmt.Sprintf("%5.1fs %-10s  published %6d  rolled back %5d  delivered %6d  pending %5d  %7.0f ev/s  lag %s",
		now.Sub(p.start).Seconds(), phase, s.committed, s.rolledBack, s.delivered, s.pending, rate, s.oldestPending.Round(time.Millisecond))
	if s.unexpected > 0 {
		line += fmt.Sprintf("  UNEXPECTED %d", s.unexpected)
	}
	if p.tty {
		// One line redrawn in place must not wrap on an 80-column
		// terminal, or \r would return to its last row only.
		line = fmt.Sprintf("%5.1fs  published %-6d  delivered %-6d  pending %-5d  %5.0f/s  lag %s",
			now.Sub(p.start).Seconds(), s.committed, s.delivered, s.pending, rate, s.oldestPending.Round(time.Millisecond))
		if s.unexpected > 0 {
			line += fmt.Sprintf("  UNEXPECTED %d", s.unexpected)
		}
		fmt.Fprint(p.w, "\r\033[K"+line)
		p.drawn = true
		return
	}
	fmt.Fprintln(p.w, line)
}

func (p *progress) done() {
	if p.tty && p.drawn {
		fmt.Fprintln(p.w)
	}
}

// errDemoFailed is returned when the oracle found a lost or unexpected
// event.
var errDemoFailed = errors.New("demo failed: see the summary")

func (s *demoState) summary(w io.Writer, elapsed time.Duration, interrupted bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	lost := 0
	for id := range s.committed {
		if s.received[id] == 0 {
			lost++
		}
	}
	delivered := len(s.committed) - lost
	fmt.Fprintf(w, "\nsummary after %s:\n", elapsed.Round(100*time.Millisecond))
	fmt.Fprintf(w, "  committed events      %d\n", len(s.committed))
	fmt.Fprintf(w, "  delivered             %d\n", delivered)
	fmt.Fprintf(w, "  lost                  %d\n", lost)
	fmt.Fprintf(w, "  duplicated            %d\n", s.dups)
	fmt.Fprintf(w, "  unexpected            %d\n", s.unexpected)
	fmt.Fprintf(w, "  rolled back           %d (delivered: %d)\n", len(s.rolledBack), s.rbSeen)
	if s.txFailed > 0 {
		fmt.Fprintf(w, "  failed transactions   %d (the simulated service moved on; %d events of failed COMMITs may or may not arrive)\n", s.txFailed, len(s.uncertain))
	}
	createdDelivered := 0
	for id := range s.ordersCreated {
		if s.received[id] > 0 {
			createdDelivered++
		}
	}
	fmt.Fprintf(w, "  orders committed      %d (rows in the orders table: %d, order-created events delivered: %d)\n", s.orders, s.ordersInTable, createdDelivered)
	if n := len(s.latencies); n > 0 {
		l := slices.Clone(s.latencies)
		slices.Sort(l)
		pct := func(q float64) time.Duration { return l[min(n-1, int(q*float64(n)))].Round(100 * time.Microsecond) }
		fmt.Fprintf(w, "  commit → consumer     p50 %s  p99 %s  max %s\n", pct(0.50), pct(0.99), l[n-1].Round(100*time.Microsecond))
	}
	var problems []string
	if lost > 0 {
		problems = append(problems, fmt.Sprintf("%d committed events never arrived", lost))
	}
	if s.unexpected > 0 {
		problems = append(problems, fmt.Sprintf("%d events arrived that were never committed", s.unexpected))
	}
	if s.rbSeen > 0 {
		problems = append(problems, fmt.Sprintf("%d rolled-back events were delivered", s.rbSeen))
	}
	if s.txFailed == 0 && (int64(s.orders) != s.ordersInTable || createdDelivered != s.orders) {
		problems = append(problems, fmt.Sprintf("business data and events disagree: %d orders committed, %d in the table, %d order-created delivered", s.orders, s.ordersInTable, createdDelivered))
	}
	if len(s.committed) == 0 {
		problems = append(problems, "no event was committed")
	}
	if len(problems) > 0 {
		if interrupted {
			problems = append(problems, "interrupted before the backlog drained")
		}
		fmt.Fprintf(w, "FAILED: %s\n", strings.Join(problems, "; "))
		return errDemoFailed
	}
	fmt.Fprintf(w, "OK: all %d committed events delivered, none lost, none unexpected; no rolled-back event was ever delivered.\n", len(s.committed))
	return nil
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

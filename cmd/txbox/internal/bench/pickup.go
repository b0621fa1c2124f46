package bench

import (
	"context"
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/config"
	"github.com/txbox/txbox/internal/timing"
	"github.com/txbox/txbox/outbox"
	"github.com/txbox/txbox/relay"
	"github.com/txbox/txbox/store"
	"github.com/txbox/txbox/store/postgres"
)

func (r *runner) scenarioPickup(ctx context.Context, s *Scenario) error {
	s.Title = "steady-state pickup latency"
	s.Measures = "One event per transaction at a fixed rate, delivered to NATS by a relay with default settings running " +
		"in this process (its sender wrapped to time the hand-over). Latency from the moment the producer sends COMMIT " +
		"to the relay handing the event to the sender (pickup) and to JetStream's ack (acked). Producers: the Go " +
		"`outbox.Publisher` (NOTIFY wake-up, the default) a plain-SQL `INSERT` (no wake-up: adaptive polling only), and the same `INSERT` with the opt-in notify trigger. " +
		"Baseline: the producer itself publishing to JetStream right after its commit and waiting for the ack (the floor a dual write would have)."
	s.Conditions = map[string]string{"rate": strconv.Itoa(r.o.PickupRate) + " events/s", "duration per producer": r.o.PickupFor.String()}
	floor, err := r.pickupFloor(ctx)
	if err != nil {
		return fmt.Errorf("baseline: %w", err)
	}
	s.Latencies = append(s.Latencies, floor)
	type variant struct {
		name                      string
		plainSQL, driver, trigger bool
	}
	vs := []variant{
		{"Go publisher, relay wired as txbox relay", false, false, false},
		{"Go publisher, relay on the driver", false, true, false},
		{"plain-SQL INSERT, relay wired as txbox relay", true, false, false},
		{"plain-SQL INSERT, notify trigger, relay wired as txbox relay", true, false, true},
	}
	lat := map[string][2]Latency{}
	for _, v := range vs {
		pick, ack, err := r.pickupRun(ctx, pickupOpts{name: v.name, rate: r.o.PickupRate, plainSQL: v.plainSQL, driver: v.driver, trigger: v.trigger})
		if err != nil {
			return err
		}
		lat[v.name] = [2]Latency{pick, ack}
		s.Latencies = append(s.Latencies, pick, ack)
	}
	for _, v := range vs {
		pick, ack := lat[v.name][0], lat[v.name][1]
		if !v.plainSQL || v.trigger {
			s.addRatio(v.name+": acked p50 / direct publish p50", ack.Name, floor.Name, []float64{ack.P50}, []float64{floor.P50}, false, "", nil)
			s.addRatio(v.name+": pickup p99 / 50 ms", pick.Name, "target 50 ms", []float64{pick.P99}, []float64{50}, false,
				"≤ 1 (p99 ≤ 50 ms)", func(x float64) bool { return x <= 1 })
		}
		s.addRatio(v.name+": pickup p50 / 5 ms", pick.Name, "target 5 ms", []float64{pick.P50}, []float64{5}, false,
			"≤ 1 (p50 ≤ 5 ms)", func(x float64) bool { return x <= 1 })
	}
	s.Notes = append(s.Notes,
		"\"wired as txbox relay\": the relay built exactly as `txbox relay` builds it (config.OpenStore, config.RelayConfig); "+
			"\"on the driver\" passes the PostgreSQL driver itself, as a Go program using the library does.",
		"plain-SQL producers without the trigger send no NOTIFY: their pickup is bounded by adaptive polling (min-delay 250ms, growing ×1.5 "+
			"up to max-delay 1m while idle), so the worst case, the first row after an idle minute, waits up to max-delay (1m). "+
			"With `database.notify-trigger: true` the outbox's statement trigger notifies for them (docs/schema/postgres.md).")
	return nil
}

// paced calls fn rate times a second for d, returning the first error.
func paced(ctx context.Context, rate int, d time.Duration, fn func() error) error {
	tick := time.NewTicker(time.Second / time.Duration(rate))
	defer tick.Stop()
	n := int(math.Round(float64(rate) * d.Seconds()))
	for range n {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
		if err := fn(); err != nil {
			return err
		}
	}
	return nil
}

// pickupRelay is a relay running in this process, built from the
// generated configuration the way `txbox relay` builds it, its sender
// wrapped by a recorder.
type pickupRelay struct {
	st      *config.Store
	rec     *timing.Recorder
	rl      *relay.Relay
	stopped bool
	// wal, when set, is the WAL mode driver whose slot close drops.
	wal *postgres.Driver
}

// pickupOpts is one pickup run: its producer, its relay and its rate.
type pickupOpts struct {
	name string
	rate int
	// plainSQL: the producer INSERTs with plain SQL instead of the Go
	// publisher.
	plainSQL bool
	// driver: the relay gets the PostgreSQL driver itself instead of the
	// *config.Store.
	driver bool
	// trigger: the migration creates the outbox's notify trigger.
	trigger bool
	// wal: WAL mode (database.source: wal): the migration creates the
	// publication and the slot, the publisher emits, the relay streams.
	wal bool
	// syncCommit: every producer transaction runs with synchronous_commit
	// = on, whatever the server's default.
	syncCommit bool
}

// startPickupRelay migrates schema and starts the relay as po asks.
func (r *runner) startPickupRelay(ctx context.Context, schema string, tgt target, po pickupOpts) (*pickupRelay, error) {
	db := pgDatabase(r.o.DSN, schema)
	if po.trigger {
		db += "\nnotify-trigger: true"
	}
	if po.wal {
		db += "\nsource: wal"
	}
	cfg, err := config.Load(config.Source{Name: "bench-pickup.yaml", YAML: []byte(relayYAML(db, tgt, ""))})
	if err != nil {
		return nil, err
	}
	log := cfg.NewLogger(io.Discard)
	noEnv := func(string) string { return "" }
	st, err := cfg.OpenStore(ctx, noEnv, log)
	if err != nil {
		return nil, err
	}
	pr := &pickupRelay{st: st}
	if err := st.Migrate(ctx); err != nil {
		pr.close(ctx)
		return nil, err
	}
	if po.wal {
		if pr.wal, err = createStream(ctx, st.Driver); err != nil {
			pr.close(ctx)
			return nil, err
		}
	}
	senders, err := cfg.OpenSenders(ctx, noEnv, log)
	if err != nil {
		pr.close(ctx)
		return nil, err
	}
	pr.rec = timing.New(senders["main"])
	senders["main"] = pr.rec
	var rst store.Driver = st
	if po.driver {
		rst = st.Driver
	}
	if pr.rl, err = relay.New(cfg.RelayConfig(rst, senders, log)); err == nil {
		err = pr.rl.Start(context.WithoutCancel(ctx))
	}
	if err != nil {
		pr.rl = nil
		pr.close(ctx)
		return nil, err
	}
	return pr, nil
}

// stop stops the relay once.
func (pr *pickupRelay) stop(ctx context.Context) error {
	if pr.rl == nil || pr.stopped {
		return nil
	}
	pr.stopped = true
	return pr.rl.Stop(context.WithoutCancel(ctx))
}

func (pr *pickupRelay) close(ctx context.Context) {
	_ = pr.stop(ctx)
	if pr.rec != nil {
		_ = pr.rec.Sender.Close(context.WithoutCancel(ctx))
	}
	if pr.wal != nil {
		dropStream(ctx, pr.wal)
	}
	_ = pr.st.Close()
}

// pickupRun runs one producer against an in-process relay and returns the
// pickup and acked latencies.
func (r *runner) pickupRun(ctx context.Context, po pickupOpts) (Latency, Latency, error) {
	name := po.name
	r.p.begin("pickup: " + name)
	schema, err := r.db.newSchema(ctx)
	if err != nil {
		return Latency{}, Latency{}, err
	}
	defer r.db.drop(schema)
	tgt, err := r.br.newTarget(ctx, "nats")
	if err != nil {
		return Latency{}, Latency{}, err
	}
	defer tgt.close()
	pr, err := r.startPickupRelay(ctx, schema, tgt, po)
	if err != nil {
		return Latency{}, Latency{}, err
	}
	defer pr.close(ctx)
	one, committed, err := pickupProducer(ctx, pr.st, schema, po.plainSQL, po.syncCommit)
	if err != nil {
		return Latency{}, Latency{}, err
	}
	rec := pr.rec
	// Warm-up: one event through, so the listener is connected and the
	// first claims are behind us.
	if err := one(false); err != nil {
		return Latency{}, Latency{}, err
	}
	if err := waitUntil(ctx, 90*time.Second, func() bool { return rec.Acked() >= 1 }); err != nil {
		return Latency{}, Latency{}, fmt.Errorf("warm-up event not delivered: %w", err)
	}
	total := int(math.Round(float64(po.rate) * r.o.PickupFor.Seconds()))
	i := 0
	if err := paced(ctx, po.rate, r.o.PickupFor, func() error {
		i++
		r.p.count(int64(i), int64(total))
		return one(true)
	}); err != nil {
		return Latency{}, Latency{}, err
	}
	if err := waitUntil(ctx, 3*time.Minute, func() bool { return rec.Acked() >= len(committed)+1 }); err != nil {
		return Latency{}, Latency{}, fmt.Errorf("%s: %d of %d acked: %w", name, rec.Acked()-1, len(committed), err)
	}
	if err := pr.stop(ctx); err != nil {
		return Latency{}, Latency{}, err
	}
	pick, ack := rec.Latencies(committed)
	return percentiles(name+" → sender", millis(pick)), percentiles(name+" → acked", millis(ack)), nil
}

// millis converts ds to milliseconds.
func millis(ds []time.Duration) []float64 {
	out := make([]float64, len(ds))
	for i, d := range ds {
		out[i] = d.Seconds() * 1000
	}
	return out
}

// pickupProducer returns a function that commits one event per call (Go
// publisher, or a plain-SQL INSERT) and, when asked to record, notes the
// moment its COMMIT was sent in the returned map. With syncCommit each
// transaction sets synchronous_commit = on first.
func pickupProducer(ctx context.Context, st *config.Store, schema string, plainSQL, syncCommit bool) (func(record bool) error, map[txbox.ID]time.Time, error) {
	pub, err := outbox.NewPublisher(st, outbox.Config{})
	if err != nil {
		return nil, nil, err
	}
	committed := map[txbox.ID]time.Time{}
	insert := fmt.Sprintf(`INSERT INTO %s (event_type, payload) VALUES ($1, $2) RETURNING id`, pgx.Identifier{schema, "txbox_outbox"}.Sanitize())
	ev := txbox.Event{Type: benchType, Payload: []byte(benchPayload)}
	return func(record bool) error {
		tx, err := st.Pool.Begin(ctx)
		if err != nil {
			return err
		}
		if syncCommit {
			if _, err := tx.Exec(ctx, "SET LOCAL synchronous_commit = on"); err != nil {
				_ = tx.Rollback(ctx)
				return err
			}
		}
		var id txbox.ID
		if plainSQL {
			err = tx.QueryRow(ctx, insert, benchType, []byte(benchPayload)).Scan(&id)
		} else {
			var ids []txbox.ID
			ids, err = pub.Publish(ctx, tx, ev)
			if err == nil {
				id = ids[0]
			}
		}
		if err != nil {
			_ = tx.Rollback(ctx)
			return err
		}
		// Measured from the moment the COMMIT is sent: the relay may be
		// woken and claim before the commit's reply is back.
		if record {
			committed[id] = time.Now()
		}
		return tx.Commit(ctx)
	}, committed, nil
}

// pickupFloor is the baseline: the producer commits a row, then publishes
// the event to JetStream itself and waits for the ack.
func (r *runner) pickupFloor(ctx context.Context) (Latency, error) {
	r.p.begin("pickup: baseline (publish after commit)")
	schema, err := r.db.newSchema(ctx)
	if err != nil {
		return Latency{}, err
	}
	defer r.db.drop(schema)
	if _, err := r.db.pool.Exec(ctx, "CREATE TABLE "+schema+".orders (id uuid PRIMARY KEY, payload jsonb)"); err != nil {
		return Latency{}, err
	}
	tgt, err := r.br.newTarget(ctx, "nats")
	if err != nil {
		return Latency{}, err
	}
	defer tgt.close()
	nc, err := nats.Connect(r.o.NATSURL)
	if err != nil {
		return Latency{}, err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return Latency{}, err
	}
	subj := tgt.(*natsTarget).subj + "." + benchType
	var lat []float64
	total := int(math.Round(float64(r.o.PickupRate) * r.o.PickupFor.Seconds()))
	err = paced(ctx, r.o.PickupRate, r.o.PickupFor, func() error {
		id := txbox.NewID()
		tx, err := r.db.pool.Begin(ctx)
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, "INSERT INTO "+schema+".orders VALUES ($1, $2)", [16]byte(id), benchPayload); err != nil {
			_ = tx.Rollback(ctx)
			return err
		}
		start := time.Now()
		if err := tx.Commit(ctx); err != nil {
			return err
		}
		if _, err := js.Publish(ctx, subj, []byte(benchPayload), jetstream.WithMsgID(id.String())); err != nil {
			return err
		}
		lat = append(lat, time.Since(start).Seconds()*1000)
		r.p.count(int64(len(lat)), int64(total))
		return nil
	})
	return percentiles("publish after commit → acked (baseline)", lat), err
}

func percentiles(name string, ms []float64) Latency {
	sort.Float64s(ms)
	q := func(f float64) float64 {
		if len(ms) == 0 {
			return 0
		}
		return ms[int(f*float64(len(ms)-1))]
	}
	return Latency{Name: name, Samples: len(ms), P50: q(0.5), P95: q(0.95), P99: q(0.99), Max: q(1)}
}

// waitUntil polls cond every 5 ms until it holds or timeout passes.
func waitUntil(ctx context.Context, timeout time.Duration, cond func() bool) error {
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			return fmt.Errorf("not done after %s", timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
	return nil
}

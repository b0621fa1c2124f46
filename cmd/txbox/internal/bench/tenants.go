package bench

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/config"
)

// The tenants scenario (docs/multi-tenant.md, "Fairness"): one relay
// process serving tenantsMany schema tenants, the first draining the
// backlog while the others publish tenantsRate events a second each.
const (
	tenantsMany = 10
	tenantsRate = 50
	// tenantsMaxConns is database.max-conns, the process's budget: split
	// evenly, each of ten tenants gets 4 connections, a single tenant 40.
	tenantsMaxConns = 40
	// tenantsWideConns is the diagnostic variant's budget: 8 connections
	// a tenant, what the lock claim asks for with the default in-flight
	// (4 batches + relay.LockReserve), where 4 leave it one batch.
	tenantsWideConns = 80
	// tenantsP99 is the target of the other tenants' pickup p99, in ms.
	tenantsP99 = 250
	// tenantsMinPublish is the least time the publishing tenants publish
	// for, so that a --quick drain of a second still gives samples.
	tenantsMinPublish = time.Second
)

func (r *runner) scenarioTenants(ctx context.Context, s *Scenario) error {
	s.Title = "tenants: one tenant's backlog beside nine publishing tenants"
	s.Measures = "One `txbox relay` child with a `tenants:` list of schema tenants (one database, `database.max-conns: 40` split evenly, " +
		"default settings otherwise) delivering to NATS, every tenant to its own subjects (`{tenant}` in the route). " +
		"Baseline: the child serving one tenant, whose preloaded backlog (plain-SQL COPY) it drains. Variant: the child serving ten tenants, " +
		"the first with the same backlog, the nine others each getting 50 events/s (one per transaction, the Go publisher, from this process) " +
		"for as long as the first tenant's drain lasts. Drain rate = backlog / time from the child's start until the stream holds every " +
		"message of the first tenant and its outbox is settled. Pickup = a message's arrival at a NATS subscriber of this process minus the " +
		"moment its producer sent COMMIT (after one warm-up event per tenant). Diagnostic variant: the same ten tenants with " +
		"`database.max-conns: 80`, 8 connections a tenant, what the default lock claim asks for (in-flight 4 + 4 in reserve), " +
		"where the 4 of a 40 budget leave it one batch in flight; and the same with the nine others idle (no events), " +
		"which separates the cost of their events from that of their relays' existence."
	s.Conditions = map[string]string{"backlog": strconv.Itoa(r.o.Backlog), "rounds": strconv.Itoa(r.o.Rounds),
		"tenants":            fmt.Sprintf("1 (baseline), %d (variant), schema tenants in one PostgreSQL database", tenantsMany),
		"publishing tenants": fmt.Sprintf("%d × %d events/s during the drain (at least %s)", tenantsMany-1, tenantsRate, tenantsMinPublish),
		"database.max-conns": fmt.Sprintf("%d (1 tenant: %d connections; %d tenants: %d each); diagnostic variant %d (%d each)",
			tenantsMaxConns, tenantsMaxConns, tenantsMany, tenantsMaxConns/tenantsMany, tenantsWideConns, tenantsWideConns/tenantsMany),
		"sender": "nats", "order": "1 tenant, 10 tenants, 10 tenants with the wider budget, the same with the others idle; reversed every other round"}
	one := tenantsVariant{"1 tenant: drain", 1, tenantsMaxConns, false}
	many := tenantsVariant{fmt.Sprintf("%d tenants: tenant 1's drain", tenantsMany), tenantsMany, tenantsMaxConns, false}
	wide := tenantsVariant{fmt.Sprintf("%d tenants, max-conns %d: tenant 1's drain", tenantsMany, tenantsWideConns), tenantsMany, tenantsWideConns, false}
	quiet := tenantsVariant{fmt.Sprintf("%d tenants, max-conns %d, others idle: tenant 1's drain", tenantsMany, tenantsWideConns), tenantsMany, tenantsWideConns, true}
	all, p99s, err := r.tenantsRounds(ctx, s, []tenantsVariant{one, many, wide, quiet})
	if err != nil {
		return err
	}
	s.addRatio("tenant 1's drain: 10 tenants / 1 tenant", many.name, one.name, s.rates(many.name), s.rates(one.name), true,
		"≥ 0.9", func(x float64) bool { return x >= 0.9 })
	s.addRatio(fmt.Sprintf("tenant 1's drain: 10 tenants with max-conns %d / 1 tenant", tenantsWideConns), wide.name, one.name,
		s.rates(wide.name), s.rates(one.name), true, "", nil)
	s.addRatio(fmt.Sprintf("tenant 1's drain: 10 tenants with max-conns %d, others idle / 1 tenant", tenantsWideConns), quiet.name, one.name,
		s.rates(quiet.name), s.rates(one.name), true, "", nil)
	base := make([]float64, len(p99s))
	for i := range base {
		base[i] = tenantsP99
	}
	s.addRatio(fmt.Sprintf("tenants 2–%d: pickup p99 / %d ms", tenantsMany, tenantsP99), many.name, fmt.Sprintf("target %d ms", tenantsP99),
		p99s, base, false, fmt.Sprintf("≤ 1 (p99 ≤ %d ms)", tenantsP99), func(x float64) bool { return x <= 1 })
	if r.o.Rounds > 1 {
		s.Latencies = append(s.Latencies, percentiles(fmt.Sprintf("all rounds: tenants 2–%d, commit → arrival at NATS", tenantsMany), all))
	}
	r.addCPUNote(s, one.name, many.name, wide.name, quiet.name)
	s.Notes = append(s.Notes, fmt.Sprintf("the %d-tenant child's CPU also covers the publishing tenants' events; "+
		"the producers, the subscriber and PostgreSQL and NATS share the machine's cores with it", tenantsMany))
	return nil
}

// tenantsVariant is one child's setup: how many tenants it serves, its
// database.max-conns, and whether the other tenants stay idle.
type tenantsVariant struct {
	name     string
	n        int
	maxConns int
	idle     bool
}

// tenantsRounds runs the variants once per round, reversing the order
// every other round, and returns the pickups of the publishing tenants
// beside the first variant with more than one tenant (all rounds) and
// their p99 per round.
func (r *runner) tenantsRounds(ctx context.Context, s *Scenario, vs []tenantsVariant) ([]float64, []float64, error) {
	var all, p99s []float64
	for round := 1; round <= r.o.Rounds; round++ {
		order := slices.Clone(vs)
		if round%2 == 0 {
			slices.Reverse(order)
		}
		for _, v := range order {
			run, pick, err := r.tenantsDrain(ctx, v, round)
			if err != nil {
				return nil, nil, fmt.Errorf("%s round %d: %w", v.name, round, err)
			}
			s.Runs = append(s.Runs, run)
			if v.n == 1 || v.idle {
				continue
			}
			l := percentiles(fmt.Sprintf("round %d: %s — tenants 2–%d, commit → arrival at NATS", round, v.name, v.n), pick)
			s.Latencies = append(s.Latencies, l)
			if v.maxConns == tenantsMaxConns {
				p99s = append(p99s, l.P99)
				all = append(all, pick...)
			}
		}
	}
	return all, p99s, nil
}

// tenantsRun is one run's state: its schemas, its destination, the
// configuration of its child.
type tenantsRun struct {
	schemas  []string
	names    []string
	tgt      *natsTarget
	cfg      string
	maxConns int
}

// tenantsYAML is the child's configuration: the budget, one NATS sender,
// every tenant's events to <stream>.<tenant>.orders.
func (r *runner) tenantsYAML(tr *tenantsRun) string {
	var b strings.Builder
	fmt.Fprintf(&b, "database:\n  dialect: postgres\n  dsn: %q\n  max-conns: %d\n", r.db.dsn, tr.maxConns)
	fmt.Fprintf(&b, "senders:\n  main:\n%s\n", indent(tr.tgt.senderYAML(), "    "))
	fmt.Fprintf(&b, "defaults:\n  route: { subject: %q }\n", tr.tgt.subj+".{tenant}.{event_type}")
	fmt.Fprintf(&b, "events:\n  %s: { sender: main }\ntenants:\n", benchType)
	for i, name := range tr.names {
		fmt.Fprintf(&b, "  - { name: %s, schema: %s }\n", name, tr.schemas[i])
	}
	return b.String()
}

// prepareTenants creates the destination, migrates n schema tenants
// with `txbox migrate` and loads the first one's backlog.
func (r *runner) prepareTenants(ctx context.Context, v tenantsVariant) (*tenantsRun, error) {
	variant, n := v.name, v.n
	tgt, err := r.br.newTarget(ctx, "nats")
	if err != nil {
		return nil, err
	}
	tr := &tenantsRun{tgt: tgt.(*natsTarget), maxConns: v.maxConns}
	base := uniqueName("bench_")
	for i := 1; i <= n; i++ {
		tr.names = append(tr.names, fmt.Sprintf("t%02d", i))
		tr.schemas = append(tr.schemas, fmt.Sprintf("%s_t%02d", base, i))
	}
	if tr.cfg, err = r.writeConfig(uniqueName("tenants_"), r.tenantsYAML(tr)); err != nil {
		return tr, err
	}
	r.p.begin(fmt.Sprintf("%s: migrate %d tenants, load %d rows", variant, n, r.o.Backlog))
	if err := r.migrate(ctx, tr.cfg); err != nil {
		return tr, err
	}
	return tr, r.db.fillOutbox(ctx, tr.schemas[0], r.o.Backlog, r.p)
}

func (tr *tenantsRun) close(d *db) {
	for _, s := range tr.schemas {
		d.drop(s)
	}
	if tr.tgt != nil {
		tr.tgt.close()
	}
}

// subject is where tenant i's (0-based) events arrive.
func (tr *tenantsRun) subject(i int) string {
	return tr.tgt.subj + "." + tr.names[i] + "." + benchType
}

// delivered counts tenant i's messages in the stream.
func (tr *tenantsRun) delivered(ctx context.Context, i int) (int64, error) {
	subj := tr.subject(i)
	info, err := tr.tgt.stream.Info(ctx, jetstream.WithSubjectFilter(subj))
	if err != nil {
		return 0, err
	}
	return int64(info.State.Subjects[subj]), nil
}

// tenantsDrain runs one child serving n tenants until the first tenant's
// backlog is delivered, the others (if any) publishing meanwhile, and
// returns the drain's measurement and the others' pickups in ms.
func (r *runner) tenantsDrain(ctx context.Context, v tenantsVariant, round int) (Measurement, []float64, error) {
	variant, n := v.name, v.n
	run := Measurement{Variant: variant, Round: round, Events: r.o.Backlog, Extra: map[string]float64{}}
	tr, err := r.prepareTenants(ctx, v)
	if tr != nil {
		defer tr.close(r.db)
	}
	if err != nil {
		return run, nil, err
	}
	publishing := tr
	if v.idle {
		publishing = &tenantsRun{tgt: tr.tgt, names: tr.names[:1], schemas: tr.schemas[:1]}
	}
	pubs, err := r.startTenantProducers(ctx, publishing)
	if err != nil {
		return run, nil, err
	}
	defer pubs.close()
	r.p.begin(fmt.Sprintf("%s: drain %d (%d tenants)", variant, r.o.Backlog, n))
	start := time.Now()
	c, err := r.o.startChild(variant+" child", "relay started", "relay", "--config", tr.cfg)
	if err != nil {
		return run, nil, err
	}
	// The child's start-up (every tenant's store and relay) is inside
	// the drain's time, as a drain's is; ready_s shows its share.
	if err = c.ready(ctx, time.Minute); err == nil {
		run.Extra["ready_s"] = time.Since(start).Seconds()
		pubs.run(ctx)
		err = r.waitTenantDrained(ctx, tr, c)
	}
	el := time.Since(start)
	var pick []float64
	if err == nil {
		pick, err = pubs.finish(ctx, start.Add(tenantsMinPublish))
	}
	cpu, serr := c.stop()
	if err == nil {
		err = serr
	}
	if err != nil {
		return run, nil, err
	}
	run.Seconds, run.Rate = el.Seconds(), float64(r.o.Backlog)/el.Seconds()
	run.CPUSeconds, run.CPUPerEventMicros = cpu, cpu/float64(r.o.Backlog)*1e6
	run.Extra["other_tenants_events"] = float64(len(pick))
	if n > 1 && !v.idle {
		rate, dropped := pubs.offered()
		run.Extra["events_per_s_per_other_tenant"], run.Extra["ticks_dropped"] = rate, float64(dropped)
	}
	r.p.note("  %-28s %8d events in %6.2fs = %8.0f/s; %d pickups of the other tenants", variant, r.o.Backlog, run.Seconds, run.Rate, len(pick))
	return run, pick, nil
}

// waitTenantDrained waits until the stream holds all of the first
// tenant's backlog and its outbox is settled, failing when the child
// dies or nothing arrives for two minutes.
func (r *runner) waitTenantDrained(ctx context.Context, tr *tenantsRun, c *child) error {
	n := int64(r.o.Backlog)
	last, lastChange := int64(-1), time.Now()
	for {
		got, err := tr.delivered(ctx, 0)
		if err != nil {
			return fmt.Errorf("count delivered messages: %w", err)
		}
		r.p.count(got, n)
		if got >= n {
			left, err := r.db.outboxLeft(ctx, tr.schemas[0])
			if err != nil || left == 0 {
				return err
			}
		}
		if got != last {
			last, lastChange = got, time.Now()
		}
		if err := c.alive(); err != nil {
			return err
		}
		if time.Since(lastChange) > 2*time.Minute {
			return fmt.Errorf("stalled at %d of %d delivered for 2 minutes; the child said:\n%s", got, n, c.out.String())
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// tenantProducers are the publishing tenants' producers (tenants 2..n),
// each with its own store (the Go publisher, as pickup's producers), and
// one NATS subscriber noting when each of their messages arrives.
type tenantProducers struct {
	stores []*config.Store
	// ones are each tenant's tenantsWorkers producers, commits their
	// commit times (one map per producer).
	ones     [][]func(record bool) error
	commits  []map[txbox.ID]time.Time
	subs     []*nats.Subscription
	mu       sync.Mutex
	arrivals map[txbox.ID]time.Time
	perSubj  map[string]int
	tr       *tenantsRun
	stop     chan struct{}
	wg       sync.WaitGroup
	errs     []error
	// started is when each tenant's paced publishing began, stopped when
	// it was told to stop; dropped counts the ticks no worker was free
	// for (the offered rate not reached).
	started []time.Time
	stopped time.Time
	dropped atomic.Int64
}

// tenantsWorkers is how many transactions each publishing tenant may
// have open at once: the ticks keep their pace while a commit is slow.
const tenantsWorkers = 4

// startTenantProducers opens a store and tenantsWorkers producers per
// publishing tenant and subscribes to their subjects.
func (r *runner) startTenantProducers(ctx context.Context, tr *tenantsRun) (*tenantProducers, error) {
	tp := &tenantProducers{arrivals: map[txbox.ID]time.Time{}, perSubj: map[string]int{}, tr: tr, stop: make(chan struct{})}
	for i := 1; i < len(tr.schemas); i++ {
		yaml := relayYAML(pgDatabase(r.db.dsn, tr.schemas[i])+fmt.Sprintf("\nmax-conns: %d", tenantsWorkers), tr.tgt, "")
		cfg, err := config.Load(config.Source{Name: "bench-tenants-producer.yaml", YAML: []byte(yaml)})
		if err != nil {
			return tp, err
		}
		st, err := cfg.OpenStore(ctx, func(string) string { return "" }, cfg.NewLogger(io.Discard))
		if err != nil {
			return tp, err
		}
		tp.stores = append(tp.stores, st)
		var ones []func(bool) error
		for range tenantsWorkers {
			one, committed, err := pickupProducer(ctx, st, tr.schemas[i], false, false)
			if err != nil {
				return tp, err
			}
			ones, tp.commits = append(ones, one), append(tp.commits, committed)
		}
		tp.ones = append(tp.ones, ones)
		sub, err := r.br.nc.Subscribe(tr.subject(i), tp.arrived)
		if err != nil {
			return tp, err
		}
		_ = sub.SetPendingLimits(-1, -1)
		tp.subs = append(tp.subs, sub)
	}
	tp.started = make([]time.Time, len(tp.ones))
	if len(tp.subs) > 0 {
		return tp, r.br.nc.Flush()
	}
	return tp, nil
}

// arrived notes a message's arrival by its event id (Nats-Msg-Id).
func (tp *tenantProducers) arrived(m *nats.Msg) {
	now := time.Now()
	id, err := txbox.ParseID(m.Header.Get("Nats-Msg-Id"))
	tp.mu.Lock()
	defer tp.mu.Unlock()
	tp.perSubj[m.Subject]++
	if _, seen := tp.arrivals[id]; err == nil && !seen { // the first arrival; a redelivery is not a pickup
		tp.arrivals[id] = now
	}
}

func (tp *tenantProducers) arrivedOn(subj string) int {
	tp.mu.Lock()
	defer tp.mu.Unlock()
	return tp.perSubj[subj]
}

// run starts a goroutine per publishing tenant: one warm-up event, once
// it arrived events at tenantsRate a second until finish.
func (tp *tenantProducers) run(ctx context.Context) {
	for i, ones := range tp.ones {
		tp.wg.Add(1)
		go func() {
			defer tp.wg.Done()
			if err := tp.publish(ctx, i, ones); err != nil {
				tp.fail(fmt.Errorf("tenant %s: %w", tp.tr.names[i+1], err))
			}
		}()
	}
}

func (tp *tenantProducers) fail(err error) {
	tp.mu.Lock()
	defer tp.mu.Unlock()
	tp.errs = append(tp.errs, err)
}

// publish is tenant i's paced publishing: a ticker hands ticks to the
// tenant's workers, each committing one event per tick; a tick no worker
// is free for is dropped and counted.
func (tp *tenantProducers) publish(ctx context.Context, i int, ones []func(bool) error) error {
	if err := ones[0](false); err != nil {
		return err
	}
	subj := tp.tr.subject(i + 1)
	if err := waitUntil(ctx, 90*time.Second, func() bool { return tp.arrivedOn(subj) >= 1 }); err != nil {
		return fmt.Errorf("warm-up event not delivered: %w", err)
	}
	ticks := make(chan struct{})
	var workers sync.WaitGroup
	for _, one := range ones {
		workers.Add(1)
		go func() {
			defer workers.Done()
			for range ticks {
				if err := one(true); err != nil {
					tp.fail(fmt.Errorf("tenant %s: %w", tp.tr.names[i+1], err))
					return
				}
			}
		}()
	}
	defer workers.Wait()
	defer close(ticks)
	tick := time.NewTicker(time.Second / tenantsRate)
	defer tick.Stop()
	tp.mu.Lock()
	tp.started[i] = time.Now()
	tp.mu.Unlock()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tp.stop:
			return nil
		case <-tick.C:
		}
		select {
		case ticks <- struct{}{}:
		default:
			tp.dropped.Add(1)
		}
	}
}

// offered returns the events per second each publishing tenant
// committed (the mean over the tenants) and the ticks dropped.
func (tp *tenantProducers) offered() (float64, int64) {
	tp.mu.Lock()
	defer tp.mu.Unlock()
	var sum float64
	for i := range tp.ones {
		n := 0
		for _, c := range tp.commits[i*tenantsWorkers : (i+1)*tenantsWorkers] {
			n += len(c)
		}
		if d := tp.stopped.Sub(tp.started[i]).Seconds(); d > 0 {
			sum += float64(n) / d
		}
	}
	return sum / float64(max(len(tp.ones), 1)), tp.dropped.Load()
}

// finish stops the producers (not before notBefore), waits for every
// recorded event to arrive and returns the pickups in ms.
func (tp *tenantProducers) finish(ctx context.Context, notBefore time.Time) ([]float64, error) {
	if len(tp.ones) == 0 {
		return nil, nil
	}
	time.Sleep(time.Until(notBefore))
	tp.mu.Lock()
	tp.stopped = time.Now()
	tp.mu.Unlock()
	close(tp.stop)
	tp.wg.Wait()
	if len(tp.errs) > 0 {
		return nil, tp.errs[0]
	}
	want := 0
	for _, c := range tp.commits {
		want += len(c)
	}
	// The warm-up events are in arrivals too.
	if err := waitUntil(ctx, time.Minute, func() bool { tp.mu.Lock(); defer tp.mu.Unlock(); return len(tp.arrivals) >= want+len(tp.ones) }); err != nil {
		return nil, fmt.Errorf("publishing tenants' events: not all arrived: %w", err)
	}
	tp.mu.Lock()
	defer tp.mu.Unlock()
	var ms []float64
	for _, c := range tp.commits {
		for id, at := range c {
			got, ok := tp.arrivals[id]
			if !ok {
				return nil, fmt.Errorf("event %s committed but not seen at NATS", id)
			}
			ms = append(ms, got.Sub(at).Seconds()*1000)
		}
	}
	return ms, nil
}

func (tp *tenantProducers) close() {
	select {
	case <-tp.stop:
	default:
		close(tp.stop)
	}
	tp.wg.Wait()
	for _, s := range tp.subs {
		_ = s.Unsubscribe()
	}
	for _, st := range tp.stores {
		_ = st.Close()
	}
}

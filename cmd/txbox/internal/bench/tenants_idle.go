package bench

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The tenants-idle scenario (docs/multi-tenant.md, "Idle tenants"): one
// relay serving many idle schema tenants of one database, its statements
// and connections counted by the protocol proxy of the idle scenario.
const (
	// tenantsIdleTxTarget is the target: transactions an hour for the
	// whole relay (1,000 tenants).
	tenantsIdleTxTarget = 3000
	// tenantsIdleConnTarget is the target: connections the relay holds.
	tenantsIdleConnTarget = 30
	// tenantsIdleWakes is how many parked tenants get one event after the
	// window, to time their wake-up.
	tenantsIdleWakes = 10
)

func (r *runner) scenarioTenantsIdle(ctx context.Context, s *Scenario) error {
	n := r.o.IdleTenants
	s.Title = "idle tenants: the cost of parked schema tenants"
	s.Measures = fmt.Sprintf("One `txbox relay` child serving %d schema tenants of one PostgreSQL database (a `tenants:` list, "+
		"default settings: tenants-park-after 1m, tenants-sweep-interval 30s), every tenant idle (empty outbox), connected through "+
		"the idle scenario's counting TCP proxy: its statements, transactions (an upper bound: one per BEGIN, one per statement "+
		"outside one; pipelined statements before one Sync count once each) and connections, extrapolated to an hour, over the "+
		"window after the relay started. The connections are sampled every few seconds; the highest count is reported. "+
		"After the window, %d parked tenants get one event each (plain SQL INSERT, which notifies through the trigger): wake-up "+
		"= COMMIT until the row is gone from the tenant's outbox (delivered to NATS and finished).", n, tenantsIdleWakes)
	s.Conditions = map[string]string{"tenants": strconv.Itoa(n), "window": r.o.IdleWindow.String(), "sender": "nats"}
	up, err := pgUpstream(r.o.DSN)
	if err != nil {
		return err
	}
	proxy, err := startPGProxy(up)
	if err != nil {
		return err
	}
	defer proxy.close()
	name, cfg, cleanup, err := r.tenantsIdleDatabase(ctx, proxy.addr(), n)
	defer cleanup()
	if err != nil {
		return err
	}
	return r.tenantsIdleRun(ctx, s, name, cfg, proxy, n)
}

// tenantsIdleRun runs the relay child over the window, then times the
// wake-ups, and reports.
func (r *runner) tenantsIdleRun(ctx context.Context, s *Scenario, name, cfg string, proxy *pgProxy, n int) error {
	r.p.begin(fmt.Sprintf("tenants-idle: relay with %d parked tenants, %s", n, r.o.IdleWindow))
	first, firstTexts := proxy.counts(), proxy.statementTexts()
	start := time.Now()
	c, err := r.o.startChild("tenants-idle relay", "relay started", "relay", "--config", cfg)
	if err != nil {
		return err
	}
	defer func() { _, _ = c.stop() }()
	if err := c.ready(ctx, 5*time.Minute); err != nil {
		return err
	}
	up := time.Since(start)
	maxConns, end := 0, time.Now().Add(r.o.IdleWindow)
	// settled is the reading a minute into the window (half of a shorter
	// one): the steady cost, without the start's LISTENs and first sweep.
	settleAt, settled := start.Add(min(time.Minute, r.o.IdleWindow/2)), pgCounts{}
	var settledAt time.Time
	tick := time.NewTicker(min(2*time.Second, r.o.IdleWindow/4))
	defer tick.Stop()
	for time.Now().Before(end) {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
		if err := c.alive(); err != nil {
			return err
		}
		maxConns = max(maxConns, proxy.openConns())
		if settledAt.IsZero() && !time.Now().Before(settleAt) {
			settled, settledAt = proxy.counts(), time.Now()
		}
		r.p.count(int64(time.Since(start)/time.Second), int64(end.Sub(start)/time.Second))
	}
	last, lastTexts, span := proxy.counts(), proxy.statementTexts(), time.Since(start)
	whole := last.sub(first)
	wakes, err := r.tenantsIdleWake(ctx, name, n)
	if err != nil {
		return err
	}
	cpu, err := c.stop()
	if err != nil {
		return err
	}
	perHour := func(v int64) float64 { return float64(v) / span.Hours() }
	run := Measurement{Variant: fmt.Sprintf("%d idle tenants", n), Round: 1, Events: int(whole.transactions()), Seconds: span.Seconds(),
		Rate: perHour(whole.transactions()), CPUSeconds: cpu,
		Extra: map[string]float64{"transactions_per_hour": perHour(whole.transactions()), "statements_per_hour": perHour(whole.statements()),
			"round_trips_per_hour": perHour(whole.roundTrips()), "connections_opened": float64(whole.Conns),
			"max_open_connections": float64(maxConns), "start_seconds": up.Seconds(),
			"transactions_per_tenant_hour": perHour(whole.transactions()) / float64(n), "cpu_ms_per_minute": cpu * 1000 / span.Minutes()}}
	if !settledAt.IsZero() {
		d := start.Add(span).Sub(settledAt)
		after := last.sub(settled)
		run.Extra["settled_transactions_per_hour"] = float64(after.transactions()) / d.Hours()
		run.Extra["settled_statements_per_hour"] = float64(after.statements()) / d.Hours()
		s.addRatio(fmt.Sprintf("transactions/hour after the first minute, %d idle tenants / %d target", n, tenantsIdleTxTarget), run.Variant,
			fmt.Sprintf("target %d/hour", tenantsIdleTxTarget), []float64{max(run.Extra["settled_transactions_per_hour"], 1)},
			[]float64{tenantsIdleTxTarget}, false, "≤ 1", func(x float64) bool { return x <= 1 })
	}
	s.Runs = append(s.Runs, run)
	s.addRatio(fmt.Sprintf("transactions/hour, whole window with the start, %d idle tenants / %d target", n, tenantsIdleTxTarget), run.Variant,
		fmt.Sprintf("target %d/hour", tenantsIdleTxTarget), []float64{run.Rate}, []float64{tenantsIdleTxTarget}, false,
		"≤ 1", func(x float64) bool { return x <= 1 })
	s.addRatio(fmt.Sprintf("most connections open, %d idle tenants / %d target", n, tenantsIdleConnTarget), run.Variant,
		fmt.Sprintf("target %d", tenantsIdleConnTarget), []float64{float64(max(maxConns, 1))}, []float64{tenantsIdleConnTarget}, false,
		"≤ 1", func(x float64) bool { return x <= 1 })
	if len(wakes) > 0 {
		s.Latencies = append(s.Latencies, percentiles(fmt.Sprintf("a parked tenant's first event: COMMIT → row finished (%d tenants)", len(wakes)), wakes))
	}
	s.Notes = append(s.Notes, "The relay's statements in the window, by text: "+idleTexts(firstTexts, lastTexts, 12),
		fmt.Sprintf("The window includes the relay's start (%s until it logged \"relay started\"): every tenant is listed, "+
			"LISTENed and swept once.", up.Round(time.Millisecond)))
	return nil
}

// tenantsIdleWake publishes one event to each of tenantsIdleWakes
// parked tenants, one after the other, and returns each wake-up in ms:
// COMMIT until the row is gone.
func (r *runner) tenantsIdleWake(ctx context.Context, db string, n int) ([]float64, error) {
	dsn, err := dsnWithDatabase(r.o.DSN, db)
	if err != nil {
		return nil, err
	}
	d, err := openDB(ctx, dsn, 2)
	if err != nil {
		return nil, err
	}
	defer d.pool.Close()
	pool := d.pool
	var out []float64
	for i := range min(tenantsIdleWakes, n) {
		schema := tenantsIdleSchema(1 + i*max(n/tenantsIdleWakes, 1))
		t0 := time.Now()
		if _, err := pool.Exec(ctx, `INSERT INTO `+schema+`.txbox_outbox (event_type, payload) VALUES ('idle-1', '\x7b7d')`); err != nil {
			return nil, err
		}
		for {
			var left int
			if err := pool.QueryRow(ctx, `SELECT count(*) FROM `+schema+`.txbox_outbox`).Scan(&left); err != nil {
				return nil, err
			}
			if left == 0 {
				break
			}
			if time.Since(t0) > time.Minute {
				return nil, fmt.Errorf("tenants-idle: %s's event not delivered within a minute", schema)
			}
			time.Sleep(5 * time.Millisecond)
		}
		out = append(out, float64(time.Since(t0).Microseconds())/1000)
	}
	slices.Sort(out)
	return out, nil
}

func tenantsIdleSchema(i int) string { return fmt.Sprintf("tidle_%04d", i) }

// tenantsIdleDatabase creates the database, migrates the n tenants'
// schemas directly (not through the proxy), with the notify trigger so
// that plain-SQL inserts wake their tenant, and writes the relay's
// configuration through the proxy.
func (r *runner) tenantsIdleDatabase(ctx context.Context, proxyAddr string, n int) (name, cfg string, cleanup func(), err error) {
	r.p.begin(fmt.Sprintf("tenants-idle: migrating %d tenant schemas", n))
	return r.proxiedDatabase(ctx, "bench_tidle_", proxyAddr, func(file, dsn string, tgt target) (string, error) {
		return r.tenantsIdleConfig(file, dsn, tgt, n)
	})
}

// tenantsIdleConfig writes the configuration of n schema tenants with one
// configured type.
func (r *runner) tenantsIdleConfig(file, dsn string, tgt target, n int) (string, error) {
	yaml := relayYAML(pgDatabase(dsn, "public")+"\nnotify-trigger: true", tgt, "")
	drainType := "events:\n  " + benchType + ": { sender: main }\n"
	if !strings.Contains(yaml, drainType) {
		return "", fmt.Errorf("tenants-idle: unexpected relay configuration layout")
	}
	var b strings.Builder
	b.WriteString("events:\n  idle-1: { sender: main }\ntenants:\n")
	for i := 1; i <= n; i++ {
		fmt.Fprintf(&b, "  - { name: t%04d, schema: %s }\n", i, tenantsIdleSchema(i))
	}
	return r.writeConfig(file, strings.Replace(yaml, drainType, b.String(), 1))
}

package bench

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// idleSample is one reading of the idle database's transaction counter,
// and of the control database's (see idleControl).
type idleSample struct {
	at      time.Time
	tx      int64
	control int64
}

func (r *runner) scenarioIdle(ctx context.Context, s *Scenario) error {
	s.Title = "idle cost"
	s.Measures = fmt.Sprintf("One `txbox relay` child with %d configured event types and default settings, idle (empty outbox), "+
		"in a database of its own: `xact_commit + xact_rollback` of that database in pg_stat_database over the window, "+
		"extrapolated to an hour. The reading connection is to another database, so it does not count itself.", r.o.IdleTypes)
	s.Conditions = map[string]string{"window": r.o.IdleWindow.String(), "configured types": strconv.Itoa(r.o.IdleTypes)}
	name, cfg, cleanup, err := r.idleDatabase(ctx)
	defer cleanup()
	if err != nil {
		return err
	}
	ctl, stopControl, err := r.idleControl(ctx)
	defer stopControl()
	if err != nil {
		return err
	}
	read := func() (idleSample, error) {
		sm := idleSample{at: time.Now()}
		err := r.db.pool.QueryRow(ctx, `SELECT
			(SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = $1),
			(SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = $2)`, name, ctl).Scan(&sm.tx, &sm.control)
		return sm, err
	}
	r.p.begin("idle: relay with " + strconv.Itoa(r.o.IdleTypes) + " types, " + r.o.IdleWindow.String())
	first, err := read()
	if err != nil {
		return err
	}
	c, err := r.o.startChild("idle relay", "relay started", "relay", "--config", cfg)
	if err != nil {
		return err
	}
	// The window runs from the relay's start (the first reading, so its
	// start-up transactions count) to --idle-window after it is up: a
	// slow start does not eat a short window.
	if err := c.ready(ctx, 2*time.Minute); err != nil {
		_, _ = c.stop()
		return err
	}
	samples, err := r.idleWatch(ctx, c, first, time.Now().Add(r.o.IdleWindow), read)
	if err != nil {
		_, _ = c.stop()
		return err
	}
	cpu, err := c.stop()
	if err != nil {
		return err
	}
	last := samples[len(samples)-1]
	span := last.at.Sub(first.at)
	perHour := float64(last.tx-first.tx) / span.Hours()
	ctlPerHour := float64(last.control-first.control) / span.Hours()
	run := Measurement{Variant: fmt.Sprintf("idle relay, %d types", r.o.IdleTypes), Round: 1, Events: int(last.tx - first.tx),
		Seconds: span.Seconds(), Rate: perHour, CPUSeconds: cpu,
		Extra: map[string]float64{"transactions_per_hour": perHour, "cpu_ms_per_minute": cpu * 1000 / span.Minutes(),
			"listen_control_per_hour": ctlPerHour, "own_per_hour": perHour - ctlPerHour}}
	own := perHour - ctlPerHour
	if span > 10*time.Minute+30*time.Second {
		// The first 10 minutes against the rest.
		var at10 idleSample
		for _, sm := range samples {
			if sm.at.Sub(first.at) <= 10*time.Minute {
				at10 = sm
			}
		}
		after := last.at.Sub(at10.at).Hours()
		run.Extra["first_10min_per_hour"] = float64(at10.tx-first.tx) / at10.at.Sub(first.at).Hours()
		run.Extra["after_10min_per_hour"] = float64(last.tx-at10.tx) / after
		run.Extra["after_10min_control_per_hour"] = float64(last.control-at10.control) / after
		run.Extra["after_10min_own_per_hour"] = run.Extra["after_10min_per_hour"] - run.Extra["after_10min_control_per_hour"]
		perHour = run.Extra["after_10min_per_hour"]
		own = run.Extra["after_10min_own_per_hour"]
	} else {
		s.Notes = append(s.Notes, fmt.Sprintf("the window (%s) is not longer than 10 minutes, so the figure includes the start and the first 10 minutes; the target is for after them", r.o.IdleWindow.Round(time.Second)))
	}
	s.Runs = append(s.Runs, run)
	s.addRatio("transactions/hour / 300 target", run.Variant, "target 300/hour", []float64{perHour}, []float64{300}, false,
		"≤ 1 (≤ 300 transactions/hour after 10 min)", func(x float64) bool { return x <= 1 })
	s.addRatio("transactions/hour less the LISTEN control / 300 target", run.Variant, "target 300/hour", []float64{own}, []float64{300}, false,
		"≤ 1 (the relay's own statements)", func(x float64) bool { return x <= 1 })
	s.Notes = append(s.Notes, "A LISTENing backend runs a transaction each time it is signalled to read past other databases' "+
		"notifications in PostgreSQL's shared queue, so the relay's wake-up listener costs transactions that depend on the NOTIFY "+
		"traffic of the whole cluster (here other engineers' test suites), not on the relay. The control database has only one "+
		"session that LISTENs and waits, as the relay's listener does; its count over the same window is subtracted in the second ratio. "+
		"An idle backend flushes those counts only when it next runs a statement or exits, so the control may read 0 while the relay's "+
		"listener's counts arrive in bursts: count the relay's statements in the server log for its own cost (docs/benchmarks.md).")
	s.Notes = append(s.Notes, "PostgreSQL 15 flushes a backend's counters up to 10 s late, so the last seconds of the window may be missing from the count.",
		"pg_stat_statements is not installed here, so statements are not broken down by job.")
	return nil
}

// idleControl creates a second database holding one session that only
// LISTENs and waits for notifications, as the relay's listener does, and
// returns its name. stop ends the session and drops the database; call it
// even on error.
func (r *runner) idleControl(ctx context.Context) (name string, stop func(), err error) {
	name = uniqueName("bench_idlectl_")
	stop = func() {}
	if _, err := r.db.pool.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		return "", stop, fmt.Errorf("create the control database: %w", err)
	}
	drop := func() {
		c, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_, _ = r.db.pool.Exec(c, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
	}
	stop = drop
	dsn, err := dsnWithDatabase(r.o.DSN, name)
	if err != nil {
		return "", stop, err
	}
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return "", stop, err
	}
	if _, err := conn.Exec(ctx, `LISTEN "public.txbox_outbox"`); err != nil {
		_ = conn.Close(ctx)
		return "", stop, err
	}
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for wctx.Err() == nil {
			if _, err := conn.WaitForNotification(wctx); err != nil && wctx.Err() == nil {
				return
			}
		}
	}()
	stop = func() {
		cancel()
		<-done
		_ = conn.Close(context.Background())
		drop()
	}
	return name, stop, nil
}

// idleDatabase creates the idle relay's own database, its configuration
// with the configured types, and txbox's tables in it. cleanup drops the
// database; call it even on error.
func (r *runner) idleDatabase(ctx context.Context) (name, cfg string, cleanup func(), err error) {
	name = uniqueName("bench_idle_")
	cleanup = func() {}
	if _, err := r.db.pool.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		return "", "", cleanup, fmt.Errorf("create the idle database: %w", err)
	}
	var tgt target
	cleanup = func() {
		if tgt != nil {
			tgt.close()
		}
		c, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_, _ = r.db.pool.Exec(c, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
	}
	dsn, err := dsnWithDatabase(r.o.DSN, name)
	if err != nil {
		return "", "", cleanup, err
	}
	if tgt, err = r.br.newTarget(ctx, "nats"); err != nil {
		return "", "", cleanup, err
	}
	yaml := relayYAML(pgDatabase(dsn, "public"), tgt, "")
	var types []string
	for i := 1; i <= r.o.IdleTypes; i++ {
		types = append(types, fmt.Sprintf("  idle-%d: { sender: main }", i))
	}
	// Only the idle types: relayYAML's drain type would be one more.
	drainType := "events:\n  " + benchType + ": { sender: main }\n"
	if !strings.Contains(yaml, drainType) {
		return "", "", cleanup, fmt.Errorf("idle: unexpected relay configuration layout")
	}
	yaml = strings.Replace(yaml, drainType, "events:\n"+strings.Join(types, "\n")+"\n", 1)
	if cfg, err = r.writeConfig(name, yaml); err != nil {
		return "", "", cleanup, err
	}
	return name, cfg, cleanup, r.migrate(ctx, cfg)
}

// idleWatch reads the counter every 10 s (or a quarter of a short window)
// until end, failing if the relay exits.
func (r *runner) idleWatch(ctx context.Context, c *child, first idleSample, end time.Time, read func() (idleSample, error)) ([]idleSample, error) {
	samples := []idleSample{first}
	tick := time.NewTicker(min(10*time.Second, r.o.IdleWindow/4))
	defer tick.Stop()
	for time.Now().Before(end) {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-tick.C:
		case <-time.After(time.Until(end)):
		}
		if err := c.alive(); err != nil {
			return nil, err
		}
		sm, err := read()
		if err != nil {
			return nil, err
		}
		samples = append(samples, sm)
		r.p.count(int64(sm.at.Sub(first.at)/time.Second), int64(end.Sub(first.at)/time.Second))
	}
	return samples, nil
}

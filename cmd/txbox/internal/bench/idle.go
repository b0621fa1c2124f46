package bench

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/txbox/txbox/internal/testenv/pgdrop"
)

// idleSample is one reading of the idle relay's counts: the statements
// it sent through the counting proxy, and the server's transaction
// counter of its database.
type idleSample struct {
	at    time.Time
	own   pgCounts
	texts map[string]int64 // the relay's statements by text (pgProxy.statementTexts)
	tx    int64
}

func (r *runner) scenarioIdle(ctx context.Context, s *Scenario) error {
	s.Title = "idle cost"
	s.Measures = fmt.Sprintf("One `txbox relay` child with %d configured event types and default settings, idle (empty outbox), "+
		"in a database of its own, connected through a counting TCP proxy in the bench process that reads the PostgreSQL "+
		"protocol the relay sends: its statements (simple queries and extended-protocol executes, each at most one transaction), "+
		"round trips, connections; extrapolated to an hour. Beside them, `xact_commit + xact_rollback` of that database in "+
		"pg_stat_database, the server's counter, which also counts work no client asked for.", r.o.IdleTypes)
	s.Conditions = map[string]string{"window": r.o.IdleWindow.String(), "configured types": strconv.Itoa(r.o.IdleTypes)}
	up, err := pgUpstream(r.o.DSN)
	if err != nil {
		return err
	}
	proxy, err := startPGProxy(up)
	if err != nil {
		return err
	}
	defer proxy.close()
	name, cfg, cleanup, err := r.idleDatabase(ctx, proxy.addr())
	defer cleanup()
	if err != nil {
		return err
	}
	samples, cpu, err := r.idleRun(ctx, name, cfg, proxy)
	if err != nil {
		return err
	}
	r.idleReport(s, samples, cpu)
	s.Notes = append(s.Notes, proxy.connLines(10)...)
	return nil
}

// idleRun starts the relay and samples its counts until the window ends,
// returning the samples and the relay's CPU seconds.
func (r *runner) idleRun(ctx context.Context, name, cfg string, proxy *pgProxy) ([]idleSample, float64, error) {
	read := func() (idleSample, error) {
		sm := idleSample{at: time.Now(), own: proxy.counts(), texts: proxy.statementTexts()}
		err := r.db.pool.QueryRow(ctx, `SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = $1`, name).Scan(&sm.tx)
		return sm, err
	}
	r.p.begin("idle: relay with " + strconv.Itoa(r.o.IdleTypes) + " types, " + r.o.IdleWindow.String())
	first, err := read()
	if err != nil {
		return nil, 0, err
	}
	c, err := r.o.startChild("idle relay", "relay started", "relay", "--config", cfg)
	if err != nil {
		return nil, 0, err
	}
	// The window runs from the relay's start (the first reading, so its
	// start-up statements count) to --idle-window after it is up: a
	// slow start does not eat a short window.
	if err := c.ready(ctx, 2*time.Minute); err != nil {
		_, _ = c.stop()
		return nil, 0, err
	}
	samples, err := r.idleWatch(ctx, c, first, time.Now().Add(r.o.IdleWindow), read)
	if err != nil {
		_, _ = c.stop()
		return nil, 0, err
	}
	cpu, err := c.stop()
	return samples, cpu, err
}

// idleReport turns the samples into the scenario's run, ratios and notes.
// The target is for after the first 10 minutes, so a longer window
// reports them apart and the ratio uses the rest.
func (r *runner) idleReport(s *Scenario, samples []idleSample, cpu float64) {
	first, last := samples[0], samples[len(samples)-1]
	span := last.at.Sub(first.at)
	whole := last.own.sub(first.own)
	perHour := func(n int64, d time.Duration) float64 { return float64(n) / d.Hours() }
	run := Measurement{Variant: fmt.Sprintf("idle relay, %d types", r.o.IdleTypes), Round: 1, Events: int(whole.statements()),
		Seconds: span.Seconds(), Rate: perHour(whole.statements(), span), CPUSeconds: cpu,
		Extra: map[string]float64{"statements_per_hour": perHour(whole.statements(), span),
			"round_trips_per_hour": perHour(whole.roundTrips(), span), "transactions_per_hour": perHour(whole.transactions(), span),
			"connections": float64(whole.Conns),
			"parses":      float64(whole.Parses), "begins": float64(whole.Begins),
			"server_xact_per_hour": perHour(last.tx-first.tx, span), "cpu_ms_per_minute": cpu * 1000 / span.Minutes()}}
	target, txs, server := run.Rate, run.Extra["transactions_per_hour"], run.Extra["server_xact_per_hour"]
	from, fromLabel := first, "in the whole window"
	if span > 10*time.Minute+30*time.Second {
		at10 := first
		for _, sm := range samples {
			if sm.at.Sub(first.at) <= 10*time.Minute {
				at10 = sm
			}
		}
		after, d := last.own.sub(at10.own), last.at.Sub(at10.at)
		run.Extra["first_10min_statements_per_hour"] = perHour(at10.own.sub(first.own).statements(), at10.at.Sub(first.at))
		run.Extra["after_10min_statements_per_hour"] = perHour(after.statements(), d)
		run.Extra["after_10min_round_trips_per_hour"] = perHour(after.roundTrips(), d)
		run.Extra["after_10min_transactions_per_hour"] = perHour(after.transactions(), d)
		run.Extra["after_10min_new_connections"] = float64(after.Conns)
		run.Extra["after_10min_begins"] = float64(after.Begins)
		run.Extra["after_10min_parses"] = float64(after.Parses)
		run.Extra["after_10min_server_xact_per_hour"] = perHour(last.tx-at10.tx, d)
		target, txs = run.Extra["after_10min_statements_per_hour"], run.Extra["after_10min_transactions_per_hour"]
		server = run.Extra["after_10min_server_xact_per_hour"]
		from, fromLabel = at10, "after the first 10 minutes"
	} else {
		s.Notes = append(s.Notes, fmt.Sprintf("the window (%s) is not longer than 10 minutes, so the figure includes the start and the first 10 minutes; the target is for after them", r.o.IdleWindow.Round(time.Second)))
	}
	s.Runs = append(s.Runs, run)
	s.addRatio("statements the relay sent/hour / 300 target", run.Variant, "target 300/hour", []float64{target}, []float64{300}, false,
		"≤ 1 (≤ 300 transactions/hour after 10 min; each statement is at most one transaction)", func(x float64) bool { return x <= 1 })
	s.addRatio("transactions the relay opened/hour / 300 target", run.Variant, "target 300/hour", []float64{txs}, []float64{300}, false,
		"≤ 1 (one per BEGIN, one per statement outside BEGIN … COMMIT: an upper bound)", func(x float64) bool { return x <= 1 })
	s.addRatio("server's pg_stat_database transactions/hour / 300", run.Variant, "target 300/hour", []float64{server}, []float64{300}, false,
		"— (not the relay's cost: includes the LISTEN backend's notification reads)", nil)
	s.Notes = append(s.Notes, "The relay's statements "+fromLabel+", by text: "+idleTexts(from.texts, last.texts, 15))
	if whole.Unparsed > 0 {
		s.Notes = append(s.Notes, fmt.Sprintf("%d connection(s) could not be parsed (TLS?); their statements are missing from the counts", whole.Unparsed))
	}
	s.Notes = append(s.Notes, "Statements are the relay's simple queries and extended-protocol executes, as the proxy read them: "+
		"each runs in at most one transaction, and an explicit BEGIN … COMMIT is several statements, so the count is an upper bound "+
		"of the relay's transactions. The transactions figure is tighter and still an upper bound: one per BEGIN, one per statement "+
		"outside BEGIN … COMMIT (statements pipelined before one Sync share a transaction); a Parse/Describe/Sync that only prepares "+
		"a statement is a server transaction it leaves out (parses: see the run). Round trips are simple queries plus Syncs.",
		"pg_stat_database counts more: a LISTENing backend runs a transaction each time it is signalled to read past other databases' "+
			"notifications in PostgreSQL's shared queue, so that counter depends on the NOTIFY traffic of the whole cluster, not on "+
			"the relay (docs/benchmarks.md). PostgreSQL 15 also flushes a backend's counters up to 10 s late, and an idle one only "+
			"when it next runs a statement or exits.")
}

// idleTexts lists the statements run between two samples' tallies, the
// most frequent first (at most max).
func idleTexts(from, to map[string]int64, max int) string {
	type st struct {
		text string
		n    int64
	}
	var all []st
	for k, v := range to {
		if d := v - from[k]; d > 0 {
			all = append(all, st{k, d})
		}
	}
	sort.Slice(all, func(i, j int) bool { return all[i].n > all[j].n || (all[i].n == all[j].n && all[i].text < all[j].text) })
	var out []string
	for i, x := range all {
		if i == max {
			out = append(out, fmt.Sprintf("and %d more texts", len(all)-max))
			break
		}
		out = append(out, fmt.Sprintf("%d× `%s`", x.n, strings.ReplaceAll(x.text, "`", "'")))
	}
	if len(out) == 0 {
		return "none"
	}
	return strings.Join(out, "; ")
}

// idleDatabase creates the idle relay's own database, its configuration
// with the configured types and its DSN pointing at the counting proxy
// (proxyAddr), and txbox's tables in it (migrated directly, so the
// proxy counts only the relay). cleanup drops the database; call it
// even on error.
func (r *runner) idleDatabase(ctx context.Context, proxyAddr string) (name, cfg string, cleanup func(), err error) {
	return r.proxiedDatabase(ctx, "bench_idle_", proxyAddr, r.idleConfig)
}

// proxiedDatabase creates a database of the scenario's own (ownDatabase),
// migrates it directly with the configuration write makes, and returns
// the configuration write makes on the DSN through the counting proxy.
// cleanup drops the database; call it even on error.
func (r *runner) proxiedDatabase(ctx context.Context, prefix, proxyAddr string,
	write func(file, dsn string, tgt target) (string, error)) (name, cfg string, cleanup func(), err error) {
	name, dsn, tgt, cleanup, err := r.ownDatabase(ctx, prefix, "the scenario's database")
	if err != nil {
		return "", "", cleanup, err
	}
	direct, err := write(name+"_migrate", dsn, tgt)
	if err != nil {
		return "", "", cleanup, err
	}
	if err := r.migrate(ctx, direct); err != nil {
		return "", "", cleanup, err
	}
	proxied, err := proxiedDSN(dsn, proxyAddr)
	if err != nil {
		return "", "", cleanup, err
	}
	cfg, err = write(name, proxied, tgt)
	return name, cfg, cleanup, err
}

// ownDatabase creates a database of the scenario's own (its name starts
// with prefix) and a NATS target. cleanup closes the target and drops the
// database; call it even on error.
func (r *runner) ownDatabase(ctx context.Context, prefix, what string) (name, dsn string, tgt target, cleanup func(), err error) {
	name = uniqueName(prefix)
	cleanup = func() {}
	if _, err := r.db.pool.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		return "", "", nil, cleanup, fmt.Errorf("create %s: %w", what, err)
	}
	cleanup = func() {
		if tgt != nil {
			tgt.close()
		}
		c, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		// The relay may have left a replication slot (WAL mode), which
		// DROP DATABASE refuses; pgdrop drops it first.
		_ = pgdrop.DropDatabase(c, func(ctx context.Context, q string, args ...any) error {
			_, err := r.db.pool.Exec(ctx, q, args...)
			return err
		}, name)
	}
	if dsn, err = dsnWithDatabase(r.o.DSN, name); err != nil {
		return "", "", nil, cleanup, err
	}
	tgt, err = r.br.newTarget(ctx, "nats")
	return name, dsn, tgt, cleanup, err
}

// idleConfig writes a relay configuration on dsn with only the idle
// types and returns its path.
func (r *runner) idleConfig(file, dsn string, tgt target) (string, error) {
	yaml := relayYAML(pgDatabase(dsn, "public"), tgt, "")
	var types []string
	for i := 1; i <= r.o.IdleTypes; i++ {
		types = append(types, fmt.Sprintf("  idle-%d: { sender: main }", i))
	}
	// Only the idle types: relayYAML's drain type would be one more.
	drainType := "events:\n  " + benchType + ": { sender: main }\n"
	if !strings.Contains(yaml, drainType) {
		return "", fmt.Errorf("idle: unexpected relay configuration layout")
	}
	return r.writeConfig(file, strings.Replace(yaml, drainType, "events:\n"+strings.Join(types, "\n")+"\n", 1))
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

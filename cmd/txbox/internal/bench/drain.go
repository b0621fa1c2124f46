package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Relay settings of the drain variants. "default" changes nothing (on
// PostgreSQL and MySQL/MariaDB the broker senders then use the lock
// claim, and rows are deleted on ack); "tuned" is the best documented
// tuning of docs/benchmarks.md (batches of 1000); "kept" keeps processed
// rows for a day (retention), the history a user may ask for; the other
// claim is the claim mode the default does not pick (docs/concepts.md,
// "Claim modes"), on the dialects that have both.
const (
	relayDefault = ""
	relayTuned   = "batch-size: 1000"
	relayKept    = "retention: 24h"
	relayLease   = "claim: lease"
	relayLock    = "claim: lock"
)

// defaultLock reports whether the relay's default claim for snd on
// dialect is the lock claim: a broker sender on a database that has one
// (config's defaultClaim).
func defaultLock(dialect, snd string) bool {
	return dialect != dialectSQLite && snd != "webhook"
}

// drainSpec is one drain run: a fresh backlog of n rows delivered to a
// fresh destination by relay children or by the naive loop.
type drainSpec struct {
	variant  string
	sender   string
	n        int
	naive    bool
	relays   int
	settings string
	// pin makes another session hold a REPEATABLE READ snapshot from
	// before the drain's start until the drain has settled (pinned xmin).
	pin bool
	// db is the dialect ("" is PostgreSQL).
	db string
	// publish produces the relay's backlog with the Go publisher
	// (PostgreSQL, walPublishBatch events per transaction) instead of
	// COPY, and records the WAL the production and the drain write.
	publish bool
	// wal runs the relay in WAL mode (database.source: wal): txbox
	// migrate creates the slot, the publisher emits, the relay streams.
	// Needs publish.
	wal bool
	// walSettings are database.wal keys of a WAL mode variant.
	walSettings string
	// routes > 1 fans the bench type out to that many routes
	// (docs/concepts.md, "Fan-out"): NATS subjects of the target's one
	// stream, so the destination holds n × routes messages.
	routes int
	// measureWrites records the outbox row writes per event
	// (Extra["row_writes_per_event"]) on PostgreSQL.
	measureWrites bool
	// brokerOnly runs the naive loop without a database (its rows made
	// in memory): its client and batches alone, what the loop would reach
	// if claiming cost nothing. Needs naive.
	brokerOnly bool
}

// messages is how many messages the drain delivers: a message per event
// and route.
func (sp drainSpec) messages() int { return sp.n * max(sp.routes, 1) }

func (sp drainSpec) dialect() string {
	if sp.db == "" {
		return dialectPostgres
	}
	return sp.db
}

// drain runs one drainSpec and returns its measurement. The clock runs
// from the children's start until the destination holds n messages; CPU
// is the children's user + system time over their whole life.
func (r *runner) drain(ctx context.Context, sp drainSpec, round int) (Measurement, error) {
	run := Measurement{Variant: sp.variant, Round: round, Events: sp.n, Extra: map[string]float64{}}
	src, err := r.newSource(ctx, sp.dialect())
	if err != nil {
		return run, err
	}
	if ps, ok := src.(*pgSource); ok {
		ps.publish, ps.wal, ps.walSettings = sp.publish, sp.wal, sp.walSettings
	}
	defer src.close()
	tgt, err := r.br.newTarget(ctx, sp.sender)
	if err != nil {
		return run, err
	}
	defer tgt.close()

	args, marker, meter, err := r.prepareDrain(ctx, sp, src, tgt)
	if err != nil {
		return run, err
	}
	args, err = r.profileArgs(args, sp.variant, round)
	if err != nil {
		return run, err
	}
	var unpin func() error
	if sp.pin {
		if unpin, err = r.pinXmin(ctx); err != nil {
			return run, err
		}
	}
	r.p.begin(fmt.Sprintf("%s: drain %d to %s", sp.variant, sp.n, sp.sender))
	start := time.Now()
	var children []*child
	for i, a := range args {
		c, err := r.o.startChild(fmt.Sprintf("%s child %d", sp.variant, i+1), marker, a...)
		if err != nil {
			_, _ = stopAll(children)
			return run, err
		}
		children = append(children, c)
	}
	err = r.waitDelivered(ctx, tgt, int64(sp.messages()), children)
	if err == nil {
		// The drain ends when the table is settled too: the last
		// batches' DELETE or finish lands after the broker's ack.
		err = r.waitSettled(ctx, sp, src, children)
	}
	el := time.Since(start)
	if err == nil && meter != nil {
		err = meter.record(ctx, &run)
	}
	if unpin != nil {
		if perr := unpin(); perr != nil && err == nil {
			err = perr
		}
	}
	cpu, serr := stopAll(children)
	if err != nil {
		return run, err
	}
	if serr != nil {
		return run, serr
	}
	if err := r.measured(ctx, sp, src, tgt, children, el, cpu, &run); err != nil {
		return run, err
	}
	r.p.note("  %-22s %8d events in %6.2fs = %8.0f/s, CPU %.2f µs/event", sp.variant, sp.n, run.Seconds, run.Rate, run.CPUPerEventMicros)
	return run, nil
}

// measured fills run from a finished drain: its rate and CPU, the
// children's peak RSS, WAL mode's spills, duplicates at the destination.
func (r *runner) measured(ctx context.Context, sp drainSpec, src source, tgt target, children []*child, el time.Duration, cpu float64, run *Measurement) error {
	if ps, ok := src.(*pgSource); ok && sp.wal {
		spilled, err := ps.spilledRows(ctx)
		if err != nil {
			return err
		}
		run.Extra["spilled"] = float64(spilled)
	}
	if ps, ok := src.(*pgSource); ok && sp.measureWrites {
		// The database work per event: every row the drain inserted,
		// updated or deleted (the backlog's own inserts left out).
		ins, changed, err := ps.rowWrites(ctx)
		if err != nil {
			return err
		}
		run.Extra["row_writes_per_event"] = float64(ins-int64(sp.n)+changed) / float64(sp.n)
	}
	for _, c := range children {
		if ru, ok := c.state.SysUsage().(*syscall.Rusage); ok {
			run.Extra["max_rss_mib"] = max(run.Extra["max_rss_mib"], float64(ru.Maxrss)/1024)
		}
	}
	n := sp.messages()
	run.Events = n
	run.Seconds = el.Seconds()
	run.Rate = float64(n) / el.Seconds()
	run.CPUSeconds = cpu
	run.CPUPerEventMicros = cpu / float64(n) * 1e6
	if got, err := tgt.count(ctx); err == nil && got > int64(n) {
		run.Extra["duplicates"] = float64(got - int64(n))
	}
	return nil
}

// profileArgs adds --cpuprofile to each child's command line when
// --profile-dir is set: DIR/<variant>.pprof, with the round from round 2
// on and the child's number when there are several.
func (r *runner) profileArgs(args [][]string, variant string, round int) ([][]string, error) {
	if r.o.ProfileDir == "" {
		return args, nil
	}
	if err := os.MkdirAll(r.o.ProfileDir, 0o755); err != nil {
		return nil, fmt.Errorf("--profile-dir: %w", err)
	}
	base := strings.NewReplacer(" ", "-", "/", "-", "→", "to").Replace(variant)
	if round > 1 {
		base += fmt.Sprintf("-round%d", round)
	}
	out := make([][]string, len(args))
	for i, a := range args {
		name := base
		if len(args) > 1 {
			name += fmt.Sprintf("-%d", i+1)
		}
		// Both children take the flag right after their subcommand
		// (relay; bench _naive-loop), before the flags that follow.
		at := 1
		if len(a) > 1 && a[0] == "bench" {
			at = 2
		}
		b := append([]string(nil), a[:at]...)
		b = append(b, "--cpuprofile", filepath.Join(r.o.ProfileDir, name+".pprof"))
		out[i] = append(b, a[at:]...)
	}
	return out, nil
}

// prepareDrain loads the backlog (and, for the relay, migrates txbox's
// tables first) and returns the children's command lines, the line they
// print once working and, for a spec that publishes, the meter of the WAL
// written.
func (r *runner) prepareDrain(ctx context.Context, sp drainSpec, src source, tgt target) ([][]string, string, *walMeter, error) {
	if sp.brokerOnly {
		return [][]string{append([]string{"bench", NaiveChild, "--dialect", dialectMemory, "--rows", strconv.Itoa(sp.n)}, tgt.naiveArgs()...)}, naiveReady, nil, nil
	}
	if sp.naive {
		r.p.begin(fmt.Sprintf("%s: load %d rows", sp.variant, sp.n))
		flags, err := src.naiveTable(ctx, sp.n, r.p)
		if err != nil {
			return nil, "", nil, err
		}
		return [][]string{append(append([]string{"bench", NaiveChild}, flags...), tgt.naiveArgs()...)}, naiveReady, nil, nil
	}
	yaml := relayYAML(src.databaseYAML(), tgt, sp.settings)
	if sp.routes > 1 {
		yaml = fanoutYAML(yaml, tgt, sp.routes)
	}
	cfg, err := r.writeConfig(uniqueName("relay_"), yaml)
	if err != nil {
		return nil, "", nil, err
	}
	r.p.begin(fmt.Sprintf("%s: migrate, load %d rows", sp.variant, sp.n))
	if err := r.migrate(ctx, cfg); err != nil {
		return nil, "", nil, err
	}
	var meter *walMeter
	if sp.publish {
		if meter, err = r.startWALMeter(ctx, src); err != nil {
			return nil, "", nil, err
		}
	}
	if err := src.fillOutbox(ctx, sp.n, r.p); err != nil {
		return nil, "", nil, err
	}
	if meter != nil {
		if err := meter.filled(ctx); err != nil {
			return nil, "", nil, err
		}
	}
	var args [][]string
	for range max(sp.relays, 1) {
		args = append(args, []string{"relay", "--config", cfg})
	}
	return args, "relay started", meter, nil
}

// waitDelivered polls the destination until it holds n messages, failing
// when a child dies or nothing arrives for two minutes.
func (r *runner) waitDelivered(ctx context.Context, tgt target, n int64, children []*child) error {
	last, lastChange := int64(-1), time.Now()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		got, err := tgt.count(ctx)
		if err != nil {
			return fmt.Errorf("count delivered messages: %w", err)
		}
		r.p.count(got, n)
		if got >= n {
			return nil
		}
		if got != last {
			last, lastChange = got, time.Now()
		}
		for _, c := range children {
			if err := c.alive(); err != nil {
				return err
			}
		}
		if time.Since(lastChange) > 2*time.Minute {
			var outs []string
			for _, c := range children {
				outs = append(outs, c.out.String())
			}
			return fmt.Errorf("stalled at %d of %d delivered for 2 minutes; children said:\n%s", got, n, strings.Join(outs, "\n---\n"))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}

// waitSettled polls the source table until no row is left undelivered
// (naive loop: the table is empty; relay: nothing PENDING or IN_PROCESS),
// failing after a minute.
func (r *runner) waitSettled(ctx context.Context, sp drainSpec, src source, children []*child) error {
	if sp.brokerOnly {
		return nil // no table
	}
	deadline := time.Now().Add(time.Minute)
	for {
		var left int64
		var err error
		if sp.naive {
			left, err = src.naiveLeft(ctx)
		} else {
			left, err = src.outboxLeft(ctx)
		}
		if err != nil {
			return err
		}
		if left == 0 {
			return nil
		}
		for _, c := range children {
			if err := c.alive(); err != nil {
				return err
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: the destination holds all %d messages but %d rows are still undelivered in the table a minute later", sp.variant, sp.n, left)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// pinXmin opens a REPEATABLE READ transaction in another session of the
// source's database and holds its snapshot until the returned function is
// called: vacuum cannot remove any row version that died after it. It
// checks that the session really holds back the horizon (its
// backend_xmin is set) before returning.
func (r *runner) pinXmin(ctx context.Context) (func() error, error) {
	conn, err := r.db.pool.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	tx, err := conn.Begin(ctx)
	if err == nil {
		_, err = tx.Exec(ctx, "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
	}
	if err == nil {
		_, err = tx.Exec(ctx, "SELECT count(*) FROM pg_class") // takes the snapshot
	}
	if err == nil {
		var pinned bool
		err = tx.QueryRow(ctx, "SELECT backend_xmin IS NOT NULL FROM pg_stat_activity WHERE pid = pg_backend_pid()").Scan(&pinned)
		if err == nil && !pinned {
			err = fmt.Errorf("pin xmin: the REPEATABLE READ session has no backend_xmin")
		}
	}
	if err != nil {
		conn.Release()
		return nil, err
	}
	return func() error {
		err := tx.Rollback(context.WithoutCancel(ctx))
		conn.Release()
		return err
	}, nil
}

// pairedDrains runs every spec once per round, reversing the order every
// other round so that drift in the machine's load hits all variants
// alike, and records the runs in s.
func (r *runner) pairedDrains(ctx context.Context, s *Scenario, specs []drainSpec) error {
	for round := 1; round <= r.o.Rounds; round++ {
		order := specs
		if round%2 == 0 {
			order = make([]drainSpec, len(specs))
			for i := range specs {
				order[i] = specs[len(specs)-1-i]
			}
		}
		for _, sp := range order {
			run, err := r.drain(ctx, sp, round)
			if err != nil {
				return fmt.Errorf("%s round %d: %w", sp.variant, round, err)
			}
			s.Runs = append(s.Runs, run)
		}
	}
	return nil
}

func (r *runner) scenarioDrain(ctx context.Context, s *Scenario) error {
	s.Title = "drain per sender: txbox relay vs the naive loop"
	s.Measures = "A preloaded backlog (plain-SQL COPY) drained to a fresh destination, by `txbox relay` children " +
		"with default settings (on PostgreSQL and MySQL/MariaDB a broker sender uses the lock claim), tuned (`batch-size: 1000`), keeping processed rows (`retention: 24h`) " +
		"and with the claim mode the default does not pick (where the dialect has both), and by the naive loop of docs/benchmarks.md " +
		"\"Targets\" (4 workers × 500 rows, CTE claim, async publish with the raw client, DELETE by id) as a child on its own table. " +
		"Rate = backlog / time from the children's start until the destination holds every message; CPU = the children's rusage."
	s.Conditions = map[string]string{"backlog": strconv.Itoa(r.o.Backlog), "rounds": strconv.Itoa(r.o.Rounds),
		"senders": strings.Join(r.o.Senders, ", "), "order": "naive, default, tuned, kept 24h, other claim; reversed every other round"}
	s.Conditions["databases"] = strings.Join(r.o.Dialects, ", ")
	for _, dialect := range r.o.Dialects {
		for _, snd := range r.o.Senders {
			if err := r.drainComparison(ctx, s, dialect, snd); err != nil {
				return err
			}
		}
	}
	return nil
}

// drainComparison runs the naive loop and the relay variants on one
// database and destination, paired per round.
func (r *runner) drainComparison(ctx context.Context, s *Scenario, dialect, snd string) error {
	label := snd
	if dialect != dialectPostgres {
		label = dialect + " → " + snd
	}
	spec := func(name, settings string) drainSpec {
		return drainSpec{variant: label + " " + name, sender: snd, n: r.o.Backlog, relays: 1, settings: settings, db: dialect}
	}
	specs := []drainSpec{
		{variant: label + " naive loop", sender: snd, n: r.o.Backlog, naive: true, db: dialect},
		spec("relay default", relayDefault),
		spec("relay tuned", relayTuned),
		spec("relay kept 24h", relayKept),
	}
	other := ""
	switch {
	case defaultLock(dialect, snd):
		other = "lease"
		specs = append(specs, spec("relay lease", relayLease))
	case dialect != dialectSQLite:
		other = "lock"
		specs = append(specs, spec("relay lock", relayLock))
	}
	if err := r.pairedDrains(ctx, s, specs); err != nil {
		return err
	}
	naive := s.rates(specs[0].variant)
	pgNATS := dialect == dialectPostgres && snd == "nats"
	target, meets := "", func(float64) bool { return true }
	if pgNATS {
		target, meets = "≥ 1.0×", func(x float64) bool { return x >= 1.0 }
	}
	s.addRatio(label+": relay default / naive loop", specs[1].variant, specs[0].variant, s.rates(specs[1].variant), naive, true, target, condMeets(target, meets))
	if pgNATS {
		target, meets = "≥ 1.25×", func(x float64) bool { return x >= 1.25 }
	}
	s.addRatio(label+": relay tuned / naive loop", specs[2].variant, specs[0].variant, s.rates(specs[2].variant), naive, true, target, condMeets(target, meets))
	s.addRatio(label+": relay kept 24h / relay default", specs[3].variant, specs[1].variant, s.rates(specs[3].variant), s.rates(specs[1].variant), true, "", nil)
	variants := []string{specs[1].variant, specs[2].variant, specs[3].variant}
	if other != "" {
		o := specs[4]
		s.addRatio(label+": relay "+other+" / relay default", o.variant, specs[1].variant, s.rates(o.variant), s.rates(specs[1].variant), true, "", nil)
		variants = append(variants, o.variant)
	}
	r.addCPUNote(s, append(variants, specs[0].variant)...)
	return nil
}

func condMeets(target string, f func(float64) bool) func(float64) bool {
	if target == "" {
		return nil
	}
	return f
}

// addCPUNote states the median CPU per event of the variants against the
// target of docs/benchmarks.md (≤ 4 µs per event for the relay).
func (r *runner) addCPUNote(s *Scenario, variants ...string) {
	for _, v := range variants {
		var xs []float64
		for _, run := range s.Runs {
			if run.Variant == v && run.CPUPerEventMicros > 0 {
				xs = append(xs, run.CPUPerEventMicros)
			}
		}
		if len(xs) == 0 {
			continue
		}
		m := median(xs)
		note := fmt.Sprintf("%s: process CPU %.2f µs/event (median)", v, m)
		if strings.Contains(v, "relay") {
			note += map[bool]string{true: " — target ≤ 4 µs met", false: " — target ≤ 4 µs **not met**"}[m <= 4]
		}
		s.Notes = append(s.Notes, note)
	}
}

func (r *runner) scenarioScaling(ctx context.Context, s *Scenario) error {
	s.Title = "backlog-size scaling"
	s.Measures = "`txbox relay` (defaults) draining a small and a large backlog to NATS; the ratio is the large backlog's rate over the small one's. Relay memory: the child's peak RSS."
	s.Conditions = map[string]string{"small": strconv.Itoa(r.o.ScalingSmall), "large": strconv.Itoa(r.o.ScalingLarge), "rounds": strconv.Itoa(r.o.Rounds)}
	small := drainSpec{variant: fmt.Sprintf("relay default %d", r.o.ScalingSmall), sender: "nats", n: r.o.ScalingSmall, relays: 1}
	large := drainSpec{variant: fmt.Sprintf("relay default %d", r.o.ScalingLarge), sender: "nats", n: r.o.ScalingLarge, relays: 1}
	if err := r.pairedDrains(ctx, s, []drainSpec{small, large}); err != nil {
		return err
	}
	s.addRatio("large / small backlog rate", large.variant, small.variant, s.rates(large.variant), s.rates(small.variant), true,
		"≥ 0.8 (within 20 %)", func(x float64) bool { return x >= 0.8 })
	s.addRatio("large / small peak RSS", large.variant, small.variant, s.extra(large.variant, "max_rss_mib"), s.extra(small.variant, "max_rss_mib"), false, "", nil)
	r.addCPUNote(s, small.variant, large.variant)
	return nil
}

func (s *Scenario) extra(variant, key string) []float64 {
	var out []float64
	for _, r := range s.Runs {
		if r.Variant == variant {
			out = append(out, r.Extra[key])
		}
	}
	return out
}

func (r *runner) scenarioXmin(ctx context.Context, s *Scenario) error {
	s.Title = "pinned xmin"
	s.Measures = "`txbox relay` (defaults) draining a backlog to NATS while another session of the same database holds a " +
		"REPEATABLE READ snapshot (checked: its backend_xmin is set) from before the drain's start until the drain has settled, " +
		"so vacuum cannot remove any dead row version the drain leaves, against the same drain without it."
	s.Conditions = map[string]string{"backlog": strconv.Itoa(r.o.XminBacklog), "pinned": "the whole drain (≥ " + r.o.XminHold.String() + " asked)", "rounds": strconv.Itoa(r.o.Rounds)}
	normal := drainSpec{variant: "relay default", sender: "nats", n: r.o.XminBacklog, relays: 1}
	pinned := drainSpec{variant: "relay default, xmin pinned", sender: "nats", n: r.o.XminBacklog, relays: 1, pin: true}
	if err := r.pairedDrains(ctx, s, []drainSpec{normal, pinned}); err != nil {
		return err
	}
	s.addRatio("pinned / normal rate", pinned.variant, normal.variant, s.rates(pinned.variant), s.rates(normal.variant), true,
		"≥ 0.5", func(x float64) bool { return x >= 0.5 })
	for _, run := range s.Runs {
		if run.Variant == pinned.variant && run.Seconds < r.o.XminHold.Seconds() {
			s.Notes = append(s.Notes, fmt.Sprintf("round %d: the drain took %.0fs, less than the %s the target names; it ran pinned throughout", run.Round, run.Seconds, r.o.XminHold))
		}
	}
	return nil
}

func (r *runner) scenarioRelays(ctx context.Context, s *Scenario) error {
	s.Title = "1–N relay processes"
	s.Measures = "The same backlog drained to NATS by 1..N `txbox relay` children with default settings sharing one outbox; ratios against one process. CPU is summed over the children."
	var counts []string
	for _, n := range r.o.Relays {
		counts = append(counts, strconv.Itoa(n))
	}
	s.Conditions = map[string]string{"backlog": strconv.Itoa(r.o.Backlog), "processes": strings.Join(counts, ", "), "rounds": strconv.Itoa(r.o.Rounds)}
	var specs []drainSpec
	for _, n := range r.o.Relays {
		specs = append(specs, drainSpec{variant: fmt.Sprintf("%d relay process(es)", n), sender: "nats", n: r.o.Backlog, relays: n})
	}
	if err := r.pairedDrains(ctx, s, specs); err != nil {
		return err
	}
	base := specs[0]
	for _, sp := range specs[1:] {
		s.addRatio(sp.variant+" / "+base.variant, sp.variant, base.variant, s.rates(sp.variant), s.rates(base.variant), true, "", nil)
	}
	var vs []string
	for _, sp := range specs {
		vs = append(vs, sp.variant)
	}
	r.addCPUNote(s, vs...)
	return nil
}

// scenarioFanout drains one backlog to one NATS subject, then the same
// size of backlog fanned out to three subjects of the same stream
// (docs/concepts.md, "Fan-out"): each event's row is claimed once and
// sent to every route, so fan-out should deliver far more messages per
// second than one route (target ≥ 2×) with the database work of one.
func (r *runner) scenarioFanout(ctx context.Context, s *Scenario) error {
	s.Title = "fan-out: one route vs three routes"
	s.Measures = "A preloaded backlog (plain-SQL COPY) drained by one `txbox relay` child with default settings to one NATS subject, " +
		"and the same size of backlog with the type fanned out to three subjects of one JetStream stream (`routes:`), " +
		"which the relay claims once per event and sends to every route (the shared claim, docs/concepts.md \"Fan-out\"). " +
		"Rate = messages delivered / time from the child's start until the stream holds every message; " +
		"ratio = fan-out messages/s ÷ one route's. Row writes per event = the outbox rows the drain inserted, updated or deleted " +
		"(pg_stat_user_tables, read after the relay exited) ÷ events: the database work, which fan-out should not multiply. " +
		"Beside them, the naive loop's NATS client publishing three times the backlog with no database (rows made in memory): " +
		"the most messages per second the broker takes on this machine."
	s.Conditions = map[string]string{"backlog": strconv.Itoa(r.o.Backlog), "rounds": strconv.Itoa(r.o.Rounds),
		"sender": "nats", "database": dialectPostgres, "order": "one route, three routes, naive loop with no database; reversed every other round"}
	one := drainSpec{variant: "one route", sender: "nats", n: r.o.Backlog, relays: 1, measureWrites: true}
	three := drainSpec{variant: "three routes", sender: "nats", n: r.o.Backlog, relays: 1, routes: 3, measureWrites: true}
	// The broker's ceiling on this machine: the naive loop's own client
	// publishing as many messages with no database at all.
	broker := drainSpec{variant: "naive loop, no database", sender: "nats", n: 3 * r.o.Backlog, naive: true, brokerOnly: true}
	if err := r.pairedDrains(ctx, s, []drainSpec{one, three, broker}); err != nil {
		return err
	}
	s.addRatio("three routes / naive loop, no database (messages/s)", three.variant, broker.variant, s.rates(three.variant), s.rates(broker.variant), true, "", nil)
	s.addRatio("three routes / one route (messages/s)", three.variant, one.variant, s.rates(three.variant), s.rates(one.variant), true,
		"≥ 2.0", func(x float64) bool { return x >= 2 })
	s.addRatio("three routes / one route (row writes per event)", three.variant, one.variant,
		s.extra(three.variant, "row_writes_per_event"), s.extra(one.variant, "row_writes_per_event"), false, "", nil)
	r.addCPUNote(s, one.variant, three.variant)
	return nil
}

// fanoutYAML rewrites a relay configuration's bench type into a fan-out
// to routes subjects of the target's stream.
func fanoutYAML(yaml string, tgt target, routes int) string {
	nt, ok := tgt.(*natsTarget)
	if !ok {
		return yaml
	}
	var b strings.Builder
	fmt.Fprintf(&b, "  %s:\n    routes:\n", benchType)
	for i := range routes {
		fmt.Fprintf(&b, "      - { name: r%d, sender: main, subject: %q }\n", i, fmt.Sprintf("%s.r%d.%s", nt.subj, i, benchType))
	}
	return strings.Replace(yaml, fmt.Sprintf("  %s: { sender: main }\n", benchType), b.String(), 1)
}

package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/txbox/txbox/config"
	"github.com/txbox/txbox/relay"
	"github.com/txbox/txbox/sender"
	"github.com/txbox/txbox/store"
)

// runConfig dispatches `txbox config check` and `txbox config print`.
func runConfig(ctx context.Context, e *env, args []string) error {
	if len(args) == 0 {
		return usagef("config needs a subcommand: check or print (txbox config check --help)")
	}
	switch args[0] {
	case "check":
		return runConfigCheck(ctx, e, args[1:])
	case "print":
		return runConfigPrint(e, args[1:])
	case "-h", "--help", "help":
		fmt.Fprintln(e.stderr, "Usage: txbox config check [--connect [--timeout 10s]] | txbox config print  (flags: --config, --set, --dialect, --dsn)")
		return flag.ErrHelp
	}
	return usagef("unknown config subcommand %q: check or print", args[0])
}

// runConfigPrint prints every key with its effective value and source.
func runConfigPrint(e *env, args []string) error {
	fs := newFlagSet(e, "config print", "config print [--config txbox.yaml] [--set key=value]...")
	var cf configFlags
	cf.register(fs, e)
	if err := parse(fs, args); err != nil {
		return err
	}
	cfg, err := cf.load(e)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "KEY\tVALUE\tSOURCE")
	for _, s := range cfg.Settings() {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", s.Path, s.Value, s.Source)
	}
	return tw.Flush()
}

// destination is one place events go: a sender and a route, for the
// event types listed (or "(other types)" for the defaults route).
type destination struct {
	sender, kind, name string
	route              sender.Route
	types              []string
	// template is a route with {event_type} left in it: each type has its
	// own destination, known only for types seen in the database.
	template bool
}

// runConfigCheck loads and validates the configuration, resolves every
// secret and file it names, prints each event type's effective settings
// and destination, and with --connect checks the database, dials and
// authenticates each sender and checks each destination.
func runConfigCheck(ctx context.Context, e *env, args []string) error {
	fs := newFlagSet(e, "config check", "config check [--config txbox.yaml] [--connect] [--timeout 10s]")
	var cf configFlags
	cf.register(fs, e)
	connect := fs.Bool("connect", false, "also connect to the database and each broker and check that every destination exists")
	timeout := fs.Duration("timeout", defaultCheckTimeout, "bound on each connection check with --connect")
	if err := parse(fs, args); err != nil {
		return err
	}
	if *timeout <= 0 {
		return usagef("--timeout must be positive, not %s", *timeout)
	}
	cfg, err := cf.load(e)
	if err != nil {
		return err
	}
	// The senders log from their own goroutines while the progress lines
	// are written: both go through one lock.
	stderr := &lockedWriter{w: e.stderr}
	log := cfg.NewLogger(stderr)
	if err := cfg.CheckSecrets(e.getenv, log); err != nil {
		return err
	}
	tracing, err := cfg.TracingExport(e.getenv, log)
	if err != nil {
		return err
	}
	name := cf.file
	if name == "" {
		name = "(no configuration file found: " + lookedAt() + "; defaults and overrides only)"
	}
	fmt.Fprintf(e.stdout, "configuration %s: valid\n", name)
	fmt.Fprintf(e.stdout, "database: %s\n", cfg.Database.Dialect)
	if cfg.Database.Source == config.SourceWAL && !*connect {
		fmt.Fprintln(e.stdout, "source: wal (slot and wal_level not checked: use --connect)")
	}
	printTracing(e.stdout, tracing)
	types := cfg.EventTypes()
	c := &checker{cfg: cfg, e: e, stderr: stderr, log: log, timeout: *timeout, connect: *connect,
		opened: map[string]sender.Sender{}, refused: map[string]string{}}
	defer c.close(ctx)
	if *connect {
		if types, err = c.connectDatabase(ctx, types); err != nil {
			return err
		}
	}
	w := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	if err := c.tenants(ctx, w); err != nil {
		return err
	}
	fmt.Fprintln(w, "\nSENDER\tTYPE\tSTATUS")
	for _, n := range cfg.SenderNames() {
		fmt.Fprintf(w, "%s\t%s\t%s\n", n, cfg.Senders[n].Type, c.sender(ctx, n))
	}
	if err := w.Flush(); err != nil {
		return err
	}
	dests := printEventTypes(w, cfg, types)
	c.notes = append(c.notes, fanoutNotes(cfg, types)...)
	warnings, err := c.destinations(ctx, w, dests)
	if err != nil {
		return err
	}
	warnings = append(c.warnings, warnings...)
	for _, n := range c.notes {
		fmt.Fprintf(e.stdout, "\nnote: %s\n", n)
	}
	for _, wn := range warnings {
		fmt.Fprintf(e.stdout, "\nwarning: %s\n", wn)
	}
	return c.summary(len(warnings))
}

// printTracing says where the relay would export its spans; the check
// reads the headers and TLS files but never contacts the collector.
func printTracing(w io.Writer, tracing *config.TracingExport) {
	if tracing == nil {
		fmt.Fprintln(w, "tracing: off")
		return
	}
	fmt.Fprintf(w, "tracing: OTLP %s to %s, sampler %s (headers and TLS files read; the collector is not contacted)\n",
		tracing.Protocol, endpointForLog(tracing.Endpoint), tracing.Sampler)
}

// summary fails the check when a sender or destination failed it, and
// otherwise says that every --connect check passed, naming the warnings.
func (c *checker) summary(warnings int) error {
	var problems []string
	if n := len(c.refused); n > 0 {
		problems = append(problems, fmt.Sprintf("%d sender(s) could not connect or were refused", n))
	}
	if c.missing > 0 {
		problems = append(problems, fmt.Sprintf("%d destination(s) missing; create them (docs/quickstart.md) or set provision: true on the sender (with a provision-* list: add them to it)", c.missing))
	}
	if c.unprovisionable > 0 {
		problems = append(problems, fmt.Sprintf("%d destination(s) missing that provision: true could not create at start (the reason is in their STATUS)", c.unprovisionable))
	}
	if c.unreachable > 0 {
		problems = append(problems, fmt.Sprintf("%d destination(s) not reachable", c.unreachable))
	}
	if c.tenantsFailed > 0 {
		problems = append(problems, fmt.Sprintf("%d tenant(s) failed their database check (the reason is in their STATUS)", c.tenantsFailed))
	}
	if len(problems) > 0 {
		return errors.New(strings.Join(problems, "; "))
	}
	if c.connect {
		if warnings > 0 {
			fmt.Fprintf(c.e.stdout, "\nall checks passed, with %d warning(s) (above)\n", warnings)
		} else {
			fmt.Fprintln(c.e.stdout, "\nall checks passed")
		}
	}
	return nil
}

// defaultCheckTimeout bounds each check of `config check --connect`
// unless --timeout says otherwise.
const defaultCheckTimeout = 10 * time.Second

// checker runs the --connect checks of `config check`: one connection
// per sender, opened once and shared by its destinations, and a progress
// line on stderr before and after each check, so a slow broker shows
// which check waits.
type checker struct {
	cfg     *config.Config
	e       *env
	stderr  io.Writer
	log     *slog.Logger
	timeout time.Duration
	connect bool
	opened  map[string]sender.Sender
	// refused holds, by sender name, why the sender could not connect:
	// its destinations are then not checked (each would wait the
	// timeout again).
	refused map[string]string
	// missing and unreachable count the destinations that do not exist
	// and those that could not be checked (an error, a refused sender).
	missing, unreachable int
	// unprovisionable counts the destinations that do not exist and that
	// the sender's provision: true could not create at start.
	unprovisionable int
	// warnings are the database's (WAL mode's failover), printed with
	// the destinations'.
	warnings []string
	// provisions holds, by sender name, what its provision would do at
	// the relay's start, checked once for all its missing destinations.
	provisions map[string]*provisionCheck
	// notes are printed after the tables, not counted as warnings.
	notes []string
	// tenantsFailed counts the tenants whose database could not be
	// opened or lacks the tenant's schema (--connect).
	tenantsFailed int
}

// provisionCheck is the outcome of a sender's CheckProvision.
type provisionCheck struct {
	plan sender.ProvisionPlan
	err  error
}

// progress writes one progress line to stderr.
func (c *checker) progress(format string, args ...any) {
	fmt.Fprintf(c.stderr, "config check: "+format+"\n", args...)
}

// lockedWriter serialises the writes of several goroutines to w.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func (c *checker) close(ctx context.Context) {
	for _, s := range c.opened {
		_ = s.Close(context.WithoutCancel(ctx))
	}
}

// open returns sender name, opened once without provisioning.
func (c *checker) open(name string) (sender.Sender, error) {
	if s := c.opened[name]; s != nil {
		return s, nil
	}
	s, err := c.cfg.OpenSender(name, c.e.getenv, c.log)
	if err != nil {
		return nil, err
	}
	c.opened[name] = s
	return s, nil
}

// run runs one check under the timeout, with progress lines, and returns
// its error scrubbed of secrets.
func (c *checker) run(ctx context.Context, what string, check func(context.Context) error) error {
	c.progress("%s: checking (timeout %s)", what, c.timeout)
	start := time.Now()
	cctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	err := config.Scrub(check(cctx), c.e.secrets)
	took := time.Since(start).Round(time.Millisecond)
	if errors.Is(err, sender.ErrNoDestination) {
		// An answer, not a failure: the destination does not exist
		// (yet: a provisioning sender creates it at start).
		c.progress("%s: does not exist (%s)", what, took)
	} else if err != nil {
		c.progress("%s: failed after %s", what, took)
	} else {
		c.progress("%s: ok (%s)", what, took)
	}
	return err
}

// sender dials and authenticates sender name (with --connect) and
// returns its status.
func (c *checker) sender(ctx context.Context, name string) string {
	if !c.connect {
		return "not checked (use --connect)"
	}
	s, err := c.open(name)
	if err != nil {
		c.refused[name] = err.Error()
		return "ERROR: " + err.Error()
	}
	cc, ok := s.(sender.ConnectionChecker)
	if !ok {
		return "no connection of its own: each destination is dialed"
	}
	what := fmt.Sprintf("sender %s (%s)", name, c.cfg.Senders[name].Type)
	if err := c.run(ctx, what, cc.CheckConnection); err != nil {
		c.refused[name] = err.Error()
		return "ERROR: " + err.Error()
	}
	return "ok: connected"
}

// destinations prints each destination and, with --connect, whether it
// exists, counting those missing or unreachable. It returns a warning for
// each destination it could not check (a route template).
func (c *checker) destinations(ctx context.Context, w *tabwriter.Writer, dests []*destination) ([]string, error) {
	fmt.Fprintln(w, "\nDESTINATION\tSENDER\tEVENT TYPES\tSTATUS")
	var warnings []string
	for _, d := range dests {
		status := "not checked (use --connect)"
		switch {
		case d.template && c.connect:
			status = "NOT CHECKED: a template (see the warning below)"
			warnings = append(warnings, fmt.Sprintf("%s %s of sender %s is a template: the destination of each event type "+
				"the file does not list is checked only once the database has rows of that type. List those types under events "+
				"(events: { order.created: {} }) to have their %ss checked before the first event", d.kind, d.name, d.sender, d.kind))
		case d.template:
			status = "per event type: a template, checked for the types listed or found in the database"
		case c.connect:
			var err error
			status, err = c.destination(ctx, d)
			switch {
			case errors.Is(err, errProvisionFails):
				c.unprovisionable++
			case errors.Is(err, sender.ErrNoDestination):
				c.missing++
			case err != nil:
				c.unreachable++
			}
		}
		fmt.Fprintf(w, "%s %s\t%s\t%s\t%s\n", d.kind, d.name, d.sender, strings.Join(d.types, ", "), status)
	}
	return warnings, w.Flush()
}

// destination asks d's sender whether the destination exists. A sender
// that could not connect is not asked again.
func (c *checker) destination(ctx context.Context, d *destination) (string, error) {
	if why, ok := c.refused[d.sender]; ok {
		return "NOT CHECKED: sender " + d.sender + " could not connect", errors.New(why)
	}
	s, err := c.open(d.sender)
	if err != nil {
		return "ERROR: " + err.Error(), err
	}
	ch, ok := s.(sender.Checker)
	if !ok {
		return "not checked (this sender type cannot tell before the first event)", nil
	}
	err = c.run(ctx, fmt.Sprintf("%s %s (sender %s)", d.kind, d.name, d.sender), func(ctx context.Context) error {
		return ch.CheckRoute(ctx, d.route)
	})
	switch {
	case err == nil:
		return "ok: exists", nil
	case errors.Is(err, sender.ErrNoDestination):
		if status, ok, perr := c.provisioned(ctx, d, s); ok {
			return status, perr
		}
		return "MISSING: " + err.Error(), err
	}
	return "ERROR: " + err.Error(), err
}

// provisioned tells, for a destination that does not exist, whether the
// relay will create it at start (the sender's provision key is on and
// what it provisions covers d), checking that it could. ok is false when
// the sender does not provision d: the destination is then missing.
// perr matches sender.ErrNoDestination when the provision would fail.
func (c *checker) provisioned(ctx context.Context, d *destination, s sender.Sender) (status string, ok bool, perr error) {
	routes, on := c.cfg.ProvisionRoutes(d.sender)
	if !on {
		return "", false, nil
	}
	pc, isChecker := s.(sender.ProvisionChecker)
	if !isChecker {
		return "NOT CHECKED: does not exist; provision: true creates it at start (this sender type cannot check that before)", true, nil
	}
	p := c.provisions[d.sender]
	if p == nil {
		p = &provisionCheck{}
		p.err = c.run(ctx, fmt.Sprintf("provision of sender %s", d.sender), func(ctx context.Context) error {
			var err error
			p.plan, err = pc.CheckProvision(ctx, routes)
			return err
		})
		if c.provisions == nil {
			c.provisions = map[string]*provisionCheck{}
		}
		c.provisions[d.sender] = p
		c.reportProvision(d.sender, p)
	}
	if p.err != nil {
		return "MISSING, and provision: true could not create it at start: " + p.err.Error(), true, fmt.Errorf("%w: %w", errProvisionFails, p.err)
	}
	if p.plan.Covers != nil && !p.plan.Covers(d.route) {
		return "MISSING: provision: true does not cover it (its routes or provision-* list leave it out)", true, sender.ErrNoDestination
	}
	return "CREATED AT START by provision: true (does not exist yet; see the provision note below)", true, nil
}

// errProvisionFails marks a missing destination whose sender's provision
// would fail at the relay's start.
var errProvisionFails = errors.New("provision would fail")

// reportProvision adds the note that says what sender name's provision
// will do at the relay's start, what was verified and what was not.
func (c *checker) reportProvision(name string, p *provisionCheck) {
	if p.err != nil {
		return
	}
	var b strings.Builder
	fmt.Fprintf(&b, "sender %s: provision: true; at start the relay will %s", name, strings.Join(p.plan.Actions, "; "))
	if len(p.plan.Verified) > 0 {
		fmt.Fprintf(&b, ". Verified: %s", strings.Join(p.plan.Verified, "; "))
	}
	if len(p.plan.Unverified) > 0 {
		fmt.Fprintf(&b, ". Not verified: %s", strings.Join(p.plan.Unverified, "; "))
	}
	c.notes = append(c.notes, b.String())
}

// withDatabaseTypes adds to types those with rows in the database that the
// file does not list: they go to the defaults route, so check theirs too.
func withDatabaseTypes(ctx context.Context, cfg *config.Config, st *config.Store, types []string) ([]string, error) {
	stats, err := st.OutboxStats(ctx)
	if err != nil {
		return nil, fmt.Errorf("database: read the outbox: %w", err)
	}
	for _, ts := range stats {
		if cfg.Events[ts.EventType] == nil {
			types = append(types, ts.EventType)
		}
	}
	return types, nil
}

// destinations collects the distinct destinations of the event types.
type destinations struct {
	cfg  *config.Config
	list []*destination
}

// add records type t's destination under settings s (a template when it
// is the defaults route for unlisted types) and returns its label.
func (ds *destinations) add(t string, s relay.EventSettings, template bool) string {
	sn := deref(s.Sender)
	if ds.cfg.Senders[sn] == nil || s.Route == nil {
		return "(no sender)"
	}
	r := *s.Route
	if !template {
		r = r.Expand(t)
	}
	return ds.addRoute(t, sn, r, template)
}

// addRoute records that label (a type, or "type → route") goes to route r
// of sender sn, r already expanded unless it is the defaults template,
// and returns the destination's label.
func (ds *destinations) addRoute(label, sn string, r sender.Route, template bool) string {
	sc := ds.cfg.Senders[sn]
	if sc == nil {
		return "(no sender)"
	}
	if sc.Webhook != nil && r.URL == "" {
		r.URL = sc.Webhook.URL
	}
	t := label
	kind, dn := destinationName(sc.Type, r)
	for _, d := range ds.list {
		if d.sender == sn && d.name == dn {
			d.types = append(d.types, t)
			return kind + " " + dn
		}
	}
	// The defaults route names one destination for every type when
	// its field holds no placeholder: that one can be checked.
	template = template && strings.Contains(dn, sender.PlaceholderEventType)
	ds.list = append(ds.list, &destination{sender: sn, kind: kind, name: dn, route: r, types: []string{t}, template: template})
	return kind + " " + dn
}

// printEventTypes prints each type's effective settings and returns the
// destinations they name. A fanned-out type (config.Config.Routes) has a
// row of its own, with only the settings its routes share (lease,
// retention), then a row "type → route" per route with the route's
// sender, destination and settings, each route's destination listed as
// any type's.
//
// In WAL mode a type's events come from the stream, in batches of
// database.wal.batch-size unless the type has a batch-size of its own;
// only its rows in the outbox table (spills, rows from before the slot,
// events due later) are claimed, with its claim mode and claim batch
// size. CLAIM then says "stream (+lock)" rather than "lock", and BATCH
// "1000 (claims 200)" where the two sizes differ, so that neither column
// suggests the type is delivered by claims.
func printEventTypes(w io.Writer, cfg *config.Config, types []string) []*destination {
	ds := &destinations{cfg: cfg}
	wal := cfg.Database.Source == config.SourceWAL
	fmt.Fprintln(w, "\nEVENT TYPE\tSENDER\tDESTINATION\tCLAIM\tBATCH\tMAX ATTEMPTS\tLEASE\tORDERING\tRETENTION")
	row := func(t, key string, s relay.EventSettings, template bool) {
		dest := ds.add(t, s, template)
		claim, batch := string(deref(s.Claim)), fmt.Sprint(deref(s.BatchSize))
		if wal {
			claim = "stream (+" + claim + ")"
			if n := cfg.StreamBatchSize(key); n != deref(s.BatchSize) {
				batch = fmt.Sprintf("%d (claims %d)", n, deref(s.BatchSize))
			}
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\n", t, deref(s.Sender), dest, claim, batch,
			deref(s.MaxAttempts), deref(s.LeaseDuration), deref(s.Ordering), deref(s.Retention))
	}
	for _, t := range types {
		routes := cfg.Routes(t)
		if routes == nil {
			row(t, t, cfg.Effective(t), false)
			continue
		}
		// A fanned-out type: one row per route, each with the
		// route's own effective settings; the type's row names its
		// routes. Lease and retention are the type's.
		eff := cfg.Effective(t)
		fmt.Fprintf(w, "%s\t(fan-out: %d routes)\t\t\t\t\t%s\t\t%s\n", t, len(routes), deref(eff.LeaseDuration), deref(eff.Retention))
		for _, r := range routes {
			label := routeLabel(t, r.Name)
			dest := ds.addRoute(label, r.Sender, r.Route, false)
			fmt.Fprintf(w, "  %s\t%s\t%s\t%s\t%d\t%d\t%s\t%s\t%s\n", label, r.Sender, dest, r.Claim, r.BatchSize,
				r.MaxAttempts, deref(eff.LeaseDuration), r.Ordering, deref(eff.Retention))
		}
	}
	row("(other types)", "", cfg.Effective(""), true)
	if wal {
		fmt.Fprintln(w, "(source wal: events are streamed, BATCH a batch; CLAIM's parentheses and BATCH's claims are for a type's "+
			"rows in the outbox table: spills, rows from before the slot, events due later)")
	}
	return ds.list
}

// routeLabel names route of fanned-out type t in the tables.
func routeLabel(t, route string) string { return t + " → " + route }

// fanoutNote is config check's note for a configuration that fans a type
// out: what happens to the rows of a route that leaves it, which the
// check cannot see (it would need the store).
const fanoutNote = "fan-out: each route of a type (rows \"type → route\") gets every event, with its own deliveries, retries and dead letters. " +
	"Removing a route, or renaming it, leaves its pending rows without a destination: the relay dead-letters them " +
	"(last error \"route ... was removed from the configuration\"), where they can be deleted or redriven (docs/concepts.md, \"Fan-out\")"

// fanoutNotes is fanoutNote when one of types fans out, else nothing.
func fanoutNotes(cfg *config.Config, types []string) []string {
	for _, t := range types {
		if cfg.Routes(t) != nil {
			return []string{fanoutNote}
		}
	}
	return nil
}

// destinationName names the route field the sender type uses.
func destinationName(typ string, r sender.Route) (kind, name string) {
	switch typ {
	case config.SenderNATS:
		return "subject", r.Subject
	case config.SenderKafka:
		return "topic", r.Topic
	case config.SenderRabbitMQ:
		ex := r.Exchange
		if ex == "" {
			ex = `""`
		}
		return "exchange", ex + " key " + r.RoutingKey
	case config.SenderRedis:
		return "stream", r.Stream
	}
	return "url", config.RedactDSN(r.URL)
}

// checkDatabase connects and pings the database.
func checkDatabase(ctx context.Context, cfg *config.Config, e *env, progress io.Writer, log *slog.Logger, timeout time.Duration) (*config.Store, error) {
	st, err := cfg.OpenStore(ctx, e.getenv, log)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(progress, "config check: database %s: checking (timeout %s)\n", cfg.Database.Dialect, timeout)
	pctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := st.Ping(pctx); err != nil {
		st.Close()
		return nil, fmt.Errorf("database %s: %w", cfg.Database.Dialect, err)
	}
	fmt.Fprintf(e.stdout, "database %s: connected\n", cfg.Database.Dialect)
	return st, nil
}

// checkStream checks WAL mode's preconditions with database.source wal:
// what the relay checks before it streams; then whether the slot
// survives a failover, which is a warning unless it is shown safe (or
// there is no standby).
func checkStream(ctx context.Context, cfg *config.Config, st *config.Store, e *env, timeout time.Duration) ([]string, error) {
	if cfg.Database.Source != config.SourceWAL {
		return nil, nil
	}
	f, warnings, err := streamChecks(ctx, st, timeout)
	if err != nil {
		return nil, fmt.Errorf("source wal: %w", err)
	}
	fmt.Fprintln(e.stdout, "source: wal: wal_level logical, the slot present and not invalidated, synchronous_standby_names clear "+
		"(the replication connection itself, and the role's REPLICATION attribute, are not checked)")
	if f != nil {
		fmt.Fprintln(e.stdout, "source: wal: failover: "+failoverText(*f))
	}
	return warnings, nil
}

// streamChecks runs WAL mode's checks on st (CheckStream: wal_level, the
// slot, synchronous_standby_names) and reads the slot's failover verdict:
// nil, with a warning, when the slot could not be read. The verdict is a
// warning unless the slot is shown safe or there is no standby.
func streamChecks(ctx context.Context, st *config.Store, timeout time.Duration) (*store.StreamFailover, []string, error) {
	sc, ok := st.Driver.(interface {
		CheckStream(context.Context) error
		StreamStatus(context.Context) (*store.StreamStatus, error)
	})
	if !ok {
		return nil, nil, fmt.Errorf("the %s store cannot stream", st.Dialect())
	}
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := sc.CheckStream(cctx); err != nil {
		return nil, nil, err
	}
	ss, err := sc.StreamStatus(cctx)
	if err != nil {
		return nil, []string{"failover: could not read the slot: " + err.Error()}, nil
	}
	f := ss.Failover
	if f.Verdict == store.FailoverSafe || f.Verdict == store.FailoverNoStandby {
		return &f, nil, nil
	}
	warnings := []string{"the WAL slot is not shown to survive a failover (" + f.Verdict + "): " + f.Note}
	for _, p := range f.Problems[min(1, len(f.Problems)):] {
		warnings = append(warnings, "failover: "+p)
	}
	for _, u := range f.Unchecked {
		warnings = append(warnings, "failover: not checked: "+u)
	}
	return &f, warnings, nil
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}

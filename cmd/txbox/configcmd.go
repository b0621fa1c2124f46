package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/txbox/txbox/config"
	"github.com/txbox/txbox/relay"
	"github.com/txbox/txbox/sender"
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
		fmt.Fprintln(e.stderr, "Usage: txbox config check [--connect] | txbox config print  (flags: --config, --set, --dialect, --dsn)")
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

// runConfigCheck loads and validates the configuration, reads every
// secret and TLS file, prints each event type's effective settings and
// destination, and with --connect checks the database and each
// destination.
func runConfigCheck(ctx context.Context, e *env, args []string) error {
	fs := newFlagSet(e, "config check", "config check [--config txbox.yaml] [--connect] [--timeout 10s]")
	var cf configFlags
	cf.register(fs, e)
	connect := fs.Bool("connect", false, "also connect to the database and each broker and check that every destination exists")
	timeout := fs.Duration("timeout", 10*time.Second, "bound on each connection check with --connect")
	if err := parse(fs, args); err != nil {
		return err
	}
	cfg, err := cf.load(e)
	if err != nil {
		return err
	}
	log := cfg.NewLogger(e.stderr)
	if err := cfg.CheckSenders(e.getenv, log); err != nil {
		return err
	}
	tracing, err := cfg.TracingExport(e.getenv, log)
	if err != nil {
		return err
	}
	name := cf.path
	if name == "" {
		name = "(no file: defaults and overrides)"
	}
	fmt.Fprintf(e.stdout, "configuration %s: valid\n", name)
	fmt.Fprintf(e.stdout, "database: %s\n", cfg.Database.Dialect)
	if tracing == nil {
		fmt.Fprintln(e.stdout, "tracing: off")
	} else {
		fmt.Fprintf(e.stdout, "tracing: OTLP %s to %s, sampler %s (headers and TLS files read; the collector is not contacted)\n",
			tracing.Protocol, endpointForLog(tracing.Endpoint), tracing.Sampler)
	}
	w := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "\nSENDER\tTYPE")
	for _, n := range cfg.SenderNames() {
		fmt.Fprintf(w, "%s\t%s\n", n, cfg.Senders[n].Type)
	}
	if err := w.Flush(); err != nil {
		return err
	}
	types := cfg.EventTypes()
	if *connect {
		st, err := checkDatabase(ctx, cfg, e, log, *timeout)
		if err != nil {
			return err
		}
		defer st.Close()
		if types, err = withDatabaseTypes(ctx, cfg, st, types); err != nil {
			return err
		}
	}
	dests := printEventTypes(w, cfg, types)
	missing, err := printDestinations(ctx, w, cfg, e, log, dests, *connect, *timeout)
	if err != nil {
		return err
	}
	if missing > 0 {
		return fmt.Errorf("%d destination(s) missing or not reachable; create them (docs/quickstart.md) or set provision: true on the sender", missing)
	}
	if *connect {
		fmt.Fprintln(e.stdout, "\nall checks passed")
	}
	return nil
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
	sc := ds.cfg.Senders[sn]
	if sc == nil || s.Route == nil {
		return "(no sender)"
	}
	r := *s.Route
	if !template {
		r = r.Expand(t)
	}
	if sc.Webhook != nil && r.URL == "" {
		r.URL = sc.Webhook.URL
	}
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
// destinations they name.
func printEventTypes(w io.Writer, cfg *config.Config, types []string) []*destination {
	ds := &destinations{cfg: cfg}
	fmt.Fprintln(w, "\nEVENT TYPE\tSENDER\tDESTINATION\tCLAIM\tBATCH\tMAX ATTEMPTS\tLEASE\tORDERING\tRETENTION")
	row := func(t string, s relay.EventSettings, template bool) {
		dest := ds.add(t, s, template)
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%d\t%d\t%s\t%s\t%s\n", t, deref(s.Sender), dest, deref(s.Claim), deref(s.BatchSize),
			deref(s.MaxAttempts), deref(s.LeaseDuration), deref(s.Ordering), deref(s.Retention))
	}
	for _, t := range types {
		row(t, cfg.Effective(t), false)
	}
	row("(other types)", cfg.Effective(""), true)
	return ds.list
}

// printDestinations prints each destination and, with connect, whether it
// exists; it returns how many are missing or unreachable.
func printDestinations(ctx context.Context, w *tabwriter.Writer, cfg *config.Config, e *env, log *slog.Logger,
	dests []*destination, connect bool, timeout time.Duration) (int, error) {
	fmt.Fprintln(w, "\nDESTINATION\tSENDER\tEVENT TYPES\tSTATUS")
	missing := 0
	// One connection per sender, for all its destinations.
	opened := map[string]sender.Sender{}
	defer func() {
		for _, s := range opened {
			_ = s.Close(context.WithoutCancel(ctx))
		}
	}()
	for _, d := range dests {
		status := "not checked (use --connect)"
		switch {
		case d.template:
			status = "per event type: a template, checked for the types listed or found in the database"
		case connect:
			var err error
			status, err = checkDestination(ctx, cfg, e, log, d, timeout, opened)
			if err != nil {
				missing++
			}
		}
		fmt.Fprintf(w, "%s %s\t%s\t%s\t%s\n", d.kind, d.name, d.sender, strings.Join(d.types, ", "), status)
	}
	return missing, w.Flush()
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
func checkDatabase(ctx context.Context, cfg *config.Config, e *env, log *slog.Logger, timeout time.Duration) (*config.Store, error) {
	st, err := cfg.OpenStore(ctx, e.getenv, log)
	if err != nil {
		return nil, err
	}
	pctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := st.Ping(pctx); err != nil {
		st.Close()
		return nil, fmt.Errorf("database %s: %w", cfg.Database.Dialect, err)
	}
	fmt.Fprintf(e.stdout, "database %s: connected\n", cfg.Database.Dialect)
	return st, nil
}

// checkDestination opens d's sender (without provisioning; once, kept
// in opened) and asks it
// whether the destination exists. Senders that cannot tell (Redis
// creates streams on the first entry; a webhook URL is checked on the
// first request) only have their connection checked where they have one.
func checkDestination(ctx context.Context, cfg *config.Config, e *env, log *slog.Logger, d *destination, timeout time.Duration, opened map[string]sender.Sender) (string, error) {
	s := opened[d.sender]
	if s == nil {
		var err error
		if s, err = cfg.OpenSender(d.sender, e.getenv, log); err != nil {
			return "ERROR: " + err.Error(), err
		}
		opened[d.sender] = s
	}
	c, ok := s.(sender.Checker)
	if !ok {
		return "not checked (this sender type cannot tell before the first event)", nil
	}
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	err := config.Scrub(c.CheckRoute(cctx, d.route), e.secrets)
	switch {
	case err == nil:
		return "ok: exists", nil
	case errors.Is(err, sender.ErrNoDestination):
		return "MISSING: " + err.Error(), err
	}
	return "ERROR: " + err.Error(), err
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}

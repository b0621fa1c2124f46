package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/config"
	"github.com/txbox/txbox/store"
)

const redriveUsage = `redrive --type T [--key K] [--since D | --processed-after T --processed-before T] [--id ID ...] [--dry-run] [--rate N] [--yes] [--json]

Send the kept events of one type again: the rows a type with a retention
keeps PROCESSED until cleanup go back to PENDING with the same ids
(attempts 0, due now), and the relay delivers them again. Receivers with
an inbox drop the ones they already have. The type must have a retention
in the configuration (docs/operations.md, "Redrive from kept events").

  --type T               the event type (required)
  --key K                only the events of this key
  --since D              only events delivered within this duration
  --processed-after T    only events delivered at or after this time (RFC 3339)
  --processed-before T   only events delivered before this time (RFC 3339);
                         defaults to when the command started, so events
                         delivered while it runs are not taken again
  --id ID                only this event (repeatable)
  --dry-run              count and list the events, change nothing
  --rate N               at most about N events per second
  --yes                  confirm a redrive of every kept event of the type
                         (no --key, time bound or --id)
  --json                 print the result as JSON

Progress (matched and changed so far) goes to stderr after each page of
500 events. On PostgreSQL a NOTIFY wakes the relays at once; on MySQL and
SQLite the relay takes the events at its next poll.`

// redriveArgs is a parsed redrive command line.
type redriveArgs struct {
	cf                   configFlags
	params               store.OutboxRedriveParams
	rate                 float64
	dryRun, yes, asJSON  bool
	narrowed, boundGiven bool
}

func parseRedrive(e *env, args []string) (*redriveArgs, error) {
	a := &redriveArgs{}
	fs := newFlagSet(e, "redrive", redriveUsage)
	a.cf.register(fs, e)
	a.cf.registerTenant(fs, false)
	var (
		typ    = fs.String("type", "", "the event `type` (required)")
		key    = fs.String("key", "", "only this event `key`")
		since  = fs.Duration("since", 0, "only events delivered within this `duration`")
		after  = fs.String("processed-after", "", "only events delivered at or after this `time` (RFC 3339)")
		before = fs.String("processed-before", "", "only events delivered before this `time` (RFC 3339); default: now")
		ids    multiFlag
	)
	fs.Var(&ids, "id", "only this event `id` (repeatable)")
	fs.BoolVar(&a.dryRun, "dry-run", false, "count and list the events, change nothing")
	fs.Float64Var(&a.rate, "rate", 0, "at most about `N` events per second (0: no throttle)")
	fs.BoolVar(&a.yes, "yes", false, "confirm a redrive of every kept event of the type")
	fs.BoolVar(&a.asJSON, "json", false, "print the result as JSON")
	if err := parse(fs, args); err != nil {
		return nil, err
	}
	switch {
	case *typ == "":
		return nil, usagef("--type is required")
	case txbox.ValidateEventType(*typ) != nil:
		return nil, usagef("--type %q is not a valid event type", *typ)
	case *since < 0:
		return nil, usagef("--since must be ≥ 0")
	case math.IsNaN(a.rate) || math.IsInf(a.rate, 0) || a.rate < 0:
		return nil, usagef("--rate must be ≥ 0")
	case len(ids) > store.MaxFilterIDs:
		return nil, usagef("at most %d --id", store.MaxFilterIDs)
	}
	a.params = store.OutboxRedriveParams{EventType: *typ, Key: *key, DryRun: a.dryRun}
	// The dead-letter time flags' rules: RFC 3339, checked in UTC, after
	// before before. They fill a DeadLetterFilter, whose failed_at bounds
	// become the processed_at bounds here.
	var f store.DeadLetterFilter
	if *since > 0 && *after != "" {
		return nil, usagef("give --since or --processed-after, not both")
	}
	if err := parseFailedTimes(&f, *since, *after, *before); err != nil {
		return nil, usagef("%s", redriveFlagNames(err.Error()))
	}
	a.params.ProcessedAfter, a.params.ProcessedBefore = f.FailedAfter, f.FailedBefore
	a.boundGiven = !f.FailedAfter.IsZero() || !f.FailedBefore.IsZero()
	for _, s := range ids {
		id, err := txbox.ParseID(s)
		if err != nil {
			return nil, usagef("--id %q: %v", s, err)
		}
		a.params.IDs = append(a.params.IDs, id)
	}
	a.narrowed = *key != "" || a.boundGiven || len(ids) > 0
	if !a.narrowed && !a.dryRun && !a.yes {
		return nil, usagef("redrive without --key, a time bound or --id sends every kept event of %s again: narrow it, --dry-run to see them, or --yes", *typ)
	}
	return a, nil
}

// redriveFlagNames rewrites parseFailedTimes's messages for redrive's
// flag names.
func redriveFlagNames(s string) string {
	return strings.NewReplacer("--failed-after", "--processed-after", "--failed-before", "--processed-before").Replace(s)
}

// typeRetention returns what admin.Config.Retention asks of the
// configuration: a type's effective retention, and whether the
// configuration knows the type: it is listed under events, or the
// defaults keep delivered rows, so every type the relay delivers does.
func typeRetention(cfg *config.Config) func(string) (time.Duration, bool) {
	return func(t string) (time.Duration, bool) {
		_, listed := cfg.Events[t]
		ret := deref(cfg.Effective(t).Retention)
		return ret, listed || deref(cfg.Defaults.Retention) > 0
	}
}

// redriveResult is what redrive prints with --json.
type redriveResult struct {
	Action          string     `json:"action"`
	Type            string     `json:"type"`
	DryRun          bool       `json:"dry_run"`
	Matched         int        `json:"matched"`
	Changed         int        `json:"changed"`
	Pages           int        `json:"pages"`
	ProcessedAfter  *time.Time `json:"processed_after,omitempty"`
	ProcessedBefore *time.Time `json:"processed_before,omitempty"`
	// LastID is the id of the last event matched: the redrive went up to
	// it in id order.
	LastID string `json:"last_id,omitempty"`
	// IDs are the first 100 matched ids, in the order they go out again.
	IDs []string `json:"ids"`
}

// redriveSampleIDs is how many ids the result lists.
const redriveSampleIDs = 100

func runRedrive(ctx context.Context, e *env, args []string) error {
	a, err := parseRedrive(e, args)
	if err != nil {
		return err
	}
	cfg, st, err := a.cf.openStoreConfig(ctx, e)
	if err != nil {
		return err
	}
	defer st.Close()
	if len(cfg.Events) == 0 && cfg.Defaults.Retention == nil {
		// Only a database named (--dsn): no way to check the type.
		fmt.Fprintf(e.stderr, "txbox redrive: the configuration names no event types; redriving whatever rows of %s were kept\n", a.params.EventType)
	} else if ret, known := typeRetention(cfg)(a.params.EventType); !known {
		return usagef("event type %s is not in the configuration (events.%s), and the defaults keep no delivered rows", a.params.EventType, a.params.EventType)
	} else if ret <= 0 {
		return usagef("event type %s has retention 0: its rows are deleted when delivered, nothing is kept to send again (set events.%s.retention)", a.params.EventType, a.params.EventType)
	}
	rd, ok := st.Driver.(store.OutboxRedriver)
	if !ok {
		return fmt.Errorf("the %s store cannot redrive", st.Dialect())
	}
	if a.params.ProcessedBefore.IsZero() {
		// Events delivered from now on, this run's own among them, are
		// not taken again.
		a.params.ProcessedBefore = time.Now().UTC()
	}
	res := redriveResult{Action: "redrive", Type: a.params.EventType, DryRun: a.dryRun, IDs: []string{}}
	if t := a.params.ProcessedAfter; !t.IsZero() {
		res.ProcessedAfter = &t
	}
	t := a.params.ProcessedBefore
	res.ProcessedBefore = &t
	err = a.walk(ctx, e, rd, &res)
	appendCLIAudit(ctx, e, st, "txbox redrive", &store.AuditEntry{
		Who: cliWho(e), Action: "redrive", Selector: store.AuditSelectorFilter, Filter: store.AuditRedriveJSON(&a.params),
		DryRun: a.dryRun, Matched: int64(res.Matched), Changed: int64(res.Changed),
	}, err)
	if err != nil {
		return fmt.Errorf("%d matched, %d changed before: %w", res.Matched, res.Changed, err)
	}
	return a.report(e, &res)
}

// walk redrives page after page until a page is short, printing progress
// to stderr and sleeping between pages to keep to --rate.
func (a *redriveArgs) walk(ctx context.Context, e *env, rd store.OutboxRedriver, res *redriveResult) error {
	p := a.params
	p.Limit = store.RatePage(a.rate, store.RedrivePageSize)
	start := time.Now()
	for {
		page, err := rd.OutboxRedrive(ctx, &p)
		if err != nil {
			return err
		}
		res.Pages++
		res.Matched += page.Matched
		res.Changed += page.Changed
		for _, id := range page.Sample {
			if len(res.IDs) < redriveSampleIDs {
				res.IDs = append(res.IDs, id.String())
			}
		}
		if page.Matched > 0 {
			p.After = page.Last
			res.LastID = page.Last.String()
		}
		verb := "changed"
		if a.dryRun {
			verb = "would change"
		}
		fmt.Fprintf(e.stderr, "txbox redrive: page %d: %d matched, %d %s so far\n", res.Pages, res.Matched,
			map[bool]int{true: res.Matched, false: res.Changed}[a.dryRun], verb)
		if page.Matched < p.Limit {
			return nil
		}
		if !a.dryRun {
			if err := store.Pace(ctx, a.rate, start, res.Matched, time.Time{}); err != nil {
				return err
			}
		}
	}
}

func (a *redriveArgs) report(e *env, res *redriveResult) error {
	if a.asJSON {
		return json.NewEncoder(e.stdout).Encode(res)
	}
	if a.dryRun {
		fmt.Fprintf(e.stdout, "dry run: would send %d kept events of %s again\n", res.Matched, res.Type)
		for _, id := range res.IDs {
			fmt.Fprintln(e.stdout, id)
		}
		if res.Matched > len(res.IDs) {
			fmt.Fprintf(e.stdout, "… and %d more\n", res.Matched-len(res.IDs))
		}
		return nil
	}
	fmt.Fprintf(e.stdout, "redriven %d of %d kept events of %s\n", res.Changed, res.Matched, res.Type)
	return nil
}

package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/config"
	"github.com/txbox/txbox/store"
)

const dlqUsage = `dlq <list|groups|show|parked|retry|resolve|delete|audit> [flags] [ID...]

  list                 list dead letters, newest failure first
  groups               list the failure groups, largest first: dead letters
                       that failed at the same destination, for the same
                       reason (docs/operations.md, "Failure groups")
  show ID              print one dead letter with its headers and payload
                       (payloads over 4 KiB are cut short unless --full)
  parked               list the keys of ordered types that dead letters hold
                       back, with the dead letter holding each
  retry ID...          move dead letters back to the outbox (same id, attempts 0, due now)
  resolve ID...        mark dead letters resolved (kept until cleanup.dead-letter-ttl)
  delete ID...         delete dead letters now
  audit                list the audit trail, newest first: who retried, resolved
                       or deleted what (--limit, --action, --json)

Filters (list, and retry/resolve/delete with --all): --type, --key,
--route (one route of a fanned-out type), --status, --error-contains,
--since, --failed-after, --failed-before, --group (a fingerprint that
groups prints); parked takes --type and --key; groups takes --status and
--limit.
retry, resolve and delete take ids or --all with filters, and --dry-run to
print what would change; --all with no filter also needs --yes; --rate N
acts on N dead letters per second at most, printing its progress. Each
retry, resolve and delete, dry runs included, writes an entry to the audit
trail as cli:<OS user> (kept for cleanup.audit-ttl). --json prints JSON
instead of a table.`

// dlqPreview is how much of a payload `dlq show` prints without --full.
const dlqPreview = 4 << 10

// dlqMaxBulk bounds one bulk retry/resolve/delete, so a mistyped filter
// cannot rewrite a whole table in one go; it bounds the ids a run reports
// too.
const dlqMaxBulk = 100_000

func runDLQ(ctx context.Context, e *env, args []string) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" {
		fmt.Fprintf(e.stderr, "Usage: txbox %s\n", dlqUsage)
		if len(args) == 0 {
			return usagef("a dlq subcommand is required")
		}
		return nil
	}
	if args[0] == "audit" {
		return runDLQAudit(ctx, e, args[1:])
	}
	a, err := parseDLQ(e, args[0], args[1:])
	if err != nil {
		return err
	}
	cfg, st, err := a.cf.openStoreConfig(ctx, e)
	if err != nil {
		return err
	}
	defer st.Close()

	switch a.sub {
	case "list":
		dls, err := st.DeadLetterList(ctx, &store.DeadLetterListParams{Filter: a.filter, Limit: a.limit})
		if err != nil {
			return err
		}
		return printDeadLetters(e, dls, a.asJSON)
	case "show":
		dl, err := st.DeadLetterGet(ctx, a.ids[0])
		if err != nil {
			return err
		}
		return printDeadLetter(e, dl, a.asJSON, a.full)
	case "parked":
		return a.parked(ctx, e, cfg, st)
	case "groups":
		return a.groups(ctx, e, cfg, st)
	}
	err = a.change(ctx, e, st)
	a.auditChange(ctx, e, st, err)
	return err
}

// dlqArgs is a parsed dlq command line.
type dlqArgs struct {
	sub    string
	cf     configFlags
	filter store.DeadLetterFilter
	ids    []txbox.ID
	limit  int
	// full is for show; all, dryRun and yes for the changes.
	asJSON, full, all, dryRun, yes bool
	// filtered is set when a filter narrows the default (every
	// unresolved dead letter).
	filtered bool
	// rate throttles a change to this many dead letters per second; 0
	// does not.
	rate float64
	// total is how many dead letters --all matched when it started: the
	// denominator of the progress --rate prints.
	total int64
	// matched and changed are what change did, for its audit entry.
	matched, changed int
}

// parseDLQ parses the flags and ids of dlq sub and checks they fit
// together.
func parseDLQ(e *env, sub string, args []string) (*dlqArgs, error) {
	switch sub {
	case "list", "groups", "show", "parked", "retry", "resolve", "delete":
	default:
		return nil, usagef("unknown dlq subcommand %q (list, groups, show, parked, retry, resolve, delete, audit)", sub)
	}
	a := &dlqArgs{sub: sub}
	fs := newFlagSet(e, "dlq "+sub, dlqUsage)
	a.cf.register(fs, e)
	a.cf.registerTenant(fs, false)
	ff := registerDLQFilter(fs)
	mutating := sub == "retry" || sub == "resolve" || sub == "delete"
	fs.IntVar(&a.limit, "limit", 50, "list, parked: at most this many")
	fs.BoolVar(&a.asJSON, "json", false, "print JSON instead of a table")
	fs.BoolVar(&a.full, "full", false, "show: print the whole payload, however large")
	fs.BoolVar(&a.all, "all", false, "retry/resolve/delete: every dead letter matching the filters instead of ids")
	fs.BoolVar(&a.dryRun, "dry-run", false, "retry/resolve/delete: print what would change, change nothing")
	fs.BoolVar(&a.yes, "yes", false, "retry/resolve/delete: confirm --all without any filter")
	fs.Float64Var(&a.rate, "rate", 0, "retry/resolve/delete: at most this many dead letters per `second` (0: no limit)")
	positional, err := parseInterspersed(fs, args)
	if err != nil {
		return nil, err
	}
	if a.rate < 0 || a.rate != a.rate {
		return nil, usagef("--rate must be ≥ 0")
	}
	if a.limit < 1 {
		return nil, usagef("--since must be ≥ 0 and --limit ≥ 1")
	}
	if a.filter, err = ff.build(); err != nil {
		return nil, err
	}
	a.filtered = ff.filtered(&a.filter)
	for _, p := range positional {
		id, err := txbox.ParseID(p)
		if err != nil {
			return nil, &usageError{err.Error()}
		}
		a.ids = append(a.ids, id)
	}
	switch {
	case sub == "list" && len(a.ids) > 0:
		return nil, usagef("list takes no ids")
	case sub == "show" && len(a.ids) != 1:
		return nil, usagef("show takes exactly one id")
	case sub == "parked" && len(a.ids) > 0:
		return nil, usagef("parked takes no ids")
	case sub == "groups" && (len(a.ids) > 0 || a.filtered && *ff.status != "resolved"):
		return nil, usagef("groups takes --status and --limit only")
	case sub == "parked" && (*ff.errText != "" || *ff.route != "" || *ff.status != "unresolved" || !a.filter.FailedAfter.IsZero() || !a.filter.FailedBefore.IsZero()):
		return nil, usagef("parked takes --type and --key only: a key is parked by every unresolved dead letter it has")
	case mutating && a.all == (len(a.ids) > 0):
		return nil, usagef("give ids or --all (with filters), not both and not neither")
	case mutating && a.all && !a.filtered && !a.dryRun && !a.yes:
		return nil, usagef("%s --all without a filter changes every unresolved dead letter: add filters, --dry-run to see them, or --yes", sub)
	}
	return a, nil
}

// dlqFilterFlags are the filter flags of dlq list, parked, groups and the
// changes with --all.
type dlqFilterFlags struct {
	typ, status, key, route, errText, after, before, group *string
	since                                                  *time.Duration
}

// registerDLQFilter registers the filter flags on fs.
func registerDLQFilter(fs *flag.FlagSet) *dlqFilterFlags {
	return &dlqFilterFlags{
		typ:     fs.String("type", "", "only this event `type`"),
		status:  fs.String("status", "unresolved", "unresolved, resolved or all"),
		key:     fs.String("key", "", "only this event `key`"),
		route:   fs.String("route", "", "only the dead letters of this fan-out route (its `name`); none: every route"),
		errText: fs.String("error-contains", "", "only dead letters whose last error contains `text`"),
		since:   fs.Duration("since", 0, "only dead letters that failed within this `duration`"),
		after:   fs.String("failed-after", "", "only dead letters that failed at or after this `time` (RFC 3339)"),
		before:  fs.String("failed-before", "", "only dead letters that failed before this `time` (RFC 3339)"),
		group:   fs.String("group", "", "only the dead letters of this failure group (a `fingerprint` from dlq groups)"),
	}
}

// build checks the filter flags and returns the filter they give.
func (ff *dlqFilterFlags) build() (store.DeadLetterFilter, error) {
	f := store.DeadLetterFilter{EventType: *ff.typ, Key: *ff.key, Route: *ff.route, ErrorContains: *ff.errText, Group: *ff.group}
	if *ff.group != "" && !store.ValidFingerprintKey(*ff.group) {
		return f, usagef("--group must be a fingerprint as dlq groups prints it (16 lower-case hex digits), not %q", *ff.group)
	}
	if *ff.route != "" && !store.ValidRouteName(*ff.route) {
		return f, usagef("--route must be a route name (1 to 64 of A-Z a-z 0-9 . _ -), not %q", *ff.route)
	}
	switch *ff.status {
	case "unresolved":
		f.Status = store.DeadLetterUnresolved
	case "resolved":
		f.Status = store.DeadLetterResolved
	case "all":
	default:
		return f, usagef("--status must be unresolved, resolved or all, not %q", *ff.status)
	}
	if *ff.since < 0 {
		return f, usagef("--since must be ≥ 0 and --limit ≥ 1")
	}
	return f, parseFailedTimes(&f, *ff.since, *ff.after, *ff.before)
}

// filtered reports whether the flags narrow the default filter (every
// unresolved dead letter) that f, their build, is.
func (ff *dlqFilterFlags) filtered(f *store.DeadLetterFilter) bool {
	return *ff.typ != "" || *ff.key != "" || *ff.route != "" || *ff.errText != "" || *ff.group != "" ||
		*ff.status == "resolved" || !f.FailedAfter.IsZero() || !f.FailedBefore.IsZero()
}

// parseFailedTimes sets f's failure-time bounds from --since,
// --failed-after and --failed-before.
func parseFailedTimes(f *store.DeadLetterFilter, since time.Duration, after, before string) error {
	if since > 0 {
		f.FailedAfter = time.Now().Add(-since)
	}
	for _, tf := range []struct {
		flag, v string
		dst     *time.Time
	}{{"--failed-after", after, &f.FailedAfter}, {"--failed-before", before, &f.FailedBefore}} {
		if tf.v == "" {
			continue
		}
		if tf.flag == "--failed-after" && since > 0 {
			return usagef("give --since or --failed-after, not both")
		}
		ts, err := time.Parse(time.RFC3339Nano, tf.v)
		if err != nil {
			return usagef("%s must be an RFC 3339 time such as 2026-01-02T15:04:05Z, not %q", tf.flag, tf.v)
		}
		// Checked in UTC, as the admin API does: 9999-12-31T23:59:59-14:00
		// is in year 10000, which not every dialect stores.
		if ts = ts.UTC(); store.CheckFilterTime(ts) != nil {
			return usagef("%s must be from %s to %s once in UTC, not %q", tf.flag,
				store.MinFilterTime.Format(time.RFC3339), store.MaxFilterTime.Format(time.RFC3339Nano), tf.v)
		}
		*tf.dst = ts
	}
	if !f.FailedAfter.IsZero() && !f.FailedBefore.IsZero() && !f.FailedAfter.Before(f.FailedBefore) {
		return usagef("--failed-after must be before --failed-before")
	}
	return nil
}

// parseInterspersed parses fs from args and returns the positional
// arguments, which flags may follow (txbox dlq show ID --json).
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, err
			}
			return nil, &usageError{err.Error()}
		}
		if fs.NArg() == 0 {
			return positional, nil
		}
		positional = append(positional, fs.Arg(0))
		args = fs.Args()[1:]
	}
}

// change runs retry, resolve or delete on the ids, or with --all on every
// dead letter matching the filters; --dry-run only prints them. --all
// walks the dead letters like the admin API (store.DeadLetterWalk): ids,
// failure times and statuses, 500 at a time, each page acted on before
// the next is read, never a payload.
func (a *dlqArgs) change(ctx context.Context, e *env, st *config.Store) error {
	apply := map[string]func(context.Context, []txbox.ID) (int, error){
		"retry": st.DeadLetterRetry, "resolve": st.DeadLetterResolve, "delete": st.DeadLetterDelete,
	}[a.sub]
	var ids []txbox.ID
	changed := 0
	defer func() { a.matched, a.changed = len(ids), changed }()
	act := func(page []txbox.ID) error {
		ids = append(ids, page...)
		if a.dryRun {
			return nil
		}
		k, err := apply(ctx, page)
		changed += k
		if err != nil {
			return fmt.Errorf("%s: %d of %d done: %w", a.sub, changed, len(ids), err)
		}
		if a.rate > 0 {
			fmt.Fprintf(e.stderr, "txbox dlq %s: %d of %d done\n", a.sub, changed, a.total)
		}
		return nil
	}
	if !a.all {
		for start := 0; start < len(a.ids); start += store.DeadLetterPageSize {
			if err := act(a.ids[start:min(start+store.DeadLetterPageSize, len(a.ids))]); err != nil {
				return err
			}
		}
		return a.report(e, ids, changed)
	}
	n, err := st.DeadLetterCount(ctx, &a.filter)
	if err != nil {
		return err
	}
	if n > dlqMaxBulk {
		return usagef("%d dead letters match, more than %d; narrow the filters", n, dlqMaxBulk)
	}
	a.total = n
	next, err := store.DeadLetterWalk(ctx, st, &store.DeadLetterWalkParams{Filter: a.filter, Limit: dlqMaxBulk, Rate: a.walkRate()},
		func(page []store.DeadLetterEntry) error {
			pageIDs := make([]txbox.ID, len(page))
			for i, en := range page {
				pageIDs[i] = en.ID
			}
			return act(pageIDs)
		})
	if err != nil {
		return err
	}
	if next != nil {
		fmt.Fprintf(e.stderr, "txbox dlq %s: more dead letters arrived than one run takes (%d); run it again\n", a.sub, dlqMaxBulk)
	}
	return a.report(e, ids, changed)
}

// walkRate is the pace of a change's walk: --rate, except for a dry run,
// which changes nothing.
func (a *dlqArgs) walkRate() float64 {
	if a.dryRun {
		return 0
	}
	return a.rate
}

// report prints what a change did (changed of ids), or with --dry-run
// would do.
func (a *dlqArgs) report(e *env, ids []txbox.ID, changed int) error {
	if a.asJSON {
		out := struct {
			Action  string   `json:"action"`
			DryRun  bool     `json:"dry_run"`
			Matched int      `json:"matched"`
			Changed int      `json:"changed"`
			IDs     []string `json:"ids"`
		}{Action: a.sub, DryRun: a.dryRun, Matched: len(ids), Changed: changed, IDs: make([]string, 0, len(ids))}
		for _, id := range ids {
			out.IDs = append(out.IDs, id.String())
		}
		return json.NewEncoder(e.stdout).Encode(out)
	}
	if a.dryRun {
		fmt.Fprintf(e.stdout, "dry run: would %s %d dead letters\n", a.sub, len(ids))
		for _, id := range ids {
			fmt.Fprintln(e.stdout, id)
		}
		return nil
	}
	past := map[string]string{"retry": "retried", "resolve": "resolved", "delete": "deleted"}[a.sub]
	fmt.Fprintf(e.stdout, "%s %d of %d dead letters\n", past, changed, len(ids))
	return nil
}

// parkedKey is a key of an ordered type that dead letters hold back: the
// relay delivers none of its later rows until they are all retried,
// resolved or deleted (docs/concepts.md, "Ordering").
type parkedKey struct {
	EventType string `json:"event_type"`
	Key       string `json:"key"`
	// DeadLetters counts the unresolved dead letters of the key, Waiting
	// the outbox rows of the key that wait behind them.
	DeadLetters int64 `json:"dead_letters"`
	Waiting     int64 `json:"waiting"`
	// Holding is the oldest dead letter, the first to deal with.
	Holding   string    `json:"holding_id"`
	FailedAt  time.Time `json:"failed_at"`
	LastError string    `json:"last_error"`
}

// parked lists the parked keys: keys with unresolved dead letters, of
// types whose effective ordering is key.
func (a *dlqArgs) parked(ctx context.Context, e *env, cfg *config.Config, st *config.Store) error {
	in, ok := st.Driver.(store.Inspector)
	if !ok {
		return fmt.Errorf("the %s store cannot list parked keys", st.Dialect())
	}
	keys, err := in.DeadLetterParkedKeys(ctx, &store.ParkedKeysParams{EventType: a.filter.EventType, Limit: a.limit})
	if err != nil {
		return err
	}
	out := []parkedKey{}
	for _, k := range keys {
		if deref(cfg.Effective(k.EventType).Ordering) != txbox.OrderingKey || a.filter.Key != "" && k.Key != a.filter.Key {
			continue
		}
		out = append(out, parkedKey{EventType: k.EventType, Key: k.Key, DeadLetters: k.DeadLetters, Waiting: k.Waiting,
			Holding: k.DeadLetterID.String(), FailedAt: k.FailedAt, LastError: k.LastError})
	}
	if a.asJSON {
		return json.NewEncoder(e.stdout).Encode(out)
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TYPE\tKEY\tDEAD LETTERS\tWAITING\tHOLDING ID\tFAILED AT\tLAST ERROR")
	for _, p := range out {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t%s\t%s\n", p.EventType, p.Key, p.DeadLetters, p.Waiting, p.Holding,
			p.FailedAt.UTC().Format(time.RFC3339), oneLine(p.LastError, 80))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(keys) == a.limit {
		fmt.Fprintf(e.stderr, "txbox dlq parked: showing the first %d keys; --limit shows more\n", a.limit)
	}
	return nil
}

// oneLine flattens s to one line of at most n bytes (cut on a rune
// boundary), for table cells.
func oneLine(s string, n int) string {
	s = strings.ReplaceAll(s, "\n", " ")
	if len(s) > n {
		s = strings.ToValidUTF8(s[:n], "") + "…"
	}
	return s
}

type dlqJSON struct {
	ID        string `json:"id"`
	EventType string `json:"event_type"`
	Key       string `json:"key,omitempty"`
	// Route and EventID are a fan-out route's (admin's DeadLetter):
	// absent for a type with one route.
	Route     string            `json:"route,omitempty"`
	EventID   string            `json:"event_id,omitempty"`
	Status    string            `json:"status"`
	Attempts  int               `json:"attempts"`
	LastError string            `json:"last_error"`
	CreatedAt time.Time         `json:"created_at"`
	FailedAt  time.Time         `json:"failed_at"`
	Headers   map[string]string `json:"headers,omitempty"`
	// PayloadSize is the whole payload's size in bytes; show only.
	PayloadSize *int    `json:"payload_size,omitempty"`
	Payload     *string `json:"payload,omitempty"`
	// PayloadBase64 is set instead of Payload when it is not UTF-8.
	PayloadBase64 *string `json:"payload_base64,omitempty"`
	// PayloadTruncated is true when Payload holds only the first
	// dlqPreview bytes (show without --full).
	PayloadTruncated bool `json:"payload_truncated,omitempty"`
}

func toJSON(dl *store.DeadLetter, withBody, full bool) dlqJSON {
	j := dlqJSON{ID: dl.ID.String(), EventType: dl.EventType, Key: dl.Key, Status: dl.Status, Attempts: dl.Attempts,
		LastError: dl.LastError, CreatedAt: dl.CreatedAt, FailedAt: dl.FailedAt, Route: dl.Route}
	if dl.EventID != (txbox.ID{}) {
		j.EventID = dl.EventID.String()
	}
	if withBody {
		j.Headers = dl.Headers
		size := len(dl.Payload)
		j.PayloadSize = &size
		body := dl.Payload
		if !full && len(body) > dlqPreview {
			body, j.PayloadTruncated = body[:dlqPreview], true
		}
		if utf8.Valid(dl.Payload) {
			s := strings.ToValidUTF8(string(body), "")
			j.Payload = &s
		} else {
			s := base64.StdEncoding.EncodeToString(body)
			j.PayloadBase64 = &s
		}
	}
	return j
}

func printDeadLetters(e *env, dls []*store.DeadLetter, asJSON bool) error {
	if asJSON {
		out := make([]dlqJSON, 0, len(dls))
		for _, dl := range dls {
			out = append(out, toJSON(dl, false, false))
		}
		return json.NewEncoder(e.stdout).Encode(out)
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	// A ROUTE column when a dead letter of the page is a fan-out
	// route's.
	routed := slices.ContainsFunc(dls, func(dl *store.DeadLetter) bool { return dl.Route != "" })
	if routed {
		fmt.Fprintln(tw, "ID\tTYPE\tROUTE\tKEY\tATTEMPTS\tFAILED AT\tSTATUS\tLAST ERROR")
	} else {
		fmt.Fprintln(tw, "ID\tTYPE\tKEY\tATTEMPTS\tFAILED AT\tSTATUS\tLAST ERROR")
	}
	for _, dl := range dls {
		typ := dl.EventType
		if routed {
			typ += "\t" + dl.Route
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%s\n", dl.ID, typ, dl.Key, dl.Attempts, dl.FailedAt.UTC().Format(time.RFC3339), dl.Status, oneLine(dl.LastError, 80))
	}
	return tw.Flush()
}

func printDeadLetter(e *env, dl *store.DeadLetter, asJSON, full bool) error {
	j := toJSON(dl, true, full)
	if asJSON {
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(j)
	}
	fmt.Fprintf(e.stdout, "id:         %s\ntype:       %s\nkey:        %s\nstatus:     %s\nattempts:   %d\ncreated at: %s\nfailed at:  %s\nlast error: %s\n",
		j.ID, j.EventType, j.Key, j.Status, j.Attempts, j.CreatedAt.UTC().Format(time.RFC3339Nano), j.FailedAt.UTC().Format(time.RFC3339Nano), j.LastError)
	if j.Route != "" {
		fmt.Fprintf(e.stdout, "route:      %s\n", j.Route)
	}
	if j.EventID != "" {
		fmt.Fprintf(e.stdout, "event id:   %s\n", j.EventID)
	}
	fmt.Fprintln(e.stdout, "headers:")
	for _, k := range sortedKeys(dl.Headers) {
		fmt.Fprintf(e.stdout, "  %s: %s\n", k, dl.Headers[k])
	}
	body, enc := "", ""
	if j.Payload != nil {
		body = *j.Payload
	} else {
		body, enc = *j.PayloadBase64, ", base64"
	}
	fmt.Fprintf(e.stdout, "payload (%d bytes%s):\n%s\n", len(dl.Payload), enc, body)
	if j.PayloadTruncated {
		fmt.Fprintf(e.stdout, "… %d more bytes not shown; --full shows the whole payload\n", len(dl.Payload)-dlqPreview)
	}
	return nil
}

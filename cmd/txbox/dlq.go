package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/config"
	"github.com/txbox/txbox/store"
)

const dlqUsage = `dlq <list|show|retry|resolve|delete> [flags] [ID...]

  list                 list dead letters, newest failure first
  show ID              print one dead letter with its payload and headers
  retry ID...          move dead letters back to the outbox (same id, attempts 0, due now)
  resolve ID...        mark dead letters resolved (kept until cleanup.dead-letter-ttl)
  delete ID...         delete dead letters now

retry, resolve and delete also take the list filters with --all instead of
ids, and --dry-run to print what would change.`

// dlqMaxBulk bounds one bulk retry/resolve/delete, so a mistyped filter
// cannot rewrite a whole table in one go.
const dlqMaxBulk = 100_000

func runDLQ(ctx context.Context, e *env, args []string) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" {
		fmt.Fprintf(e.stderr, "Usage: txbox %s\n", dlqUsage)
		if len(args) == 0 {
			return usagef("a dlq subcommand is required")
		}
		return nil
	}
	a, err := parseDLQ(e, args[0], args[1:])
	if err != nil {
		return err
	}
	st, err := a.cf.openStore(ctx, e)
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
		return printDeadLetter(e, dl, a.asJSON)
	}
	return a.change(ctx, e, st)
}

// dlqArgs is a parsed dlq command line.
type dlqArgs struct {
	sub    string
	cf     configFlags
	filter store.DeadLetterFilter
	ids    []txbox.ID
	limit  int
	// asJSON is for list and show; all and dryRun for the changes.
	asJSON, all, dryRun bool
}

// parseDLQ parses the flags and ids of dlq sub and checks they fit
// together.
func parseDLQ(e *env, sub string, args []string) (*dlqArgs, error) {
	switch sub {
	case "list", "show", "retry", "resolve", "delete":
	default:
		return nil, usagef("unknown dlq subcommand %q (list, show, retry, resolve, delete)", sub)
	}
	a := &dlqArgs{sub: sub}
	fs := newFlagSet(e, "dlq "+sub, dlqUsage)
	a.cf.register(fs, e)
	var (
		typ      = fs.String("type", "", "only this event `type`")
		status   = fs.String("status", "unresolved", "unresolved, resolved or all")
		key      = fs.String("key", "", "only this event `key`")
		errText  = fs.String("error-contains", "", "only dead letters whose last error contains `text`")
		since    = fs.Duration("since", 0, "only dead letters that failed within this `duration`")
		mutating = sub == "retry" || sub == "resolve" || sub == "delete"
	)
	fs.IntVar(&a.limit, "limit", 50, "list: at most this many")
	fs.BoolVar(&a.asJSON, "json", false, "list/show: print JSON")
	fs.BoolVar(&a.all, "all", false, "retry/resolve/delete: every dead letter matching the filters instead of ids")
	fs.BoolVar(&a.dryRun, "dry-run", false, "retry/resolve/delete: print what would change, change nothing")
	positional, err := parseInterspersed(fs, args)
	if err != nil {
		return nil, err
	}
	a.filter = store.DeadLetterFilter{EventType: *typ, Key: *key, ErrorContains: *errText}
	switch *status {
	case "unresolved":
		a.filter.Status = store.DeadLetterUnresolved
	case "resolved":
		a.filter.Status = store.DeadLetterResolved
	case "all":
	default:
		return nil, usagef("--status must be unresolved, resolved or all, not %q", *status)
	}
	if *since < 0 || a.limit < 1 {
		return nil, usagef("--since must be ≥ 0 and --limit ≥ 1")
	}
	if *since > 0 {
		a.filter.FailedAfter = time.Now().Add(-*since)
	}
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
	case mutating && a.all == (len(a.ids) > 0):
		return nil, usagef("give ids or --all (with filters), not both and not neither")
	}
	return a, nil
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
// dead letter matching the filters, in chunks of 1000; --dry-run only
// prints them.
func (a *dlqArgs) change(ctx context.Context, e *env, st *config.Store) error {
	ids := a.ids
	if a.all {
		var err error
		if ids, err = matchingIDs(ctx, st, a.filter); err != nil {
			return err
		}
	}
	if a.dryRun {
		fmt.Fprintf(e.stdout, "dry run: would %s %d dead letters\n", a.sub, len(ids))
		for _, id := range ids {
			fmt.Fprintln(e.stdout, id)
		}
		return nil
	}
	var n int
	for start := 0; start < len(ids); start += 1000 {
		chunk := ids[start:min(start+1000, len(ids))]
		var k int
		var err error
		switch a.sub {
		case "retry":
			k, err = st.DeadLetterRetry(ctx, chunk)
		case "resolve":
			k, err = st.DeadLetterResolve(ctx, chunk)
		case "delete":
			k, err = st.DeadLetterDelete(ctx, chunk)
		}
		n += k
		if err != nil {
			return fmt.Errorf("%s: %d of %d done: %w", a.sub, n, len(ids), err)
		}
	}
	past := map[string]string{"retry": "retried", "resolve": "resolved", "delete": "deleted"}[a.sub]
	fmt.Fprintf(e.stdout, "%s %d of %d dead letters\n", past, n, len(ids))
	return nil
}

// matchingIDs pages through the dead letters matching filter.
func matchingIDs(ctx context.Context, st *config.Store, filter store.DeadLetterFilter) ([]txbox.ID, error) {
	var ids []txbox.ID
	var after *store.DeadLetterCursor
	for {
		page, err := st.DeadLetterList(ctx, &store.DeadLetterListParams{Filter: filter, After: after, Limit: 1000})
		if err != nil {
			return nil, err
		}
		for _, dl := range page {
			ids = append(ids, dl.ID)
		}
		if len(ids) > dlqMaxBulk {
			return nil, usagef("more than %d dead letters match; narrow the filters", dlqMaxBulk)
		}
		if len(page) < 1000 {
			return ids, nil
		}
		last := page[len(page)-1]
		after = &store.DeadLetterCursor{FailedAt: last.FailedAt, ID: last.ID}
	}
}

type dlqJSON struct {
	ID        string            `json:"id"`
	EventType string            `json:"event_type"`
	Key       string            `json:"key,omitempty"`
	Status    string            `json:"status"`
	Attempts  int               `json:"attempts"`
	LastError string            `json:"last_error"`
	CreatedAt time.Time         `json:"created_at"`
	FailedAt  time.Time         `json:"failed_at"`
	Headers   map[string]string `json:"headers,omitempty"`
	Payload   *string           `json:"payload,omitempty"`
	// PayloadBase64 is set instead of Payload when it is not UTF-8.
	PayloadBase64 *string `json:"payload_base64,omitempty"`
}

func toJSON(dl *store.DeadLetter, withBody bool) dlqJSON {
	j := dlqJSON{ID: dl.ID.String(), EventType: dl.EventType, Key: dl.Key, Status: dl.Status, Attempts: dl.Attempts,
		LastError: dl.LastError, CreatedAt: dl.CreatedAt, FailedAt: dl.FailedAt}
	if withBody {
		j.Headers = dl.Headers
		if utf8.Valid(dl.Payload) {
			s := string(dl.Payload)
			j.Payload = &s
		} else {
			s := base64.StdEncoding.EncodeToString(dl.Payload)
			j.PayloadBase64 = &s
		}
	}
	return j
}

func printDeadLetters(e *env, dls []*store.DeadLetter, asJSON bool) error {
	if asJSON {
		out := make([]dlqJSON, 0, len(dls))
		for _, dl := range dls {
			out = append(out, toJSON(dl, false))
		}
		return json.NewEncoder(e.stdout).Encode(out)
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tTYPE\tKEY\tATTEMPTS\tFAILED AT\tSTATUS\tLAST ERROR")
	for _, dl := range dls {
		msg := strings.ReplaceAll(dl.LastError, "\n", " ")
		if len(msg) > 80 {
			msg = msg[:80] + "…"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%s\n", dl.ID, dl.EventType, dl.Key, dl.Attempts, dl.FailedAt.UTC().Format(time.RFC3339), dl.Status, msg)
	}
	return tw.Flush()
}

func printDeadLetter(e *env, dl *store.DeadLetter, asJSON bool) error {
	enc := json.NewEncoder(e.stdout)
	enc.SetIndent("", "  ")
	if asJSON {
		return enc.Encode(toJSON(dl, true))
	}
	j := toJSON(dl, true)
	fmt.Fprintf(e.stdout, "id:         %s\ntype:       %s\nkey:        %s\nstatus:     %s\nattempts:   %d\ncreated at: %s\nfailed at:  %s\nlast error: %s\nheaders:\n",
		j.ID, j.EventType, j.Key, j.Status, j.Attempts, j.CreatedAt.UTC().Format(time.RFC3339Nano), j.FailedAt.UTC().Format(time.RFC3339Nano), j.LastError)
	for _, k := range sortedKeys(dl.Headers) {
		fmt.Fprintf(e.stdout, "  %s: %s\n", k, dl.Headers[k])
	}
	if j.Payload != nil {
		fmt.Fprintf(e.stdout, "payload (%d bytes):\n%s\n", len(dl.Payload), *j.Payload)
	} else {
		fmt.Fprintf(e.stdout, "payload (%d bytes, base64):\n%s\n", len(dl.Payload), *j.PayloadBase64)
	}
	return nil
}

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
	sub, args := args[0], args[1:]
	switch sub {
	case "list", "show", "retry", "resolve", "delete":
	default:
		return usagef("unknown dlq subcommand %q (list, show, retry, resolve, delete)", sub)
	}
	fs := newFlagSet(e, "dlq "+sub, dlqUsage)
	var cf configFlags
	cf.register(fs, e)
	var (
		typ      = fs.String("type", "", "only this event `type`")
		status   = fs.String("status", "unresolved", "unresolved, resolved or all")
		key      = fs.String("key", "", "only this event `key`")
		errText  = fs.String("error-contains", "", "only dead letters whose last error contains `text`")
		since    = fs.Duration("since", 0, "only dead letters that failed within this `duration`")
		limit    = fs.Int("limit", 50, "list: at most this many")
		asJSON   = fs.Bool("json", false, "list/show: print JSON")
		all      = fs.Bool("all", false, "retry/resolve/delete: every dead letter matching the filters instead of ids")
		dryRun   = fs.Bool("dry-run", false, "retry/resolve/delete: print what would change, change nothing")
		mutating = sub == "retry" || sub == "resolve" || sub == "delete"
	)
	// Flags may follow the ids (txbox dlq show ID --json).
	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return err
			}
			return &usageError{err.Error()}
		}
		if fs.NArg() == 0 {
			break
		}
		positional = append(positional, fs.Arg(0))
		args = fs.Args()[1:]
	}
	filter := store.DeadLetterFilter{EventType: *typ, Key: *key, ErrorContains: *errText}
	switch *status {
	case "unresolved":
		filter.Status = store.DeadLetterUnresolved
	case "resolved":
		filter.Status = store.DeadLetterResolved
	case "all":
	default:
		return usagef("--status must be unresolved, resolved or all, not %q", *status)
	}
	if *since < 0 || *limit < 1 {
		return usagef("--since must be ≥ 0 and --limit ≥ 1")
	}
	if *since > 0 {
		filter.FailedAfter = time.Now().Add(-*since)
	}
	ids := make([]txbox.ID, 0, len(positional))
	for _, a := range positional {
		id, err := txbox.ParseID(a)
		if err != nil {
			return &usageError{err.Error()}
		}
		ids = append(ids, id)
	}
	switch {
	case sub == "list" && len(ids) > 0:
		return usagef("list takes no ids")
	case sub == "show" && len(ids) != 1:
		return usagef("show takes exactly one id")
	case mutating && *all == (len(ids) > 0):
		return usagef("give ids or --all (with filters), not both and not neither")
	}

	cfg, err := cf.load(e)
	if err != nil {
		return err
	}
	if err := cf.requireDatabase(cfg, e.getenv); err != nil {
		return err
	}
	st, err := cfg.OpenStore(ctx, e.getenv, cfg.NewLogger(e.stderr))
	if err != nil {
		return err
	}
	defer st.Close()

	switch sub {
	case "list":
		dls, err := st.DeadLetterList(ctx, &store.DeadLetterListParams{Filter: filter, Limit: *limit})
		if err != nil {
			return err
		}
		return printDeadLetters(e, dls, *asJSON)
	case "show":
		dl, err := st.DeadLetterGet(ctx, ids[0])
		if err != nil {
			return err
		}
		return printDeadLetter(e, dl, *asJSON)
	}
	if *all {
		if ids, err = matchingIDs(ctx, st, filter); err != nil {
			return err
		}
	}
	if *dryRun {
		fmt.Fprintf(e.stdout, "dry run: would %s %d dead letters\n", sub, len(ids))
		for _, id := range ids {
			fmt.Fprintln(e.stdout, id)
		}
		return nil
	}
	var n int
	for start := 0; start < len(ids); start += 1000 {
		chunk := ids[start:min(start+1000, len(ids))]
		var k int
		switch sub {
		case "retry":
			k, err = st.DeadLetterRetry(ctx, chunk)
		case "resolve":
			k, err = st.DeadLetterResolve(ctx, chunk)
		case "delete":
			k, err = st.DeadLetterDelete(ctx, chunk)
		}
		n += k
		if err != nil {
			return fmt.Errorf("%s: %d of %d done: %w", sub, n, len(ids), err)
		}
	}
	past := map[string]string{"retry": "retried", "resolve": "resolved", "delete": "deleted"}[sub]
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

package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/user"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/txbox/txbox/config"
	"github.com/txbox/txbox/store"
)

// dlqAuditTimeout bounds the write of a change's audit entry. It runs
// after the change, detached from the command's context: an interrupted
// change is recorded with what it did.
const dlqAuditTimeout = 5 * time.Second

// dlqAuditSampleIDs is how many ids an ids change's entry names, as the
// admin API's entries do.
const dlqAuditSampleIDs = 10

// cliWho names the operator of a dlq change in the audit trail: "cli:"
// and the OS user's name, $USER when the user database has none (a
// container's numeric user), "unknown" when neither does.
func cliWho(e *env) string {
	name := ""
	if u, err := user.Current(); err == nil {
		name = u.Username
	}
	if name == "" && e.getenv != nil {
		name = e.getenv("USER")
	}
	if name == "" {
		name = "unknown"
	}
	return "cli:" + name
}

// auditChange appends the audit entry of a retry, resolve or delete (or
// its dry run) that ran: how the dead letters were chosen, how many
// matched and changed, and changeErr when it stopped. A command line the
// checks refused before anything was read changed nothing and is not
// recorded. The change is done: an entry that cannot be written is a
// warning on stderr, never the command's failure.
func (a *dlqArgs) auditChange(ctx context.Context, e *env, st *config.Store, changeErr error) {
	var ue *usageError
	if errors.As(changeErr, &ue) {
		return
	}
	en := &store.AuditEntry{Who: cliWho(e), Action: a.sub, DryRun: a.dryRun, Matched: int64(a.matched), Changed: int64(a.changed)}
	switch {
	case !a.all:
		en.Selector = store.AuditSelectorIDs
		ids := make([]string, 0, dlqAuditSampleIDs)
		for _, id := range a.ids[:min(len(a.ids), dlqAuditSampleIDs)] {
			ids = append(ids, id.String())
		}
		b, _ := json.Marshal(struct {
			IDs     []string `json:"ids"`
			Matched int      `json:"matched"`
		}{ids, a.matched})
		en.Filter = string(b)
	case a.filtered:
		en.Selector, en.Filter = store.AuditSelectorOf(store.AuditSelectorFilter, &a.filter), store.AuditFilterJSON(&a.filter)
	default:
		en.Selector, en.Filter = store.AuditSelectorAll, store.AuditFilterJSON(&a.filter)
	}
	appendCLIAudit(ctx, e, st, "txbox dlq "+a.sub, en, changeErr)
}

// appendCLIAudit writes en, the entry of a CLI action that ran (its Err
// from actionErr), after the action and detached from ctx: an interrupted
// action is recorded with what it did. An entry that cannot be written is
// a warning on stderr, named by command, never the command's failure.
func appendCLIAudit(ctx context.Context, e *env, st *config.Store, command string, en *store.AuditEntry, actionErr error) {
	if actionErr != nil {
		en.Error = config.Scrub(actionErr, e.secrets).Error()
	}
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), dlqAuditTimeout)
	defer cancel()
	if err := st.AuditAppend(actx, en); err != nil {
		fmt.Fprintf(e.stderr, "%s: warning: the audit entry was not written: %s\n", command, config.Scrub(err, e.secrets))
	}
}

// dlqAuditArgs is a parsed `dlq audit` command line.
type dlqAuditArgs struct {
	cf     configFlags
	limit  int
	action string
	asJSON bool
}

// runDLQAudit lists the audit trail newest first: `txbox dlq audit
// [--limit N] [--action A] [--json]`.
func runDLQAudit(ctx context.Context, e *env, args []string) error {
	var a dlqAuditArgs
	fs := newFlagSet(e, "dlq audit", dlqUsage)
	a.cf.register(fs, e)
	a.cf.registerTenant(fs, false)
	fs.IntVar(&a.limit, "limit", 50, fmt.Sprintf("audit: at most this many entries, 1 to %d", store.MaxAuditPageSize))
	fs.StringVar(&a.action, "action", "", "audit: only entries of this `action` (retry, resolve, delete, ...)")
	fs.BoolVar(&a.asJSON, "json", false, "print JSON instead of a table")
	positional, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	switch {
	case len(positional) > 0:
		return usagef("audit takes no arguments")
	case a.limit < 1 || a.limit > store.MaxAuditPageSize:
		return usagef("--limit must be from 1 to %d", store.MaxAuditPageSize)
	case a.action != "" && !store.ValidAuditAction(a.action):
		return usagef("--action must be 1 to %d characters of a-z 0-9 . _ -, not %q", store.MaxAuditAction, a.action)
	}
	_, st, err := a.cf.openStoreConfig(ctx, e)
	if err != nil {
		return err
	}
	defer st.Close()
	entries, err := st.AuditList(ctx, &store.AuditListParams{Limit: a.limit, Action: a.action})
	if err != nil {
		return err
	}
	return printAudit(e, entries, a.asJSON)
}

// auditJSON is an audit entry as `dlq audit --json` prints it, with the
// admin API's field names.
type auditJSON struct {
	ID       int64     `json:"id"`
	At       time.Time `json:"at"`
	Who      string    `json:"who"`
	Action   string    `json:"action"`
	Selector string    `json:"selector"`
	Filter   string    `json:"filter"`
	DryRun   bool      `json:"dry_run"`
	Matched  int64     `json:"matched"`
	Changed  int64     `json:"changed"`
	Error    string    `json:"error,omitempty"`
}

func printAudit(e *env, entries []*store.AuditEntry, asJSON bool) error {
	if asJSON {
		out := make([]auditJSON, 0, len(entries))
		for _, en := range entries {
			out = append(out, auditJSON{ID: en.ID, At: en.At, Who: en.Who, Action: en.Action, Selector: en.Selector,
				Filter: en.Filter, DryRun: en.DryRun, Matched: en.Matched, Changed: en.Changed, Error: en.Error})
		}
		return json.NewEncoder(e.stdout).Encode(out)
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tAT\tWHO\tACTION\tDRY RUN\tSELECTOR\tMATCHED\tCHANGED\tFILTER\tERROR")
	for _, en := range entries {
		dry := ""
		if en.DryRun {
			dry = "yes"
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%d\t%d\t%s\t%s\n", en.ID, en.At.UTC().Format(time.RFC3339), cell(en.Who, 40), en.Action, dry,
			en.Selector, en.Matched, en.Changed, cell(en.Filter, 80), cell(en.Error, 80))
	}
	return tw.Flush()
}

// cell is s for a table cell: one line of at most n bytes, control
// characters (a terminal's escape sequences, tabs that would shift the
// columns) shown as '?'. Who and filter are whatever was written.
func cell(s string, n int) string {
	s = strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) {
			return '?'
		}
		return r
	}, oneLine(s, n))
	return s
}

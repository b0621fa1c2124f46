package main

import (
	"context"
	"encoding/json"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/txbox/txbox/config"
	"github.com/txbox/txbox/store"
)

// dlqFingerprintBatch is how many dead letters dlq groups fingerprints
// per statement before it lists.
const dlqFingerprintBatch = 1000

// groupJSON is a failure group as dlq groups --json prints it.
type groupJSON struct {
	Fingerprint   string    `json:"fingerprint"`
	Count         int64     `json:"count"`
	FirstFailedAt time.Time `json:"first_failed_at"`
	LastFailedAt  time.Time `json:"last_failed_at"`
	EventType     string    `json:"event_type"`
	Destination   string    `json:"destination"`
	Class         string    `json:"class"`
	Message       string    `json:"message"`
	SampleID      string    `json:"sample_id"`
	SampleError   string    `json:"sample_error"`
}

// groups fingerprints the dead letters that have no fingerprint yet (the
// relay does it too; this covers those stored before fingerprints were,
// or a relay that is not running), with the configuration's
// fingerprinter so that the groups are the relay's, then lists the
// groups largest first.
func (a *dlqArgs) groups(ctx context.Context, e *env, cfg *config.Config, st *config.Store) error {
	print, total := cfg.Fingerprinter(), 0
	for {
		n, err := st.DeadLetterFingerprint(ctx, &store.DeadLetterFingerprintParams{Limit: dlqFingerprintBatch, Print: print})
		if err != nil {
			return err
		}
		total += n
		if n < dlqFingerprintBatch {
			break
		}
		fmt.Fprintf(e.stderr, "txbox dlq groups: fingerprinted %d dead letters\n", total)
	}
	gs, err := st.DeadLetterGroups(ctx, &store.DeadLetterGroupsParams{Status: a.filter.Status, Limit: min(a.limit, store.MaxGroupsPage)})
	if err != nil {
		return err
	}
	out := make([]groupJSON, 0, len(gs))
	for _, g := range gs {
		out = append(out, groupJSON{
			Fingerprint: g.Fingerprint, Count: g.Count, FirstFailedAt: g.FirstFailedAt.UTC(), LastFailedAt: g.LastFailedAt.UTC(),
			EventType: g.EventType, Destination: g.Destination, Class: g.Class, Message: g.Message,
			SampleID: g.SampleID.String(), SampleError: g.SampleError,
		})
	}
	if a.asJSON {
		return json.NewEncoder(e.stdout).Encode(out)
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "GROUP\tCOUNT\tLAST FAILED\tTYPE\tCLASS\tDESTINATION\tMESSAGE")
	for _, g := range out {
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%s\n", g.Fingerprint, g.Count, g.LastFailedAt.Format(time.RFC3339),
			g.EventType, g.Class, oneLine(g.Destination, 40), oneLine(g.Message, 80))
	}
	return tw.Flush()
}

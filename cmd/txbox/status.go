package main

import (
	"context"
	"encoding/json"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/txbox/txbox/store"
)

func runStatus(ctx context.Context, e *env, args []string) error {
	fs := newFlagSet(e, "status", "status [--config txbox.yaml] [--json]")
	var cf configFlags
	cf.register(fs, e)
	asJSON := fs.Bool("json", false, "print JSON instead of a table")
	if err := parse(fs, args); err != nil {
		return err
	}
	st, err := cf.openStore(ctx, e)
	if err != nil {
		return err
	}
	defer st.Close()
	stats, err := st.OutboxStats(ctx)
	if err != nil {
		return fmt.Errorf("outbox stats: %w", err)
	}
	unresolved, err := st.DeadLetterCount(ctx, &store.DeadLetterFilter{Status: store.DeadLetterUnresolved})
	if err != nil {
		return fmt.Errorf("count dead letters: %w", err)
	}
	resolved, err := st.DeadLetterCount(ctx, &store.DeadLetterFilter{Status: store.DeadLetterResolved})
	if err != nil {
		return fmt.Errorf("count dead letters: %w", err)
	}
	if *asJSON {
		type typeStats struct {
			EventType     string  `json:"event_type"`
			Pending       int64   `json:"pending"`
			InProcess     int64   `json:"in_process"`
			Failed        int64   `json:"failed"`
			OldestPending float64 `json:"oldest_pending_seconds"`
		}
		out := struct {
			Types       []typeStats `json:"types"`
			DeadLetters struct {
				Unresolved int64 `json:"unresolved"`
				Resolved   int64 `json:"resolved"`
			} `json:"dead_letters"`
		}{Types: []typeStats{}}
		for _, s := range stats {
			out.Types = append(out.Types, typeStats{s.EventType, s.Pending, s.InProcess, s.Failed, s.OldestPendingAge.Seconds()})
		}
		out.DeadLetters.Unresolved, out.DeadLetters.Resolved = unresolved, resolved
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(out)
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "EVENT TYPE\tPENDING\tIN PROCESS\tFAILED\tOLDEST PENDING\t")
	for _, s := range stats {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%s\t\n", s.EventType, s.Pending, s.InProcess, s.Failed, s.OldestPendingAge.Round(time.Millisecond))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "dead letters: %d unresolved, %d resolved\n", unresolved, resolved)
	return nil
}

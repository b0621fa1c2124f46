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
		return printStatusJSON(e, stats, unresolved, resolved)
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "EVENT TYPE\tDUE\tSCHEDULED\tIN PROCESS\tFAILED\tRETRYING\tMAX ATTEMPTS\tLAG\tNEXT DUE IN\tLAST ERROR")
	for _, s := range stats {
		next := "-"
		if s.Pending > s.Due {
			next = s.NextDueIn.Round(time.Millisecond).String()
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t%s\t%s\t%s\n", s.EventType, s.Due, s.Pending-s.Due, s.InProcess, s.Failed,
			s.Retrying, s.MaxAttempts, s.OldestDueAge.Round(time.Millisecond), next, oneLine(s.LastError, 60))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "dead letters: %d unresolved, %d resolved\n", unresolved, resolved)
	return nil
}

// statusType is one event type in `txbox status --json`.
type statusType struct {
	EventType string `json:"event_type"`
	// Pending is Due + Scheduled.
	Pending   int64 `json:"pending"`
	Due       int64 `json:"due"`
	Scheduled int64 `json:"scheduled"`
	InProcess int64 `json:"in_process"`
	Failed    int64 `json:"failed"`
	Retrying  int64 `json:"retrying"`
	// MaxAttempts is the most attempts among the pending rows.
	MaxAttempts int `json:"max_attempts"`
	// LagSeconds is how long the oldest due row waited; scheduled rows
	// are not lag.
	LagSeconds float64 `json:"lag_seconds"`
	// OldestPending counts scheduled rows too.
	OldestPending float64 `json:"oldest_pending_seconds"`
	// NextDueSeconds is when the next scheduled row becomes due; absent
	// when none is scheduled.
	NextDueSeconds *float64 `json:"next_due_seconds,omitempty"`
	LastError      string   `json:"last_error,omitempty"`
}

func printStatusJSON(e *env, stats []*store.OutboxTypeStats, unresolved, resolved int64) error {
	out := struct {
		Types       []statusType `json:"types"`
		DeadLetters struct {
			Unresolved int64 `json:"unresolved"`
			Resolved   int64 `json:"resolved"`
		} `json:"dead_letters"`
	}{Types: []statusType{}}
	for _, s := range stats {
		st := statusType{EventType: s.EventType, Pending: s.Pending, Due: s.Due, Scheduled: s.Pending - s.Due,
			InProcess: s.InProcess, Failed: s.Failed, Retrying: s.Retrying, MaxAttempts: s.MaxAttempts,
			LagSeconds: s.OldestDueAge.Seconds(), OldestPending: s.OldestPendingAge.Seconds(), LastError: s.LastError}
		if s.Pending > s.Due {
			next := s.NextDueIn.Seconds()
			st.NextDueSeconds = &next
		}
		out.Types = append(out.Types, st)
	}
	out.DeadLetters.Unresolved, out.DeadLetters.Resolved = unresolved, resolved
	enc := json.NewEncoder(e.stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
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
	in, ok := st.Driver.(store.Inspector)
	if !ok {
		return fmt.Errorf("the %s store cannot report per-type details", st.Dialect())
	}
	types, err := in.OutboxInspect(ctx)
	if err != nil {
		return fmt.Errorf("outbox inspect: %w", err)
	}
	unresolved, err := st.DeadLetterCount(ctx, &store.DeadLetterFilter{Status: store.DeadLetterUnresolved})
	if err != nil {
		return fmt.Errorf("count dead letters: %w", err)
	}
	resolved, err := st.DeadLetterCount(ctx, &store.DeadLetterFilter{Status: store.DeadLetterResolved})
	if err != nil {
		return fmt.Errorf("count dead letters: %w", err)
	}
	slot, slotErr := streamStatus(ctx, st.Driver)
	if *asJSON {
		return printStatusJSON(e, types, unresolved, resolved, slot, slotErr)
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "EVENT TYPE\tDUE\tSCHEDULED\tIN PROCESS\tFAILED\tLAG\tNEXT DUE IN\tATTEMPTS\tLAST ERROR")
	for _, s := range types {
		next := "-"
		if s.Scheduled > 0 {
			next = s.NextDueIn.Round(time.Millisecond).String()
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%s\t%s\t%s\t%s\n", s.EventType, s.Due, s.Scheduled, s.InProcess, s.Failed,
			s.OldestDueAge.Round(time.Millisecond), next, attemptsText(s.Attempts), oneLine(s.LastError, 60))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "dead letters: %d unresolved, %d resolved\n", unresolved, resolved)
	switch {
	case slotErr != nil:
		fmt.Fprintf(e.stdout, "WAL slot: cannot read it: %v\n", slotErr)
	case slot != nil:
		safe := "unbounded"
		if slot.SafeWALSize >= 0 {
			safe = byteSize(slot.SafeWALSize)
		}
		active := "no relay streaming"
		if slot.Active {
			active = fmt.Sprintf("streamed by pid %d", slot.ActivePID)
		}
		fmt.Fprintf(e.stdout, "WAL slot %s: %s, wal_status %s, keeps %s of WAL (restart_lsn), %s unconfirmed, safe WAL %s, decoder spill %s\n",
			slot.Slot, active, slot.WALStatus, byteSize(slot.RestartLag), byteSize(slot.FlushLag), safe, byteSize(slot.SpillBytes))
		printFailover(e, slot.Failover)
		if l := slot.LastLoss; l != nil {
			fmt.Fprintf(e.stdout, "WAL slot last lost and recreated %s: events emitted between LSN %X/%X (confirmed %s) and %X/%X were not delivered\n",
				l.At.Format(time.RFC3339), l.From>>32, uint32(l.From), l.LastConfirm.Format(time.RFC3339), l.To>>32, uint32(l.To))
		}
	}
	return nil
}

// printFailover says whether the slot survives a failover, with every
// problem found and everything that could not be checked.
func printFailover(e *env, f store.StreamFailover) {
	fmt.Fprintf(e.stdout, "WAL slot failover: %s\n", failoverText(f))
	for _, p := range f.Problems[min(1, len(f.Problems)):] { // the first is the note
		fmt.Fprintf(e.stdout, "  - %s\n", p)
	}
	for _, u := range f.Unchecked {
		fmt.Fprintf(e.stdout, "  - not checked: %s\n", u)
	}
}

// streamStatus reads the WAL slot's health when d is in WAL mode; nil,
// nil in table mode.
func streamStatus(ctx context.Context, d store.Driver) (*store.StreamStatus, error) {
	src, ok := d.(interface{ Source() string })
	sm, ok2 := d.(store.Streamer)
	if !ok || !ok2 || src.Source() != "wal" {
		return nil, nil
	}
	return sm.StreamStatus(ctx)
}

// byteSize renders n bytes for people.
func byteSize(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

// attemptsText renders an attempts histogram as "attempts×rows" pairs of
// the non-empty buckets, such as "0×12 1×3 9+×1".
func attemptsText(h [store.AttemptsBuckets]int64) string {
	var parts []string
	for i, n := range h {
		if n == 0 {
			continue
		}
		label := fmt.Sprint(i)
		if i == len(h)-1 {
			label += "+"
		}
		parts = append(parts, fmt.Sprintf("%s×%d", label, n))
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, " ")
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
	// LagSeconds is the age of the oldest due row; scheduled rows are not
	// lag.
	LagSeconds float64 `json:"lag_seconds"`
	// NextDueSeconds is when the next scheduled row becomes due; absent
	// when none is scheduled.
	NextDueSeconds *float64 `json:"next_due_seconds,omitempty"`
	// Attempts[i] counts the unfinished rows with i attempts; the last
	// bucket holds that many or more.
	Attempts  []int64 `json:"attempts"`
	LastError string  `json:"last_error,omitempty"`
}

func printStatusJSON(e *env, types []*store.OutboxTypeDetail, unresolved, resolved int64, slot *store.StreamStatus, slotErr error) error {
	out := struct {
		Types       []statusType `json:"types"`
		DeadLetters struct {
			Unresolved int64 `json:"unresolved"`
			Resolved   int64 `json:"resolved"`
		} `json:"dead_letters"`
		// Slot is WAL mode's replication slot; absent in table mode.
		Slot      *store.StreamStatus `json:"wal_slot,omitempty"`
		SlotError string              `json:"wal_slot_error,omitempty"`
	}{Types: []statusType{}, Slot: slot}
	if slotErr != nil {
		out.SlotError = slotErr.Error()
	}
	for _, s := range types {
		st := statusType{EventType: s.EventType, Pending: s.Due + s.Scheduled, Due: s.Due, Scheduled: s.Scheduled,
			InProcess: s.InProcess, Failed: s.Failed, LagSeconds: s.OldestDueAge.Seconds(), Attempts: s.Attempts[:],
			LastError: s.LastError}
		if s.Scheduled > 0 {
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

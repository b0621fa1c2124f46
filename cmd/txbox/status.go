package main

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/txbox/txbox/config"
	"github.com/txbox/txbox/store"
)

func runStatus(ctx context.Context, e *env, args []string) error {
	fs := newFlagSet(e, "status", "status [--config txbox.yaml] [--tenant NAME] [--json]")
	var cf configFlags
	cf.register(fs, e)
	cf.registerTenant(fs, false)
	asJSON := fs.Bool("json", false, "print JSON instead of a table")
	if err := parse(fs, args); err != nil {
		return err
	}
	cfg, st, err := cf.openStoreConfig(ctx, e)
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
	routes, routesErr := statusRoutes(ctx, cfg, st.Driver)
	if *asJSON {
		return printStatusJSON(e, types, unresolved, resolved, slot, slotErr, routes, routesErr)
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
	if err := printStatusRoutes(e, routes, routesErr); err != nil {
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

func printStatusJSON(e *env, types []*store.OutboxTypeDetail, unresolved, resolved int64, slot *store.StreamStatus, slotErr error,
	routes []statusRoute, routesErr error) error {
	out := struct {
		Types []statusType `json:"types"`
		// Routes are the routes of the fanned-out types, and those with
		// pending rows that the configuration no longer has; absent
		// when there are none.
		Routes      []statusRoute `json:"routes,omitempty"`
		RoutesError string        `json:"routes_error,omitempty"`
		DeadLetters struct {
			Unresolved int64 `json:"unresolved"`
			Resolved   int64 `json:"resolved"`
		} `json:"dead_letters"`
		// Slot is WAL mode's replication slot; absent in table mode.
		Slot      *store.StreamStatus `json:"wal_slot,omitempty"`
		SlotError string              `json:"wal_slot_error,omitempty"`
	}{Types: []statusType{}, Slot: slot, Routes: routes}
	if routesErr != nil {
		out.RoutesError = routesErr.Error()
	}
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

// statusRoute is one route of a fanned-out type in `txbox status`: as the
// configuration resolves it (config.Config.Routes), with its pending rows
// when the store can count them.
type statusRoute struct {
	EventType string `json:"event_type"`
	config.RouteView
	// Pending counts the route's PENDING rows (expanded events not yet
	// delivered to it); absent when the store cannot count them.
	Pending *int64 `json:"pending,omitempty"`
	// Removed marks a route with pending rows that the configuration no
	// longer has: the relay dead-letters those rows.
	Removed bool `json:"removed,omitempty"`
}

// statusRoutes lists the configured routes of every fanned-out type, with
// each route's pending rows when the store can tell (store.Expander), and
// the routes with pending rows the configuration no longer has. The error
// is the store's, the routes still listed.
func statusRoutes(ctx context.Context, cfg *config.Config, d store.Driver) ([]statusRoute, error) {
	var out []statusRoute
	for _, t := range cfg.EventTypes() {
		for _, r := range cfg.Routes(t) {
			out = append(out, statusRoute{EventType: t, RouteView: r})
		}
	}
	x, ok := d.(store.Expander)
	if !ok {
		return out, nil
	}
	pending, err := x.OutboxPendingRoutes(ctx)
	if err != nil {
		return out, fmt.Errorf("pending rows per route: %w", err)
	}
	for i := range out {
		var n int64
		out[i].Pending = &n
	}
	for _, tr := range pending {
		i := slices.IndexFunc(out, func(r statusRoute) bool { return r.EventType == tr.EventType && r.Name == tr.Route })
		if i < 0 {
			out = append(out, statusRoute{EventType: tr.EventType, RouteView: config.RouteView{Name: tr.Route}, Removed: true})
			i = len(out) - 1
		}
		n := tr.Pending
		out[i].Pending = &n
	}
	return out, nil
}

// printStatusRoutes prints the routes table of `txbox status`, when a
// type fans out.
func printStatusRoutes(e *env, routes []statusRoute, storeErr error) error {
	if len(routes) == 0 && storeErr == nil {
		return nil
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "\nEVENT TYPE\tROUTE\tSENDER\tDESTINATION\tCLAIM\tMAX ATTEMPTS\tPENDING")
	for _, r := range routes {
		pending := "-"
		if r.Pending != nil {
			pending = fmt.Sprint(*r.Pending)
		}
		if r.Removed {
			fmt.Fprintf(tw, "%s\t%s\t(removed from the configuration: the relay dead-letters its pending rows)\t\t\t\t%s\n", r.EventType, r.Name, pending)
			continue
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s\n", r.EventType, r.Name, r.Sender, r.Destination, r.Claim, r.MaxAttempts, pending)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if storeErr != nil {
		fmt.Fprintf(e.stdout, "routes: %v\n", storeErr)
	}
	return nil
}

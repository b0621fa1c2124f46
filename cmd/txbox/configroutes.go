package main

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/txbox/txbox/config"
	"github.com/txbox/txbox/store"
)

// databaseWarnings are the --connect checks of the database's contents:
// WAL mode's slot (checkStream) and removed routes' rows.
func databaseWarnings(ctx context.Context, cfg *config.Config, st *config.Store, e *env, timeout time.Duration) ([]string, error) {
	stream, err := checkStream(ctx, cfg, st, e, timeout)
	if err != nil {
		return nil, err
	}
	routes, err := checkRemovedRoutes(ctx, cfg, st, timeout)
	return append(stream, routes...), err
}

// checkRemovedRoutes warns, with --connect, about the pending deliveries
// of fan-out routes the configuration no longer has (docs/concepts.md,
// "Fan-out"): a relay started with it dead-letters them.
func checkRemovedRoutes(ctx context.Context, cfg *config.Config, st *config.Store, timeout time.Duration) ([]string, error) {
	x, ok := st.Driver.(store.Expander)
	if !ok {
		return nil, nil
	}
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	pending, err := x.OutboxPendingRoutes(cctx)
	if err != nil {
		return nil, fmt.Errorf("database: the pending rows of fan-out routes: %w", err)
	}
	var warnings []string
	for _, tr := range pending {
		if slices.Contains(configuredRoutes(cfg, tr.EventType), tr.Route) {
			continue
		}
		warnings = append(warnings, fmt.Sprintf("events.%s: %d pending deliveries of route %q, which the configuration no longer has: a relay started with it dead-letters them (docs/concepts.md, \"Fan-out\")",
			tr.EventType, tr.Pending, tr.Route))
	}
	return warnings, nil
}

// configuredRoutes are the route names of a fanned-out type of cfg, nil
// for any other type.
func configuredRoutes(cfg *config.Config, eventType string) []string {
	ev := cfg.Events[eventType]
	if ev == nil || len(ev.Routes) < 2 {
		return nil
	}
	typSender := *cfg.Effective(eventType).Sender
	names := make([]string, len(ev.Routes))
	for i := range ev.Routes {
		names[i] = ev.Routes[i].RouteName(typSender)
	}
	return names
}

package store

import (
	"context"
	"fmt"
	"regexp"

	"github.com/txbox/txbox"
)

// MaxRoutes is the most fan-out routes one event type may have: a route's
// row id is its event's id with the last byte changed by the route's
// index (RouteRowID), so the index fits in a byte.
const MaxRoutes = 16

// routeNamePattern is what a route name may be: it is stored in a column
// and named in metrics labels, URLs and filters.
var routeNamePattern = regexp.MustCompile(`^[A-Za-z0-9._-]{1,64}$`)

// ValidRouteName reports whether name is a valid fan-out route name: 1
// to 64 of A-Z a-z 0-9 . _ -.
func ValidRouteName(name string) bool { return routeNamePattern.MatchString(name) }

// RouteRowID is the id of the row that delivers event id to the route at
// index i of its type's routes (docs/concepts.md, "Fan-out"). Index 0 is
// the event's own row, so RouteRowID(id, 0) == id. The id differs from
// the event's only in its last byte (XORed with i), so the rows of one
// route keep the order of their events' ids: two ids that differ in their
// first 15 bytes compare the same way after the change, which is what
// per-key order by id needs on every dialect. Ids that txbox and the
// schema's defaults make (UUIDv7) differ there with certainty; a producer
// that writes its own ids, dense in the last byte, can make a route's id
// collide with another event's id, and OutboxExpand then fails that event
// (ErrRouteIDTaken) instead of losing either.
func RouteRowID(id txbox.ID, i int) txbox.ID {
	id[15] ^= byte(i)
	return id
}

// ErrRouteIDTaken is the last error of an event that OutboxExpand could
// not expand because the id of one of its route rows (RouteRowID) is
// already another row's. The event's row fails (it goes to the dead
// letters) with this text, prefixed with NotSentPrefix.
const ErrRouteIDTaken = "fan-out: the id of a route's row is taken by another row; give events ids that differ before their last byte (docs/concepts.md, \"Fan-out\")"

// Expander is implemented by the dialects that support fan-out routes
// (all three in-tree ones).
type Expander interface {
	// OutboxExpand turns up to Limit PENDING rows of EventType whose route
	// is "" into one row per route, in one transaction, and returns how
	// many events it expanded:
	//   - the row itself gets Routes[0];
	//   - for every further route i, a new PENDING row with id
	//     RouteRowID(row.ID, i), event_id = row.ID, route = Routes[i], and
	//     the type, key, payload, headers, due_at, created_at and key
	//     order (txid on PostgreSQL) of the row; attempts 0, no last
	//     error.
	// Rows are taken whatever their due time, in key order (id on MySQL,
	// rowid on SQLite, (due_at, id) on PostgreSQL, whose copies keep
	// their txid), skipping rows another expander has locked. A row one of
	// whose route ids is already taken is not expanded: it becomes FAILED
	// with last error NotSentPrefix + ErrRouteIDTaken, and attempts +1.
	OutboxExpand(ctx context.Context, params *OutboxExpandParams) (int, error)
	// OutboxSplit is the relay's shared claim's way out (docs/concepts.md,
	// "Fan-out"): after a row of route "" was sent to every route and some
	// routes did not acknowledge it, the relay releases the row and splits
	// it so that only those routes get a row. For each of Rows that is
	// still PENDING with route "" and type EventType (any other is skipped:
	// another relay took it, and will send it to every route again), in
	// one transaction:
	//   - for every route i >= 1 whose bit in Done is clear, a copy as
	//     OutboxExpand makes it (id RouteRowID(row.ID, i), event_id =
	//     row.ID, attempts 0, the row's due_at);
	//   - the row itself gets Routes[0] when bit 0 is clear, and is
	//     deleted when it is set (that route acknowledged it), or with
	//     Retain made route 0's PROCESSED row.
	// A row whose Done has every route's bit set is deleted. An event one
	// of whose needed route ids is taken fails as in OutboxExpand (and is
	// not deleted). Rows another transaction holds are skipped, not
	// waited for. It returns how many rows were split.
	OutboxSplit(ctx context.Context, params *OutboxSplitParams) (int, error)
	// OutboxPendingRoutes lists the (type, route) pairs of PENDING rows
	// whose route is not "", so the relay can notice routes that left the
	// configuration (OutboxDropRoute). Cheap on a large backlog (a loose
	// index scan on PostgreSQL, an index walk elsewhere).
	OutboxPendingRoutes(ctx context.Context) ([]TypeRoute, error)
	// OutboxDropRoute makes up to Limit PENDING rows of EventType and
	// Route FAILED with last error Reason (attempts unchanged), so they go
	// to the dead letters rather than vanish, and returns how many. Route
	// must not be "".
	OutboxDropRoute(ctx context.Context, params *OutboxDropRouteParams) (int, error)
}

// OutboxExpandParams are the parameters of Expander.OutboxExpand.
type OutboxExpandParams struct {
	EventType string
	// Routes are the type's route names, at least 2 and at most
	// MaxRoutes, each non-empty and distinct. Their order is their index
	// in RouteRowID: adding a route at the end keeps the others' ids.
	Routes []string
	Limit  int
}

// Validate checks the parameters every dialect's OutboxExpand needs: a
// valid event type, Limit at least 1, and 2 to MaxRoutes routes, each
// non-empty and distinct. Its errors match ErrInvalidParams (or, for the
// type, txbox.ErrInvalidEventType's).
func (p *OutboxExpandParams) Validate() error {
	if p == nil || p.Limit < 1 {
		return fmt.Errorf("%w: expand needs Limit >= 1", ErrInvalidParams)
	}
	if err := txbox.ValidateEventType(p.EventType); err != nil {
		return err
	}
	if len(p.Routes) < 2 || len(p.Routes) > MaxRoutes {
		return fmt.Errorf("%w: expand needs 2 to %d routes, got %d", ErrInvalidParams, MaxRoutes, len(p.Routes))
	}
	seen := map[string]bool{}
	for _, r := range p.Routes {
		if r == "" || seen[r] {
			return fmt.Errorf("%w: expand routes must be non-empty and distinct, got %q", ErrInvalidParams, p.Routes)
		}
		seen[r] = true
	}
	return nil
}

// OutboxSplitParams are the parameters of Expander.OutboxSplit.
type OutboxSplitParams struct {
	EventType string
	// Routes are the type's route names, as in OutboxExpandParams.
	Routes []string
	// Rows are the rows to split, at most MaxSplitRows, each id once.
	Rows []SplitRow
	// Retain is set when the type keeps its delivered rows (a retention,
	// OutboxFinishParams.DeleteAcked false): a row whose route 0 is done
	// is then kept as that route's row, PROCESSED as a finish leaves an
	// acked row, rather than deleted.
	Retain bool
}

// SplitRow is one row of OutboxSplitParams.
type SplitRow struct {
	ID txbox.ID
	// Done has bit i set when route i needs no row: its destination
	// acknowledged the event.
	Done uint32
}

// MaxSplitRows bounds OutboxSplitParams.Rows: a relay splits at most one
// batch at a time.
const MaxSplitRows = 1000

// Validate checks the parameters every dialect's OutboxSplit needs: a
// valid event type, the routes as OutboxExpandParams.Validate wants
// them, 1 to MaxSplitRows rows with distinct ids and no bit of Done
// beyond the routes. Its errors match ErrInvalidParams (or, for the type,
// txbox.ErrInvalidEventType's).
func (p *OutboxSplitParams) Validate() error {
	if p == nil {
		return fmt.Errorf("%w: split params are nil", ErrInvalidParams)
	}
	if err := (&OutboxExpandParams{EventType: p.EventType, Routes: p.Routes, Limit: 1}).Validate(); err != nil {
		return err
	}
	if len(p.Rows) < 1 || len(p.Rows) > MaxSplitRows {
		return fmt.Errorf("%w: split needs 1 to %d rows, got %d", ErrInvalidParams, MaxSplitRows, len(p.Rows))
	}
	seen := make(map[txbox.ID]bool, len(p.Rows))
	for _, r := range p.Rows {
		if seen[r.ID] {
			return fmt.Errorf("%w: split row %s appears twice", ErrInvalidParams, r.ID)
		}
		seen[r.ID] = true
		if r.Done>>uint(len(p.Routes)) != 0 {
			return fmt.Errorf("%w: split row %s: done bits %b beyond the %d routes", ErrInvalidParams, r.ID, r.Done, len(p.Routes))
		}
	}
	return nil
}

// TypeRoute is one (event type, route) pair with pending rows.
type TypeRoute struct {
	EventType string
	Route     string
	Pending   int64
}

// OutboxDropRouteParams are the parameters of Expander.OutboxDropRoute.
type OutboxDropRouteParams struct {
	EventType string
	Route     string
	Reason    string
	Limit     int
}

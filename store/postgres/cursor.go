package postgres

import (
	"bytes"
	"sync"
	"time"

	"github.com/google/uuid"
)

// claimCursor remembers, per event type, the last (due_at, id) this
// driver claimed, so the next claim can start its index scan there instead
// of at the beginning of the type's due range, where every row claimed so
// far left a dead index entry (see Config.ClaimLookback). The claim
// statement lowers the bound to now() - lookback when the cursor is more
// recent, so rows of transactions that committed out of order within the
// lookback are still found. It is a hint held in memory: losing it costs
// one full scan, never a row.
type claimCursor struct {
	mu       sync.Mutex
	due      time.Time // database clock
	id       uuid.UUID
	rescanAt time.Time // local clock: the next claim scans in full after this
	// catching is true while a rescan is working through rows below the
	// cursor (rows of transactions that committed late): each claim then
	// starts after the last row the previous one of the catch-up took,
	// (catchDue, catchID), and takes the oldest rows, until a claim comes
	// back partial or reaches the cursor. A full batch of such rows is
	// not the last of them, and handing out one batch per rescan interval
	// would leave the rest behind every newer row of a saturated type.
	catching bool
	catchDue time.Time
	catchID  uuid.UUID
}

func (d *Driver) cursor(eventType string) *claimCursor { return d.cursors.Get(eventType) }

// lowerBound returns the (due_at, id) to start the scan after, or false
// for a full scan. catchUp is true when the claim is part of a catch-up
// (a full scan, or a claim after the previous catch-up batch), whose
// outcome decides whether the catch-up goes on (see claimed).
func (c *claimCursor) lowerBound(now time.Time, lookback time.Duration) (due time.Time, id uuid.UUID, bounded, catchUp bool) {
	if lookback < 0 {
		return time.Time{}, uuid.UUID{}, false, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.catching {
		return c.catchDue, c.catchID, true, true
	}
	if c.due.IsZero() || !now.Before(c.rescanAt) {
		return time.Time{}, uuid.UUID{}, false, true
	}
	return c.due, c.id, true, false
}

// claimed records a claim's outcome: the last row claimed (zero when none),
// whether it was full, and whether it was a catch-up claim. An empty
// bounded claim forces the next claim to scan in full, so an idle type
// never waits for the rescan timer to find a row that committed late. A
// full catch-up claim whose last row is still below the cursor continues
// the catch-up from that row; otherwise the catch-up is over and the next
// full scan comes after the rescan interval.
func (c *claimCursor) claimed(now, due time.Time, id uuid.UUID, full, catchUp bool, rescan time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	below := !due.IsZero() && !c.due.IsZero() && before(due, id, c.due, c.id)
	if !due.IsZero() && !below {
		c.due, c.id = due, id
	}
	switch {
	case catchUp && full && below:
		if !c.catching || before(c.catchDue, c.catchID, due, id) {
			c.catchDue, c.catchID = due, id
		}
		c.catching = true
	case catchUp:
		c.catching = false
		c.rescanAt = now.Add(rescan)
	case due.IsZero():
		c.rescanAt = time.Time{}
	}
}

// rolledBack records that a lock claim's rows went back as they were
// (store.LockedBatch.Rollback), below the cursor: the next claim scans in
// full instead of waiting for the rescan interval.
func (c *claimCursor) rolledBack() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.catching {
		c.rescanAt = time.Time{}
	}
}

// before reports whether (d1, i1) sorts before (d2, i2) in claim order.
func before(d1 time.Time, i1 uuid.UUID, d2 time.Time, i2 uuid.UUID) bool {
	if !d1.Equal(d2) {
		return d1.Before(d2)
	}
	return bytes.Compare(i1[:], i2[:]) < 0
}

// orderedCursor holds, per event type, where the next ordered claim
// starts (see claimOrderedSQL): the last key its walk visited, so
// successive claims, and the batches in flight at once, take different
// keys and every key gets its turn; and the keyless sweep, the (due_at,
// id) after which the next claim looks for rows without a key. Like
// claimCursor it is a hint held in memory: losing it costs a claim that
// starts at the first key, never a row.
type orderedCursor struct {
	mu       sync.Mutex
	key      string
	hasKey   bool
	due      time.Time // database clock; zero: sweep from the start
	id       uuid.UUID
	peeked   bool      // the last claim peeked: the next one continues the sweep
	rescanAt time.Time // local clock: the next claim peeks from the start
}

func (d *Driver) orderedCursor(eventType string) *orderedCursor { return d.ordered.Get(eventType) }

// start returns the key to walk after (false: the first key) and the
// keyless window's lower bound (zero time: from the start). Once every
// rescan interval, while a sweep is under way, one claim's window starts
// from the oldest row instead (a peek), so a keyless row that committed
// behind the sweep waits about that long; the sweep keeps its position,
// so however long it takes to get past a long run of blocked rows (a
// parked key, a hot key whose head is slow), it gets past them.
func (c *orderedCursor) start(now time.Time, rescan time.Duration) (string, bool, time.Time, uuid.UUID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.due.IsZero() && !now.Before(c.rescanAt) && !c.peeked {
		c.peeked = true
		c.rescanAt = now.Add(rescan)
		return c.key, c.hasKey, time.Time{}, uuid.UUID{}
	}
	c.peeked = false
	return c.key, c.hasKey, c.due, c.id
}

// claimed records an ordered claim's marker: the last key walked (none:
// there are no keys) and the keyless window's size and last row. A window
// that was not full reached the end of the due rows: the next sweep starts
// from the oldest again. Otherwise the sweep only moves forward: a peek's
// window, which ends behind the sweep, leaves it where it is.
func (c *orderedCursor) claimed(now time.Time, key string, hasKey bool, window, limit int, due time.Time, id uuid.UUID, rescan time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.key, c.hasKey = key, hasKey
	switch {
	case window < limit || due.IsZero():
		c.due, c.id = time.Time{}, uuid.UUID{}
		c.rescanAt = now.Add(rescan)
	case c.due.IsZero():
		c.due, c.id = due, id
		c.rescanAt = now.Add(rescan)
	case due.After(c.due) || (due.Equal(c.due) && bytes.Compare(id[:], c.id[:]) > 0):
		c.due, c.id = due, id
	}
}

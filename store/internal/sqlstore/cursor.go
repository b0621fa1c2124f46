package sqlstore

import (
	"sync"
	"time"
)

// SweepRescan is how often an ordered claim peeks at the oldest rows while
// the keyless sweep is under way, so a keyless row that committed behind
// the sweep waits about this long.
const SweepRescan = 5 * time.Second

// Cursor holds, per event type, where the next ordered claim of a driver
// starts: the last key walked, so successive claims take different keys
// and every key gets its turn, and the keyless sweep's (due_at, id), both
// as text that sorts like the columns (a dialect's timestamp text and
// canonical ids). A hint held in memory, like the PostgreSQL driver's:
// losing it costs a claim that starts at the first key, never a row. The
// zero Cursor starts from the first key and the oldest row.
type Cursor struct {
	mu       sync.Mutex
	key      string
	hasKey   bool
	due, id  string // due "": sweep from the start
	peeked   bool   // the last claim peeked: the next one continues the sweep
	rescanAt time.Time
}

// Start returns the key to walk after (hasKey false: from the first key)
// and the keyless window's lower bound (due "": from the oldest row). Once
// every SweepRescan, while a sweep is under way, one claim's window starts
// from the oldest row instead (a peek, never two in a row) and the sweep
// keeps its position, so it always gets past a long run of blocked rows,
// however slowly.
func (c *Cursor) Start(now time.Time) (key string, hasKey bool, due, id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.due != "" && !now.Before(c.rescanAt) && !c.peeked {
		c.peeked = true
		c.rescanAt = now.Add(SweepRescan)
		return c.key, c.hasKey, "", ""
	}
	c.peeked = false
	return c.key, c.hasKey, c.due, c.id
}

// Claimed records a claim's last key and its keyless window: its size
// against the limit and its last row. A window that was not full reached
// the end of the due rows: the sweep starts over. Otherwise the sweep only
// moves forward (a peek ends behind it).
func (c *Cursor) Claimed(now time.Time, key string, hasKey bool, window, limit int, due, id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.key, c.hasKey = key, hasKey
	switch {
	case window < limit:
		c.due, c.id = "", ""
		c.rescanAt = now.Add(SweepRescan)
	case c.due == "":
		c.due, c.id = due, id
		c.rescanAt = now.Add(SweepRescan)
	case due > c.due || (due == c.due && id > c.id):
		c.due, c.id = due, id
	}
}

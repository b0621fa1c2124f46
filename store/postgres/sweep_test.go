package postgres

import (
	"testing"
	"time"

	"github.com/google/uuid"
)

// TestOrderedSweepGetsPastBlockedRowsWhenSlow: the keyless sweep of an
// ordered claim keeps its position when the rescan interval passes, so it
// gets past a long run of blocked rows even when every claim takes longer
// than the interval (a slow database, or claims spaced by polling). Its
// periodic peek at the oldest rows must not move it back.
func TestOrderedSweepGetsPastBlockedRowsWhenSlow(t *testing.T) {
	t.Parallel()
	const rescan = 5 * time.Second
	c := &orderedCursor{}
	now := time.Unix(1_000_000, 0)
	base := time.Unix(2_000_000, 0)
	pos := func(i int) (time.Time, uuid.UUID) {
		var id uuid.UUID
		id[14], id[15] = byte(i>>8), byte(i)
		return base.Add(time.Duration(i) * time.Millisecond), id
	}
	const window, blocked = 10, 300
	next, peeks := 0, 0
	for claim := 0; next < blocked; claim++ {
		if claim > 2*blocked/window+2 {
			t.Fatalf("the sweep is at row %d of %d after %d claims", next, blocked, claim)
		}
		_, _, due, id := c.start(now, rescan)
		from := 0
		if !due.IsZero() {
			wantDue, wantID := pos(next)
			if !due.Equal(wantDue) || id != wantID {
				t.Fatalf("claim %d starts the window at (%s, %s), want the sweep's (%s, %s)", claim, due, id, wantDue, wantID)
			}
			from = next
		} else if next > 0 {
			peeks++
		}
		d, i := pos(from + window)
		c.claimed(now, "k", true, window, window, d, i, rescan)
		next = max(next, from+window)
		now = now.Add(2 * rescan)
	}
	if peeks == 0 {
		t.Fatal("no claim peeked at the oldest rows while the sweep was under way")
	}
	c.claimed(now, "k", true, 3, window, time.Time{}, uuid.UUID{}, rescan)
	if _, _, due, _ := c.start(now, rescan); !due.IsZero() {
		t.Fatalf("after a partial window the sweep starts at %s, want the oldest row", due)
	}
}

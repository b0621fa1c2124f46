package mysql

import (
	"fmt"
	"testing"
	"time"
)

// TestOrderedSweepGetsPastBlockedRowsWhenSlow: see the SQLite driver's
// test of the same name. The keyless sweep keeps its position when the
// rescan interval passes, so it gets past a long run of blocked rows even
// when every claim takes longer than the interval.
func TestOrderedSweepGetsPastBlockedRowsWhenSlow(t *testing.T) {
	t.Parallel()
	c := &orderedCursor{}
	now := time.Unix(1_000_000, 0)
	pos := func(i int) (string, string) {
		return fmt.Sprintf("2026-01-01 00:00:%09.6f", float64(i)/1e6), fmt.Sprintf("id-%06d", i)
	}
	const window, blocked = 10, 300
	next, peeks := 0, 0
	for claim := 0; next < blocked; claim++ {
		if claim > 2*blocked/window+2 {
			t.Fatalf("the sweep is at row %d of %d after %d claims", next, blocked, claim)
		}
		_, _, due, id := c.start(now)
		from := 0
		if due != sweepStart {
			wantDue, wantID := pos(next)
			if due != wantDue || id != wantID {
				t.Fatalf("claim %d starts the window at (%s, %s), want the sweep's (%s, %s)", claim, due, id, wantDue, wantID)
			}
			from = next
		} else if next > 0 {
			peeks++
		}
		d, i := pos(from + window)
		c.claimed(now, "k", true, window, window, d, i)
		next = max(next, from+window)
		now = now.Add(2 * sweepRescan)
	}
	if peeks == 0 {
		t.Fatal("no claim peeked at the oldest rows while the sweep was under way")
	}
	c.claimed(now, "k", true, 3, window, "", "")
	if _, _, due, _ := c.start(now); due != sweepStart {
		t.Fatalf("after a partial window the sweep starts at %q, want the oldest row", due)
	}
}

package sqlstore

import (
	"fmt"
	"testing"
	"time"
)

// TestOrderedSweepGetsPastBlockedRowsWhenSlow: the keyless sweep of an
// ordered claim keeps its position when the rescan interval passes, so it
// gets past a long run of blocked rows even when every claim takes longer
// than the interval (a slow database, or claims spaced by polling). Its
// periodic peek at the oldest rows must not move it back.
func TestOrderedSweepGetsPastBlockedRowsWhenSlow(t *testing.T) {
	t.Parallel()
	c := &Cursor{}
	now := time.Unix(1_000_000, 0)
	pos := func(i int) (string, string) {
		return fmt.Sprintf("2026-01-01 00:00:%09.6f", float64(i)/1e6), fmt.Sprintf("id-%06d", i)
	}
	const window, blocked = 10, 300
	next, peeks := 0, 0 // the sweep's position, in rows
	for claim := 0; next < blocked; claim++ {
		if claim > 2*blocked/window+2 {
			t.Fatalf("the sweep is at row %d of %d after %d claims", next, blocked, claim)
		}
		_, _, due, id := c.Start(now)
		from := 0
		if due != "" {
			wantDue, wantID := pos(next)
			if due != wantDue || id != wantID {
				t.Fatalf("claim %d starts the window at (%s, %s), want the sweep's (%s, %s)", claim, due, id, wantDue, wantID)
			}
			from = next
		} else if next > 0 {
			peeks++
		}
		d, i := pos(from + window)
		c.Claimed(now, "k", true, window, window, d, i)
		next = max(next, from+window)
		now = now.Add(2 * SweepRescan)
	}
	if peeks == 0 {
		t.Fatal("no claim peeked at the oldest rows while the sweep was under way")
	}
	if key, hasKey, _, _ := c.Start(now); key != "k" || !hasKey {
		t.Fatalf("the key cursor is (%q, %v), want the last key walked", key, hasKey)
	}
	// A window that is not full ends the sweep: the next starts over.
	c.Claimed(now, "k", true, 3, window, "", "")
	if _, _, due, _ := c.Start(now); due != "" {
		t.Fatalf("after a partial window the sweep starts at %q, want the oldest row", due)
	}
}

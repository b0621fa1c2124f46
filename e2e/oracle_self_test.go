package e2e

import (
	"testing"

	"github.com/txbox/txbox"
)

// TestOracleSortsIDs checks the oracle itself: each category must be able
// to fail.
func TestOracleSortsIDs(t *testing.T) {
	t.Parallel()
	o := newOracle()
	ok, lost, dup, rb, stray := txbox.NewID(), txbox.NewID(), txbox.NewID(), txbox.NewID(), txbox.NewID()
	o.committedIDs(ok, lost, dup)
	o.rolledBackIDs(rb)
	o.receivedIDs(ok, dup, dup, dup, rb, stray)
	r := o.report()
	if r.Committed != 3 || r.OK != 2 {
		t.Errorf("committed/ok = %d/%d, want 3/2", r.Committed, r.OK)
	}
	if len(r.Lost) != 1 || r.Lost[0] != lost {
		t.Errorf("lost = %v", r.Lost)
	}
	if len(r.Duplicated) != 1 || r.Duplicated[dup] != 3 || r.extra() != 2 {
		t.Errorf("duplicated = %v", r.Duplicated)
	}
	if len(r.Unexpected) != 2 || r.RolledBackArrived != 1 {
		t.Errorf("unexpected = %v, rolled back arrived %d", r.Unexpected, r.RolledBackArrived)
	}
	if r.clean() {
		t.Error("a report with losses is clean")
	}
	clean := newOracle()
	clean.committedIDs(ok)
	clean.receivedIDs(ok)
	if !clean.report().clean() {
		t.Errorf("clean run reported %v", clean.report())
	}
}

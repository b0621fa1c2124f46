package sqlstore

import (
	"slices"
	"testing"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/store"
)

// TestSplitPlan: a copy for every route whose bit is clear, the row kept
// when bit 0 is; the plan follows the locked ids' order.
func TestSplitPlan(t *testing.T) {
	t.Parallel()
	a, b, c := txbox.NewID(), txbox.NewID(), txbox.NewID()
	rows := []store.SplitRow{{ID: a, Done: 0b010}, {ID: b, Done: 0b001}, {ID: c, Done: 0b111}}
	got := SplitPlan([]txbox.ID{c, a, b}, rows, 3)
	want := []FanOut{{ID: c}, {ID: a, Copies: []int{2}, Keep: true}, {ID: b, Copies: []int{1, 2}}}
	for j := range want {
		if got[j].ID != want[j].ID || got[j].Keep != want[j].Keep || !slices.Equal(got[j].Copies, want[j].Copies) {
			t.Fatalf("plan %d: %+v, want %+v", j, got[j], want[j])
		}
	}
	if keep, drop := Kept(got); !slices.Equal(keep, []txbox.ID{a}) || !slices.Equal(drop, []txbox.ID{c, b}) {
		t.Fatalf("kept %v, dropped %v", keep, drop)
	}
}

// TestPartitionTakenIDs: a row fails when a copy's id is taken already or
// by an earlier row's copy; a row that needs no copy of the taken id
// passes.
func TestPartitionTakenIDs(t *testing.T) {
	t.Parallel()
	a := txbox.NewID()
	b := store.RouteRowID(a, 3) // a's route 1 id is b's route 2 id
	c := txbox.NewID()
	taken := map[txbox.ID]bool{store.RouteRowID(c, 1): true}
	plan := []FanOut{
		{ID: a, Copies: []int{1}, Keep: true},
		{ID: b, Copies: []int{2}, Keep: true},
		{ID: c, Copies: []int{1, 2}},
		{ID: txbox.NewID(), Keep: false},
	}
	ok, failed := Partition(plan, taken)
	if len(ok) != 2 || ok[0].ID != a || ok[1].ID != plan[3].ID || !slices.Equal(failed, []txbox.ID{b, c}) {
		t.Fatalf("ok %+v, failed %v; want a and the copyless row, b and c failed", ok, failed)
	}
}

package store

import (
	"slices"
	"testing"

	"github.com/txbox/txbox"
)

func TestSortedIDs(t *testing.T) {
	a := txbox.ID{1}
	b := txbox.ID{2}
	c := txbox.ID{0, 9}
	in := []txbox.ID{b, a, c, b, a}
	got := SortedIDs(in)
	if want := []txbox.ID{c, a, b}; !slices.Equal(got, want) {
		t.Fatalf("SortedIDs = %v, want %v", got, want)
	}
	if in[0] != b || len(in) != 5 {
		t.Fatal("SortedIDs changed its input")
	}
	if got := SortedIDs(nil); len(got) != 0 {
		t.Fatalf("SortedIDs(nil) = %v", got)
	}
}

func TestInputOrder(t *testing.T) {
	a, b, c := txbox.ID{1}, txbox.ID{2}, txbox.ID{3}
	fresh := map[txbox.ID]bool{a: true, c: true}
	got := InputOrder([]txbox.ID{c, b, a, c}, fresh)
	if want := []txbox.ID{c, a}; !slices.Equal(got, want) {
		t.Fatalf("InputOrder = %v, want %v (each fresh id once, in input order)", got, want)
	}
	if len(fresh) != 0 {
		t.Fatalf("fresh left with %v", fresh)
	}
}

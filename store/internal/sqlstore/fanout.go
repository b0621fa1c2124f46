package sqlstore

import (
	"github.com/txbox/txbox"
	"github.com/txbox/txbox/store"
)

// FanOut is one locked PENDING row of route "" that a dialect's expander
// turns into route rows (store.Expander): OutboxExpand gives it every
// route, OutboxSplit only the routes that did not acknowledge it.
type FanOut struct {
	ID txbox.ID
	// Copies are the indexes (>= 1) of the routes that get a new row,
	// id store.RouteRowID(ID, i).
	Copies []int
	// Keep: the row itself takes route 0; else it is deleted.
	Keep bool
}

// ExpandAll is OutboxExpand's plan for ids: every further route gets a
// copy and every row takes route 0.
func ExpandAll(ids []txbox.ID, routes int) []FanOut {
	copies := make([]int, 0, routes-1)
	for i := 1; i < routes; i++ {
		copies = append(copies, i)
	}
	out := make([]FanOut, len(ids))
	for j, id := range ids {
		out[j] = FanOut{ID: id, Copies: copies, Keep: true}
	}
	return out
}

// SplitPlan is OutboxSplit's plan for the locked ids, in their order:
// a copy for every route i >= 1 whose bit in the row's Done is clear,
// and the row kept (route 0) when bit 0 is clear. rows must hold every
// locked id.
func SplitPlan(locked []txbox.ID, rows []store.SplitRow, routes int) []FanOut {
	done := make(map[txbox.ID]uint32, len(rows))
	for _, r := range rows {
		done[r.ID] = r.Done
	}
	out := make([]FanOut, len(locked))
	for j, id := range locked {
		d := done[id]
		f := FanOut{ID: id, Keep: d&1 == 0}
		for i := 1; i < routes; i++ {
			if d&(1<<uint(i)) == 0 {
				f.Copies = append(f.Copies, i)
			}
		}
		out[j] = f
	}
	return out
}

// CopyIDs returns the ids of every copy of fs.
func CopyIDs(fs []FanOut) []txbox.ID {
	var out []txbox.ID
	for _, f := range fs {
		for _, i := range f.Copies {
			out = append(out, store.RouteRowID(f.ID, i))
		}
	}
	return out
}

// Partition splits fs, in order, into the rows whose copies can be
// inserted and the ids of those that fail with store.ErrRouteIDTaken:
// one of their copies' ids is taken, by a row there is (taken, which it
// fills in) or by an earlier row's copy in fs (ids dense in the last
// byte), so the later row fails.
func Partition(fs []FanOut, taken map[txbox.ID]bool) (ok []FanOut, failed []txbox.ID) {
	for _, f := range fs {
		bad := false
		for _, i := range f.Copies {
			bad = bad || taken[store.RouteRowID(f.ID, i)]
		}
		if bad {
			failed = append(failed, f.ID)
			continue
		}
		for _, i := range f.Copies {
			taken[store.RouteRowID(f.ID, i)] = true
		}
		ok = append(ok, f)
	}
	return ok, failed
}

// Kept returns, in order, the ids of the rows of fs that take route 0
// and of those to delete.
func Kept(fs []FanOut) (keep, drop []txbox.ID) {
	for _, f := range fs {
		if f.Keep {
			keep = append(keep, f.ID)
		} else {
			drop = append(drop, f.ID)
		}
	}
	return keep, drop
}

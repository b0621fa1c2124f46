package e2e

import (
	"fmt"
	"sort"
	"sync"

	"github.com/txbox/txbox"
)

// oracle sorts event ids into ok / lost / duplicated / unexpected
// (docs/testing.md, "The delivery oracle"). Publishers tell it what
// they committed and what they rolled back; readers tell it what arrived.
// It is safe for concurrent use.
type oracle struct {
	mu         sync.Mutex
	committed  map[txbox.ID]bool
	rolledBack map[txbox.ID]bool
	received   map[txbox.ID]int
}

func newOracle() *oracle {
	return &oracle{committed: map[txbox.ID]bool{}, rolledBack: map[txbox.ID]bool{}, received: map[txbox.ID]int{}}
}

// committedIDs records ids whose transaction committed.
func (o *oracle) committedIDs(ids ...txbox.ID) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, id := range ids {
		o.committed[id] = true
	}
}

// rolledBackIDs records ids whose transaction rolled back: they must never
// arrive.
func (o *oracle) rolledBackIDs(ids ...txbox.ID) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, id := range ids {
		o.rolledBack[id] = true
	}
}

// receivedIDs records one arrival per id (an id twice = two arrivals).
func (o *oracle) receivedIDs(ids ...txbox.ID) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, id := range ids {
		o.received[id]++
	}
}

// expected is the number of committed ids.
func (o *oracle) expected() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.committed)
}

// report is the oracle's verdict.
type report struct {
	Committed         int
	OK                int
	Lost              []txbox.ID
	Duplicated        map[txbox.ID]int // id → arrivals (≥ 2)
	Unexpected        []txbox.ID       // arrived but rolled back or never published
	RolledBackArrived int
}

func (r report) String() string {
	return fmt.Sprintf("committed %d: ok %d, lost %d, duplicated %d (extra arrivals %d), unexpected %d (of which rolled back %d)",
		r.Committed, r.OK, len(r.Lost), len(r.Duplicated), r.extra(), len(r.Unexpected), r.RolledBackArrived)
}

// extra counts arrivals beyond the first.
func (r report) extra() int {
	n := 0
	for _, c := range r.Duplicated {
		n += c - 1
	}
	return n
}

// clean reports no loss, no duplicate and nothing unexpected.
func (r report) clean() bool {
	return len(r.Lost) == 0 && len(r.Duplicated) == 0 && len(r.Unexpected) == 0
}

func (o *oracle) report() report {
	o.mu.Lock()
	defer o.mu.Unlock()
	r := report{Committed: len(o.committed), Duplicated: map[txbox.ID]int{}}
	for id := range o.committed {
		switch n := o.received[id]; {
		case n == 0:
			r.Lost = append(r.Lost, id)
		case n == 1:
			r.OK++
		default:
			r.OK++
			r.Duplicated[id] = n
		}
	}
	for id := range o.received {
		if !o.committed[id] {
			r.Unexpected = append(r.Unexpected, id)
			if o.rolledBack[id] {
				r.RolledBackArrived++
			}
		}
	}
	sort.Slice(r.Lost, func(i, j int) bool { return r.Lost[i].String() < r.Lost[j].String() })
	return r
}

// copy returns an oracle with o's committed and rolled-back ids and no
// arrivals: one oracle per destination of a fanned-out type, each judged
// against the same publishes.
func (o *oracle) copy() *oracle {
	o.mu.Lock()
	defer o.mu.Unlock()
	c := newOracle()
	for id := range o.committed {
		c.committed[id] = true
	}
	for id := range o.rolledBack {
		c.rolledBack[id] = true
	}
	return c
}

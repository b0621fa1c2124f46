// Package inspect assembles store.OutboxTypeDetail values from the rows
// of the dialects' inspection queries, so that each dialect only writes
// its SQL: one row per (event type, status, due or not, attempts bucket)
// and one last error per type.
package inspect

import (
	"slices"
	"strings"
	"time"

	"github.com/txbox/txbox/store"
)

// Acc accumulates the rows of one inspection. The zero Acc is ready.
type Acc struct {
	m map[string]*store.OutboxTypeDetail
}

// Group is one row of a dialect's grouped count.
type Group struct {
	EventType string
	Status    string
	// Due is true for PENDING rows due now.
	Due bool
	// Attempts is the attempts bucket (capped by the query at
	// store.AttemptsBuckets-1; larger values are capped here too).
	Attempts int
	Count    int64
	// OldestAge is now() - min(created_at) of the group.
	OldestAge time.Duration
	// NextDueIn is min(due_at) - now() of the group.
	NextDueIn time.Duration
}

func (a *Acc) get(typ string) *store.OutboxTypeDetail {
	if a.m == nil {
		a.m = map[string]*store.OutboxTypeDetail{}
	}
	d := a.m[typ]
	if d == nil {
		d = &store.OutboxTypeDetail{EventType: typ}
		a.m[typ] = d
	}
	return d
}

// Add folds one group into its type's detail.
func (a *Acc) Add(g Group) {
	d := a.get(g.EventType)
	switch g.Status {
	case store.StatusPending:
		if g.Due {
			d.Due += g.Count
			if age := max(0, g.OldestAge); age > d.OldestDueAge {
				d.OldestDueAge = age
			}
		} else {
			d.Scheduled += g.Count
			if in := max(time.Microsecond, g.NextDueIn); d.NextDueIn == 0 || in < d.NextDueIn {
				d.NextDueIn = in
			}
		}
	case store.StatusInProcess:
		d.InProcess += g.Count
	case store.StatusFailed:
		d.Failed += g.Count
	default:
		return
	}
	d.Attempts[min(max(g.Attempts, 0), store.AttemptsBuckets-1)] += g.Count
}

// LastError records the last error of a type that has rows.
func (a *Acc) LastError(typ, msg string) {
	if d := a.m[typ]; d != nil {
		d.LastError = msg
	}
}

// Result returns the details sorted by event type.
func (a *Acc) Result() []*store.OutboxTypeDetail {
	out := make([]*store.OutboxTypeDetail, 0, len(a.m))
	for _, d := range a.m {
		out = append(out, d)
	}
	slices.SortFunc(out, func(x, y *store.OutboxTypeDetail) int { return strings.Compare(x.EventType, y.EventType) })
	return out
}

// Seconds converts a database's float seconds to a duration.
func Seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

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

// Rows is the part of *sql.Rows and pgx.Rows that the readers below walk,
// so that the loop over a query's rows is written once for every dialect.
// The caller still closes the rows.
type Rows interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
}

// ScanAll reads every row with scan, which fills one new T from the row
// at hand, and returns the values in the order of the query.
func ScanAll[T any](rows Rows, scan func(*T) error) ([]*T, error) {
	var out []*T
	for rows.Next() {
		v := new(T)
		if err := scan(v); err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	return out, nil
}

// AddGroups folds every row of a dialect's grouped count into a; scan
// reads the row at hand into g (each dialect returns ages in its own
// unit).
func (a *Acc) AddGroups(rows Rows, scan func(g *Group) error) error {
	for rows.Next() {
		var g Group
		if err := scan(&g); err != nil {
			return err
		}
		a.Add(g)
	}
	return rows.Err()
}

// AddLastErrors records every (event type, last error) row of a dialect's
// last-error query.
func (a *Acc) AddLastErrors(rows Rows) error {
	for rows.Next() {
		var typ, msg string
		if err := rows.Scan(&typ, &msg); err != nil {
			return err
		}
		a.LastError(typ, msg)
	}
	return rows.Err()
}

// Query runs one of the inspection's statements and returns its rows
// with the function that closes them (*sql.Rows and pgx.Rows close
// differently). Its error is returned as it is.
type Query func(sql string) (Rows, func(), error)

// Outbox is every dialect's OutboxInspect: it runs the grouped count
// groups, reading each row with scan, then the last-error query
// lastErrors, and returns the details they fold into. The caller wraps
// the error in its dialect's way.
func Outbox(query Query, groups, lastErrors string, scan func(rows Rows, g *Group) error) ([]*store.OutboxTypeDetail, error) {
	var acc Acc
	rows, closeRows, err := query(groups)
	if err != nil {
		return nil, err
	}
	err = acc.AddGroups(rows, func(g *Group) error { return scan(rows, g) })
	closeRows()
	if err != nil {
		return nil, err
	}
	rows, closeRows, err = query(lastErrors)
	if err != nil {
		return nil, err
	}
	defer closeRows()
	if err := acc.AddLastErrors(rows); err != nil {
		return nil, err
	}
	return acc.Result(), nil
}

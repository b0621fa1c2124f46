package store

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/txbox/txbox"
)

// MinFilterTime and MaxFilterTime bound the times of a DeadLetterFilter,
// in UTC: the range every dialect stores. MySQL's DATETIME starts at year
// 1000; SQLite's text times compare correctly only with four-digit years
// and keep milliseconds, so the last storable instant is 9999-12-31
// 23:59:59.999. A bound outside is refused (ErrInvalidParams), never
// clipped: on a dialect that cannot store it, it would select rows the
// others do not.
var (
	MinFilterTime = time.Date(1000, 1, 1, 0, 0, 0, 0, time.UTC)
	MaxFilterTime = time.Date(9999, 12, 31, 23, 59, 59, 999_000_000, time.UTC)
)

// MaxFilterIDs is the most ids a DeadLetterFilter may name.
const MaxFilterIDs = 1000

// DeadLetterPageSize is how many dead letters DeadLetterWalk reads at a
// time unless told otherwise.
const DeadLetterPageSize = 500

// CheckFilterTime returns an error matching ErrInvalidParams unless t,
// converted to UTC whatever its zone, lies within [MinFilterTime,
// MaxFilterTime]. Checking in UTC matters: 9999-12-31T23:59:59-14:00 is
// in year 10000.
func CheckFilterTime(t time.Time) error {
	if r := filterTimeProblem(t); r != "" {
		return fmt.Errorf("%w: %s", ErrInvalidParams, r)
	}
	return nil
}

func filterTimeProblem(t time.Time) string {
	u := t.UTC()
	if u.Before(MinFilterTime) || u.After(MaxFilterTime) {
		return fmt.Sprintf("%s (UTC) is outside %s to %s, the times every dialect stores",
			u.Format(time.RFC3339Nano), MinFilterTime.Format(time.RFC3339), MaxFilterTime.Format(time.RFC3339Nano))
	}
	return ""
}

// FilterError is the error of DeadLetterFilter.Validate: the field at
// fault and why. It matches ErrInvalidParams (errors.Is).
type FilterError struct {
	Field, Reason string
}

func (e *FilterError) Error() string { return "dead-letter filter " + e.Field + ": " + e.Reason }

// Is makes a FilterError match ErrInvalidParams.
func (e *FilterError) Is(target error) bool { return target == ErrInvalidParams }

// Validate checks f before a dialect renders it: a known status, a
// valid group and route, at most MaxFilterIDs ids, and time bounds that
// CheckFilterTime accepts. It returns a *FilterError.
func (f *DeadLetterFilter) Validate() error {
	if f == nil {
		return nil
	}
	switch f.Status {
	case "", DeadLetterUnresolved, DeadLetterResolved:
	default:
		return &FilterError{"Status", fmt.Sprintf("%q must be %s or %s", f.Status, DeadLetterUnresolved, DeadLetterResolved)}
	}
	if f.Group != "" && !ValidFingerprintKey(f.Group) {
		return &FilterError{"Group", "not a fingerprint key (16 lower-case hex digits)"}
	}
	if f.Route != "" && !ValidRouteName(f.Route) {
		return &FilterError{"Route", "not a route name (1 to 64 of A-Z a-z 0-9 . _ -)"}
	}
	if len(f.IDs) > MaxFilterIDs {
		return &FilterError{"IDs", fmt.Sprintf("%d ids, at most %d", len(f.IDs), MaxFilterIDs)}
	}
	for _, b := range []struct {
		name string
		t    time.Time
	}{{"FailedAfter", f.FailedAfter}, {"FailedBefore", f.FailedBefore}} {
		if b.t.IsZero() {
			continue
		}
		if r := filterTimeProblem(b.t); r != "" {
			return &FilterError{b.name, r}
		}
	}
	return nil
}

// FilterBound is the value a dialect compares a stored time with for the
// filter bound t: t in UTC, rounded up to the stored precision. Stored
// values are multiples of precision, so failed_at >= FilterBound(t) holds
// exactly when failed_at >= t, and failed_at < FilterBound(t) exactly when
// failed_at < t: every dialect selects the rows whose stored time is in
// the interval, whatever the precision of the bound.
func FilterBound(t time.Time, precision time.Duration) time.Time {
	u := t.UTC()
	if d := u.Truncate(precision); !d.Equal(u) {
		return d.Add(precision)
	}
	return u
}

// DeadLetterEntry is what a bulk action reads of a dead letter: its place
// in the listing order and its status, never its payload, headers or
// error.
type DeadLetterEntry struct {
	ID       txbox.ID
	FailedAt time.Time
	Status   string
}

// Cursor is the listing position of e: a page that starts after it starts
// with the next dead letter.
func (e DeadLetterEntry) Cursor() *DeadLetterCursor {
	return &DeadLetterCursor{FailedAt: e.FailedAt, ID: e.ID}
}

// DeadLetterWalkParams are the parameters of DeadLetterWalk.
type DeadLetterWalkParams struct {
	Filter DeadLetterFilter
	// After starts the walk after this position; nil starts at the
	// newest failure.
	After *DeadLetterCursor
	// Limit stops the walk after this many dead letters; 0 walks to the
	// end.
	Limit int
	// PageSize is how many dead letters one call of fn gets at most.
	// Defaults to DeadLetterPageSize, or with Rate to a second's worth
	// (at most DeadLetterPageSize).
	PageSize int
	// Rate, when above 0, paces the walk: the page after n dead letters
	// is handed to fn no sooner than n/Rate seconds after the walk began,
	// so an action on the pages (a retry) runs at Rate dead letters per
	// second at most. It waits on ctx.
	Rate float64
}

// DeadLetterWalk hands fn the dead letters matching the filter, newest
// failure first (failed_at desc, id desc, the listing's order), a page at
// a time, through DeadLetterListIDs: it holds one page of entries and no
// payload. Each page is read after fn returned for the previous one, from
// the position of the previous page's last entry, so fn may retry,
// resolve or delete the page's dead letters: the walk goes on below them
// and visits each position once.
//
// What that means for dead letters that change during the walk: every dead
// letter that matches when the walk starts, and still matches when the
// walk reaches its place, is handed to fn exactly once. One that arrives
// during the walk is handed over when its failure time places it below the
// walk's position (it failed before the dead letters still ahead), and not
// otherwise. None is handed over twice: positions only go down, and a
// retried event that fails again comes back with a later failure time,
// above the walk.
//
// It returns the position to continue from when it stopped at Limit with
// more dead letters matching, nil when it reached the end.
func DeadLetterWalk(ctx context.Context, s DeadLetters, p *DeadLetterWalkParams, fn func(page []DeadLetterEntry) error) (*DeadLetterCursor, error) {
	if p == nil || p.Limit < 0 || p.PageSize < 0 || !(p.Rate >= 0) {
		return nil, fmt.Errorf("%w: dead-letter walk needs a Limit, PageSize and Rate of 0 or more", ErrInvalidParams)
	}
	size := p.PageSize
	if size == 0 {
		size = RatePage(p.Rate, DeadLetterPageSize)
	}
	after, seen, start := p.After, 0, time.Now()
	for {
		n := size
		if p.Limit > 0 {
			n = min(n, p.Limit-seen)
		}
		if n == 0 {
			// At Limit: is there more?
			more, err := s.DeadLetterListIDs(ctx, &DeadLetterListParams{Filter: p.Filter, After: after, Limit: 1})
			if err != nil || len(more) == 0 {
				return nil, err
			}
			return after, nil
		}
		page, err := s.DeadLetterListIDs(ctx, &DeadLetterListParams{Filter: p.Filter, After: after, Limit: n})
		if err != nil {
			return nil, err
		}
		if len(page) > 0 {
			if err := Pace(ctx, p.Rate, start, seen, time.Time{}); err != nil {
				return nil, err
			}
			if err := fn(page); err != nil {
				return nil, err
			}
			seen += len(page)
			after = page[len(page)-1].Cursor()
		}
		if len(page) < n {
			return nil, nil
		}
	}
}

// RatePage is the page size of a walk paced at rate items per second
// (0: not paced, max): a second's worth, at least 1 and at most max, so
// that the pace is even.
func RatePage(rate float64, max int) int {
	if rate <= 0 {
		return max
	}
	return int(min(float64(max), math.Max(1, math.Floor(rate))))
}

// Pace waits until done items at rate per second (0: no limit) are due
// since start, but not past limit (zero: no limit), and returns ctx's
// error when ctx ends first. A walk that acts on pages (a retry, a
// redrive) calls it before each page to keep to the rate.
func Pace(ctx context.Context, rate float64, start time.Time, done int, limit time.Time) error {
	if rate <= 0 || done == 0 {
		return nil
	}
	due := start.Add(time.Duration(float64(done) / rate * float64(time.Second)))
	if !limit.IsZero() && limit.Before(due) {
		due = limit
	}
	d := time.Until(due)
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

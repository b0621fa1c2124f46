package admin

import (
	"errors"
	"net/url"
	"testing"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/store"
)

// FuzzParseListQuery: any query string either parses into a filter the
// store accepts (limit in range, a valid event type and status, times in
// order) or fails with parameter errors; it never panics. A cursor the
// API produced parses back to itself. Seeds are in testdata/fuzz.
func FuzzParseListQuery(f *testing.F) {
	for _, s := range []string{
		"", "type=orders&status=unresolved&limit=10", "limit=0", "limit=-1", "limit=999999999999999999999",
		"status=RESOLVED&key=k&error=503", "failed_after=2026-01-01T00:00:00Z&failed_before=2025-01-01T00:00:00Z",
		"cursor=AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", "cursor=%ff", "type=x%22%3B+DROP+TABLE+t%3B--", "a=1&a=2&type=t&type=u",
		"error=%00", "key=%c3%28", "failed_after=0000-01-01T00:00:00Z",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		q, err := url.ParseQuery(raw)
		if err != nil {
			return
		}
		got, err := parseListQuery(q, listParams)
		if err != nil {
			var pe paramErrors
			if !errors.As(err, &pe) || len(pe) == 0 {
				t.Fatalf("%q: error %v is not a parameter error", raw, err)
			}
			return
		}
		if got.limit < 1 || got.limit > MaxPageSize {
			t.Fatalf("%q: limit %d", raw, got.limit)
		}
		fl := got.filter
		if fl.EventType != "" && txbox.ValidateEventType(fl.EventType) != nil {
			t.Fatalf("%q: invalid type %q accepted", raw, fl.EventType)
		}
		if fl.Status != "" && fl.Status != store.DeadLetterResolved && fl.Status != store.DeadLetterUnresolved {
			t.Fatalf("%q: status %q", raw, fl.Status)
		}
		if !fl.FailedAfter.IsZero() && !fl.FailedBefore.IsZero() && !fl.FailedBefore.After(fl.FailedAfter) {
			t.Fatalf("%q: window out of order", raw)
		}
		if got.after != nil {
			back, err := decodeCursor(encodeCursor(*got.after))
			if err != nil || back.ID != got.after.ID || !back.FailedAt.Equal(got.after.FailedAt) {
				t.Fatalf("%q: cursor does not round-trip", raw)
			}
		}
	})
}

// TestCursorRoundTrip: the cursor the API hands out parses back.
func TestCursorRoundTrip(t *testing.T) {
	c := store.DeadLetterCursor{FailedAt: time.Date(2026, 3, 4, 5, 6, 7, 891011000, time.UTC), ID: txbox.NewID()}
	back, err := decodeCursor(encodeCursor(c))
	if err != nil || back.ID != c.ID || !back.FailedAt.Equal(c.FailedAt) {
		t.Fatalf("round trip: %+v, %v", back, err)
	}
}

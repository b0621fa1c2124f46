package admin

import (
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/store"
)

// Limits of the query parameters. Values beyond them are refused with a
// 400 naming the parameter, not clipped silently.
const (
	// DefaultPageSize is the limit of a dead-letter page when none is
	// given; MaxPageSize the largest accepted.
	DefaultPageSize = 50
	MaxPageSize     = 500
	// maxFilterText bounds the key and error-text filters.
	maxFilterText = 1000
	// maxParamValues: a parameter given twice is an error, not "the last
	// one wins".
	maxParamValues = 1
)

// Filter is a dead-letter filter as clients write it: in the query string
// of a listing (?type=orders&status=unresolved&failed_after=...) and in
// the JSON body of a bulk action. Every set field must match.
type Filter struct {
	// Type is the event type.
	Type string `json:"type,omitempty"`
	// Status is "unresolved" or "resolved" (any case).
	Status string `json:"status,omitempty"`
	// Key is the event key.
	Key string `json:"key,omitempty"`
	// Error matches a substring of the last error, ignoring case.
	Error string `json:"error,omitempty"`
	// FailedAfter (inclusive) and FailedBefore (exclusive) bound the
	// failure time: RFC 3339 in any offset, compared in UTC, refused
	// unless from store.MinFilterTime to store.MaxFilterTime once in UTC.
	FailedAfter  string `json:"failed_after,omitempty"`
	FailedBefore string `json:"failed_before,omitempty"`
	// Group is a failure group's fingerprint (DeadLetterGroup.Fingerprint,
	// GET /api/v1/dead-letters/groups).
	Group string `json:"group,omitempty"`
	// Route is a fan-out route's name (DeadLetterView.Route): only the
	// dead letters of that route. Empty matches every route; a type with
	// one route needs none.
	Route string `json:"route,omitempty"`
}

// empty reports whether f selects everything.
func (f Filter) empty() bool { return f == Filter{} }

// toStore validates f and converts it; errors name the parameters with
// prefix (empty for the query string, "filter." in a body).
func (f Filter) toStore(prefix string, errs *paramErrors) store.DeadLetterFilter {
	var out store.DeadLetterFilter
	if f.Type != "" {
		if err := txbox.ValidateEventType(f.Type); err != nil {
			errs.add(prefix+"type", "not a valid event type: 1 to 200 characters of A-Z a-z 0-9 . _ : -")
		} else {
			out.EventType = f.Type
		}
	}
	switch strings.ToLower(f.Status) {
	case "":
	case "unresolved":
		out.Status = store.DeadLetterUnresolved
	case "resolved":
		out.Status = store.DeadLetterResolved
	default:
		errs.add(prefix+"status", "must be unresolved or resolved")
	}
	out.Key = text(prefix+"key", f.Key, errs)
	out.ErrorContains = text(prefix+"error", f.Error, errs)
	out.FailedAfter = timeParam(prefix+"failed_after", f.FailedAfter, errs)
	out.FailedBefore = timeParam(prefix+"failed_before", f.FailedBefore, errs)
	if f.Group != "" {
		if store.ValidFingerprintKey(f.Group) {
			out.Group = f.Group
		} else {
			errs.add(prefix+"group", "not a failure group's fingerprint (16 lower-case hex digits)")
		}
	}
	if f.Route != "" {
		if store.ValidRouteName(f.Route) {
			out.Route = f.Route
		} else {
			errs.add(prefix+"route", "not a route name: 1 to 64 characters of A-Z a-z 0-9 . _ -")
		}
	}
	if !out.FailedAfter.IsZero() && !out.FailedBefore.IsZero() && !out.FailedBefore.After(out.FailedAfter) {
		errs.add(prefix+"failed_before", "must be after failed_after")
	}
	return out
}

func text(param, v string, errs *paramErrors) string {
	switch {
	case len(v) > maxFilterText:
		errs.add(param, fmt.Sprintf("longer than %d bytes", maxFilterText))
	case !utf8.ValidString(v) || strings.ContainsRune(v, 0):
		errs.add(param, "must be valid UTF-8 without NUL")
	default:
		return v
	}
	return ""
}

// timeParam parses an RFC 3339 bound and normalises it to UTC. The range
// is checked in UTC (store.CheckFilterTime): 9999-12-31T23:59:59-14:00 is
// in year 10000, which MySQL's DATETIME and SQLite's text times cannot
// hold, so it is refused rather than compared wrongly.
func timeParam(param, v string, errs *paramErrors) time.Time {
	if v == "" {
		return time.Time{}
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		errs.add(param, "must be an RFC 3339 time such as 2026-01-02T15:04:05Z")
		return time.Time{}
	}
	t = t.UTC()
	if store.CheckFilterTime(t) != nil {
		errs.add(param, fmt.Sprintf("must be from %s to %s once in UTC",
			store.MinFilterTime.Format(time.RFC3339), store.MaxFilterTime.Format(time.RFC3339Nano)))
		return time.Time{}
	}
	return t
}

// listQuery is a parsed dead-letter listing request.
type listQuery struct {
	filter store.DeadLetterFilter
	after  *store.DeadLetterCursor
	limit  int
}

// listParams are the parameters a listing accepts; any other is refused,
// so a typo (?stauts=) does not silently list everything.
var listParams = map[string]bool{
	"type": true, "status": true, "key": true, "error": true,
	"failed_after": true, "failed_before": true, "limit": true, "cursor": true, "group": true, "route": true,
}

// countParams are the listing's filter parameters.
var countParams = map[string]bool{
	"type": true, "status": true, "key": true, "error": true, "failed_after": true, "failed_before": true, "group": true,
	"route": true,
}

// parseListQuery parses the query string of a dead-letter listing (or,
// with allowed = countParams, of a count).
func parseListQuery(q url.Values, allowed map[string]bool) (listQuery, error) {
	var errs paramErrors
	checkParams(q, allowed, &errs)
	f := Filter{
		Type: q.Get("type"), Status: q.Get("status"), Key: q.Get("key"), Error: q.Get("error"),
		FailedAfter: q.Get("failed_after"), FailedBefore: q.Get("failed_before"), Group: q.Get("group"),
		Route: q.Get("route"),
	}
	out := listQuery{filter: f.toStore("", &errs), limit: limitParam(q, DefaultPageSize, MaxPageSize, &errs)}
	if v := q.Get("cursor"); v != "" {
		c, err := decodeCursor(v)
		if err != nil {
			errs.add("cursor", "not a cursor returned by this API")
		} else {
			out.after = c
		}
	}
	if err := errs.err(); err != nil {
		return listQuery{}, err
	}
	return out, nil
}

// checkParams refuses the parameters of q that allowed does not name (a
// typo such as ?stauts= must not list everything) and any given more
// than once (not "the last one wins").
func checkParams(q url.Values, allowed map[string]bool, errs *paramErrors) {
	for k, vs := range q {
		switch {
		case !allowed[k]:
			errs.add(clipParam(k), "unknown parameter")
		case len(vs) > maxParamValues:
			errs.add(k, "given more than once")
		}
	}
}

// limitParam is the limit parameter of q: def when it is absent, refused
// unless an integer from 1 to max.
func limitParam(q url.Values, def, max int, errs *paramErrors) int {
	v := q.Get("limit")
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > max {
		errs.add("limit", fmt.Sprintf("must be an integer from 1 to %d", max))
		return def
	}
	return n
}

// clipParam shortens a hostile parameter name before it is echoed.
func clipParam(s string) string {
	s = strings.ToValidUTF8(s, "?")
	if len(s) > 64 {
		return s[:61] + "..."
	}
	return s
}

// A cursor is the position after the last dead letter of a page:
// base64url of its failed_at (Unix seconds, 8 bytes, and nanoseconds, 4
// bytes: any stored time fits, years 1000 to 9999 included) and id (16
// bytes). The 24-byte form of earlier versions (Unix nanoseconds, 8
// bytes) is still read.
func encodeCursor(c store.DeadLetterCursor) string {
	var b [28]byte
	binary.BigEndian.PutUint64(b[:8], uint64(c.FailedAt.Unix()))
	binary.BigEndian.PutUint32(b[8:12], uint32(c.FailedAt.Nanosecond()))
	copy(b[12:], c.ID[:])
	return base64.RawURLEncoding.EncodeToString(b[:])
}

func decodeCursor(s string) (*store.DeadLetterCursor, error) {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return nil, err
	}
	c := &store.DeadLetterCursor{}
	switch len(b) {
	case 24:
		c.FailedAt = time.Unix(0, int64(binary.BigEndian.Uint64(b[:8]))).UTC()
		copy(c.ID[:], b[8:])
	case 28:
		ns := binary.BigEndian.Uint32(b[8:12])
		if ns >= 1e9 {
			return nil, fmt.Errorf("cursor with %d nanoseconds", ns)
		}
		c.FailedAt = time.Unix(int64(binary.BigEndian.Uint64(b[:8])), int64(ns)).UTC()
		copy(c.ID[:], b[12:])
	default:
		return nil, fmt.Errorf("cursor of %d bytes", len(b))
	}
	// Not a position this API hands out: the stores could not take it.
	if err := store.CheckFilterTime(c.FailedAt); err != nil {
		return nil, err
	}
	return c, nil
}

// parseID parses a dead letter id from the path.
func parseID(s string) (txbox.ID, error) {
	id, err := txbox.ParseID(s)
	if err != nil {
		var errs paramErrors
		errs.add("id", "not a UUID")
		return txbox.ID{}, errs
	}
	return id, nil
}

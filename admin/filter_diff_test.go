package admin_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/admin"
	"github.com/txbox/txbox/internal/storeharness"
	"github.com/txbox/txbox/internal/testenv"
	"github.com/txbox/txbox/store"
	"github.com/txbox/txbox/store/mysql"
	"github.com/txbox/txbox/store/postgres"
	"github.com/txbox/txbox/store/sqlite"
)

// diffRow is a dead letter seeded identically on every dialect.
type diffRow struct {
	id       txbox.ID
	failedAt time.Time
	status   string
}

// diffStore is one dialect's admin handler over the seeded dead letters.
type diffStore struct {
	name string
	h    *admin.Handler
}

// diffTimes are the failure times seeded on every dialect: boundaries of
// what every dialect stores, the Unix epoch, a day around now and the
// instants a -14:00 or +14:00 offset moves across a year boundary. All are
// whole milliseconds, SQLite's precision, so every dialect stores the
// same instant.
func diffTimes() []time.Time {
	ms := time.Millisecond
	out := []time.Time{
		store.MinFilterTime, store.MinFilterTime.Add(ms), store.MaxFilterTime, store.MaxFilterTime.Add(-ms),
		time.Date(9999, 12, 31, 9, 59, 59, 999_000_000, time.UTC), time.Date(9999, 12, 31, 10, 0, 0, 0, time.UTC),
		time.Date(1000, 1, 1, 14, 0, 0, 0, time.UTC), time.Date(1000, 1, 1, 13, 59, 59, 999_000_000, time.UTC),
		time.Unix(0, 0).UTC(), time.Unix(0, 0).UTC().Add(-ms), time.Date(2038, 1, 19, 3, 14, 8, 0, time.UTC),
		time.Date(2026, 12, 31, 23, 59, 59, 999_000_000, time.UTC), time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC),
	}
	base := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	for i := range 12 {
		out = append(out, base.Add(time.Duration(i)*97*time.Minute+time.Duration(i*7)*ms))
	}
	return out
}

// seedDiffRows inserts rows into d's dead-letter table with plain SQL, the
// only way to give them chosen failure times.
func seedDiffRows(t testing.TB, d store.Driver, rows []diffRow) {
	t.Helper()
	ctx := context.Background()
	for _, r := range rows {
		var err error
		switch d := d.(type) {
		case *postgres.Driver:
			tb := d.Tables()
			_, err = d.Pool().Exec(ctx, `INSERT INTO `+pgx.Identifier{tb.Schema, tb.DeadLetter}.Sanitize()+
				` (id, event_type, payload, headers, attempts, last_error, created_at, failed_at, status)
				VALUES ($1, 'diff', 'p', '{}', 1, 'x', now(), $2, $3)`, r.id.String(), r.failedAt, r.status)
		case *mysql.Driver:
			tb := d.Tables()
			_, err = d.DB().ExecContext(ctx, "INSERT INTO `"+tb.Schema+"`.`"+tb.DeadLetter+"`"+
				" (id, event_type, payload, headers, attempts, last_error, created_at, failed_at, status)"+
				" VALUES (?, 'diff', 'p', '{}', 1, 'x', UTC_TIMESTAMP(6), ?, ?)", r.id.String(), r.failedAt.Format("2006-01-02 15:04:05.000000"), r.status)
		case *sqlite.Driver:
			_, err = d.DB().ExecContext(ctx, `INSERT INTO "`+d.Tables().DeadLetter+`"
				(id, event_type, payload, headers, attempts, last_error, created_at, failed_at, status)
				VALUES (?, 'diff', 'p', '{}', 1, 'x', '2026-01-01 00:00:00.000', ?, ?)`, r.id.String(), r.failedAt.Format("2006-01-02 15:04:05.000"), r.status)
		default:
			t.Fatalf("no seeding for %T", d)
		}
		if err != nil {
			t.Fatalf("seed %T: %v", d, err)
		}
	}
}

// diffSetup seeds the same dead letters on PostgreSQL, MariaDB and SQLite
// and returns an admin handler on each, and the rows.
func diffSetup(t testing.TB) ([]diffStore, []diffRow) {
	t.Helper()
	testenv.RequireTCP(t, "PostgreSQL", testenv.PostgresAddr)
	testenv.RequireTCP(t, "MariaDB", "127.0.0.1:3306")
	var rows []diffRow
	for i, at := range diffTimes() {
		st := store.DeadLetterUnresolved
		if i%3 == 0 {
			st = store.DeadLetterResolved
		}
		rows = append(rows, diffRow{txbox.NewID(), at, st})
	}
	pg, err := postgres.New(storeharness.PostgresPool(t, 4), postgres.Config{Schema: storeharness.PostgresSchema(t)})
	if err != nil {
		t.Fatal(err)
	}
	dbName, _ := storeharness.MySQLDatabase(t)
	my, err := mysql.Open(testenv.MySQLDSN, mysql.Config{Schema: dbName})
	if err != nil {
		t.Fatal(err)
	}
	lite, err := sqlite.Open(filepath.Join(t.TempDir(), "diff.db"), sqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}
	var out []diffStore
	for _, s := range []struct {
		name string
		d    store.Driver
	}{{"postgres", pg}, {"mariadb", my}, {"sqlite", lite}} {
		t.Cleanup(func() { _ = s.d.Close() })
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		err := s.d.Migrate(ctx)
		cancel()
		if err != nil {
			t.Fatalf("%s: migrate: %v", s.name, err)
		}
		seedDiffRows(t, s.d, rows)
		h, err := admin.New(admin.Config{Store: s.d, ReadToken: readToken, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, diffStore{s.name, h})
	}
	return out, rows
}

// diffAnswer is what one dialect's API said to a listing and a count.
type diffAnswer struct {
	status int
	params []string // the problem's parameter names, for a 4xx
	ids    []string // listed, sorted
	count  int
}

func ask(t testing.TB, h *admin.Handler, query string) diffAnswer {
	t.Helper()
	get := func(path string) (int, []byte) {
		req := httptest.NewRequest(http.MethodGet, path, nil)
		req.Host = "127.0.0.1"
		req.Header.Set("Authorization", "Bearer "+readToken)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec.Code, rec.Body.Bytes()
	}
	var a diffAnswer
	code, body := get("/api/v1/dead-letters?limit=500&" + query)
	a.status = code
	if code != http.StatusOK {
		var p struct{ Errors []struct{ Param string } }
		if err := json.Unmarshal(body, &p); err != nil {
			t.Fatalf("%s: %d %s", query, code, body)
		}
		for _, e := range p.Errors {
			a.params = append(a.params, e.Param)
		}
		return a
	}
	var page struct{ Items []struct{ ID string } }
	if err := json.Unmarshal(body, &page); err != nil {
		t.Fatalf("%s: %v in %s", query, err, body)
	}
	for _, it := range page.Items {
		a.ids = append(a.ids, it.ID)
	}
	slices.Sort(a.ids)
	code, body = get("/api/v1/dead-letters/count?" + query)
	var c struct{ Count int }
	if code != http.StatusOK || json.Unmarshal(body, &c) != nil {
		t.Fatalf("count %s: %d %s, the listing said 200", query, code, body)
	}
	a.count = c.Count
	return a
}

// expect is what the filter must select, computed here from the rows: a
// bound is valid when it is RFC 3339 and within store.MinFilterTime and
// store.MaxFilterTime once in UTC, and selects failed_at in [after,
// before) exactly.
func expect(rows []diffRow, after, before, status string) diffAnswer {
	var a diffAnswer
	parse := func(param, v string) time.Time {
		if v == "" {
			return time.Time{}
		}
		ts, err := time.Parse(time.RFC3339Nano, v)
		if err != nil || ts.UTC().Before(store.MinFilterTime) || ts.UTC().After(store.MaxFilterTime) {
			a.params = append(a.params, param)
			return time.Time{}
		}
		return ts
	}
	lo, hi := parse("failed_after", after), parse("failed_before", before)
	if !lo.IsZero() && !hi.IsZero() && !hi.After(lo) {
		a.params = append(a.params, "failed_before")
	}
	if len(a.params) > 0 {
		a.status = http.StatusBadRequest
		return a
	}
	a.status = http.StatusOK
	for _, r := range rows {
		if (lo.IsZero() || !r.failedAt.Before(lo)) && (hi.IsZero() || r.failedAt.Before(hi)) &&
			(status == "" || strings.EqualFold(status, r.status)) {
			a.ids = append(a.ids, r.id.String())
		}
	}
	slices.Sort(a.ids)
	a.count = len(a.ids)
	return a
}

// checkFilter asks every dialect and compares their answers with each
// other and with expect.
func checkFilter(t testing.TB, stores []diffStore, rows []diffRow, after, before, status string) {
	t.Helper()
	q := url.Values{}
	for k, v := range map[string]string{"failed_after": after, "failed_before": before, "status": status} {
		if v != "" {
			q.Set(k, v)
		}
	}
	want := expect(rows, after, before, status)
	for _, s := range stores {
		got := ask(t, s.h, q.Encode())
		slices.Sort(got.params)
		slices.Sort(want.params)
		if got.status != want.status || !slices.Equal(got.params, want.params) || !slices.Equal(got.ids, want.ids) || got.count != want.count {
			t.Fatalf("%s with %s: %d %v, %d listed, counted %d; want %d %v, %d (%v)", s.name, q.Encode(),
				got.status, got.params, len(got.ids), got.count, want.status, want.params, len(want.ids), want.ids)
		}
	}
}

// offsets are the zones the bounds are written in: -14:00 to +14:00 in
// quarter hours.
func offsets() []*time.Location {
	var out []*time.Location
	for m := -14 * 60; m <= 14*60; m += 15 {
		out = append(out, time.FixedZone(fmt.Sprintf("%+d", m), m*60))
	}
	return out
}

// TestFilterDifferential: the same time filters select the same dead
// letters on PostgreSQL, MariaDB and SQLite, and exactly those in the
// half-open window, for bounds at, just around and between the seeded
// failure times (a nanosecond, a microsecond, a millisecond off), written
// in every offset from -14:00 to +14:00, and far in the future or the
// past. A bound outside what every dialect stores is a 400 naming it on
// every dialect: 9999-12-31T23:59:59-14:00 used to count rows on MariaDB
// and none on PostgreSQL.
func TestFilterDifferential(t *testing.T) {
	t.Parallel()
	stores, rows := diffSetup(t)
	zones := offsets()
	rnd := rand.New(rand.NewPCG(17, 4))
	var bounds []time.Time
	for _, at := range diffTimes() {
		for _, d := range []time.Duration{0, time.Nanosecond, -time.Nanosecond, time.Microsecond, -time.Microsecond, time.Millisecond, -time.Millisecond, 14 * time.Hour} {
			bounds = append(bounds, at.Add(d))
		}
	}
	format := func(ts time.Time) string {
		if ts.IsZero() {
			return ""
		}
		return ts.In(zones[rnd.IntN(len(zones))]).Format(time.RFC3339Nano)
	}
	// The failure reported: year 10000 in UTC, refused everywhere.
	checkFilter(t, stores, rows, "9999-12-31T23:59:59-14:00", "", "")
	checkFilter(t, stores, rows, "", "9999-12-31T23:59:59.999-00:01", "")
	checkFilter(t, stores, rows, "1000-01-01T00:00:00+00:01", "", "")
	for _, z := range zones {
		checkFilter(t, stores, rows, store.MaxFilterTime.In(z).Format(time.RFC3339Nano), "", "")
		checkFilter(t, stores, rows, "", store.MinFilterTime.In(z).Format(time.RFC3339Nano), "")
	}
	for range 250 {
		lo, hi := bounds[rnd.IntN(len(bounds))], bounds[rnd.IntN(len(bounds))]
		switch rnd.IntN(4) {
		case 0:
			lo = time.Time{}
		case 1:
			hi = time.Time{}
		}
		status := []string{"", "resolved", "unresolved"}[rnd.IntN(3)]
		checkFilter(t, stores, rows, format(lo), format(hi), status)
	}
}

// FuzzFilterDifferential feeds the listing's time filters to the admin
// API of all three dialects: every input is either refused with the same
// 400 naming the same parameters everywhere, or selects the same dead
// letters everywhere, exactly those expect computes. The seeds (here and
// in testdata/fuzz) run in the normal suite.
func FuzzFilterDifferential(f *testing.F) {
	for _, s := range [][3]string{
		{"9999-12-31T23:59:59-14:00", "", ""},
		{"", "9999-12-31T23:59:59.999Z", "unresolved"},
		{"1000-01-01T00:00:00Z", "1000-01-01T00:00:00.001Z", ""},
		{"2026-12-01T12:00:00.0000000001+00:00", "2026-12-01T14:00:00-14:00", "resolved"},
		{"1969-12-31T23:59:59.999999999Z", "1970-01-01T00:00:00.000000001+14:00", ""},
		{"2038-01-19T03:14:08Z", "10000-01-01T00:00:00Z", ""},
		{"0999-12-31T23:59:59.999-00:00", "", "x"},
		{"2026-12-01T12:00:00Z", "2026-12-01T12:00:00Z", ""},
	} {
		f.Add(s[0], s[1], s[2])
	}
	stores, rows := diffSetup(f)
	f.Fuzz(func(t *testing.T, after, before, status string) {
		switch status {
		case "", "resolved", "unresolved":
		default:
			// Other statuses are the parser's business
			// (FuzzParseListQuery); here every dialect must agree.
			status = ""
		}
		checkFilter(t, stores, rows, after, before, status)
	})
}

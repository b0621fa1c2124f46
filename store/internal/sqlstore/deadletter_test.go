package sqlstore_test

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/store"
	"github.com/txbox/txbox/store/internal/sqlstore"
)

var errInvalid = errors.New("test: invalid params")

// testSQL is a dialect whose encoders are easy to recognise in the output.
var testSQL = sqlstore.DeadLetterSQL{
	KeyArg:        func(k string) any { return []byte(k) },
	ErrorContains: func(s string) (string, any) { return "last_error LIKE ?", "%" + s + "%" },
	Time:          func(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) },
	Precision:     time.Millisecond,
	InIDs:         func(n int) string { return fmt.Sprintf("id IN (%d ids)", n) },
	After:         "(failed_at, id) < (?, ?, ?)",
	Invalid:       errInvalid,
}

// TestDeadLetterWhere: each filter field adds its condition and argument
// in a fixed order, bounds are rounded up to the precision, the cursor
// comes last, an empty filter adds nothing and an invalid one wraps the
// dialect's error.
func TestDeadLetterWhere(t *testing.T) {
	t.Parallel()
	if where, args, err := testSQL.Where(nil, nil); where != "" || args != nil || err != nil {
		t.Fatalf("nil filter: %q %v %v", where, args, err)
	}
	if where, _, err := testSQL.Where(&store.DeadLetterFilter{}, nil); where != "" || err != nil {
		t.Fatalf("empty filter: %q %v", where, err)
	}
	if _, _, err := testSQL.Where(&store.DeadLetterFilter{Status: "BOGUS"}, nil); !errors.Is(err, errInvalid) {
		t.Fatalf("bad status: %v, want the dialect's invalid-params error", err)
	}
	after := time.Date(2026, 1, 2, 3, 4, 5, 100, time.UTC) // rounds up to .001
	id1, id2, cur := txbox.NewID(), txbox.NewID(), txbox.NewID()
	f := &store.DeadLetterFilter{EventType: "orders", Status: store.DeadLetterUnresolved, Key: "k", ErrorContains: "boom",
		FailedAfter: after, FailedBefore: after.Add(time.Hour), IDs: []txbox.ID{id1, id2}}
	curAt := after.Add(time.Minute)
	where, args, err := testSQL.Where(f, &store.DeadLetterCursor{FailedAt: curAt, ID: cur})
	if err != nil {
		t.Fatal(err)
	}
	want := " WHERE " + strings.Join([]string{"event_type = ?", "status = ?", "event_key = ?", "last_error LIKE ?",
		"failed_at >= ?", "failed_at < ?", "id IN (2 ids)", "(failed_at, id) < (?, ?, ?)"}, " AND ")
	if where != want {
		t.Fatalf("where =\n%s\nwant\n%s", where, want)
	}
	wantArgs := []any{"orders", store.DeadLetterUnresolved, []byte("k"), "%boom%",
		"2026-01-02T03:04:05.001Z", "2026-01-02T04:04:05.001Z", id1.String(), id2.String(),
		testSQL.Time(curAt), testSQL.Time(curAt), cur.String()}
	if !reflect.DeepEqual(args, wantArgs) {
		t.Fatalf("args =\n%v\nwant\n%v", args, wantArgs)
	}
}

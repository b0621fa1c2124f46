package store_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/txbox/txbox/store"
)

// TestDeadLetterFilterRoute: a filter's Route must be a route name (the
// relay's rule, store.ValidRouteName) or empty, and the audit trail's
// filter JSON names it as the admin API does.
func TestDeadLetterFilterRoute(t *testing.T) {
	t.Parallel()
	for _, ok := range []string{"", "hook", "partner.v2", "a_b-C", strings.Repeat("r", 64)} {
		if err := (&store.DeadLetterFilter{Route: ok}).Validate(); err != nil {
			t.Errorf("route %q: %v", ok, err)
		}
	}
	for _, bad := range []string{"a b", "x'--", "ü", strings.Repeat("r", 65), "a/b"} {
		err := (&store.DeadLetterFilter{Route: bad}).Validate()
		var fe *store.FilterError
		if !errors.As(err, &fe) || fe.Field != "Route" || !errors.Is(err, store.ErrInvalidParams) {
			t.Errorf("route %q: %v, want a FilterError on Route", bad, err)
		}
	}
	if got := store.AuditFilterJSON(&store.DeadLetterFilter{EventType: "orders", Route: "hook"}); got != `{"type":"orders","route":"hook"}` {
		t.Errorf("audit filter = %s", got)
	}
	if got := store.AuditFilterJSON(&store.DeadLetterFilter{EventType: "orders"}); strings.Contains(got, "route") {
		t.Errorf("audit filter without a route = %s", got)
	}
}

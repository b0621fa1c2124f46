package sqlstore_test

import (
	"errors"
	"testing"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/store/internal/sqlstore"
)

func TestCheckInsertEvents(t *testing.T) {
	t.Parallel()
	invalid := errors.New("invalid")
	good := &txbox.Event{ID: txbox.NewID(), Type: "t"}
	bad := errors.New("dialect's own")
	more := func(i int, ev *txbox.Event) error {
		if ev.Type == "bad" {
			return bad
		}
		return nil
	}
	for _, tc := range []struct {
		name   string
		events []*txbox.Event
		want   error
		msg    string
	}{
		{"all good", []*txbox.Event{good, good}, nil, ""},
		{"nil", []*txbox.Event{good, nil}, invalid, "invalid: event 1 is nil"},
		{"no id", []*txbox.Event{{Type: "t"}}, invalid, "invalid: event 0 has no id"},
		{"first bad reported", []*txbox.Event{{ID: txbox.NewID(), Type: "bad"}, nil}, bad, "dialect's own"},
	} {
		err := sqlstore.CheckInsertEvents(invalid, tc.events, more)
		if !errors.Is(err, tc.want) || (err == nil) != (tc.want == nil) {
			t.Fatalf("%s: got %v, want %v", tc.name, err, tc.want)
		}
		if err != nil && err.Error() != tc.msg {
			t.Fatalf("%s: message %q, want %q", tc.name, err.Error(), tc.msg)
		}
	}
	if err := sqlstore.CheckInsertEvents(invalid, []*txbox.Event{good}, nil); err != nil {
		t.Fatalf("without more: %v", err)
	}
}

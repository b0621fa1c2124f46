package keypath

import "testing"

func TestJoin(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ path, key, want string }{
		{"", "defaults", "defaults"},
		{"defaults", "batch-size", "defaults.batch-size"},
		{"events", "order.created", `events["order.created"]`},
		{`events["order.created"]`, "polling", `events["order.created"].polling`},
		{"", "a.b", `["a.b"]`},
		{"events", `x"; DROP`, `events.x"; DROP`},
	} {
		if got := Join(tc.path, tc.key); got != tc.want {
			t.Errorf("Join(%q, %q) = %s, want %s", tc.path, tc.key, got, tc.want)
		}
	}
}

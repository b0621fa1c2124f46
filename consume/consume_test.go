package consume_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/consume"
)

func TestNewMessage(t *testing.T) {
	t.Parallel()
	id := txbox.NewID()
	m, err := consume.NewMessage(id.String(), "order-created", "k", []byte("p"), map[string]string{"a": "b"})
	if err != nil || m.ID != id || m.Type != "order-created" || m.Key != "k" || string(m.Payload) != "p" || m.Headers["a"] != "b" {
		t.Fatalf("NewMessage = %+v, %v", m, err)
	}
	for _, bad := range []string{"", "not-a-uuid", "00000000-0000-0000-0000-000000000000", `x"; DROP TABLE t;--`} {
		_, err := consume.NewMessage(bad, "", "", nil, nil)
		var ie *consume.InvalidMessageError
		if !errors.As(err, &ie) {
			t.Errorf("NewMessage(%q) = %v; want *InvalidMessageError", bad, err)
		}
	}
}

func TestBackoff(t *testing.T) {
	t.Parallel()
	b, err := consume.Backoff{}.Normalize()
	if err != nil || b.Min != consume.DefaultMinBackoff || b.Max != consume.DefaultMaxBackoff {
		t.Fatalf("defaults: %+v, %v", b, err)
	}
	b = consume.Backoff{Min: 10 * time.Millisecond, Max: 50 * time.Millisecond}
	want := []time.Duration{10, 20, 40, 50, 50}
	for i, w := range want {
		if got := b.Delay(i + 1); got != w*time.Millisecond {
			t.Errorf("Delay(%d) = %v, want %v", i+1, got, w*time.Millisecond)
		}
	}
	if got := b.Delay(1000); got != 50*time.Millisecond {
		t.Errorf("Delay(1000) = %v", got)
	}
	for _, bad := range []consume.Backoff{{Min: -1}, {Max: -1}, {Min: time.Second, Max: time.Millisecond}} {
		if _, err := bad.Normalize(); err == nil {
			t.Errorf("Normalize(%+v) accepted", bad)
		}
	}
}

// FuzzNewMessage: any header value either parses to a non-zero id or is an
// *InvalidMessageError; never a panic.
func FuzzNewMessage(f *testing.F) {
	f.Add(txbox.NewID().String())
	f.Add("")
	f.Add("{01a228d5-3ce3-7db8-be11-aedf897f8887}")
	f.Add(strings.Repeat("f", 36))
	f.Fuzz(func(t *testing.T, s string) {
		m, err := consume.NewMessage(s, "", "", nil, nil)
		var ie *consume.InvalidMessageError
		switch {
		case err == nil && m.ID == (txbox.ID{}):
			t.Fatalf("%q parsed to the zero id", s)
		case err != nil && !errors.As(err, &ie):
			t.Fatalf("%q: untyped error %v", s, err)
		}
	})
}

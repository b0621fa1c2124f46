package store_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/store"
)

func TestNewTables(t *testing.T) {
	t.Parallel()
	tb, err := store.NewTables("", "")
	if err != nil {
		t.Fatal(err)
	}
	if tb.Outbox != "txbox_outbox" || tb.DeadLetter != "txbox_dead_letter" || tb.Inbox != "txbox_inbox" ||
		tb.Lease != "txbox_lease" || tb.SchemaVersion != "txbox_schema_version" {
		t.Fatalf("default names: %+v", tb)
	}
	hostile := []string{`x"; DROP TABLE t;--`, "`tick`", strings.Repeat("p", 300), "ünï_", "1abc", "a b", "a-b"}
	for _, h := range hostile {
		if _, err := store.NewTables("", h); !errors.Is(err, txbox.ErrInvalidIdentifier) {
			t.Errorf("prefix %q: %v, want ErrInvalidIdentifier", h, err)
		}
		if _, err := store.NewTables(h, "p_"); !errors.Is(err, txbox.ErrInvalidIdentifier) {
			t.Errorf("schema %q: %v, want ErrInvalidIdentifier", h, err)
		}
	}
}

// FuzzNewTables checks that whatever schema and prefix are accepted, every
// derived name is a plain identifier short enough for PostgreSQL (63) and
// MySQL (64), so quoting is belt and braces, never the only defence.
func FuzzNewTables(f *testing.F) {
	f.Add("", "")
	f.Add("app", "txbox_")
	f.Add(`x"; DROP TABLE t;--`, "`")
	f.Add("s", strings.Repeat("a", 40))
	f.Fuzz(func(t *testing.T, schema, prefix string) {
		tb, err := store.NewTables(schema, prefix)
		if err != nil {
			if !errors.Is(err, txbox.ErrInvalidIdentifier) {
				t.Fatalf("error %v does not match ErrInvalidIdentifier", err)
			}
			return
		}
		for _, n := range []string{tb.Schema, tb.Outbox, tb.DeadLetter, tb.Inbox, tb.Lease, tb.SchemaVersion} {
			if len(n) > 63 {
				t.Fatalf("%q is longer than 63 bytes", n)
			}
			if strings.Trim(n, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_") != "" {
				t.Fatalf("%q has a character outside [A-Za-z0-9_]", n)
			}
		}
	})
}

package sqlite

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/txbox/txbox/store/internal/sqlstore"
)

// FuzzHeaders: whatever a plain-SQL producer writes into the headers
// column, decoding never panics, and headers written by txbox come back
// unchanged.
func FuzzHeaders(f *testing.F) {
	for _, s := range []string{"", "{}", `{"a":"b"}`, `{"n":1,"b":true,"x":null,"o":{"k":"v"}}`, `[1,2]`, `"str"`, `{"a":`, "\x00\xff", `{"é":"ü","":""}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		m, _ := decodeHeaders(s)
		if m == nil {
			t.Fatal("nil headers map")
		}
		enc, err := sqlstore.EncodeHeaders("sqlite", m)
		if err != nil {
			// json.Marshal replaces invalid UTF-8; it does not fail on a
			// map[string]string.
			t.Fatalf("encode %v: %v", m, err)
		}
		back, err := decodeHeaders(enc)
		if err != nil {
			t.Fatalf("headers txbox wrote (%s) do not decode: %v", enc, err)
		}
		if len(back) != len(m) {
			t.Fatalf("round trip of %q changed the header count: %v → %v", s, m, back)
		}
		var want map[string]string
		if json.Unmarshal([]byte(s), &want) == nil && len(want) > 0 {
			for k, v := range want {
				if m[k] != v {
					t.Fatalf("header %q = %q, want %q", k, m[k], v)
				}
			}
		}
	})
}

// FuzzParseTime: timestamps in the schema's format round-trip; anything
// else is an error, never a panic.
func FuzzParseTime(f *testing.F) {
	for _, s := range []string{"2026-11-29 19:38:50.747", "2026-11-29 19:38:50", "2026-11-29T19:38:50Z", "", "garbage", "9999-12-31 23:59:59.999"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		tm, err := parseTime(s)
		if err != nil {
			return
		}
		if tm.Location() != time.UTC {
			t.Fatalf("%q parsed into %s, not UTC", s, tm.Location())
		}
		if again, err := parseTime(formatTime(tm)); err != nil || !again.Equal(tm.Truncate(time.Millisecond)) {
			t.Fatalf("%q: format/parse round trip gave %v, %v", s, again, err)
		}
	})
}

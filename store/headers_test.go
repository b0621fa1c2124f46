package store_test

import (
	"encoding/json"
	"maps"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/txbox/txbox/store"
)

func TestDecodeHeaders(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]map[string]string{
		``:                  nil,
		`{}`:                nil,
		` {} `:              nil,
		`{"a":"b"}`:         {"a": "b"},
		`{"retries": 3}`:    {"retries": "3"},
		`{"ok": true}`:      {"ok": "true"},
		`{"n": null}`:       {"n": ""},
		`{"o": {"a": 1}}`:   {"o": `{"a":1}`},
		`{"l": [1, "x"]}`:   {"l": `[1,"x"]`},
		`{"f": 1.5e3}`:      {"f": "1.5e3"},
		`{"é": "ü", "":""}`: {"é": "ü", "": ""},
	} {
		got, err := store.DecodeHeaders([]byte(in))
		if err != nil {
			t.Errorf("DecodeHeaders(%s): %v", in, err)
			continue
		}
		if !maps.Equal(got, want) {
			t.Errorf("DecodeHeaders(%s) = %v, want %v", in, got, want)
		}
	}
	for _, in := range []string{`[1, 2]`, `"text"`, `3`, `null`, `true`, `{"a":`, `not json`, `{"a":"b"} x`, "\x00\xff"} {
		h, err := store.DecodeHeaders([]byte(in))
		if err == nil {
			t.Errorf("DecodeHeaders(%q) = %v, want an error", in, h)
			continue
		}
		if !strings.Contains(err.Error(), "not a JSON object") || !utf8.ValidString(err.Error()) || strings.ContainsRune(err.Error(), 0) {
			t.Errorf("DecodeHeaders(%q) error %q does not give the reason as valid text", in, err)
		}
	}
	long := `[` + strings.Repeat(`1,`, 500) + `1]`
	if _, err := store.DecodeHeaders([]byte(long)); err == nil || len(err.Error()) > 200 {
		t.Errorf("long invalid headers: error %q is not bounded", err)
	}
}

// FuzzDecodeHeaders: whatever a plain-SQL producer writes, decoding never
// panics; it either fails with a reason or returns headers that survive a
// round trip through the encoding txbox writes, and string values are
// kept exactly.
func FuzzDecodeHeaders(f *testing.F) {
	for _, s := range []string{``, `{}`, `{"a":"b"}`, `{"retries": 3}`, `{"n":1,"b":true,"x":null,"o":{"k":"v"}}`, `[1,2]`, `"s"`, `{"a":`, "\x00\xff", `{"é":"ü"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		h, err := store.DecodeHeaders(raw)
		if err != nil {
			if h != nil {
				t.Fatalf("error %v with headers %v", err, h)
			}
			return
		}
		enc := []byte("{}") // what the dialects write for no headers
		if len(h) > 0 {
			if enc, err = json.Marshal(h); err != nil {
				t.Fatalf("encode %v: %v", h, err)
			}
		}
		back, err := store.DecodeHeaders(enc)
		if err != nil || len(back) != len(h) {
			t.Fatalf("round trip of %q: %v, %v → %v", raw, err, h, back)
		}
		var strs map[string]string
		if json.Unmarshal(raw, &strs) == nil {
			for k, v := range strs {
				if h[k] != v {
					t.Fatalf("string header %q = %q, want %q", k, h[k], v)
				}
			}
		}
	})
}

package store

import (
	"encoding/json"
	"maps"
	"testing"
)

// FuzzDecodeFlat: wherever the fast path accepts input, encoding/json
// decodes it to the same headers (so the fast path changes no delivery).
func FuzzDecodeFlat(f *testing.F) {
	for _, s := range []string{`{}`, ` { } `, `{"a":"b"}`, `{"a":"b","a":"c"}`, "{\"content-type\" :\t\"application/json\" ,\n\"x\":\"\"}",
		`{"a":"b",}`, `{"a":"b"} x`, `{"a":1}`, `{"a\"":"b"}`, `{"é":"ü"}`, `{"a":"b"`, `{"a" "b"}`, `{,}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		got, ok := decodeFlat(raw)
		if !ok {
			return
		}
		var want map[string]string
		if err := json.Unmarshal(raw, &want); err != nil {
			t.Fatalf("fast path accepted %q, encoding/json refuses it: %v", raw, err)
		}
		if !maps.Equal(got, want) {
			t.Fatalf("%q: fast path %v, encoding/json %v", raw, got, want)
		}
	})
}

func TestDecodeFlatTakesWhatTxboxWrites(t *testing.T) {
	for _, s := range []string{`{"content-type":"application/json"}`, `{"a": "b", "c": "d"}`, `{}`} {
		if _, ok := decodeFlat([]byte(s)); !ok {
			t.Errorf("fast path refused %s", s)
		}
	}
	for _, s := range []string{`{"a":"\u00e9"}`, `{"a":1}`, `{"a":"b"} {}`, `[]`} {
		if _, ok := decodeFlat([]byte(s)); ok {
			t.Errorf("fast path accepted %s", s)
		}
	}
}

func BenchmarkDecodeHeaders(b *testing.B) {
	raw := []byte(`{"content-type": "application/json", "traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}`)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := DecodeHeaders(raw); err != nil {
			b.Fatal(err)
		}
	}
}

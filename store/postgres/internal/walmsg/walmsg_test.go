package walmsg

import (
	"bytes"
	"errors"
	"maps"
	"testing"
	"time"
)

func TestRoundTrip(t *testing.T) {
	id := [16]byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}
	created := time.Date(2026, 12, 2, 3, 4, 5, 123456000, time.UTC)
	msg := Append(nil, id, created, time.Time{}, "order.created", "order-7", []byte(`{"a":"b"}`), []byte("payload"))
	ev, err := Decode(msg)
	if err != nil {
		t.Fatal(err)
	}
	if ev.ID != id || !ev.CreatedAt.Equal(created) || !ev.NotBefore.IsZero() || ev.Type != "order.created" ||
		ev.Key != "order-7" || ev.Headers["a"] != "b" || !bytes.Equal(ev.Payload, []byte("payload")) {
		t.Fatalf("decoded %+v", ev)
	}
}

func TestDecodeRejects(t *testing.T) {
	good := Append(nil, [16]byte{}, time.Now(), time.Time{}, "t", "", nil, nil)
	cases := map[string][]byte{
		"short":       good[:10],
		"version":     append([]byte{2}, good[1:]...),
		"type length": append(append([]byte{}, good[:headerSize]...), 0, 0, 1, 0),
		"headers":     Append(nil, [16]byte{}, time.Now(), time.Time{}, "t", "", []byte(`[1]`), nil),
	}
	for name, msg := range cases {
		if _, err := Decode(msg); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: got %v, want ErrMalformed", name, err)
		}
	}
}

func FuzzDecode(f *testing.F) {
	f.Add(Append(nil, [16]byte{9}, time.Now(), time.Now(), "t", "k", []byte(`{"x":"y"}`), []byte("p")))
	var c HeaderCache
	f.Fuzz(func(t *testing.T, msg []byte) {
		ev, err := Decode(msg)
		cev, cerr := c.Decode(msg)
		if (err == nil) != (cerr == nil) || (err == nil && !maps.Equal(ev.Headers, cev.Headers)) {
			t.Fatalf("Decode: %v, %v; HeaderCache.Decode: %v, %v", ev, err, cev, cerr)
		}
		if err != nil {
			return
		}
		var h []byte
		if ev.Headers != nil {
			h = []byte("{}")
		}
		_ = Append(nil, ev.ID, ev.CreatedAt, ev.NotBefore, ev.Type, ev.Key, h, ev.Payload)
	})
}

// TestHeaderCache: the cache decodes what Decode decodes, gives every
// event a map of its own, and notices headers that changed or are bad.
func TestHeaderCache(t *testing.T) {
	var c HeaderCache
	msg := func(h string) []byte {
		return Append(nil, [16]byte{1}, time.Now(), time.Time{}, "t", "", []byte(h), []byte("p"))
	}
	a, err := c.Decode(msg(`{"content-type":"application/json"}`))
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.Decode(msg(`{"content-type":"application/json"}`))
	if err != nil {
		t.Fatal(err)
	}
	a.Headers["content-type"] = "changed"
	a.Headers["extra"] = "x"
	if len(b.Headers) != 1 || b.Headers["content-type"] != "application/json" {
		t.Fatalf("second event's headers %v: shares the first's map", b.Headers)
	}
	d, err := c.Decode(msg(`{"content-type":"text/plain","x":"y"}`))
	if err != nil || len(d.Headers) != 2 || d.Headers["content-type"] != "text/plain" {
		t.Fatalf("changed headers: %v, %v", d.Headers, err)
	}
	if _, err := c.Decode(msg(`{"content-type":1}`)); !errors.Is(err, ErrMalformed) {
		t.Fatalf("bad headers after good ones: %v, want ErrMalformed", err)
	}
	e, err := c.Decode(msg(""))
	if err != nil || e.Headers != nil {
		t.Fatalf("no headers: %v, %v", e.Headers, err)
	}
	f, err := c.Decode(msg(`{"content-type":"text/plain","x":"y"}`))
	if err != nil || len(f.Headers) != 2 || f.Headers["x"] != "y" {
		t.Fatalf("cached headers again: %v, %v", f.Headers, err)
	}
}

// BenchmarkDecodeHeaders is the decode of a message with the usual
// content-type header, without and with the cache.
func BenchmarkDecodeHeaders(b *testing.B) {
	msg := Append(nil, [16]byte{1}, time.Now(), time.Time{}, "orders", "", []byte(`{"content-type":"application/json"}`),
		[]byte(`{"order_id":12345,"amount":"99.90","currency":"EUR","customer":"c-778"}`))
	b.Run("Decode", func(b *testing.B) {
		for b.Loop() {
			if _, err := Decode(msg); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("HeaderCache", func(b *testing.B) {
		var c HeaderCache
		for b.Loop() {
			if _, err := c.Decode(msg); err != nil {
				b.Fatal(err)
			}
		}
	})
}

package walmsg

import (
	"bytes"
	"errors"
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
	f.Fuzz(func(t *testing.T, msg []byte) {
		ev, err := Decode(msg)
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

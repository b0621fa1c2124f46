package postgres

import (
	"encoding/binary"
	"strings"
	"testing"
	"time"

	"github.com/txbox/txbox/store/postgres/internal/walmsg"
)

// TestMatchesSyncStandby covers the forms of synchronous_standby_names
// that PostgreSQL accepts, read as current_setting returns them.
func TestMatchesSyncStandby(t *testing.T) {
	const app = "txbox-relay"
	cases := []struct {
		setting string
		want    bool
	}{
		{"", false},
		{"   ", false},
		{"*", true},
		{"standby1", false},
		{"standby1, standby2", false},
		{"standby1, *", true},
		{"txbox-relay", true}, // an unquoted name with a dash does not scan in PostgreSQL, but refusing is the safe side
		{`"txbox-relay"`, true},
		{`"TXBOX-RELAY"`, true}, // PostgreSQL compares names case-insensitively
		{`"txbox-relay2"`, false},
		{`FIRST 1 (s1, "txbox-relay")`, true},
		{`first 2 (s1, s2)`, false},
		{`ANY 1 (s1, s2)`, false},
		{`any 1 ("txbox-relay", s2)`, true},
		{`ANY 2 (*)`, true},
		{`2 (s1, "txbox-relay")`, true},
		{`2 (s1, s2)`, false},
		{`"a""b", s2`, false},
		{`FIRST 1 (s1, s2`, true}, // does not parse: refuse
		{`"unterminated`, true},
		{`s1,,s2`, true},
	}
	for _, c := range cases {
		if got := matchesSyncStandby(c.setting, app); got != c.want {
			t.Errorf("matchesSyncStandby(%q, %q) = %v, want %v", c.setting, app, got, c.want)
		}
	}
	names, ok := parseSyncStandbyNames(`FIRST 2 ("a""b", c_1)`)
	if !ok || len(names) != 2 || names[0] != `a"b` || names[1] != "c_1" {
		t.Errorf("parse: %q %v", names, ok)
	}
	if !matchesSyncStandby("relay_b, relay", "RELAY") {
		t.Error("an unquoted name must match case-insensitively")
	}
}

func TestWALServerError(t *testing.T) {
	if err := walServerError("replica", 150000); err == nil || !strings.Contains(err.Error(), "wal_level = logical") {
		t.Errorf("replica: %v", err)
	}
	if err := walServerError("logical", 140009); err == nil || !strings.Contains(err.Error(), "15") {
		t.Errorf("14: %v", err)
	}
	if err := walServerError("logical", 150004); err != nil {
		t.Errorf("15: %v", err)
	}
}

// TestDecodeMessageEvent: a message that does not decode is still an
// event, with Invalid set; its id is the message's own when that is
// readable, else derived from the LSN (the same on a replay).
func TestDecodeMessageEvent(t *testing.T) {
	d := newStreamDecoder("p", "s", "t", 0)
	id := [16]byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}
	future := time.Now().Add(time.Hour).Truncate(time.Microsecond)
	good := walmsg.Append(nil, id, time.UnixMicro(1700000000000000), future, "order.created", "k1", []byte(`{"a":"b"}`), []byte("payload"))
	ev := d.messageEvent(100, good)
	if ev.Row.Invalid != "" || ev.Row.ID != id || ev.Row.EventType != "order.created" || ev.Row.Key != "k1" ||
		string(ev.Row.Payload) != "payload" || ev.Row.Headers["a"] != "b" || !ev.NotBefore.Equal(future) || ev.Captured {
		t.Errorf("good message: %+v", ev)
	}
	truncated := good[:40]
	ev = d.messageEvent(100, truncated)
	if ev.Row.Invalid == "" || ev.Row.ID != id {
		t.Errorf("truncated message: %+v", ev.Row)
	}
	ev = d.messageEvent(200, []byte("garbage"))
	ev2 := d.messageEvent(200, []byte("other garbage"))
	ev3 := d.messageEvent(201, []byte("garbage"))
	if ev.Row.Invalid == "" || !strings.Contains(ev.Row.Invalid, "WAL position") || ev.Row.ID != ev2.Row.ID || ev.Row.ID == ev3.Row.ID {
		t.Errorf("garbage: %+v / %v / %v", ev.Row, ev2.Row.ID, ev3.Row.ID)
	}
	if v := ev.Row.ID.Version(); v != 8 {
		t.Errorf("derived id version %d", v)
	}
}

func TestPgTimestamptz(t *testing.T) {
	want := time.Date(2026, 12, 2, 3, 4, 5, 6000, time.UTC)
	b := binary.BigEndian.AppendUint64(nil, uint64(want.UnixMicro()-pgEpochMicros))
	if got, ok := pgTimestamptz(b); !ok || !got.Equal(want) {
		t.Errorf("got %v %v", got, ok)
	}
	if _, ok := pgTimestamptz(b[:7]); ok {
		t.Error("7 bytes decoded")
	}
	if _, ok := pgTimestamptz(binary.BigEndian.AppendUint64(nil, 1<<63-1)); ok {
		t.Error("infinity decoded")
	}
}

// TestParseLogicalMalformed: a malformed message is an error, not a panic.
func TestParseLogicalMalformed(t *testing.T) {
	for _, b := range [][]byte{nil, {'M'}, {'M', 1, 0, 0, 0, 0, 0, 0, 0, 1, 'p', 0, 0xff, 0xff, 0xff, 0xff}, {'I', 0, 0}, {'Z'}} {
		if _, err := parseLogical(b); err == nil {
			t.Errorf("%q parsed", b)
		}
	}
}

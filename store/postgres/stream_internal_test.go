package postgres

import (
	"bytes"
	"encoding/binary"
	"strings"
	"testing"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/store"
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
// event, of type store.UndecodableEventType, with the raw bytes as its
// payload, its WAL position in a header and Invalid saying why and where;
// its id is the message's own when that is readable, else derived from
// the LSN (the same on a replay).
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
	undecodable := func(name string, ev *store.StreamEvent, raw []byte, lsn string) {
		t.Helper()
		r := ev.Row
		if r.EventType != store.UndecodableEventType || !bytes.Equal(r.Payload, raw) || len(r.Headers) != 1 ||
			r.Headers[WALPositionHeader] != lsn || !strings.Contains(r.Invalid, "malformed") ||
			!strings.Contains(r.Invalid, "WAL position "+lsn) || ev.Captured || !ev.NotBefore.IsZero() {
			t.Errorf("%s: %+v", name, ev)
		}
		if err := txbox.ValidateEventType(r.EventType); err != nil {
			t.Errorf("%s: the outbox would refuse its type: %v", name, err)
		}
	}
	truncated := good[:40]
	ev = d.messageEvent(0x16B3748, truncated)
	undecodable("truncated", ev, truncated, "0/16B3748")
	if ev.Row.ID != id {
		t.Errorf("truncated message: id %s, want its own %x", ev.Row.ID, id)
	}
	badType := walmsg.Append(nil, id, time.Now(), time.Time{}, "no spaces", "k1", nil, []byte("p"))
	ev = d.messageEvent(1<<32|7, badType)
	undecodable("bad type", ev, badType, "1/7")
	if ev.Row.ID != id || !strings.Contains(ev.Row.Invalid, "invalid event type") {
		t.Errorf("bad type: %+v", ev.Row)
	}
	ev = d.messageEvent(200, []byte("garbage"))
	undecodable("garbage", ev, []byte("garbage"), "0/C8")
	ev2 := d.messageEvent(200, []byte("other garbage"))
	ev3 := d.messageEvent(201, []byte("garbage"))
	if !strings.Contains(ev.Row.Invalid, "derived from the position") || ev.Row.ID != ev2.Row.ID || ev.Row.ID == ev3.Row.ID {
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

// pgoutput v1 messages, built as the server sends them.

func pgoBegin(final uint64, xid uint32) []byte {
	b := append([]byte{'B'}, binary.BigEndian.AppendUint64(nil, final)...)
	b = binary.BigEndian.AppendUint64(b, 0)
	return binary.BigEndian.AppendUint32(b, xid)
}

func pgoCommit(commit, end uint64) []byte {
	b := []byte{'C', 0}
	b = binary.BigEndian.AppendUint64(b, commit)
	b = binary.BigEndian.AppendUint64(b, end)
	return binary.BigEndian.AppendUint64(b, 0)
}

func pgoMessage(transactional bool, lsn uint64, prefix string, content []byte) []byte {
	b := []byte{'M', 0}
	if transactional {
		b[1] = 1
	}
	b = binary.BigEndian.AppendUint64(b, lsn)
	b = append(append(b, prefix...), 0)
	b = binary.BigEndian.AppendUint32(b, uint32(len(content)))
	return append(b, content...)
}

func pgoRelation(id uint32, nsp, rel string, cols ...string) []byte {
	b := append([]byte{'R'}, binary.BigEndian.AppendUint32(nil, id)...)
	b = append(append(b, nsp...), 0)
	b = append(append(b, rel...), 0)
	b = append(b, 'd')
	b = binary.BigEndian.AppendUint16(b, uint16(len(cols)))
	for _, c := range cols {
		b = append(b, 0)
		b = append(append(b, c...), 0)
		b = binary.BigEndian.AppendUint32(b, 25)
		b = binary.BigEndian.AppendUint32(b, 0xffffffff)
	}
	return b
}

// pgoCol is one tuple column: kind 'n' (null), 'b' or 't' with data.
type pgoCol struct {
	kind byte
	data []byte
}

func pgoInsert(rel uint32, cols ...pgoCol) []byte {
	b := append([]byte{'I'}, binary.BigEndian.AppendUint32(nil, rel)...)
	b = append(b, 'N')
	b = binary.BigEndian.AppendUint16(b, uint16(len(cols)))
	for _, c := range cols {
		b = append(b, c.kind)
		if c.kind != 'n' {
			b = binary.BigEndian.AppendUint32(b, uint32(len(c.data)))
			b = append(b, c.data...)
		}
	}
	return b
}

func feed(t *testing.T, d *streamDecoder, msgs ...[]byte) []decodeResult {
	t.Helper()
	var out []decodeResult
	for i, m := range msgs {
		res, err := d.handle(uint64(1000+i), m)
		if err != nil {
			t.Fatalf("message %d (%q): %v", i, m[0], err)
		}
		out = append(out, res)
	}
	return out
}

// TestStreamDecoder: transactions framed by Begin and Commit, events
// numbered in Pos, other relations and prefixes ignored, event-less and
// already confirmed transactions passed, captured rows with bad columns
// handed out Invalid.
func TestStreamDecoder(t *testing.T) {
	d := newStreamDecoder("txbox:x", "s", "outbox", 500)
	cols := outboxColumns[:]
	id := [16]byte{9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9}
	msg := walmsg.Append(nil, id, time.Now(), time.Time{}, "t", "", nil, []byte("p"))
	ts := binary.BigEndian.AppendUint64(nil, uint64(time.Now().UnixMicro()-pgEpochMicros))
	good := []pgoCol{
		{'b', id[:]}, {'b', []byte("row.type")}, {'n', nil}, {'b', []byte("pl")}, {'b', []byte("\x01{\"a\":\"b\"}")},
		{'b', []byte{0, 0, 0, 0}}, {'b', ts}, {'b', ts}, {'b', binary.BigEndian.AppendUint64(nil, 77)},
	}
	res := feed(t, d,
		pgoRelation(1, "s", "outbox", cols...),
		pgoRelation(2, "s", "other", "id"),
		// Confirmed before a restart: skipped.
		pgoBegin(400, 1), pgoMessage(true, 390, "txbox:x", msg), pgoCommit(400, 450),
		pgoBegin(600, 2),
		pgoMessage(true, 510, "txbox:x", msg),
		pgoMessage(false, 511, "txbox:x", msg),
		pgoMessage(true, 512, "txbox:y", msg),
		pgoInsert(2, pgoCol{'b', id[:]}),
		pgoInsert(1, good...),
		pgoInsert(1, append([]pgoCol{{'n', nil}}, good[1:]...)...),
		pgoInsert(1, append(append([]pgoCol{}, good[:4]...), append([]pgoCol{{'b', []byte("\x01[1]")}}, good[5:]...)...)...),
		pgoInsert(1, append(append([]pgoCol{}, good[:3]...), append([]pgoCol{{'t', []byte("pl")}}, good[4:]...)...)...),
		pgoInsert(1, append(append([]pgoCol{}, good[:5]...), append([]pgoCol{{'b', []byte{0, 2}}}, good[6:]...)...)...),
		pgoInsert(1, append(append([]pgoCol{}, good[:5]...), append([]pgoCol{{'n', nil}}, good[6:]...)...)...),
		pgoCommit(600, 650),
		pgoBegin(700, 3), pgoMessage(true, 690, "txbox:other", msg), pgoCommit(700, 750),
	)
	if res[4].passed != 450 || res[4].tx != nil {
		t.Errorf("a confirmed transaction: %+v", res[4])
	}
	tx := res[16].tx
	if tx == nil || tx.End != 650 || len(tx.Events) != 7 {
		t.Fatalf("transaction: %+v", res[16])
	}
	if res[19].passed != 750 || res[19].tx != nil {
		t.Errorf("an event-less transaction: %+v", res[19])
	}
	for i, ev := range tx.Events {
		if ev.Pos != 600<<16|uint64(i) {
			t.Errorf("event %d: pos %x", i, ev.Pos)
		}
	}
	if ev := tx.Events[0]; ev.Captured || ev.Row.ID != id || ev.Row.Invalid != "" {
		t.Errorf("message: %+v", ev)
	}
	if ev := tx.Events[1]; !ev.Captured || ev.Row.ID != id || ev.Row.EventType != "row.type" || ev.Row.Headers["a"] != "b" ||
		ev.Row.Seq != 77 || ev.Row.Invalid != "" || string(ev.Row.Payload) != "pl" || ev.Row.CreatedAt.IsZero() || !ev.NotBefore.IsZero() {
		t.Errorf("captured row: %+v", ev)
	}
	if ev := tx.Events[2]; ev.Row.Invalid == "" || !strings.Contains(ev.Row.Invalid, "id null") || ev.Row.ID != lsnID(1011) {
		t.Errorf("a row without an id: %+v", ev.Row)
	}
	if ev := tx.Events[3]; !strings.Contains(ev.Row.Invalid, "not a JSON object") || ev.Row.ID != id {
		t.Errorf("a row with array headers: %+v", ev.Row)
	}
	if ev := tx.Events[4]; !strings.Contains(ev.Row.Invalid, "payload sent in format") {
		t.Errorf("a text column: %+v", ev.Row)
	}
	if ev := tx.Events[5]; !strings.Contains(ev.Row.Invalid, "attempts is 2 bytes, not 4") || ev.Row.ID != id || ev.Row.Attempts != 0 {
		t.Errorf("attempts of 2 bytes: %+v", ev.Row)
	}
	if ev := tx.Events[6]; !strings.Contains(ev.Row.Invalid, "attempts null") {
		t.Errorf("attempts null: %+v", ev.Row)
	}
	// Framing errors are errors, not panics.
	if _, err := d.handle(1, pgoCommit(1, 2)); err == nil {
		t.Error("a commit outside a transaction")
	}
	if _, err := d.handle(1, pgoInsert(9, good...)); err == nil {
		t.Error("an insert into an undescribed relation")
	}
}

// BenchmarkStreamDecode decodes transactions of 100 messages of 256
// bytes; one op is one event.
func BenchmarkStreamDecode(b *testing.B) {
	d := newStreamDecoder("txbox:x", "s", "outbox", 0)
	id := [16]byte{1}
	msg := pgoMessage(true, 10, "txbox:x", walmsg.Append(nil, id, time.Now(), time.Time{}, "bench.event", "key-1", []byte(`{"a":"b"}`), make([]byte, 256)))
	b.ReportAllocs()
	lsn := uint64(1000)
	for i := 0; i < b.N; i++ {
		if i%100 == 0 {
			if _, err := d.handle(lsn, pgoBegin(lsn+100, 1)); err != nil {
				b.Fatal(err)
			}
		}
		if _, err := d.handle(lsn, msg); err != nil {
			b.Fatal(err)
		}
		if i%100 == 99 || i == b.N-1 {
			if _, err := d.handle(lsn, pgoCommit(lsn+100, lsn+120)); err != nil {
				b.Fatal(err)
			}
			lsn += 200
		}
	}
}

// TestStreamReadTimeoutBounds: the read timeout leaves the status
// sender's period on both sides: above half the sender timeout (when a
// walsender busy in a large filtered transaction answers) and below the
// whole (when the server frees the slot of a silent stream).
func TestStreamReadTimeoutBounds(t *testing.T) {
	for _, timeout := range []time.Duration{time.Second, 2 * time.Second, DefaultSenderTimeout, time.Minute} {
		for _, interval := range []time.Duration{100 * time.Millisecond, DefaultStreamStatusInterval, 30 * time.Second} {
			d, ask := streamReadTimeout(timeout), streamAskEvery(interval, timeout)
			if d <= timeout/2+ask || d >= timeout-ask {
				t.Errorf("sender timeout %s, interval %s: read timeout %s, period %s", timeout, interval, d, ask)
			}
		}
	}
	if got := streamReadTimeout(DefaultSenderTimeout); got != 7500*time.Millisecond {
		t.Errorf("default read timeout %s", got)
	}
}

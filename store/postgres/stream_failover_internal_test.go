package postgres

import (
	"encoding/binary"
	"errors"
	"strings"
	"testing"

	"github.com/txbox/txbox/store"
)

// TestJudgeFailover: the verdict on what the primary and the DSN's hosts
// showed. Safe only when every standby the primary streams to was read
// and shows a usable copy; anything seen wrong is unsafe, with a reason
// naming the setting; what could not be read is unknown.
func TestJudgeFailover(t *testing.T) {
	t.Parallel()
	const slot = "txbox_slot"
	primary := func(mod func(*primaryFailover)) *primaryFailover {
		pf := &primaryFailover{version: 170004, slotFailover: true, standbySlots: []string{"sb1_slot"},
			physical: map[string]bool{"sb1_slot": true}, identity: "p",
			replicas: []store.StreamReplica{{ApplicationName: "sb1", State: "streaming", SyncState: "sync", Slot: "sb1_slot"}}}
		if mod != nil {
			mod(pf)
		}
		return pf
	}
	good := func(mod func(*standbyReading)) standbyReading {
		yes := true
		r := standbyReading{host: "10.0.0.2:5432", inRecovery: true, version: 170004, identity: "s", st: store.StreamStandby{
			Host: "10.0.0.2:5432", SyncReplicationSlots: true, HotStandbyFeedback: true, PrimarySlotName: "sb1_slot",
			ConninfoDBName: &yes, SlotExists: true, Synced: true}}
		if mod != nil {
			mod(&r)
		}
		return r
	}
	self := standbyReading{host: "10.0.0.1:5432", version: 170004, identity: "p"}
	for _, tc := range []struct {
		name     string
		disabled bool
		pf       *primaryFailover
		rs       []standbyReading
		verdict  string
		want     string
		pending  bool
	}{
		{"safe", false, primary(nil), []standbyReading{self, good(nil)}, store.FailoverSafe, "synced and persistent on sb1 (slot sb1_slot)", false},
		{"the DSN names only the primary", false, primary(nil), nil, store.FailoverUnknown, "sb1 (slot sb1_slot) could not be read", false},
		{"the standby does not answer", false, primary(nil), []standbyReading{self, {host: "10.0.0.2:5432", err: errors.New("refused")}},
			store.FailoverUnknown, "10.0.0.2:5432 (a host of the DSN) did not answer: refused", false},
		{"another primary in the DSN", false, primary(nil), []standbyReading{{host: "10.0.0.3:5432", identity: "q", version: 170004}},
			store.FailoverUnknown, "not in recovery: another primary", false},
		{"no standby", false, primary(func(pf *primaryFailover) { pf.replicas = nil }), nil, store.FailoverNoStandby, "nothing to promote", false},
		{"PostgreSQL 16 with a standby", false, primary(func(pf *primaryFailover) { pf.version = 160004 }), nil,
			store.FailoverUnsafe, "PostgreSQL 16 keeps the slot on the primary only", false},
		{"PostgreSQL 15 alone", false, primary(func(pf *primaryFailover) { pf.version = 150010; pf.replicas = nil }), nil,
			store.FailoverNoStandby, "PostgreSQL 15 keeps the slot on the primary only", false},
		{"not a failover slot", false, primary(func(pf *primaryFailover) { pf.slotFailover = false }), []standbyReading{good(func(r *standbyReading) { r.st.SlotExists = false })},
			store.FailoverUnsafe, "is not a failover slot (run txbox migrate", false},
		{"failover off", true, primary(func(pf *primaryFailover) { pf.slotFailover = false }), nil,
			store.FailoverUnsafe, "(database.wal.failover is false)", false},
		{"synchronized_standby_slots unset", false, primary(func(pf *primaryFailover) { pf.standbySlots = nil }), []standbyReading{good(nil)},
			store.FailoverUnsafe, "synchronized_standby_slots is not set on the primary: the slot can confirm WAL a standby has not received, and a promotion of that standby loses those events; set it to sb1_slot", false},
		{"a standby it does not name", false, primary(func(pf *primaryFailover) {
			pf.replicas = append(pf.replicas, store.StreamReplica{ApplicationName: "sb2", Slot: "sb2_slot"})
			pf.physical["sb2_slot"] = true
		}), nil, store.FailoverUnsafe, "standby sb2 (slot sb2_slot) streams through the slot sb2_slot, which synchronized_standby_slots does not name", false},
		{"a named slot missing", false, primary(func(pf *primaryFailover) { pf.standbySlots = append(pf.standbySlots, "gone") }), nil,
			store.FailoverUnsafe, "synchronized_standby_slots names gone, which is not a physical slot on the primary", false},
		{"a named standby down", false, primary(func(pf *primaryFailover) { pf.physical["sb1_slot"] = false }), nil,
			store.FailoverUnsafe, "is not connected: the relay's stream waits for it", false},
		{"a standby without a slot", false, primary(func(pf *primaryFailover) { pf.replicas[0].Slot = "" }), nil,
			store.FailoverUnsafe, "standby sb1 streams without a physical slot", false},
		{"sync_replication_slots off", false, primary(nil), []standbyReading{good(func(r *standbyReading) { r.st.SyncReplicationSlots = false })},
			store.FailoverUnsafe, "sync_replication_slots is off on standby 10.0.0.2:5432", false},
		{"hot_standby_feedback off", false, primary(nil), []standbyReading{good(func(r *standbyReading) { r.st.HotStandbyFeedback = false })},
			store.FailoverUnsafe, "hot_standby_feedback is off on standby 10.0.0.2:5432", false},
		{"no dbname", false, primary(nil), []standbyReading{good(func(r *standbyReading) { no := false; r.st.ConninfoDBName = &no })},
			store.FailoverUnsafe, "primary_conninfo on standby 10.0.0.2:5432 names no dbname", false},
		{"primary_conninfo unreadable, copy usable", false, primary(nil), []standbyReading{good(func(r *standbyReading) { r.st.ConninfoDBName = nil })},
			store.FailoverSafe, "synced and persistent", false},
		{"a temporary copy", false, primary(nil), []standbyReading{good(func(r *standbyReading) { r.st.Temporary = true })},
			store.FailoverUnsafe, "is still temporary, which a promotion drops", true},
		{"no copy yet", false, primary(nil), []standbyReading{good(func(r *standbyReading) { r.st.SlotExists = false })},
			store.FailoverUnsafe, "has no copy of the slot txbox_slot", true},
		{"an invalidated copy", false, primary(nil), []standbyReading{good(func(r *standbyReading) { r.st.Invalidated = "rows_removed" })},
			store.FailoverUnsafe, "is invalidated (rows_removed)", false},
		{"a standby of 16", false, primary(nil), []standbyReading{good(func(r *standbyReading) { r.version = 160001 })},
			store.FailoverUnsafe, "is PostgreSQL 16: it cannot keep a copy", false},
	} {
		j := judgeFailover(slot, tc.disabled, tc.pf, tc.rs)
		all := j.Note + "\n" + strings.Join(j.Problems, "\n") + "\n" + strings.Join(j.Unchecked, "\n")
		if j.Verdict != tc.verdict || !strings.Contains(all, tc.want) || (len(j.pending) > 0) != tc.pending {
			t.Errorf("%s: verdict %s (want %s), pending %v (want %v):\n%s\nwant %q", tc.name, j.Verdict, tc.verdict, j.pending, tc.pending, all, tc.want)
		}
		if j.Safe() != (tc.verdict == store.FailoverSafe) {
			t.Errorf("%s: Safe() = %v", tc.name, j.Safe())
		}
	}
}

func TestConninfoHasDBName(t *testing.T) {
	t.Parallel()
	for s, want := range map[string]bool{
		"host=p port=5432 user=repl dbname=postgres":               true,
		"host=p dbname = 'my db' application_name=s1":              true,
		"host=p password='a b dbname=x' user=r":                    false,
		`host=p password='it\'s' dbname=app`:                       true,
		"host=p user=repl":                                         false,
		"host=p dbname=":                                           false,
		"postgresql://repl@p:5432/postgres?application_name=s1":    true,
		"postgres://repl@p:5432?dbname=app":                        true,
		"postgres://repl@p:5432":                                   false,
		"":                                                         false,
		"garbage":                                                  false,
		"  host=p\tdbname=x  ":                                     true,
		"host=p application_name=dbname dbname_other=x":            false,
		"user=dbname host=h":                                       false,
		"host=a,b dbname=postgres target_session_attrs=read-write": true,
	} {
		if got := conninfoHasDBName(s); got != want {
			t.Errorf("conninfoHasDBName(%q) = %v, want %v", s, got, want)
		}
	}
}

// TestParseSlotList: synchronized_standby_slots as PostgreSQL reads an
// identifier list (slot names are lower case, digits and underscores).
func TestParseSlotList(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		` sb1_slot, "sb_2" ,SB3 ,`: "sb1_slot|sb_2|sb3",
		"a_slot,b_slot":            "a_slot|b_slot",
		"":                         "",
	} {
		if got := strings.Join(parseSlotList(in), "|"); got != want {
			t.Errorf("parseSlotList(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestDecoderLeavesPollersRows: a captured row whose transaction the
// state row's snapshot shows belongs to the poller: the decoder leaves it
// out (an adopted slot streams a few such transactions), and hands out
// every other one.
func TestDecoderLeavesPollersRows(t *testing.T) {
	t.Parallel()
	snap, err := parseXidSnapshot("100:105:101,103")
	if err != nil {
		t.Fatal(err)
	}
	for xid, want := range map[uint64]bool{99: true, 100: true, 101: false, 102: true, 103: false, 104: true, 105: false, 200: false} {
		if got := snap.visible(xid); got != want {
			t.Errorf("visible(%d) = %v", xid, got)
		}
	}
	if (xidSnapshot{}).visible(1) {
		t.Error("no snapshot shows a transaction")
	}
	for _, bad := range []string{"", "1:2", "a:2:", "1:2:x"} {
		if _, err := parseXidSnapshot(bad); err == nil {
			t.Errorf("parsed %q", bad)
		}
	}
	if s, err := parseXidSnapshot("7:9:"); err != nil || len(s.xip) != 0 || !s.visible(8) {
		t.Errorf("7:9: → %+v, %v", s, err)
	}

	d := newStreamDecoder("txbox:x", "s", "outbox", 0).ownedBy(snap)
	row := func(xid uint64) []byte {
		id := [16]byte{byte(xid)}
		return pgoInsert(1, pgoCol{'b', id[:]}, pgoCol{'b', []byte("t")}, pgoCol{'n', nil}, pgoCol{'b', []byte("p")}, pgoCol{'n', nil},
			pgoCol{'b', []byte{0, 0, 0, 0}}, pgoCol{'n', nil}, pgoCol{'n', nil}, pgoCol{'b', binary.BigEndian.AppendUint64(nil, xid)})
	}
	res := feed(t, d, pgoRelation(1, "s", "outbox", outboxColumns[:]...),
		pgoBegin(600, 1), row(102), pgoCommit(600, 650), // the poller's: passed
		pgoBegin(700, 2), row(103), row(102), pgoCommit(700, 750)) // the stream's and the poller's
	if res[3].passed != 650 || res[3].tx != nil {
		t.Errorf("the poller's transaction: %+v", res[3])
	}
	tx := res[7].tx
	if tx == nil || len(tx.Events) != 1 || tx.Events[0].Row.Seq != 103 {
		t.Fatalf("the stream's transaction: %+v", res[7])
	}
}

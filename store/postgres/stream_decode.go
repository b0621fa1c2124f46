package postgres

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pglogrepl"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/store"
	"github.com/txbox/txbox/store/postgres/internal/walmsg"
)

// Decoding the pgoutput stream (protocol version 1, binary tuples,
// messages on) into store.StreamTx values.
//
// An event's Pos is the commit LSN shifted left by 16 bits, or'ed with the
// event's index in its transaction: transactions come in commit order and
// commit LSNs increase, so Pos increases along the stream. An index past
// 65535 stays at 65535 (the later events of so large a transaction share
// a Pos; their order is still the transaction's, which a spill keeps by
// id). stream_pos is a signed bigint, so the scheme holds until the WAL
// reaches 2^47 bytes (128 TiB).

// maxPosIndex is the largest index in a transaction a Pos can carry.
const maxPosIndex = 1<<16 - 1

// outboxColumns are the outbox columns a captured row is read from.
var outboxColumns = [...]string{"id", "event_type", "event_key", "payload", "headers", "attempts", "due_at", "created_at", "txid"}

const (
	colID = iota
	colType
	colKey
	colPayload
	colHeaders
	colAttempts
	colDue
	colCreated
	colTxid
)

// outboxRelation maps the outbox columns to their positions in a
// relation's tuples (-1: the relation has no such column).
type outboxRelation struct {
	pos [len(outboxColumns)]int
}

// streamDecoder turns pgoutput messages into transactions. It keeps the
// transaction being read and the relations the stream described.
type streamDecoder struct {
	prefix string
	// nsp and rel name the outbox table.
	nsp, rel string
	// skipTo is the persisted confirmed LSN: a transaction that ended at
	// or before it was confirmed before a restart and is skipped.
	skipTo uint64
	// pollers is the state row's snapshot: a captured row whose
	// transaction it shows belongs to the poller and is left out. For a
	// slot made by migrate that is no row at all (the snapshot is the
	// slot's creation snapshot, and the stream starts after it); for an
	// adopted slot it is the rows of the transactions that committed
	// between the slot's new start and the snapshot (adoptSlot).
	pollers xidSnapshot
	now     func() time.Time

	// rels holds the outbox relation by id; other relations map to nil.
	rels map[uint32]*outboxRelation

	inTx   bool
	commit uint64 // the transaction's commit LSN, from its Begin
	events []*store.StreamEvent
	// headers saves decoding the same headers JSON for every message.
	headers walmsg.HeaderCache
}

func newStreamDecoder(prefix, nsp, rel string, skipTo uint64) *streamDecoder {
	return &streamDecoder{prefix: prefix, nsp: nsp, rel: rel, skipTo: skipTo, now: time.Now, rels: map[uint32]*outboxRelation{}}
}

// ownedBy leaves the captured rows that snapshot shows to the poller.
func (d *streamDecoder) ownedBy(snapshot xidSnapshot) *streamDecoder {
	d.pollers = snapshot
	return d
}

// decodeResult is what one message of the stream made.
type decodeResult struct {
	// tx is a finished transaction with events, to hand out.
	tx *store.StreamTx
	// passed is the end of a finished transaction that had no events (or
	// was skipped): a position the stream went past.
	passed uint64
}

// handle decodes one XLogData payload; walStart is its WAL position. The
// data must stay unchanged while the events live (payloads alias it).
func (d *streamDecoder) handle(walStart uint64, data []byte) (res decodeResult, err error) {
	msg, err := parseLogical(data)
	if err != nil {
		return res, err
	}
	return d.handleMsg(walStart, msg)
}

// handleMsg decodes one parsed message (handle); a shared stream parses
// each message once and hands it to every tenant's decoder.
func (d *streamDecoder) handleMsg(walStart uint64, msg pglogrepl.Message) (res decodeResult, err error) {
	switch m := msg.(type) {
	case *pglogrepl.RelationMessage:
		if m.Namespace != d.nsp || m.RelationName != d.rel {
			d.rels[m.RelationID] = nil
			return res, nil
		}
		r := &outboxRelation{}
		for i := range r.pos {
			r.pos[i] = -1
		}
		for i, c := range m.Columns {
			for j, name := range outboxColumns {
				if c.Name == name {
					r.pos[j] = i
				}
			}
		}
		d.rels[m.RelationID] = r
	case *pglogrepl.BeginMessage:
		if d.inTx {
			return res, fmt.Errorf("postgres: stream: a transaction began at %s inside another", m.FinalLSN)
		}
		d.inTx, d.commit, d.events = true, uint64(m.FinalLSN), nil
	case *pglogrepl.CommitMessage:
		if !d.inTx {
			return res, fmt.Errorf("postgres: stream: a commit at %s outside a transaction", m.CommitLSN)
		}
		end := uint64(m.TransactionEndLSN)
		events := d.events
		d.inTx, d.events = false, nil
		if len(events) == 0 || end <= d.skipTo {
			res.passed = end
			return res, nil
		}
		res.tx = &store.StreamTx{End: end, Events: events}
	case *pglogrepl.LogicalDecodingMessage:
		if !m.Transactional || m.Prefix != d.prefix {
			return res, nil
		}
		if !d.inTx {
			return res, fmt.Errorf("postgres: stream: a transactional message at %s outside a transaction", m.LSN)
		}
		d.add(d.messageEvent(uint64(m.LSN), m.Content))
	case *pglogrepl.InsertMessage:
		rel, known := d.rels[m.RelationID]
		if !known {
			return res, fmt.Errorf("postgres: stream: an insert into relation %d, which the stream did not describe", m.RelationID)
		}
		if rel == nil {
			return res, nil
		}
		if !d.inTx {
			return res, fmt.Errorf("postgres: stream: an insert at %s outside a transaction", pglogrepl.LSN(walStart))
		}
		if ev := d.capturedEvent(walStart, rel, m.Tuple); ev.Row.Seq == 0 || !d.pollers.visible(ev.Row.Seq) {
			d.add(ev)
		}
	}
	// Origin, Type, Update, Delete and Truncate messages carry nothing
	// for the stream (the publication publishes inserts only).
	return res, nil
}

// add appends ev to the transaction with its Pos.
func (d *streamDecoder) add(ev *store.StreamEvent) {
	idx := uint64(min(len(d.events), maxPosIndex))
	ev.Pos = d.commit<<16 | idx
	d.events = append(d.events, ev)
}

// partial reports whether the decoder is inside a transaction.
func (d *streamDecoder) partial() bool { return d.inTx }

// parseLogical is pglogrepl.Parse, with a malformed message (which the
// parser may index out of range on) turned into an error.
func parseLogical(data []byte) (msg pglogrepl.Message, err error) {
	if len(data) == 0 {
		return nil, fmt.Errorf("postgres: stream: an empty logical replication message")
	}
	defer func() {
		if r := recover(); r != nil {
			msg, err = nil, fmt.Errorf("postgres: stream: a malformed %q message: %v", data[0], r)
		}
	}()
	msg, err = pglogrepl.Parse(data)
	if err != nil {
		return nil, fmt.Errorf("postgres: stream: %w", err)
	}
	return msg, nil
}

// lsnID is the id of an event whose own id could not be read: derived
// from its WAL position, so that a replay hands out the same id (and the
// dead letter is not duplicated). It is a UUID of version 8.
func lsnID(lsn uint64) uuid.UUID {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], lsn)
	sum := sha256.Sum256(append([]byte("txbox wal event at "), b[:]...))
	var id uuid.UUID
	copy(id[:], sum[:16])
	id[6] = id[6]&0x0f | 0x80
	id[8] = id[8]&0x3f | 0x80
	return id
}

// WALPositionHeader is the header of an undecodable message's event
// (store.UndecodableEventType): the message's WAL position, as
// PostgreSQL writes an LSN (0/16B3748), to find it with
// pg_logical_slot_peek_binary_changes or pg_waldump.
const WALPositionHeader = "txbox-wal-lsn"

// messageEvent decodes an emitted message. One that does not decode is
// still an event, of type store.UndecodableEventType with the raw message
// as its payload, its WAL position in the WALPositionHeader header and
// Row.Invalid saying why: the relay dead-letters it (with a type the
// outbox accepts, so the spill that does so succeeds) and the slot moves
// on past it.
func (d *streamDecoder) messageEvent(lsn uint64, content []byte) *store.StreamEvent {
	ev := &store.StreamEvent{}
	m, err := d.headers.Decode(content)
	if err == nil {
		// A hand-written message may carry a type the outbox refuses:
		// neither a spill nor a dead letter could store it under it.
		if terr := txbox.ValidateEventType(m.Type); terr != nil {
			err = fmt.Errorf("%w: %w", walmsg.ErrMalformed, terr)
		}
	}
	if err != nil {
		at := pglogrepl.LSN(lsn).String()
		ev.Row.EventType = store.UndecodableEventType
		ev.Row.Payload = content
		ev.Row.Headers = map[string]string{WALPositionHeader: at}
		if len(content) >= 17 && content[0] == walmsg.Version {
			copy(ev.Row.ID[:], content[1:17])
			ev.Row.Invalid = fmt.Sprintf("%v (the message at WAL position %s)", err, at)
		} else {
			ev.Row.ID = lsnID(lsn)
			ev.Row.Invalid = fmt.Sprintf("%v (the message at WAL position %s; its id is unreadable: %s is derived from the position)", err, at, ev.Row.ID)
		}
		return ev
	}
	ev.Row = store.OutboxRow{ID: m.ID, EventType: m.Type, Key: m.Key, Payload: m.Payload, Headers: m.Headers, CreatedAt: m.CreatedAt}
	if len(m.Headers) == 0 {
		ev.Row.Headers = nil
	}
	if m.NotBefore.After(d.now()) {
		ev.NotBefore = m.NotBefore
	}
	return ev
}

// capturedEvent decodes a row a producer inserted into the outbox table.
// As in the claim's scan, a row that cannot be turned into a message is
// handed out with Row.Invalid set rather than failing the stream.
func (d *streamDecoder) capturedEvent(lsn uint64, rel *outboxRelation, tuple *pglogrepl.TupleData) *store.StreamEvent {
	ev := &store.StreamEvent{Captured: true}
	r := &ev.Row
	var bad []string
	col := func(i int) (*pglogrepl.TupleDataColumn, string) {
		p := rel.pos[i]
		if p < 0 || tuple == nil || p >= len(tuple.Columns) {
			return nil, "missing"
		}
		c := tuple.Columns[p]
		switch c.DataType {
		case pglogrepl.TupleDataTypeNull:
			return nil, "null"
		case pglogrepl.TupleDataTypeBinary:
			return c, ""
		default:
			return nil, fmt.Sprintf("sent in format %q, not binary", c.DataType)
		}
	}
	fail := func(i int, why string) { bad = append(bad, outboxColumns[i]+" "+why) }

	if c, why := col(colID); c == nil || len(c.Data) != 16 {
		r.ID = lsnID(lsn)
		if why == "" {
			why = fmt.Sprintf("is %d bytes, not 16", len(c.Data))
		}
		fail(colID, why+fmt.Sprintf(" (the id %s is derived from the row's WAL position %s)", r.ID, pglogrepl.LSN(lsn)))
	} else {
		copy(r.ID[:], c.Data)
	}
	if c, why := col(colType); c != nil {
		r.EventType = string(c.Data)
	} else {
		fail(colType, why)
	}
	if c, why := col(colKey); c != nil {
		r.Key = string(c.Data)
	} else if why != "null" {
		fail(colKey, why)
	}
	if c, why := col(colPayload); c != nil {
		r.Payload = c.Data
	} else {
		fail(colPayload, why)
	}
	if c, why := col(colHeaders); c != nil {
		if len(c.Data) == 0 || c.Data[0] != 1 {
			fail(colHeaders, "is not jsonb of version 1")
		} else if h, err := store.DecodeHeaders(c.Data[1:]); err != nil {
			bad = append(bad, err.Error())
		} else {
			r.Headers = h
		}
	} else if why != "null" {
		fail(colHeaders, why)
	}
	if c, why := col(colAttempts); c == nil {
		fail(colAttempts, why)
	} else if len(c.Data) != 4 {
		fail(colAttempts, fmt.Sprintf("is %d bytes, not 4", len(c.Data)))
	} else {
		r.Attempts = int(int32(binary.BigEndian.Uint32(c.Data)))
	}
	if c, _ := col(colCreated); c != nil {
		r.CreatedAt, _ = pgTimestamptz(c.Data)
	}
	if c, _ := col(colDue); c != nil {
		if due, ok := pgTimestamptz(c.Data); ok && due.After(d.now()) {
			ev.NotBefore = due
		}
	}
	if c, _ := col(colTxid); c != nil && len(c.Data) == 8 {
		r.Seq = binary.BigEndian.Uint64(c.Data)
	}
	if len(bad) > 0 {
		r.Invalid = "captured outbox row: " + joinReasons(bad)
	}
	return ev
}

func joinReasons(rs []string) string {
	out := rs[0]
	for _, r := range rs[1:] {
		out += "; " + r
	}
	return out
}

// pgEpochMicros is 2000-01-01 UTC in Unix microseconds: the epoch of
// PostgreSQL's binary timestamps.
const pgEpochMicros = 946684800 * 1000000

// pgTimestamptz decodes a binary timestamptz; false for a malformed value
// or an infinity.
func pgTimestamptz(b []byte) (time.Time, bool) {
	if len(b) != 8 {
		return time.Time{}, false
	}
	us := int64(binary.BigEndian.Uint64(b))
	if us == math.MaxInt64 || us == math.MinInt64 || us > math.MaxInt64-pgEpochMicros {
		return time.Time{}, false
	}
	return time.UnixMicro(us + pgEpochMicros).UTC(), true
}

// xidSnapshot is a pg_snapshot: the transactions below xmin have ended,
// those from xmax on had not started, and xip were running.
type xidSnapshot struct {
	// set is false for no snapshot, which shows nothing.
	set        bool
	xmin, xmax uint64
	xip        []uint64
}

// parseXidSnapshot reads a pg_snapshot's text form, "xmin:xmax:xip,...".
func parseXidSnapshot(s string) (xidSnapshot, error) {
	parts := strings.Split(s, ":")
	if len(parts) != 3 {
		return xidSnapshot{}, fmt.Errorf("%q is not a pg_snapshot", s)
	}
	var snap xidSnapshot
	var err error
	if snap.xmin, err = strconv.ParseUint(parts[0], 10, 64); err != nil {
		return xidSnapshot{}, fmt.Errorf("%q is not a pg_snapshot: %w", s, err)
	}
	if snap.xmax, err = strconv.ParseUint(parts[1], 10, 64); err != nil {
		return xidSnapshot{}, fmt.Errorf("%q is not a pg_snapshot: %w", s, err)
	}
	if parts[2] != "" {
		for _, x := range strings.Split(parts[2], ",") {
			v, err := strconv.ParseUint(x, 10, 64)
			if err != nil {
				return xidSnapshot{}, fmt.Errorf("%q is not a pg_snapshot: %w", s, err)
			}
			snap.xip = append(snap.xip, v)
		}
	}
	snap.set = true
	return snap, nil
}

// visible reports whether the committed transaction xid is visible in the
// snapshot, as pg_visible_in_snapshot does.
func (s xidSnapshot) visible(xid uint64) bool {
	switch {
	case !s.set || xid >= s.xmax:
		return false
	case xid < s.xmin:
		return true
	}
	return !slices.Contains(s.xip, xid)
}

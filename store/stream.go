package store

import (
	"context"
	"errors"
	"time"

	"github.com/txbox/txbox"
)

// The change stream of WAL mode (docs/concepts.md, "WAL mode"): instead of
// claiming rows, the relay reads committed transactions from the
// database's log and delivers their events. A dialect that can do so
// implements Streamer; the relay's stream source (relay/stream.go) is its
// only caller.

// ErrStreamBusy matches the error of OpenStream when another relay is
// streaming the slot: the caller stands by and tries again later.
var ErrStreamBusy = errors.New("store: the stream is held by another relay")

// ErrStreamLost matches the error of OpenStream or Stream.Next when the
// database has invalidated the stream (its slot lost WAL it needed): the
// events in that WAL cannot be recovered from the stream, and the slot
// must be recreated (docs/operations.md, "WAL mode").
var ErrStreamLost = errors.New("store: the stream was invalidated by the database")

// Sources of a store's events (SourceReporter).
const (
	// SourceTable: producers insert rows into the outbox table, which
	// the relay claims.
	SourceTable = "table"
	// SourceWAL: producers emit their events into the database's log,
	// which only a stream reads (WAL mode, docs/concepts.md): the relay
	// must stream them.
	SourceWAL = "wal"
)

// SourceReporter is a Driver that says where its producers' events go,
// SourceTable or SourceWAL. WAL mode is then one switch, the store's: a
// relay on a store that reports SourceWAL streams, and one asked to
// stream a store that reports SourceTable is refused.
type SourceReporter interface {
	Source() string
}

// Streamer is a Driver that can stream committed events.
type Streamer interface {
	// OpenStream starts streaming at the position the driver persisted
	// with the last Stream.Confirm (or the slot's start). It fails with
	// an error matching ErrStreamBusy while another relay holds the
	// stream.
	OpenStream(ctx context.Context, opts *StreamOptions) (Stream, error)
	// StreamSpill writes events the stream could not deliver into the
	// outbox table, where the poller takes them (a spill), or as FAILED
	// rows for the dead-letter mover; it commits durably
	// (synchronous_commit on) before it returns. An event whose id is
	// already in the table is left alone (the same id: the broker sees
	// the same dedup id); a captured row is updated in place. Either way
	// the row gets the event's Row.Route (and an emitted one its
	// Row.EventID): a fanned-out type's copy becomes its route's row.
	StreamSpill(ctx context.Context, items []*StreamSpillItem) error
	// StreamSpilledKeys lists the (type, key) pairs that have rows in the
	// outbox table not yet finished (PENDING, IN_PROCESS or FAILED) or an
	// unresolved dead letter: an ordered type's later events of such a key
	// must spill too, behind them. It pages by keyset: after is the last
	// pair of the previous page, nil for the first.
	StreamSpilledKeys(ctx context.Context, after *StreamKey, limit int) ([]StreamKey, error)
	// StreamStatus reads the slot's health over an ordinary connection.
	StreamStatus(ctx context.Context) (*StreamStatus, error)
	// StreamRecreate recreates a slot the database lost (a failover to a
	// standby without it, an invalidation): a new slot and a new state,
	// whose snapshot hands every row already in the outbox table to the
	// poller. It returns what was lost, or nil (and does nothing) when
	// the slot is there, or when there is no state to recreate it from
	// (the stream was never created, or was dropped on purpose). timeout
	// bounds the slot creation's wait for the transactions open in the
	// cluster.
	StreamRecreate(ctx context.Context, timeout time.Duration) (*StreamLoss, error)
	// StreamSenderTimeout is how long the server waits to hear from a
	// silent stream before it ends it and frees the slot for another
	// relay (wal_sender_timeout on PostgreSQL); 0 when unknown. A relay
	// that was stopped must drop what it holds well before that.
	StreamSenderTimeout() time.Duration
}

// StreamLoss is what recreating a lost slot cost: the events emitted
// between the last confirmed position and the new slot's start were in WAL
// that no slot decodes, and cannot be recovered from the stream. Rows
// inserted into the outbox table are not lost (the new slot's snapshot
// hands them to the poller).
type StreamLoss struct {
	// Slot is the slot's name; Reason why it was recreated (missing,
	// invalidated).
	Slot   string `json:"slot"`
	Reason string `json:"reason"`
	// From is the last confirmed position (events after it, up to To,
	// are unrecoverable), LastConfirm when it was confirmed; To the new
	// slot's start. On PostgreSQL these are LSNs.
	From        uint64    `json:"from"`
	To          uint64    `json:"to"`
	LastConfirm time.Time `json:"last_confirm,omitzero"`
	// At is when the slot was recreated.
	At time.Time `json:"at"`
}

// UndecodableEventType is the event type of a stream event that could
// not be decoded (a message from a newer producer, a hand-written one):
// it is dead-lettered with its raw bytes as the payload, never sent
// (docs/operations.md, "WAL mode").
const UndecodableEventType = "txbox.undecodable"

// StreamOptions configure OpenStream.
type StreamOptions struct {
	// StatusInterval is how often the stream sends its position to the
	// server, on a timer that does not depend on reading.
	StatusInterval time.Duration
	// Window bounds the transactions read ahead of Confirm; Next blocks
	// (and keeps sending status) while it is full.
	Window int
}

// Stream is one open stream. Next and Confirm may be called from
// different goroutines; Close ends it.
type Stream interface {
	// Next blocks until the next committed transaction with at least one
	// event, or ctx ends. Transactions come in commit order.
	Next(ctx context.Context) (*StreamTx, error)
	// Confirm records that every transaction up to and including the one
	// that ended at end is done: each of its events acked, spilled or
	// dead-lettered. It deletes the captured rows of those transactions
	// and persists end in one transaction, then reports end to the server
	// as the flush position. captured are the ids of the confirmed
	// transactions' captured rows that were acked; a captured row that
	// spilled stays, updated in place by StreamSpill.
	Confirm(ctx context.Context, end uint64, captured []txbox.ID) error
	// Close ends the stream and its connection.
	Close(ctx context.Context) error
	// ServerPID is the process id of the server's side of the stream
	// (on PostgreSQL the walsender's backend pid): while the stream is
	// healthy, the slot's active process is this one, and a slot held
	// by another process has been taken over.
	ServerPID() int
}

// StreamTx is one committed transaction's events.
type StreamTx struct {
	// End is the transaction's commit end LSN: its position to confirm.
	End uint64
	// Events in the order the transaction wrote them.
	Events []*StreamEvent
}

// StreamEvent is one event of the stream.
type StreamEvent struct {
	Row OutboxRow
	// NotBefore is zero when the event may go at once.
	NotBefore time.Time
	// Captured is true for a row a producer inserted into the outbox
	// table (deleted by Confirm), false for an emitted message.
	Captured bool
	// Pos is the event's place in the stream: the commit LSN and the
	// event's index in its transaction, increasing along the stream. A
	// spill records it as the row's order.
	Pos uint64
}

// StreamSpillItem is one event to write into the outbox table.
type StreamSpillItem struct {
	Event *StreamEvent
	// Outcome is OutcomeRetry or OutcomeReleased (PENDING, due at DueAt)
	// or OutcomeFailed (FAILED, for the dead-letter mover).
	Outcome  Outcome
	Attempts int
	DueAt    time.Time
	Error    string
}

// StreamKey is one (type, key) pair.
type StreamKey struct {
	EventType, Key string
}

// StreamStatus is the slot's health.
type StreamStatus struct {
	Slot string `json:"slot"`
	// Active is true while some walsender streams the slot; ActivePID is
	// its backend pid.
	Active    bool `json:"active"`
	ActivePID int  `json:"active_pid,omitempty"`
	// WALStatus is pg_replication_slots.wal_status: reserved, extended,
	// unreserved or lost.
	WALStatus string `json:"wal_status"`
	// RestartLag is the WAL bytes from the slot's restart_lsn to the
	// server's current position (WAL the slot pins); FlushLag from its
	// confirmed_flush_lsn (WAL not yet confirmed).
	RestartLag int64 `json:"restart_lag_bytes"`
	FlushLag   int64 `json:"flush_lag_bytes"`
	// SafeWALSize is pg_replication_slots.safe_wal_size, -1 when
	// unbounded (max_slot_wal_keep_size = -1).
	SafeWALSize int64 `json:"safe_wal_size_bytes"`
	// SpillBytes is pg_stat_replication_slots.spill_bytes: decoded
	// transactions too large for logical_decoding_work_mem.
	SpillBytes int64 `json:"spill_bytes"`
	// LastLoss is the last time the slot was recreated after it was
	// lost, and what that cost; nil when it never was.
	LastLoss *StreamLoss `json:"last_loss,omitempty"`
	// LastConfirm is when the relay last persisted a confirm (the stream
	// state's confirmed_at), zero before the first.
	LastConfirm time.Time `json:"last_confirm,omitzero"`
	// Failover says whether the slot survives the promotion of a
	// standby, and what that verdict rests on.
	Failover StreamFailover `json:"failover"`
}

// Verdicts of StreamFailover.
const (
	// FailoverSafe: the slot is a failover slot, the primary holds it
	// back for every standby it streams to (synchronized_standby_slots),
	// and every such standby was reached and shows its copy synced and
	// persistent: a promotion keeps the slot and loses no event.
	FailoverSafe = "safe"
	// FailoverUnsafe: something seen is wrong (StreamFailover.Problems):
	// a promotion would lose the slot, or events.
	FailoverUnsafe = "unsafe"
	// FailoverUnknown: nothing seen is wrong, but not everything could be
	// looked at (a standby the DSN does not list, or that did not
	// answer): its copy of the slot is unconfirmed.
	FailoverUnknown = "unknown"
	// FailoverNoStandby: no standby streams from the primary
	// (pg_stat_replication has none), so there is nothing to promote.
	FailoverNoStandby = "no_standby"
)

// StreamFailover is the slot's protection against a failover
// (docs/operations.md, "Failover"): what the primary shows
// (pg_replication_slots.failover, synchronized_standby_slots,
// pg_stat_replication) and what each standby that could be reached
// shows (its settings and its copy of the slot). A verdict of
// FailoverSafe is given only when everything was looked at.
type StreamFailover struct {
	// Verdict is FailoverSafe, FailoverUnsafe, FailoverUnknown or
	// FailoverNoStandby; "" when it was not judged (a store without
	// standbys, or an error before).
	Verdict string `json:"verdict"`
	// Note says why, in one line for people.
	Note string `json:"note,omitempty"`
	// Problems are the things found wrong, each naming its server and
	// setting; Unchecked what could not be looked at, and why.
	Problems  []string `json:"problems,omitempty"`
	Unchecked []string `json:"unchecked,omitempty"`
	// ServerVersion is the primary's server_version_num: failover slots
	// need 170000 (PostgreSQL 17) or later.
	ServerVersion int `json:"server_version"`
	// SlotFailover is the primary's pg_replication_slots.failover for the
	// slot.
	SlotFailover bool `json:"slot_failover"`
	// Disabled is true when the configuration turns failover slots off
	// (database.wal.failover: false).
	Disabled bool `json:"disabled,omitempty"`
	// SynchronizedStandbySlots is the primary's synchronized_standby_slots:
	// the physical slots a failover slot never runs ahead of.
	SynchronizedStandbySlots []string `json:"synchronized_standby_slots,omitempty"`
	// Replicas are the physical standbys streaming from the primary
	// (pg_stat_replication, the relay's own walsenders left out).
	Replicas []StreamReplica `json:"replicas,omitempty"`
	// Standbys are the other hosts of the DSN that answered as standbys
	// (pg_is_in_recovery), or did not answer.
	Standbys []StreamStandby `json:"standbys,omitempty"`
}

// Safe reports whether the verdict is FailoverSafe.
func (f StreamFailover) Safe() bool { return f.Verdict == FailoverSafe }

// StreamReplica is one physical standby as the primary sees it.
type StreamReplica struct {
	// ApplicationName, State and SyncState are pg_stat_replication's
	// (empty when the role may not read them: pg_read_all_stats).
	ApplicationName string `json:"application_name,omitempty"`
	State           string `json:"state,omitempty"`
	SyncState       string `json:"sync_state,omitempty"`
	// Slot is the physical slot it streams through, "" for none.
	Slot string `json:"slot,omitempty"`
	// Listed is true when synchronized_standby_slots names Slot.
	Listed bool `json:"listed"`
}

// StreamStandby is one standby of the DSN, as it showed itself.
type StreamStandby struct {
	// Host is host:port (or the socket directory) as the DSN lists it.
	Host string `json:"host"`
	// Error is why it could not be read; the fields below are then zero.
	Error string `json:"error,omitempty"`
	// SyncReplicationSlots, HotStandbyFeedback, PrimarySlotName and
	// ConninfoDBName are its settings: sync_replication_slots,
	// hot_standby_feedback, primary_slot_name, and whether
	// primary_conninfo names a dbname (the slot sync worker needs it).
	// ConninfoDBName is nil when the role may not read primary_conninfo.
	SyncReplicationSlots bool   `json:"sync_replication_slots"`
	HotStandbyFeedback   bool   `json:"hot_standby_feedback"`
	PrimarySlotName      string `json:"primary_slot_name,omitempty"`
	ConninfoDBName       *bool  `json:"primary_conninfo_dbname,omitempty"`
	// SlotExists, Synced and Temporary describe its copy of the slot: a
	// copy is usable after a promotion once synced and not temporary.
	SlotExists bool `json:"slot_exists"`
	Synced     bool `json:"synced"`
	Temporary  bool `json:"temporary"`
	// Invalidated is the copy's invalidation_reason, "" when valid.
	Invalidated string `json:"invalidated,omitempty"`
}

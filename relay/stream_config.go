package relay

import (
	"fmt"
	"time"
)

// StreamConfig configures WAL mode's stream (Config.Stream).
type StreamConfig struct {
	// Enabled turns the stream on. The Store must be a store.Streamer.
	// Defaults to true when the Store reports WAL mode
	// (store.SourceReporter: postgres.Config.Source = SourceWAL), so WAL
	// mode is the store's one switch; true with a store that reports
	// table mode is refused by New.
	Enabled bool
	// Window bounds the events the stream holds between reading and
	// confirming, across all types: the relay's memory for a backlog of
	// any size. Defaults to DefaultStreamWindow.
	Window int
	// WindowBytes bounds the same in payload bytes (payloads, keys and
	// headers), so that large payloads do not multiply the window's
	// memory. Defaults to DefaultStreamWindowBytes.
	WindowBytes int64
	// LaneQueue bounds the events one type holds waiting for a send.
	// When a lane stays full for laneStall (100ms: its destination is
	// slower than the stream), the type's further events spill into the
	// outbox table until the lane has drained to half, instead of holding
	// back the other types; a lane that drains (a backlog) is waited for.
	// Defaults to DefaultStreamLaneQueue.
	LaneQueue int
	// BatchSize is the most events of one stream batch, for a type
	// whose batch-size is not set (in its Events entry or in Defaults):
	// with no claim to pay for, a batch only groups the sends, and a
	// larger one lets the stream run ahead of the destination's acks.
	// An explicit batch-size wins, and still sizes the type's claims of
	// spilled rows. Defaults to DefaultStreamBatchSize.
	BatchSize int
	// StatusInterval is how often the stream reports its position to the
	// server, whatever the relay is doing. Defaults to
	// DefaultStreamStatusInterval.
	StatusInterval time.Duration
	// StandbyInterval is how often a relay that finds the stream held by
	// another asks again (with 20% jitter). Defaults to
	// DefaultStreamStandbyInterval.
	StandbyInterval time.Duration
	// ConfirmInterval is the longest a done transaction waits to be
	// confirmed. Defaults to DefaultStreamConfirmInterval.
	ConfirmInterval time.Duration
	// PauseLimit is how long the relay may have been stopped (SIGSTOP, a
	// frozen VM) before it assumes the server gave its stream to another
	// relay: it then drops what it holds unsent and reopens, instead of
	// sending events another relay is sending too. Set it below the
	// server's wal_sender_timeout (New refuses one that is not).
	// Defaults to half the store's sender timeout
	// (store.Streamer.StreamSenderTimeout), else to
	// DefaultStreamPauseLimit.
	PauseLimit time.Duration
	// StatusPoll is how often the relay reads the slot's health (lag,
	// WAL status) for Health. Defaults to DefaultStreamStatusPoll.
	StatusPoll time.Duration
	// LagThreshold turns Health degraded when the slot pins more WAL
	// than this many bytes (restart or confirmed-flush distance).
	// Defaults to DefaultStreamLagThreshold; negative turns the check
	// off.
	LagThreshold int64

	// OnSlotLost is what the relay does when the database lost the slot
	// (a failover to a standby without it, an invalidation):
	// SlotLostRecreate makes a new one at once, so that delivery goes on
	// (the rows in the outbox table are delivered; the events emitted
	// since the last confirm cannot be, and the relay says which, loudly);
	// SlotLostStop keeps failing until an operator runs txbox migrate.
	// Defaults to SlotLostRecreate.
	OnSlotLost SlotLostPolicy

	// tableKeysReload is how often the keys with rows in the table are
	// read again: defaultTableKeysReload, shorter in this package's
	// tests.
	tableKeysReload time.Duration
}

// SlotLostPolicy is StreamConfig.OnSlotLost.
type SlotLostPolicy string

// The values of StreamConfig.OnSlotLost.
const (
	SlotLostRecreate SlotLostPolicy = "recreate"
	SlotLostStop     SlotLostPolicy = "stop"
)

// SlotLossAlert is how long after a lost slot was recreated Health still
// reports it (health's stream_events_lost): long enough for an operator
// to see it, not for ever.
const SlotLossAlert = time.Hour

// Defaults of StreamConfig.
const (
	DefaultStreamWindow          = 20_000
	DefaultStreamWindowBytes     = 64 << 20
	DefaultStreamLaneQueue       = 5_000
	DefaultStreamBatchSize       = 1_000
	DefaultStreamStatusInterval  = time.Second
	DefaultStreamStandbyInterval = time.Second
	DefaultStreamConfirmInterval = 50 * time.Millisecond
	DefaultStreamPauseLimit      = 5 * time.Second
	DefaultStreamStatusPoll      = 10 * time.Second
	DefaultStreamLagThreshold    = 1 << 30
)

func (c StreamConfig) withDefaults() StreamConfig {
	if c.Window == 0 {
		c.Window = DefaultStreamWindow
	}
	if c.WindowBytes == 0 {
		c.WindowBytes = DefaultStreamWindowBytes
	}
	if c.LaneQueue == 0 {
		c.LaneQueue = DefaultStreamLaneQueue
	}
	if c.BatchSize == 0 {
		c.BatchSize = DefaultStreamBatchSize
	}
	if c.StatusInterval == 0 {
		c.StatusInterval = DefaultStreamStatusInterval
	}
	if c.StandbyInterval == 0 {
		c.StandbyInterval = DefaultStreamStandbyInterval
	}
	if c.ConfirmInterval == 0 {
		c.ConfirmInterval = DefaultStreamConfirmInterval
	}
	if c.PauseLimit == 0 {
		c.PauseLimit = DefaultStreamPauseLimit
	}
	if c.StatusPoll == 0 {
		c.StatusPoll = DefaultStreamStatusPoll
	}
	if c.LagThreshold == 0 {
		c.LagThreshold = DefaultStreamLagThreshold
	}
	if c.OnSlotLost == "" {
		c.OnSlotLost = SlotLostRecreate
	}
	return c
}

// validate checks the stream's settings.
func (c StreamConfig) validate() error {
	for _, f := range []struct {
		name string
		bad  bool
	}{
		{"Window", c.Window < 0},
		{"WindowBytes", c.WindowBytes < 0},
		{"LaneQueue", c.LaneQueue < 0},
		{"BatchSize", c.BatchSize < 0},
		{"StatusInterval", c.StatusInterval < 0},
		{"StandbyInterval", c.StandbyInterval < 0},
		{"ConfirmInterval", c.ConfirmInterval < 0},
		{"PauseLimit", c.PauseLimit < 0},
		{"StatusPoll", c.StatusPoll < 0},
	} {
		if f.bad {
			return &ConfigError{Component: "relay", Field: "Stream." + f.name, Reason: "must not be negative"}
		}
	}
	switch c.OnSlotLost {
	case "", SlotLostRecreate, SlotLostStop:
	default:
		return &ConfigError{Component: "relay", Field: "Stream.OnSlotLost", Reason: fmt.Sprintf("is %q, not %q or %q", c.OnSlotLost, SlotLostRecreate, SlotLostStop)}
	}
	return nil
}

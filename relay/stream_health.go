package relay

import (
	"time"

	"github.com/txbox/txbox/store"
)

// StreamState is what a relay's stream is doing.
type StreamState string

// The states of StreamHealth.State.
const (
	StreamOff       StreamState = ""
	StreamStarting  StreamState = "starting"
	StreamStreaming StreamState = "streaming"
	StreamStandby   StreamState = "standby"
	StreamFailing   StreamState = "failing"
)

// StreamHealth is the stream's part of Health.
type StreamHealth struct {
	State StreamState
	// Since is when the stream entered State.
	Since time.Time
	// LastConfirm is when this relay last confirmed a position;
	// Confirmed is that position (an LSN on PostgreSQL).
	LastConfirm time.Time
	Confirmed   uint64
	// Held is how many events the stream holds between reading and
	// confirming, HeldBytes their size; Transactions how many
	// transactions.
	Held, Transactions int
	HeldBytes          int64
	// Spilled counts the events this relay spilled into the outbox
	// table since it started.
	Spilled int64
	// Losses counts the sessions this relay lost: it was stopped (SIGSTOP,
	// a frozen VM) past StreamConfig.PauseLimit (Pauses counts those),
	// its connection broke or went silent, or another relay holds the
	// slot now. Dropped counts the events it then let go of unsent and
	// unspilled, for the relay that holds the stream now.
	Losses, Pauses, Dropped int64
	LastError               string
	// Slot is the last reading of the slot's health, nil before the
	// first; SlotReadAt is when it was read, SlotErr why it could not be.
	Slot       *store.StreamStatus
	SlotReadAt time.Time
	SlotErr    string
	// Lagging is true when the slot pins more WAL than the threshold
	// (StreamConfig.LagThreshold).
	Lagging bool
	// SlotRecreations counts the lost slots this relay recreated
	// (StreamConfig.OnSlotLost); LastLoss is the last one's cost, here or
	// as the slot's state records it (whichever relay recreated it).
	SlotRecreations int64
	LastLoss        *store.StreamLoss
}

func (s *streamSource) setState(st StreamState, lastErr string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.setStateLocked(st, lastErr)
}

// setStateLocked is setState with s.mu held.
func (s *streamSource) setStateLocked(st StreamState, lastErr string) {
	if s.health.State != st {
		s.health.State, s.health.Since = st, time.Now()
	}
	if lastErr != "" || st == StreamStreaming {
		s.health.LastError = lastErr
	}
}

// healthSnapshot is the stream's part of Relay.Health.
func (s *streamSource) healthSnapshot() *StreamHealth {
	s.mu.Lock()
	defer s.mu.Unlock()
	h := s.health
	h.Held, h.HeldBytes = s.window.held()
	h.Transactions = len(s.txs)
	return &h
}

// laneHealth is the lanes' part of Health.Types, one per type the stream
// has seen.
func (s *streamSource) laneHealth() []TypeHealth {
	s.mu.Lock()
	lanes := make([]*streamLane, 0, len(s.lanes))
	for _, l := range s.lanes {
		lanes = append(lanes, l)
	}
	s.mu.Unlock()
	out := make([]TypeHealth, 0, len(lanes))
	for _, l := range lanes {
		out = append(out, l.lane.health())
	}
	return out
}

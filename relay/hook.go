package relay

import "github.com/txbox/txbox"

// The hook interface and its events moved to package txbox (relaytypes.go
// there), so that an observer of a relay needs only the leaf package; the
// names below are deprecated aliases, kept for one release
// (docs/upgrading.md).

// Hook is txbox.RelayHook.
//
// Deprecated: use txbox.RelayHook.
type Hook = txbox.RelayHook

// NopHook is txbox.NopRelayHook.
//
// Deprecated: use txbox.NopRelayHook.
type NopHook = txbox.NopRelayHook

// PollEvent is txbox.PollEvent.
//
// Deprecated: use txbox.PollEvent.
type PollEvent = txbox.PollEvent

// BatchEvent is txbox.BatchEvent.
//
// Deprecated: use txbox.BatchEvent.
type BatchEvent = txbox.BatchEvent

// CircuitState is txbox.CircuitState.
//
// Deprecated: use txbox.CircuitState.
type CircuitState = txbox.CircuitState

// Circuit states, now in package txbox.
const (
	// CircuitClosed is txbox.CircuitClosed.
	//
	// Deprecated: use txbox.CircuitClosed.
	CircuitClosed = txbox.CircuitClosed
	// CircuitOpen is txbox.CircuitOpen.
	//
	// Deprecated: use txbox.CircuitOpen.
	CircuitOpen = txbox.CircuitOpen
	// CircuitHalfOpen is txbox.CircuitHalfOpen.
	//
	// Deprecated: use txbox.CircuitHalfOpen.
	CircuitHalfOpen = txbox.CircuitHalfOpen
)

// CircuitEvent is txbox.CircuitEvent.
//
// Deprecated: use txbox.CircuitEvent.
type CircuitEvent = txbox.CircuitEvent

// Background job names, now in package txbox.
const (
	// JobRecover is txbox.JobRecover.
	//
	// Deprecated: use txbox.JobRecover.
	JobRecover = txbox.JobRecover
	// JobDeadLetterMove is txbox.JobDeadLetterMove.
	//
	// Deprecated: use txbox.JobDeadLetterMove.
	JobDeadLetterMove = txbox.JobDeadLetterMove
	// JobOutboxCleanup is txbox.JobOutboxCleanup.
	//
	// Deprecated: use txbox.JobOutboxCleanup.
	JobOutboxCleanup = txbox.JobOutboxCleanup
	// JobDeadLetterCleanup is txbox.JobDeadLetterCleanup.
	//
	// Deprecated: use txbox.JobDeadLetterCleanup.
	JobDeadLetterCleanup = txbox.JobDeadLetterCleanup
	// JobDiscover is txbox.JobDiscover.
	//
	// Deprecated: use txbox.JobDiscover.
	JobDiscover = txbox.JobDiscover
	// JobDiscoverWake is txbox.JobDiscoverWake.
	//
	// Deprecated: use txbox.JobDiscoverWake.
	JobDiscoverWake = txbox.JobDiscoverWake
)

// MaintenanceEvent is txbox.MaintenanceEvent.
//
// Deprecated: use txbox.MaintenanceEvent.
type MaintenanceEvent = txbox.MaintenanceEvent

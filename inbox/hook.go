package inbox

import (
	"time"

	"github.com/txbox/txbox"
)

// Hook observes an Inbox and a Cleaner, typically to export metrics
// (inbox/inboxprom implements it). Methods are called synchronously from
// the goroutines that call Handle, HandleBatch, HandleInTx and
// Cleaner.RunOnce, possibly concurrently: they must be safe for concurrent
// use and return quickly. Embed NopHook to implement only some methods and
// stay compatible when methods are added. It has the shape of txbox.RelayHook:
// one method per kind of event, each taking an event struct.
type Hook interface {
	// OnHandled is called once per message that Handle, HandleInTx or
	// HandleBatch settled, with its result.
	OnHandled(HandledEvent)
	// OnCache is called after each cache lookup.
	OnCache(CacheEvent)
	// OnCleanup is called after each Cleaner run that held the lease or
	// failed.
	OnCleanup(CleanupEvent)
}

// NopHook implements Hook with methods that do nothing.
type NopHook struct{}

// OnHandled does nothing.
func (NopHook) OnHandled(HandledEvent) {}

// OnCache does nothing.
func (NopHook) OnCache(CacheEvent) {}

// OnCleanup does nothing.
func (NopHook) OnCleanup(CleanupEvent) {}

var _ Hook = NopHook{}

// HandledEvent describes one message after the inbox settled it.
type HandledEvent struct {
	// Consumer is the inbox's consumer name.
	Consumer string
	// ID and Type are the message's event id and type.
	ID   txbox.ID
	Type string
	// Delivery is what the broker said about this delivery (its count,
	// redelivery flag and position), as the adapter filled it.
	Delivery Delivery
	// Result is Processed, Duplicate, Failed or Lost.
	Result Result
	// Batch is the number of messages of the HandleBatch call this message
	// was part of; 1 for Handle and HandleInTx.
	Batch int
	// Duration is how long the call took (for a batch, the whole batch).
	Duration time.Duration
	// Err is the error Handle returned for this message (a *HandlerError,
	// *StoreError, …), if any. It is set for Failed and Lost.
	Err error
}

// CacheEvent describes one cache lookup.
type CacheEvent struct {
	// Consumer is the inbox's consumer name.
	Consumer string
	// ID is the event id looked up.
	ID txbox.ID
	// Hit reports that the cache knew the id: the message is a Duplicate
	// without a database round trip.
	Hit bool
	// Err is the cache's error, if the lookup failed (then Hit is false
	// and the table answers).
	Err error
}

// CleanupEvent describes one Cleaner run.
type CleanupEvent struct {
	// Deleted is the number of ids deleted.
	Deleted int
	// Held reports whether this instance held the cleanup lease.
	Held bool
	// Duration is how long the run took.
	Duration time.Duration
	// Err is the run's error, if any.
	Err error
}

package outbox

import "time"

// Hook observes a Publisher, typically to export metrics (relay/relayprom
// implements it), so this package needs no metrics library. It is called
// synchronously from the goroutine that called Publish, possibly
// concurrently: it must be safe for concurrent use and return quickly.
// Embed NopHook to implement only some methods and stay compatible when
// methods are added.
type Hook interface {
	// OnPublish is called once per Publish call that reached the store.
	OnPublish(PublishEvent)
}

// NopHook implements Hook with methods that do nothing.
type NopHook struct{}

// OnPublish does nothing.
func (NopHook) OnPublish(PublishEvent) {}

var _ Hook = NopHook{}

// PublishEvent describes one Publish call.
type PublishEvent struct {
	// Counts maps each event type written to the number of its events in
	// the call. The insert happened inside the caller's transaction, which
	// may still roll back: these are events published, not committed.
	Counts map[string]int
	// Duration is how long the insert statement took.
	Duration time.Duration
	// Err is the insert's error, if any (then nothing was written).
	Err error
}

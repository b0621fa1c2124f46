package inbox

import (
	"errors"
	"fmt"
	"time"

	"github.com/txbox/txbox"
)

// Sentinel errors. Compare with errors.Is.
var (
	// ErrMissingID is returned when a message carries no event id (the
	// zero UUID). Without an id there is nothing to deduplicate on, so the
	// message is refused rather than processed unguarded.
	ErrMissingID = errors.New("inbox: message has no event id")

	// ErrNilHandler is returned when Handle or HandleBatch is called with
	// a nil handler.
	ErrNilHandler = errors.New("inbox: handler is nil")
)

// ConfigError is txbox.ConfigError: New, NewCleaner, NewLRU and
// rediscache.New return it, with Component "inbox", when a configuration
// field is missing or out of range. Field names the offending field; it
// matches txbox.ErrInvalidConfig.
type ConfigError = txbox.ConfigError

// CacheTTLError is returned by New when the cache keeps entries longer than
// the inbox table keeps ids. Such a cache would claim "already processed"
// for ids the table has forgotten, which hides the table's answer; worse,
// operators would size retention by the wrong number.
type CacheTTLError struct {
	CacheTTL time.Duration
	InboxTTL time.Duration
}

func (e *CacheTTLError) Error() string {
	return fmt.Sprintf("inbox: cache TTL %s exceeds the inbox TTL %s", e.CacheTTL, e.InboxTTL)
}

// HandlerError is returned when the user's handler failed. In transactional
// mode the id was not recorded and the effect was rolled back, so a
// redelivery runs the handler again. Err is the handler's error or a
// *PanicError.
type HandlerError struct {
	Consumer string
	// IDs are the ids of the messages the handler was given.
	IDs []txbox.ID
	Err error
}

func (e *HandlerError) Error() string {
	if len(e.IDs) == 1 {
		return fmt.Sprintf("inbox: consumer %s: handler failed for event %s: %v", e.Consumer, e.IDs[0], e.Err)
	}
	return fmt.Sprintf("inbox: consumer %s: handler failed for a batch of %d events: %v", e.Consumer, len(e.IDs), e.Err)
}

// Unwrap returns the handler's error.
func (e *HandlerError) Unwrap() error { return e.Err }

// PanicError is the error a handler's panic is turned into, so that one bad
// message cannot crash the consumer. The transaction is rolled back and no
// id is recorded.
type PanicError struct {
	// Value is what the handler panicked with.
	Value any
	// Stack is the goroutine's stack at the panic.
	Stack []byte
}

func (e *PanicError) Error() string {
	return fmt.Sprintf("inbox: handler panicked: %v", e.Value)
}

// Unwrap returns Value when it is an error, so errors.Is sees through a
// panic(err).
func (e *PanicError) Unwrap() error {
	if err, ok := e.Value.(error); ok {
		return err
	}
	return nil
}

// StoreError is returned when the inbox table could not be read or written
// (begin, record or commit failed). The outcome of a failed commit is
// unknown: a redelivery either finds the id recorded or runs the handler
// again, and both are correct.
type StoreError struct {
	Consumer string
	// Op is "begin", "record" or "commit".
	Op  string
	Err error
}

func (e *StoreError) Error() string {
	return fmt.Sprintf("inbox: consumer %s: %s: %v", e.Consumer, e.Op, e.Err)
}

// Unwrap returns the store's error.
func (e *StoreError) Unwrap() error { return e.Err }

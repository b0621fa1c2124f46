package relay

import (
	"sync"

	"github.com/txbox/txbox/sender"
	"github.com/txbox/txbox/store"
)

// TypeFailureSettings are what a fingerprint needs of an event type's
// settings, or of one route of a fanned-out type: where its messages go
// and how many attempts it has.
type TypeFailureSettings struct {
	// Sender names the type's sender; Route is its route, expanded for
	// the type.
	Sender string
	Route  sender.Route
	// MaxAttempts is the type's max-attempts; 0 when unknown.
	MaxAttempts int
}

// NewFingerprinter returns the function that fingerprints dead letters
// (store.Fingerprint, the key of a failure group; docs/operations.md,
// "Failure groups") with the settings resolve returns for their event
// type and route (store.OutboxRow.Route, "" for a type with one route;
// ok false: unknown). The destination is the sender's name and the
// destination its route names ("nats subject=orders.created", as the
// circuits name it); the failure class is store.FailureClassOf with the
// type's max-attempts. Every process that fingerprints (the relay, the
// admin API, txbox dlq) goes through here, so a dead letter gets the same
// fingerprint whichever of them fingerprints it.
func NewFingerprinter(resolve func(eventType, route string) (TypeFailureSettings, bool)) store.Fingerprinter {
	var mu sync.Mutex
	known := map[string]typeFailure{}
	return func(in *store.FingerprintInput) store.Fingerprint {
		mu.Lock()
		k := in.EventType + "\x00" + in.Route
		tf, ok := known[k]
		if !ok {
			if s, found := resolve(in.EventType, in.Route); found {
				tf = typeFailure{destination: s.Sender + " " + sender.DestinationOf(nil, s.Route), maxAttempts: s.MaxAttempts}
			}
			// Bounded: one entry per event type the dead letters name.
			if len(known) < maxFingerprintTypes {
				known[k] = tf
			}
		}
		mu.Unlock()
		return store.NewFingerprint(tf.destination, in.EventType, store.FailureClassOf(in.LastError, in.Attempts, tf.maxAttempts), in.LastError)
	}
}

// Fingerprinter returns the NewFingerprinter of c's event types. A type
// whose settings do not resolve (several senders and none named for it)
// gets no destination and an unknown max-attempts.
func (c Config) Fingerprinter() store.Fingerprinter {
	return NewFingerprinter(func(eventType, route string) (TypeFailureSettings, bool) {
		s, err := c.routeSettings(eventType, route)
		if err != nil || s == nil {
			return TypeFailureSettings{}, false
		}
		return TypeFailureSettings{Sender: s.senderName, Route: s.route, MaxAttempts: s.maxAttempts}, true
	})
}

// Fingerprinter returns the function the relay fingerprints its dead
// letters with (Config.Fingerprinter of its configuration).
func (r *Relay) Fingerprinter() store.Fingerprinter { return r.fingerprint }

// maxFingerprintTypes bounds the types a fingerprinter remembers; past it
// each further type is resolved each time (which costs a little CPU, not
// a different fingerprint).
const maxFingerprintTypes = 10_000

// typeFailure is what a fingerprint needs of a type's settings, resolved.
type typeFailure struct {
	destination string
	maxAttempts int
}

package txbox

import (
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
)

// ID identifies an event. It is a UUIDv7: time-ordered, so inserts land at
// the tail of the primary-key index, and unique, so it travels with the
// message as the receiver's deduplication key.
type ID = uuid.UUID

// NewID returns a new UUIDv7. It panics only if the system's random source
// fails, which crypto/rand documents as unrecoverable.
func NewID() ID {
	return uuid.Must(uuid.NewV7())
}

// ParseID parses the canonical text form of an ID.
func ParseID(s string) (ID, error) {
	id, err := uuid.Parse(s)
	if err != nil {
		return ID{}, fmt.Errorf("txbox: invalid event id %q: %w", s, err)
	}
	return id, nil
}

// Header names added to every delivered message.
const (
	HeaderEventID     = "txbox-event-id"
	HeaderEventType   = "txbox-event-type"
	HeaderCreatedAt   = "txbox-created-at"
	HeaderTraceParent = "traceparent"
	HeaderTraceState  = "tracestate"
	// HeaderTenant names the tenant whose outbox an event came from, on
	// the messages of a relay that serves tenants (docs/multi-tenant.md);
	// absent otherwise.
	HeaderTenant = "txbox-tenant"
)

// MaxTenantNameLength is the longest tenant name: a tenant's name may be
// its schema's name, which PostgreSQL bounds at 63 bytes.
const MaxTenantNameLength = 63

// ValidateTenantName checks a tenant's name: 1 to MaxTenantNameLength of
// a-z, 0-9 and _, starting with a letter, so that it serves as a schema
// name, a metric label value, a log attribute and a header value as it
// is. Its error wraps ErrInvalidTenantName.
func ValidateTenantName(name string) error {
	if len(name) == 0 || len(name) > MaxTenantNameLength {
		return fmt.Errorf("%w: %q must be 1 to %d characters", ErrInvalidTenantName, name, MaxTenantNameLength)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || i > 0 && (c >= '0' && c <= '9' || c == '_')) {
			return fmt.Errorf("%w: %q: a letter a-z first, then a-z, 0-9 or _", ErrInvalidTenantName, name)
		}
	}
	return nil
}

// ErrInvalidTenantName is wrapped by ValidateTenantName's errors.
var ErrInvalidTenantName = errors.New("txbox: invalid tenant name")

// DefaultMaxPayloadSize is the payload size limit enforced at publish time
// when none is configured: 1 MiB.
const DefaultMaxPayloadSize = 1 << 20

// MaxEventTypeLength is the longest event type accepted.
const MaxEventTypeLength = 200

// Event is one message to publish. Only Type is required.
type Event struct {
	// ID is the event's identity. Leave it zero and the publisher assigns a
	// fresh UUIDv7; set it to make a publish idempotent on your side.
	ID ID
	// Type names the event, such as "order-created". It selects the relay's
	// per-type settings and route. See [ValidateEventType].
	Type string
	// Key is the optional partition key (aggregate id): the Kafka record key
	// and the unit of ordered delivery.
	Key string
	// Payload is the message body, opaque to txbox.
	Payload []byte
	// Headers are delivered as broker headers.
	Headers map[string]string
	// NotBefore delays delivery until this time. Zero means as soon as
	// possible.
	NotBefore time.Time
}

// ValidateEventType reports whether t is a valid event type: 1 to 200
// characters from [A-Za-z0-9._:-]. The error is an *InvalidEventTypeError.
func ValidateEventType(t string) error {
	if len(t) == 0 || len(t) > MaxEventTypeLength {
		return &InvalidEventTypeError{Type: t, Reason: fmt.Sprintf("length must be 1..%d", MaxEventTypeLength)}
	}
	for i := 0; i < len(t); i++ {
		c := t[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9',
			c == '.', c == '_', c == ':', c == '-':
		default:
			return &InvalidEventTypeError{Type: t, Reason: fmt.Sprintf("character %q at %d is not in [A-Za-z0-9._:-]", c, i)}
		}
	}
	return nil
}

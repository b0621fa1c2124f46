package store

import (
	"context"
	"fmt"
	"time"

	"github.com/txbox/txbox"
)

// Inspector is the part of the seam that operators' tools read: the admin
// API, its dashboard and txbox status (docs/operations.md). Its queries
// read the partial indexes of the backlog, never the processed history,
// but they do count rows: callers cache the results for a few seconds
// instead of running them per request.
type Inspector interface {
	// OutboxInspect returns, per event type with PENDING, IN_PROCESS or
	// FAILED rows, the backlog split into due and scheduled, the age of
	// the oldest due row, the next due time, an attempts histogram and
	// the last error recorded. Ages are measured on the database clock.
	// Sorted by event type.
	OutboxInspect(ctx context.Context) ([]*OutboxTypeDetail, error)
	// DeadLetterParkedKeys lists, per (event type, key) with unresolved
	// dead letters, the oldest such dead letter: under ordering by key it
	// holds back every later event of its key until it is retried or
	// resolved (docs/concepts.md, "Ordering"). Waiting counts the outbox
	// rows of that key that wait behind it. Sorted by event type, then
	// key; at most Limit entries.
	DeadLetterParkedKeys(ctx context.Context, params *ParkedKeysParams) ([]*ParkedKey, error)
}

// Instances is the part of the seam for relay heartbeats: one small row
// per running relay instance, so operators can see who is running.
type Instances interface {
	// InstanceHeartbeat records that params.ID is alive until
	// now() + TTL on the database clock, creating its row on first use,
	// and forgets the rows of instances whose heartbeat expired more than
	// InstanceForgetAfter ago.
	InstanceHeartbeat(ctx context.Context, params *InstanceHeartbeatParams) error
	// InstanceList lists the known instances, most recently seen first,
	// each marked Expired when its heartbeat ran out (database clock).
	InstanceList(ctx context.Context) ([]*Instance, error)
	// InstanceRemove deletes the instance's row; a relay that stops
	// gracefully calls it so it does not linger as expired.
	InstanceRemove(ctx context.Context, id string) error
}

// InstanceForgetAfter is how long an expired heartbeat row stays listed
// (as expired) before a heartbeat of any instance deletes it.
const InstanceForgetAfter = time.Hour

// MaxInstanceIDLength bounds InstanceHeartbeatParams.ID, and
// MaxInstanceInfoLength its Info.
const (
	MaxInstanceIDLength   = 200
	MaxInstanceInfoLength = 4096
)

// AttemptsBuckets is the number of buckets of OutboxTypeDetail.Attempts:
// rows with 0, 1, ..., AttemptsBuckets-2 attempts, and the last bucket
// for AttemptsBuckets-1 or more.
const AttemptsBuckets = 10

// OutboxTypeDetail describes one event type's unfinished rows.
type OutboxTypeDetail struct {
	EventType string
	// Due counts PENDING rows whose due time has come: the backlog the
	// relay should be working on.
	Due int64
	// Scheduled counts PENDING rows due later (not-before, or waiting
	// for a retry): not lag.
	Scheduled int64
	InProcess int64
	Failed    int64
	// OldestDueAge is now() minus the creation time of the oldest due
	// row; zero when nothing is due. Scheduled rows do not count: an event
	// published for tomorrow is not late.
	OldestDueAge time.Duration
	// NextDueIn is how long until the earliest scheduled row becomes due;
	// zero when none is scheduled.
	NextDueIn time.Duration
	// Attempts[i] counts PENDING, IN_PROCESS and FAILED rows with i
	// attempts so far; the last bucket holds AttemptsBuckets-1 or more.
	Attempts [AttemptsBuckets]int64
	// LastError is the last error of the row whose next attempt is due
	// latest among the rows that failed at least once (the most recently
	// rescheduled one, as a rule); empty when no row has an error.
	LastError string
}

// ParkedKeysParams are the parameters of Inspector.DeadLetterParkedKeys.
type ParkedKeysParams struct {
	// EventType limits the result to one type; empty lists every type.
	EventType string
	// Limit bounds the result, at least 1.
	Limit int
}

// ParkedKey is one key held back by a dead letter.
type ParkedKey struct {
	EventType string
	Key       string
	// DeadLetterID is the oldest unresolved dead letter of the key, the
	// one to retry or resolve to release the key.
	DeadLetterID txbox.ID
	FailedAt     time.Time
	LastError    string
	// DeadLetters counts the key's unresolved dead letters.
	DeadLetters int64
	// Waiting counts the key's PENDING outbox rows.
	Waiting int64
}

// InstanceHeartbeatParams are the parameters of Instances.InstanceHeartbeat.
type InstanceHeartbeatParams struct {
	// ID names the instance (relay.Config.InstanceID), 1 to
	// MaxInstanceIDLength bytes.
	ID string
	// TTL is how long the heartbeat counts: the instance is listed as
	// expired after now() + TTL unless it beats again. At least 1s.
	TTL time.Duration
	// Info is a short free text the instance describes itself with (its
	// version and host, for example), at most MaxInstanceInfoLength bytes.
	Info string
}

// Instance is one heartbeat row.
type Instance struct {
	ID   string
	Info string
	// StartedAt is the first heartbeat of the row, SeenAt the last.
	StartedAt time.Time
	SeenAt    time.Time
	// SeenAgo is now() - SeenAt on the database clock.
	SeenAgo time.Duration
	// Expired is true when the last heartbeat's TTL ran out.
	Expired bool
}

// Validate checks p: an instance id of 1 to MaxInstanceIDLength bytes, a
// TTL of at least a second, an Info of at most MaxInstanceInfoLength
// bytes.
func (p *InstanceHeartbeatParams) Validate() error {
	switch {
	case p == nil:
		return fmt.Errorf("%w: no heartbeat parameters", ErrInvalidParams)
	case p.ID == "" || len(p.ID) > MaxInstanceIDLength:
		return fmt.Errorf("%w: instance id must be 1..%d bytes", ErrInvalidParams, MaxInstanceIDLength)
	case p.TTL < time.Second:
		return fmt.Errorf("%w: heartbeat ttl %s must be at least 1s", ErrInvalidParams, p.TTL)
	case len(p.Info) > MaxInstanceInfoLength:
		return fmt.Errorf("%w: instance info must be at most %d bytes", ErrInvalidParams, MaxInstanceInfoLength)
	}
	return nil
}

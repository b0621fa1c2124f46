package outbox

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"time"

	"go.opentelemetry.io/otel/propagation"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/store"
)

// ErrInvalidConfig is txbox.ErrInvalidConfig, matched by the
// *txbox.ConfigError NewPublisher returns for a configuration it cannot
// use.
var ErrInvalidConfig = txbox.ErrInvalidConfig

// Config configures a [Publisher]. The zero value is ready to use.
type Config struct {
	// MaxPayloadSize is the largest payload accepted, in bytes. A payload of
	// exactly this size is accepted; one byte more is refused with a
	// *txbox.PayloadTooLargeError before anything is written. Defaults to
	// txbox.DefaultMaxPayloadSize (1 MiB).
	MaxPayloadSize int

	// DisableNotify turns off database wake-ups. By default (false) the
	// insert asks the store to signal listening relays when the caller's
	// transaction commits (a PostgreSQL NOTIFY folded into the insert
	// statement), so they pick the events up at once instead of at their
	// next poll. Relays keep polling either way. Defaults to false
	// (notify).
	DisableNotify bool

	// OnPublish, when set, is called after a successful insert with the
	// distinct event types just written, for example to wake a relay
	// running in the same process (relay.Relay.Wake). It runs BEFORE the
	// caller commits, and the transaction may still roll back, so it is
	// only a hint: a relay woken early finds nothing yet and falls back to
	// polling or to the commit-time NOTIFY. It must be fast and must not
	// block. Defaults to nil.
	OnPublish func(eventTypes []string)

	// Hook, when set, observes every Publish call that reached the store
	// (metrics: relay/relayprom). Defaults to nil.
	Hook Hook
}

func (c Config) withDefaults() Config {
	if c.MaxPayloadSize == 0 {
		c.MaxPayloadSize = txbox.DefaultMaxPayloadSize
	}
	return c
}

func (c Config) validate() error {
	if c.MaxPayloadSize < 0 {
		return &txbox.ConfigError{Component: "outbox", Field: "MaxPayloadSize", Reason: fmt.Sprintf("must not be negative, got %d", c.MaxPayloadSize)}
	}
	return nil
}

// Publisher writes events into the outbox inside callers' transactions. It
// is safe for concurrent use.
type Publisher struct {
	store store.Outbox
	cfg   Config
	prop  propagation.TextMapPropagator
}

// NewPublisher returns a Publisher writing through s, typically a dialect
// driver such as *postgres.Driver.
func NewPublisher(s store.Outbox, cfg Config) (*Publisher, error) {
	if s == nil {
		return nil, &txbox.ConfigError{Component: "outbox", Field: "store", Reason: "is nil"}
	}
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &Publisher{store: s, cfg: cfg, prop: propagation.TraceContext{}}, nil
}

// Publish writes events through tx, the caller's open transaction, in one
// round trip, and returns their ids in order (assigned here for events
// whose ID is zero). It never commits or rolls back tx: the events become
// visible to relays exactly when the caller commits, and vanish if it
// rolls back.
//
// tx must be an open transaction the store supports (pgx.Tx, *sql.Tx, an
// ORM transaction with ExecContext and Commit); nil, a *sql.DB or a pool is
// txbox.ErrNoTransaction. An invalid event type is a
// *txbox.InvalidEventTypeError and an oversized payload a
// *txbox.PayloadTooLargeError; in both cases nothing is written. Headers
// are copied, never modified in place; when ctx carries an OpenTelemetry
// span, its traceparent and tracestate are added to the copies.
func (p *Publisher) Publish(ctx context.Context, tx any, events ...txbox.Event) ([]txbox.ID, error) {
	if tx == nil {
		return nil, txbox.ErrNoTransaction
	}
	return p.publish(ctx, events, func(ctx context.Context, params *store.OutboxInsertParams) error {
		return p.store.OutboxInsert(ctx, tx, params)
	})
}

// publish validates and prepares events, then writes them with insert,
// which runs the store's insert inside the caller's transaction.
func (p *Publisher) publish(ctx context.Context, events []txbox.Event, insert func(context.Context, *store.OutboxInsertParams) error) ([]txbox.ID, error) {
	if len(events) == 0 {
		return nil, nil
	}
	rows := make([]*txbox.Event, len(events))
	ids := make([]txbox.ID, len(events))
	var types []string
	for i := range events {
		ev := events[i] // a copy: the caller's value is not modified
		if err := txbox.ValidateEventType(ev.Type); err != nil {
			return nil, fmt.Errorf("outbox: event %d: %w", i, err)
		}
		if len(ev.Payload) > p.cfg.MaxPayloadSize {
			return nil, fmt.Errorf("outbox: event %d: %w", i,
				&txbox.PayloadTooLargeError{EventType: ev.Type, Size: len(ev.Payload), Limit: p.cfg.MaxPayloadSize})
		}
		if ev.ID == (txbox.ID{}) {
			ev.ID = txbox.NewID()
		}
		ev.Headers = p.headers(ctx, ev.Headers)
		rows[i] = &ev
		ids[i] = ev.ID
		if !contains(types, ev.Type) {
			types = append(types, ev.Type)
		}
	}
	start := time.Now()
	err := insert(ctx, &store.OutboxInsertParams{Events: rows, Notify: !p.cfg.DisableNotify})
	if p.cfg.Hook != nil {
		p.report(rows, time.Since(start), err)
	}
	if err != nil {
		return nil, fmt.Errorf("outbox: publish: %w", err)
	}
	if p.cfg.OnPublish != nil {
		p.cfg.OnPublish(types)
	}
	return ids, nil
}

// report tells the hook about one insert.
func (p *Publisher) report(rows []*txbox.Event, took time.Duration, err error) {
	counts := make(map[string]int, 1)
	for _, ev := range rows {
		counts[ev.Type]++
	}
	p.cfg.Hook.OnPublish(PublishEvent{Counts: counts, Duration: took, Err: err})
}

// contains is a linear search: batches rarely carry more than a handful of
// distinct types, where a map would cost more.
func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// headers copies h and adds the trace context of ctx, if any.
func (p *Publisher) headers(ctx context.Context, h map[string]string) map[string]string {
	carrier := propagation.MapCarrier{}
	p.prop.Inject(ctx, carrier)
	if len(carrier) == 0 {
		if len(h) == 0 {
			return nil
		}
		return maps.Clone(h)
	}
	out := make(map[string]string, len(h)+len(carrier))
	maps.Copy(out, h)
	maps.Copy(out, carrier)
	return out
}

// NewJSONEvent returns an event of type eventType and key whose payload is
// v marshalled as JSON, with a "content-type: application/json" header.
func NewJSONEvent(eventType, key string, v any) (txbox.Event, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return txbox.Event{}, fmt.Errorf("outbox: marshal %s payload: %w", eventType, err)
	}
	return txbox.Event{
		Type:    eventType,
		Key:     key,
		Payload: b,
		Headers: map[string]string{HeaderContentType: ContentTypeJSON},
	}, nil
}

// Content type header set by the JSON helpers.
const (
	HeaderContentType = "content-type"
	ContentTypeJSON   = "application/json"
)

// PublishJSON marshals v as JSON and publishes it through tx as one event
// of type eventType with the given key (empty for none). It returns the
// event's id.
func (p *Publisher) PublishJSON(ctx context.Context, tx any, eventType, key string, v any) (txbox.ID, error) {
	return publishJSON(ctx, p.Publish, tx, eventType, key, v)
}

// publishJSON is PublishJSON over either publisher's Publish.
func publishJSON[TTx any](ctx context.Context, publish func(context.Context, TTx, ...txbox.Event) ([]txbox.ID, error), tx TTx, eventType, key string, v any) (txbox.ID, error) {
	ev, err := NewJSONEvent(eventType, key, v)
	if err != nil {
		return txbox.ID{}, err
	}
	ids, err := publish(ctx, tx, ev)
	if err != nil {
		return txbox.ID{}, err
	}
	return ids[0], nil
}

// PublishResult runs fn, which should do its work through the caller's
// transaction tx, and publishes fn's result as a JSON event of type
// eventType and key through the same transaction: the result is announced
// if and only if the caller commits. When fn fails, nothing is published
// and fn's error is returned unchanged (so the caller rolls back as it
// would without txbox). When publishing fails, the zero T and the publish
// error are returned.
//
//	order, err := outbox.PublishResult(ctx, pub, tx, "order-created", id,
//		func(ctx context.Context) (Order, error) { return createOrder(ctx, tx, id) })
func PublishResult[T any](ctx context.Context, p *Publisher, tx any, eventType, key string, fn func(ctx context.Context) (T, error)) (T, error) {
	return publishResult(ctx, p.Publish, tx, eventType, key, fn)
}

// PublishResultTx is PublishResult for a [TxPublisher]: tx has the
// publisher's transaction type.
func PublishResultTx[TTx, T any](ctx context.Context, p *TxPublisher[TTx], tx TTx, eventType, key string, fn func(ctx context.Context) (T, error)) (T, error) {
	return publishResult(ctx, p.Publish, tx, eventType, key, fn)
}

// publishResult is PublishResult over either publisher's Publish.
func publishResult[TTx, T any](ctx context.Context, publish func(context.Context, TTx, ...txbox.Event) ([]txbox.ID, error), tx TTx, eventType, key string, fn func(ctx context.Context) (T, error)) (T, error) {
	var zero T
	if any(tx) == nil {
		return zero, txbox.ErrNoTransaction
	}
	if err := txbox.ValidateEventType(eventType); err != nil {
		return zero, fmt.Errorf("outbox: %w", err)
	}
	res, err := fn(ctx)
	if err != nil {
		return zero, err
	}
	if _, err := publishJSON(ctx, publish, tx, eventType, key, res); err != nil {
		return zero, err
	}
	return res, nil
}

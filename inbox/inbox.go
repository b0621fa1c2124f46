package inbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"reflect"
	"runtime/debug"
	"time"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/store"
)

// DefaultTTL is how long recorded ids are kept when no TTL is configured:
// 24 hours. See docs/inbox.md for sizing it.
const DefaultTTL = 24 * time.Hour

// Mode selects the delivery guarantee of an Inbox.
type Mode int

const (
	// Transactional records the id and runs the handler in one database
	// transaction: effectively-once for effects written through that
	// transaction. It is the default.
	Transactional Mode = iota
	// NonTransactional records the id and commits before running the
	// handler, which gets a nil transaction: at-most-once, for effects
	// that cannot be rolled back. A handler failure after the commit is
	// the Result Lost.
	NonTransactional
)

func (m Mode) String() string {
	switch m {
	case Transactional:
		return "transactional"
	case NonTransactional:
		return "non-transactional"
	default:
		return fmt.Sprintf("Mode(%d)", int(m))
	}
}

// Result is the outcome of handling one message.
type Result int

const (
	// Processed: the handler ran and its transaction committed (or, in
	// non-transactional mode, the handler returned nil).
	Processed Result = iota
	// Duplicate: the id was already recorded for this consumer; the
	// handler did not run. Acknowledge the message.
	Duplicate
	// Failed: the handler or the store failed; see the error. In
	// transactional mode nothing was recorded, so a redelivery retries.
	Failed
	// Lost: non-transactional mode only. The id was recorded and committed
	// before the handler ran, and the handler then failed (an error or a
	// panic; see the error): its effect is lost, and a redelivery would be
	// a Duplicate that does not run it again. The inbox logs it at ERROR
	// and reports it to the Hook; an adapter acknowledges the message
	// rather than ask the broker for a pointless redelivery. See
	// docs/inbox.md.
	Lost
)

// Acknowledge reports whether a broker adapter should acknowledge the
// message: Processed, Duplicate and Lost are settled for good (nothing a
// redelivery could change); Failed asks for a redelivery.
func (r Result) Acknowledge() bool {
	return r == Processed || r == Duplicate || r == Lost
}

func (r Result) String() string {
	switch r {
	case Processed:
		return "processed"
	case Duplicate:
		return "duplicate"
	case Failed:
		return "failed"
	case Lost:
		return "lost"
	default:
		return fmt.Sprintf("Result(%d)", int(r))
	}
}

// Message is one received event, as the consumer adapters hand it over.
type Message struct {
	// ID is the event id, read from the txbox-event-id header, or from
	// the id attribute of a CloudEvents message (ce-id, ce_id,
	// cloudEvents:id; docs/cloudevents.md). Required.
	ID txbox.ID
	// Type is the event type (txbox-event-type, or the CloudEvents type
	// attribute), informational.
	Type string
	// Key is the partition key, when the broker carries one (the
	// CloudEvents subject attribute).
	Key string
	// Payload is the message body.
	Payload []byte
	// Headers are the broker headers.
	Headers map[string]string
	// Delivery is what the broker says about this delivery: how many times
	// it delivered the message, whether it flags it as a redelivery, and
	// where the message sits (stream sequence, partition and offset,
	// delivery tag). The adapters in consume/ fill it; the zero value
	// means unknown. The inbox passes it to the Hook and never decides
	// anything on it.
	Delivery Delivery
}

// Delivery describes one delivery of a message by its broker. Fields a
// broker does not have stay zero.
type Delivery struct {
	// Broker names the adapter: "nats", "kafka", "rabbitmq", "webhook".
	Broker string
	// Source is the NATS stream, the Kafka topic or the RabbitMQ queue.
	Source string
	// Count is the delivery attempt, 1 for the first; 0 when the broker
	// does not say. NATS JetStream counts every delivery (NumDelivered);
	// a RabbitMQ quorum queue counts redeliveries (x-delivery-count), a
	// classic queue does not (then a redelivery has Count 0 and
	// Redelivered set); Kafka keeps no count, so consume/kafka counts its
	// own in-place retries of the record (1 after a restart).
	Count int
	// Redelivered is the broker's redelivery flag: it delivered this
	// message before, to this consumer or another, and got no ack.
	Redelivered bool
	// StreamSeq and ConsumerSeq are the JetStream stream and consumer
	// sequence numbers.
	StreamSeq, ConsumerSeq uint64
	// Partition and Offset locate a Kafka record.
	Partition int32
	Offset    int64
	// DeliveryTag is the RabbitMQ channel's delivery tag.
	DeliveryTag uint64
}

// IsRedelivery reports whether the broker delivered the message before:
// its redelivery flag is set or its count is above 1.
func (d Delivery) IsRedelivery() bool { return d.Redelivered || d.Count > 1 }

// Handler processes one new message. tx is the open transaction to write
// the effect through (pgx.Tx for the PostgreSQL store, *sql.Tx for MySQL
// and SQLite; the dialect packages offer typed accessors), or nil in
// non-transactional mode. It must not commit or roll back tx. Returning an
// error, or panicking, rolls the transaction back.
type Handler func(ctx context.Context, tx any, msg Message) error

// BatchHandler processes the new messages of a batch in one transaction;
// msgs never contains an id that was already recorded.
type BatchHandler func(ctx context.Context, tx any, msgs []Message) error

// Config configures an Inbox.
type Config struct {
	// Consumer names this consumer; ids are deduplicated per consumer.
	// Required; 1..100 characters from [A-Za-z0-9._:-].
	Consumer string
	// Mode is Transactional or NonTransactional. Defaults to
	// Transactional.
	Mode Mode
	// Cache is consulted before the table for single messages. Defaults
	// to nil: every message goes to the table.
	Cache Cache
	// TTL is how long the inbox table keeps ids. The Cleaner does the
	// deleting with its own CleanerConfig.TTL: give it Inbox.TTL(). Here
	// it bounds the cache's TTL, checked at construction. Defaults to
	// DefaultTTL.
	TTL time.Duration
	// Logger receives warnings about cache failures and, at ERROR, every
	// effect lost in non-transactional mode. Payloads are never logged.
	// Defaults to slog.Default().
	Logger *slog.Logger
	// Hook observes results and cache lookups (inbox/inboxprom exports
	// them to Prometheus). Defaults to NopHook.
	Hook Hook
}

// Inbox is an idempotent consumer bound to one consumer name. It is safe for
// concurrent use.
type Inbox struct {
	st     store.Inbox
	cfg    Config
	logger *slog.Logger
}

// New returns an Inbox that records ids through st. It returns a
// *ConfigError for a missing store, an invalid consumer name, an unknown
// mode or a negative TTL, and a *CacheTTLError when the cache keeps entries
// longer than TTL.
func New(st store.Inbox, cfg Config) (*Inbox, error) {
	if st == nil {
		return nil, &ConfigError{Component: "inbox", Field: "store", Reason: "is nil"}
	}
	if err := store.ValidateConsumerName(cfg.Consumer); err != nil {
		return nil, &ConfigError{Component: "inbox", Field: "Consumer", Reason: "is not valid: " + err.Error(), Err: err}
	}
	if cfg.Mode != Transactional && cfg.Mode != NonTransactional {
		return nil, &ConfigError{Component: "inbox", Field: "Mode", Reason: fmt.Sprintf("unknown mode %d", int(cfg.Mode))}
	}
	if cfg.TTL < 0 {
		return nil, &ConfigError{Component: "inbox", Field: "TTL", Reason: fmt.Sprintf("must not be negative, got %s", cfg.TTL)}
	}
	if cfg.TTL == 0 {
		cfg.TTL = DefaultTTL
	}
	if cfg.Cache != nil {
		ct := cfg.Cache.TTL()
		if ct <= 0 {
			return nil, &ConfigError{Component: "inbox", Field: "Cache", Reason: fmt.Sprintf("TTL must be positive, got %s", ct)}
		}
		if ct > cfg.TTL {
			return nil, &CacheTTLError{CacheTTL: ct, InboxTTL: cfg.TTL}
		}
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.Default()
	}
	if cfg.Hook == nil {
		cfg.Hook = NopHook{}
	}
	return &Inbox{st: st, cfg: cfg, logger: logger.With("consumer", cfg.Consumer)}, nil
}

// Consumer returns the consumer name.
func (in *Inbox) Consumer() string { return in.cfg.Consumer }

// TTL returns the inbox TTL (Config.TTL after defaults). Pass it to the
// Cleaner's CleanerConfig.TTL so the table keeps ids as long as the cache
// check assumed.
func (in *Inbox) TTL() time.Duration { return in.cfg.TTL }

// Mode returns the configured mode.
func (in *Inbox) Mode() Mode { return in.cfg.Mode }

// Handle runs h for msg unless this consumer already recorded msg's id
// (see Mode for the guarantee). It returns Processed with a nil error,
// Duplicate with a nil error when the id was already recorded, Failed with
// a *HandlerError, *StoreError or ErrMissingID, or (non-transactional mode
// only) Lost with the *HandlerError of a handler that failed after the id
// was committed. A broker adapter acknowledges when Result.Acknowledge
// holds and asks for a redelivery otherwise. The handler's context
// continues the trace of the message's traceparent header, if any.
func (in *Inbox) Handle(ctx context.Context, msg Message, h Handler) (Result, error) {
	ctx, start, r, done, err := in.begin(ctx, msg, h)
	if done {
		return r, err
	}
	if in.cfg.Mode == NonTransactional {
		r, err = in.handleAtMostOnce(ctx, msg, h)
	} else {
		r, err = in.handleInTx(ctx, msg, h)
	}
	in.report(msg, r, 1, start, err)
	return r, err
}

// begin is the start both Handle methods share: it refuses a nil handler
// and a message without id, continues msg's trace, and answers Duplicate
// for an id the cache holds. When done, the caller returns r, err as they
// are; otherwise it handles msg with ctx and reports from start.
func (in *Inbox) begin(ctx context.Context, msg Message, h Handler) (_ context.Context, start time.Time, r Result, done bool, err error) {
	if h == nil {
		return ctx, start, Failed, true, ErrNilHandler
	}
	if msg.ID == (txbox.ID{}) {
		return ctx, start, Failed, true, ErrMissingID
	}
	start = time.Now()
	ctx = continueTrace(ctx, msg.Headers)
	if in.cacheContains(ctx, msg.ID) {
		in.report(msg, Duplicate, 1, start, nil)
		return ctx, start, Duplicate, true, nil
	}
	return ctx, start, r, false, nil
}

func (in *Inbox) handleInTx(ctx context.Context, msg Message, h Handler) (Result, error) {
	tx, fresh, err := in.beginRecord(ctx, []txbox.ID{msg.ID})
	if err != nil {
		return Failed, err
	}
	defer rollback(ctx, tx)
	if len(fresh) == 0 {
		// Recorded by a committed transaction (the insert waited for any
		// uncommitted one), so the cache may learn it.
		_ = tx.Rollback(context.WithoutCancel(ctx))
		in.cacheAdd(ctx, []txbox.ID{msg.ID})
		return Duplicate, nil
	}
	if err := call(func() error { return h(ctx, tx.Native(), msg) }); err != nil {
		return Failed, &HandlerError{Consumer: in.cfg.Consumer, IDs: []txbox.ID{msg.ID}, Err: err}
	}
	if err := tx.Commit(ctx); err != nil {
		return Failed, in.storeErr("commit", err)
	}
	in.cacheAdd(ctx, []txbox.ID{msg.ID})
	return Processed, nil
}

func (in *Inbox) handleAtMostOnce(ctx context.Context, msg Message, h Handler) (Result, error) {
	fresh, err := in.recordAndCommit(ctx, []txbox.ID{msg.ID})
	if err != nil {
		return Failed, err
	}
	if len(fresh) == 0 {
		in.cacheAdd(ctx, []txbox.ID{msg.ID})
		return Duplicate, nil
	}
	if err := call(func() error { return h(ctx, nil, msg) }); err != nil {
		// The id stays recorded: at-most-once means the effect is not
		// retried, and a redelivery would be a Duplicate. Say so loudly
		// rather than let an adapter ask for that redelivery.
		herr := &HandlerError{Consumer: in.cfg.Consumer, IDs: []txbox.ID{msg.ID}, Err: err}
		in.lost(ctx, msg, herr)
		return Lost, herr
	}
	in.cacheAdd(ctx, []txbox.ID{msg.ID})
	return Processed, nil
}

// lost logs, at ERROR, an effect lost in non-transactional mode: the
// operator's only trace of it besides the Hook.
func (in *Inbox) lost(ctx context.Context, msg Message, err error) {
	in.logger.ErrorContext(ctx, "inbox effect lost: the handler failed after the event id was recorded (non-transactional mode); the event will not be handled again",
		"event_id", msg.ID, "event_type", msg.Type, "delivery_count", msg.Delivery.Count, "error", err)
}

func (in *Inbox) recordAndCommit(ctx context.Context, ids []txbox.ID) ([]txbox.ID, error) {
	tx, fresh, err := in.beginRecord(ctx, ids)
	if err != nil {
		return nil, err
	}
	defer rollback(ctx, tx)
	if err := tx.Commit(ctx); err != nil {
		return nil, in.storeErr("commit", err)
	}
	return fresh, nil
}

// HandleInTx processes msg inside the caller's open transaction tx (a
// pgx.Tx or *sql.Tx of the store's database), for consumers that already
// run their own unit of work: it records the id in tx and, when the id is
// new, runs h with tx. It neither commits nor rolls back: the caller does,
// and must roll back on any error, which also forgets the id. It returns
// Processed or Duplicate with a nil error. The cache is consulted but not
// written, since the commit is the caller's; Mode is ignored (this is
// transactional by construction). A conflict the database broke by rolling
// tx back (store.ErrTxConflict) is returned, not retried.
func (in *Inbox) HandleInTx(ctx context.Context, tx any, msg Message, h Handler) (Result, error) {
	ctx, start, r, done, err := in.begin(ctx, msg, h)
	if done {
		return r, err
	}
	fresh, err := in.st.InboxRecord(ctx, tx, &store.InboxRecordParams{Consumer: in.cfg.Consumer, IDs: []txbox.ID{msg.ID}})
	if err != nil {
		err = in.storeErr("record", err)
		in.report(msg, Failed, 1, start, err)
		return Failed, err
	}
	if len(fresh) == 0 {
		in.report(msg, Duplicate, 1, start, nil)
		return Duplicate, nil
	}
	if err := call(func() error { return h(ctx, tx, msg) }); err != nil {
		herr := &HandlerError{Consumer: in.cfg.Consumer, IDs: []txbox.ID{msg.ID}, Err: err}
		in.report(msg, Failed, 1, start, herr)
		return Failed, herr
	}
	in.report(msg, Processed, 1, start, nil)
	return Processed, nil
}

// HandleBatch processes msgs together. Ids already recorded (and repeated
// ids within msgs, after their first occurrence) are filtered out; h gets
// only the new messages, in input order, in one transaction (after the
// commit of the records in non-transactional mode), and is not called when
// none is new. The cache is not consulted: one insert-or-ignore answers for
// the whole batch. It returns one Result per input message; on an error
// every new message is Failed and, in transactional mode, none is
// recorded. In non-transactional mode a handler error makes every new
// message Lost (their ids stay recorded).
func (in *Inbox) HandleBatch(ctx context.Context, msgs []Message, h BatchHandler) ([]Result, error) {
	results := make([]Result, len(msgs))
	if h == nil {
		fill(results, Failed)
		return results, ErrNilHandler
	}
	start := time.Now()
	ids := make([]txbox.ID, 0, len(msgs))
	first := make(map[txbox.ID]int, len(msgs))
	for i, m := range msgs {
		if m.ID == (txbox.ID{}) {
			fill(results, Failed)
			return results, fmt.Errorf("message %d: %w", i, ErrMissingID)
		}
		if _, dup := first[m.ID]; !dup {
			first[m.ID] = i
			ids = append(ids, m.ID)
		}
	}
	if len(ids) == 0 {
		return results, nil
	}
	results, err := in.handleBatch(ctx, msgs, ids, first, h, results)
	for i, m := range msgs {
		var merr error
		if !(results[i] == Processed || results[i] == Duplicate) {
			merr = err
		}
		in.report(m, results[i], len(msgs), start, merr)
	}
	return results, err
}

func (in *Inbox) handleBatch(ctx context.Context, msgs []Message, ids []txbox.ID, first map[txbox.ID]int, h BatchHandler, results []Result) ([]Result, error) {
	var fresh []txbox.ID
	var tx store.InboxTx
	var err error
	if in.cfg.Mode == NonTransactional {
		fresh, err = in.recordAndCommit(ctx, ids)
	} else {
		tx, fresh, err = in.beginRecord(ctx, ids)
		if err == nil {
			defer rollback(ctx, tx)
		}
	}
	if err != nil {
		fill(results, Failed)
		return results, err
	}
	isNew := make(map[txbox.ID]bool, len(fresh))
	for _, id := range fresh {
		isNew[id] = true
	}
	todo := make([]Message, 0, len(fresh))
	for i, m := range msgs {
		if isNew[m.ID] && first[m.ID] == i {
			todo = append(todo, m)
			results[i] = Processed
		} else {
			results[i] = Duplicate
		}
	}
	if len(todo) == 0 {
		return results, nil
	}
	// failNew marks the new messages with r: Failed when nothing stayed
	// recorded, Lost when their ids were committed before the handler.
	failNew := func(r Result) {
		for i := range results {
			if results[i] == Processed {
				results[i] = r
			}
		}
	}
	var native any
	if tx != nil {
		native = tx.Native()
	}
	if err := call(func() error { return h(ctx, native, todo) }); err != nil {
		herr := &HandlerError{Consumer: in.cfg.Consumer, IDs: fresh, Err: err}
		if tx == nil {
			failNew(Lost)
			for _, m := range todo {
				in.lost(ctx, m, herr)
			}
			return results, herr
		}
		failNew(Failed)
		return results, herr
	}
	if tx != nil {
		if err := tx.Commit(ctx); err != nil {
			failNew(Failed)
			return results, in.storeErr("commit", err)
		}
	}
	in.cacheAdd(ctx, fresh)
	return results, nil
}

// maxRecordAttempts bounds the retries of a begin+record that the database
// rolled back to break a lock conflict (store.ErrTxConflict).
const maxRecordAttempts = 5

// beginRecord begins a transaction and records ids in it. A conflict that
// made the database roll the transaction back is retried with a fresh
// transaction after a short jittered pause: nothing has run yet, so a retry
// is invisible to the handler.
func (in *Inbox) beginRecord(ctx context.Context, ids []txbox.ID) (store.InboxTx, []txbox.ID, error) {
	for attempt := 1; ; attempt++ {
		tx, err := in.st.InboxBegin(ctx)
		if err != nil {
			return nil, nil, in.storeErr("begin", err)
		}
		fresh, err := in.st.InboxRecord(ctx, tx.Native(), &store.InboxRecordParams{Consumer: in.cfg.Consumer, IDs: ids})
		if err == nil {
			return tx, fresh, nil
		}
		rollback(ctx, tx)
		if !errors.Is(err, store.ErrTxConflict) || attempt == maxRecordAttempts {
			return nil, nil, in.storeErr("record", err)
		}
		in.logger.DebugContext(ctx, "inbox record conflict; retrying", "attempt", attempt, "error", err)
		pause := time.Duration(attempt) * time.Millisecond * time.Duration(1+rand.IntN(5))
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, nil, in.storeErr("record", ctx.Err())
		case <-t.C:
		}
	}
}

func (in *Inbox) cacheContains(ctx context.Context, id txbox.ID) bool {
	if in.cfg.Cache == nil {
		return false
	}
	hit, err := in.cfg.Cache.Contains(ctx, in.cfg.Consumer, id)
	in.cfg.Hook.OnCache(CacheEvent{Consumer: in.cfg.Consumer, ID: id, Hit: hit && err == nil, Err: err})
	if err != nil {
		// The table is the source of truth: a broken cache costs a lookup.
		in.logger.WarnContext(ctx, "inbox cache lookup failed; using the table", "event_id", id, "error", err)
		return false
	}
	return hit
}

func (in *Inbox) cacheAdd(ctx context.Context, ids []txbox.ID) {
	if in.cfg.Cache == nil || len(ids) == 0 {
		return
	}
	if err := in.cfg.Cache.Add(context.WithoutCancel(ctx), in.cfg.Consumer, ids); err != nil {
		in.logger.WarnContext(ctx, "inbox cache write failed", "events", len(ids), "error", err)
	}
}

// report tells the Hook how msg ended. batch is the size of the call it
// was part of (1 outside HandleBatch).
func (in *Inbox) report(msg Message, r Result, batch int, start time.Time, err error) {
	in.cfg.Hook.OnHandled(HandledEvent{
		Consumer: in.cfg.Consumer, ID: msg.ID, Type: msg.Type, Delivery: msg.Delivery,
		Result: r, Batch: batch, Duration: time.Since(start), Err: err,
	})
}

func (in *Inbox) storeErr(op string, err error) error {
	return &StoreError{Consumer: in.cfg.Consumer, Op: op, Err: err}
}

// continueTrace makes the handler's context continue the producer's trace:
// the publisher put W3C traceparent/tracestate headers on the event, and
// the handler's spans become its children. A context that already carries
// a span (an instrumented HTTP server, say) is left alone.
func continueTrace(ctx context.Context, headers map[string]string) context.Context {
	if len(headers) == 0 || trace.SpanContextFromContext(ctx).IsValid() {
		return ctx
	}
	return propagation.TraceContext{}.Extract(ctx, propagation.MapCarrier(headers))
}

// rollback ends tx if it is still open. It runs on a context that outlives
// cancellation so that a cancelled delivery never leaves a transaction (and
// its row locks) behind.
func rollback(ctx context.Context, tx store.InboxTx) {
	_ = tx.Rollback(context.WithoutCancel(ctx))
}

// call runs f and turns a panic into a *PanicError.
func call(f func() error) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = &PanicError{Value: v, Stack: debug.Stack()}
		}
	}()
	return f()
}

func fill(rs []Result, r Result) {
	for i := range rs {
		rs[i] = r
	}
}

// Typed adapts a handler that wants the store's concrete transaction type
// (pgx.Tx, *sql.Tx) into a Handler, so handler code needs no type
// assertion:
//
//	h := inbox.Typed(func(ctx context.Context, tx pgx.Tx, m inbox.Message) error {
//		_, err := tx.Exec(ctx, "UPDATE stock SET n = n - 1 WHERE sku = $1", m.Key)
//		return err
//	})
//
// When the transaction is not a T (a nil tx in non-transactional mode, or a
// store of another dialect) the handler is not called and the error
// matches txbox.ErrNoTransaction.
func Typed[T any](h func(ctx context.Context, tx T, msg Message) error) Handler {
	return func(ctx context.Context, tx any, msg Message) error {
		t, ok := tx.(T)
		if !ok {
			return &txbox.UnsupportedTxError{Dialect: "inbox", Type: fmt.Sprintf("%T (handler wants %s)", tx, reflect.TypeFor[T]())}
		}
		return h(ctx, t, msg)
	}
}

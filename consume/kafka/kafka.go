package kafka

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/consume"
	"github.com/txbox/txbox/consume/internal/drain"
	"github.com/txbox/txbox/consume/internal/route"
	"github.com/txbox/txbox/inbox"
)

// Defaults.
const (
	// DefaultMaxPollRecords bounds one poll.
	DefaultMaxPollRecords = 500
	// DefaultBatchDuration is the handling time one poll aims at.
	DefaultBatchDuration = time.Second
)

// Config configures a Consumer.
type Config struct {
	// Inbox deduplicates and runs Handler. Exactly one of Inbox and
	// Tenants is required.
	Inbox *inbox.Inbox
	// Tenants, in place of Inbox, routes each message to its tenant's
	// inbox by its txbox-tenant header (docs/multi-tenant.md,
	// "Consumers"); a message of a tenant without an inbox is an invalid
	// message (consume.InvalidMessageError wrapping
	// inbox.ErrUnknownTenant), settled as one without an event id.
	Tenants *inbox.Tenants
	// Handler processes each new message. Required.
	Handler inbox.Handler
	// Backoff spaces the retries of a failing record. Defaults to
	// consume.DefaultMinBackoff doubling up to consume.DefaultMaxBackoff.
	Backoff consume.Backoff
	// MaxPollRecords bounds the records of one poll. Defaults to
	// DefaultMaxPollRecords.
	MaxPollRecords int
	// BatchDuration is the handling time one poll aims at: the adapter
	// polls about BatchDuration / (the average time one record took)
	// records, at least 1 and at most MaxPollRecords (the first poll takes
	// Concurrency records), so that a poll's records are handled and
	// committed within about BatchDuration whatever the handler's pace.
	// That bounds what a crash or a rebalance hands to another member
	// again and, with kgo.BlockRebalanceOnPoll, how long a rebalance waits
	// for this member (docs/inbox.md). Defaults to DefaultBatchDuration.
	BatchDuration time.Duration
	// Concurrency is the number of partitions handled at once; records of
	// one partition are always handled in order, one at a time. Defaults
	// to 1.
	Concurrency int
	// DrainTimeout is how long the handlers already running may finish
	// once stopping began (Stop, or Run's context ended); then their
	// context is cancelled. Stop's context may cut them sooner. Defaults
	// to consume.DefaultDrainTimeout.
	DrainTimeout time.Duration
	// Logger receives warnings (auto-commit on, invalid records, handler
	// failures). Payloads are never logged. Defaults to slog.Default().
	Logger *slog.Logger
}

// commitMode is how offsets reach Kafka.
type commitMode int

const (
	commitSync  commitMode = iota // DisableAutoCommit: CommitRecords per batch
	commitMarks                   // AutoCommitMarks: MarkCommitRecords per record
	commitAuto                    // plain auto-commit: unsafe, warned about
)

// Consumer feeds the records of a consumer group to an inbox. Run it
// with Start and Stop (the lifecycle of the relay and the inbox cleaner),
// or with Run(ctx), which is both. It never fails by itself (Err is
// always nil); it stops by itself when its client is closed.
type Consumer struct {
	cl     *kgo.Client
	cfg    Config
	target route.Target
	mode   commitMode
	logger *slog.Logger

	// life is the consumer's start, loop and stop (Start, Stop, Run).
	life drain.Life

	mu  sync.Mutex
	avg time.Duration // moving average of one record's handling time
}

// New returns a Consumer on cl, which must be a consumer-group client; it
// stays the caller's to close. Missing fields are an error naming them.
func New(cl *kgo.Client, cfg Config) (*Consumer, error) {
	if cl == nil {
		return nil, &consume.ConfigError{Component: "consume/kafka", Field: "client", Reason: "is nil"}
	}
	if cfg.Handler == nil {
		return nil, &consume.ConfigError{Component: "consume/kafka", Field: "Handler", Reason: "is required"}
	}
	target, err := route.New("consume/kafka", cfg.Inbox, cfg.Tenants)
	if err != nil {
		return nil, err
	}
	if cfg.MaxPollRecords < 0 {
		return nil, &consume.ConfigError{Component: "consume/kafka", Field: "MaxPollRecords", Reason: fmt.Sprintf("must not be negative, got %d", cfg.MaxPollRecords)}
	}
	if cfg.MaxPollRecords == 0 {
		cfg.MaxPollRecords = DefaultMaxPollRecords
	}
	if cfg.Concurrency < 0 {
		return nil, &consume.ConfigError{Component: "consume/kafka", Field: "Concurrency", Reason: fmt.Sprintf("must not be negative, got %d", cfg.Concurrency)}
	}
	if cfg.Concurrency == 0 {
		cfg.Concurrency = 1
	}
	if cfg.BatchDuration < 0 {
		return nil, &consume.ConfigError{Component: "consume/kafka", Field: "BatchDuration", Reason: fmt.Sprintf("must not be negative, got %s", cfg.BatchDuration)}
	}
	if cfg.BatchDuration == 0 {
		cfg.BatchDuration = DefaultBatchDuration
	}
	if cfg.Backoff, err = cfg.Backoff.Normalize(); err != nil {
		return nil, err
	}
	if cfg.DrainTimeout, err = consume.DrainTimeout("kafka", cfg.DrainTimeout); err != nil {
		return nil, err
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.Default()
	}
	logger = logger.With("consumer", target.Name())
	if g, _ := cl.OptValue(kgo.ConsumerGroup).(string); g == "" {
		return nil, &consume.ConfigError{Component: "consume/kafka", Field: "client", Reason: "has no consumer group (kgo.ConsumerGroup)"}
	}
	mode := commitAuto
	switch {
	case optBool(cl, kgo.DisableAutoCommit):
		mode = commitSync
	case optBool(cl, kgo.AutoCommitMarks):
		mode = commitMarks
	default:
		logger.Warn("kafka auto-commit is on: offsets are committed whether or not the handler finished, so a crash can lose messages; use kgo.DisableAutoCommit or kgo.AutoCommitMarks")
	}
	return &Consumer{cl: cl, cfg: cfg, target: target, mode: mode, logger: logger, life: drain.Life{Timeout: cfg.DrainTimeout}}, nil
}

func optBool(cl *kgo.Client, opt any) bool {
	v, _ := cl.OptValue(opt).(bool)
	return v
}

// Start starts polling and handling records in the background and
// returns at once. The consumer runs until Stop, or until the client is
// closed (it then stops by itself: Stopped is closed and Err is nil,
// since closing the client is the caller's own way to stop it). ctx only
// carries values. Fetch errors are logged and polling goes on, so there
// is no fatal error: Err is always nil. A second Start returns
// consume.ErrAlreadyStarted, a Start after Stop consume.ErrStopped.
func (c *Consumer) Start(ctx context.Context) error { return c.life.Start(ctx, c.prepare) }

// Stop stops gracefully: it starts no new record, lets the running
// handlers finish for up to DrainTimeout or until ctx ends, whichever
// comes first (then cancels their context), commits what was handled, so
// a restart does not redo it, and returns once every goroutine of the
// consumer ended. It returns ctx's error when ctx ended first. A second
// Stop waits for the first; Stop before Start returns
// consume.ErrNotStarted. The client stays the caller's to close.
func (c *Consumer) Stop(ctx context.Context) error { return c.life.Stop(ctx) }

// Started is closed once Start succeeded.
func (c *Consumer) Started() <-chan struct{} { return c.life.Started() }

// Stopped is closed once the consumer stopped: by Stop, or by itself
// when the client was closed.
func (c *Consumer) Stopped() <-chan struct{} { return c.life.Stopped() }

// Err returns the error that stopped the consumer by itself. The Kafka
// consumer has none (fetch errors are retried), so it is always nil; it
// is here for the same shape as the other adapters.
func (c *Consumer) Err() error { return c.life.Err() }

// Run is Start, then Stop once ctx ends or the client is closed. It
// returns nil then. Its Stop has no deadline of its own: the running
// handlers finish for up to DrainTimeout (then their context is
// cancelled), and what was handled is committed, so a restart does not
// redo it. A consumer runs once: after Run returned, Run and Start
// return consume.ErrStopped. With kgo.BlockRebalanceOnPoll, rebalances
// are allowed after each poll's records are handled and committed, and
// when the consumer stops.
func (c *Consumer) Run(ctx context.Context) error { return c.life.Run(ctx, c.prepare) }

// prepare is Start's check: there is nothing to check or subscribe
// before the first poll (the group is joined by polling).
func (c *Consumer) prepare() (drain.Loop, error) { return c.loop, nil }

// loop polls and handles records until run ends or the client is closed.
func (c *Consumer) loop(ctx, hctx context.Context) error {
	// A no-op without kgo.BlockRebalanceOnPoll.
	defer c.cl.AllowRebalance()
	for {
		fetches := c.cl.PollRecords(ctx, c.pollSize())
		if fetches.IsClientClosed() || ctx.Err() != nil {
			// Records polled now are not started, not committed: the
			// member that owns their partition next gets them.
			return nil
		}
		fetches.EachError(func(topic string, p int32, err error) {
			if !errors.Is(err, context.Canceled) {
				c.logger.WarnContext(ctx, "kafka fetch error", "topic", topic, "partition", p, "error", err)
			}
		})
		var parts [][]*kgo.Record
		fetches.EachPartition(func(p kgo.FetchTopicPartition) {
			if len(p.Records) > 0 {
				parts = append(parts, p.Records)
			}
		})
		stopped := c.handleBatch(ctx, hctx, parts)
		c.cl.AllowRebalance()
		if stopped {
			return nil
		}
	}
}

// handleBatch handles each partition's records in order, up to
// Concurrency partitions at once, and commits what was handled. A
// partition stops at the first record it could not handle before ctx
// ended, and no record starts after ctx ended, so what is committed is a
// prefix. It reports whether ctx ended.
func (c *Consumer) handleBatch(ctx, hctx context.Context, parts [][]*kgo.Record) (stopped bool) {
	handled := make([][]*kgo.Record, len(parts))
	var stop atomic.Bool
	sem := make(chan struct{}, c.cfg.Concurrency)
	var wg sync.WaitGroup
	for i, recs := range parts {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			for _, r := range recs {
				if ctx.Err() != nil || !c.handle(ctx, hctx, r) {
					stop.Store(true)
					return
				}
				handled[i] = append(handled[i], r)
				if c.mode == commitMarks {
					c.cl.MarkCommitRecords(r)
				}
			}
		})
	}
	wg.Wait()
	var done []*kgo.Record
	for _, h := range handled {
		done = append(done, h...)
	}
	if c.mode == commitSync && len(done) > 0 {
		// WithoutCancel: what was handled is committed even during
		// shutdown, so a restart does not redo it.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		err := c.cl.CommitRecords(cctx, done...)
		cancel()
		if err != nil {
			c.logger.WarnContext(ctx, "kafka offset commit failed; the records will be redelivered and deduplicated", "records", len(done), "error", err)
		}
	}
	return stop.Load() || ctx.Err() != nil
}

// pollSize is the number of records to poll so that handling them takes
// about BatchDuration at the pace measured so far.
func (c *Consumer) pollSize() int {
	c.mu.Lock()
	avg := c.avg
	c.mu.Unlock()
	if avg <= 0 {
		return min(c.cfg.Concurrency, c.cfg.MaxPollRecords)
	}
	return max(1, min(c.cfg.MaxPollRecords, int(c.cfg.BatchDuration/avg)))
}

// observe folds one record's handling time into the moving average.
func (c *Consumer) observe(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.avg <= 0 {
		c.avg = d
		return
	}
	c.avg += (d - c.avg) / 8
}

// handle runs one record through the inbox, retrying until it succeeds. It
// returns false when ctx ended first (the record is not handled).
func (c *Consumer) handle(ctx, hctx context.Context, r *kgo.Record) bool {
	headers := make(map[string]string, len(r.Headers))
	for _, h := range r.Headers {
		headers[h.Key] = string(h.Value)
	}
	get := func(name string) string { return headers[name] }
	msg, err := consume.NewMessageFromHeaders(get, consume.PrefixKafka, "", string(r.Key), r.Value, headers)
	var in *inbox.Inbox
	if err == nil {
		in, err = c.target.Inbox(msg)
	}
	if err != nil {
		// Retrying cannot give it an id; holding the partition forever
		// would stop every later record. Skip it, loudly.
		c.logger.ErrorContext(ctx, "kafka record skipped", "topic", r.Topic, "partition", r.Partition, "offset", r.Offset, "error", err)
		return true
	}
	if msg.Key == msg.ID.String() && msg.Key == string(r.Key) {
		// The Kafka sender keys a record whose event has no key by the
		// event id (to spread them over the partitions): that record key
		// is not the event's key.
		msg.Key = ""
	}
	for attempt := 1; ; attempt++ {
		// Kafka keeps no delivery count: Count is this adapter's attempt.
		msg.Delivery = inbox.Delivery{Broker: "kafka", Source: r.Topic, Count: attempt, Partition: r.Partition, Offset: r.Offset}
		start := time.Now()
		res, err := in.Handle(hctx, msg, c.cfg.Handler)
		c.observe(time.Since(start))
		if res.Acknowledge() {
			return true
		}
		if txbox.Classify(err) == txbox.ClassPermanent {
			// The handler says no retry can succeed (txbox.Permanent): skip
			// the record, loudly, rather than stall the partition forever.
			c.logger.ErrorContext(ctx, "kafka record skipped by the handler", "topic", r.Topic, "partition", r.Partition, "offset", r.Offset, "event_id", msg.ID, "error", err)
			return true
		}
		if ctx.Err() != nil {
			return false
		}
		delay := c.cfg.Backoff.Delay(attempt)
		c.logger.WarnContext(ctx, "kafka record failed; retrying", "topic", r.Topic, "partition", r.Partition, "offset", r.Offset, "event_id", msg.ID, "attempt", attempt, "retry_in", delay, "error", err)
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return false
		case <-t.C:
		}
	}
}

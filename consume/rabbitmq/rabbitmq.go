package rabbitmq

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/consume"
	"github.com/txbox/txbox/consume/internal/drain"
	"github.com/txbox/txbox/consume/internal/route"
	"github.com/txbox/txbox/inbox"
)

// ErrDeliveriesClosed is the error that stops a consumer by itself when
// the broker closed the deliveries channel (connection or channel lost,
// queue deleted): Run, Stop and Err return it. Open a new channel, make a
// new Consumer on it and start that one; unacked messages are
// redelivered.
var ErrDeliveriesClosed = errors.New("consume/rabbitmq: deliveries channel closed")

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
	// Queue to consume. Required.
	Queue string
	// ConsumerTag names the consumer on the broker; Stop cancels it by
	// this tag. Defaults to a unique "txbox-<consumer>-…".
	ConsumerTag string
	// Prefetch is the QoS prefetch count: unacked deliveries the broker
	// sends ahead. Deliveries beyond Concurrency wait in the client while
	// the broker counts them as this consumer's (another consumer of the
	// queue cannot have them; a crash requeues them all; RabbitMQ's
	// consumer_timeout runs for them). Defaults to Concurrency.
	Prefetch int
	// Concurrency is the number of deliveries handled at once. Above 1,
	// deliveries of the queue are handled out of order. Defaults to 1.
	Concurrency int
	// Backoff delays the nack of a failed delivery, growing with the
	// failures of the same event id (of the same tenant, with Tenants)
	// seen by this consumer. Defaults to consume.DefaultMinBackoff
	// doubling up to consume.DefaultMaxBackoff.
	Backoff consume.Backoff
	// DrainTimeout is how long the handlers already running may finish
	// once stopping began (Stop, or Run's context ended); then their
	// context is cancelled. Stop's context may cut them sooner. Defaults
	// to consume.DefaultDrainTimeout.
	DrainTimeout time.Duration
	// Logger receives warnings. Payloads are never logged. Defaults to slog.Default().
	Logger *slog.Logger
}

// Consumer feeds one queue's deliveries to an inbox. Run it with Start
// and Stop (the lifecycle of the relay and the inbox cleaner), or with
// Run(ctx), which is both. It stops by itself when the broker closes its
// deliveries: Stopped is closed and Err returns ErrDeliveriesClosed.
type Consumer struct {
	ch     *amqp.Channel
	cfg    Config
	target route.Target
	logger *slog.Logger

	mu       sync.Mutex
	failures map[failureKey]int

	acked, nacked, rejected atomic.Int64

	// life is the consumer's start, loop and stop (Start, Stop, Run).
	life drain.Life
}

// Stats counts how deliveries were settled since New.
type Stats struct {
	// Acked deliveries were processed, duplicates, or lost effects (see
	// inbox.Lost).
	Acked int64
	// Nacked deliveries failed and were requeued, or were handed back
	// unstarted during a stop.
	Nacked int64
	// Rejected deliveries had no usable event id.
	Rejected int64
}

// Stats returns the settlement counters.
func (c *Consumer) Stats() Stats {
	return Stats{Acked: c.acked.Load(), Nacked: c.nacked.Load(), Rejected: c.rejected.Load()}
}

// maxTrackedFailures bounds the failure counters kept for backoff.
const maxTrackedFailures = 10_000

// New returns a Consumer on ch, which stays the caller's to close.
func New(ch *amqp.Channel, cfg Config) (*Consumer, error) {
	if ch == nil {
		return nil, &consume.ConfigError{Component: "consume/rabbitmq", Field: "channel", Reason: "is nil"}
	}
	if cfg.Handler == nil || cfg.Queue == "" {
		return nil, &consume.ConfigError{Component: "consume/rabbitmq", Field: "Handler, Queue", Reason: "are required"}
	}
	target, err := route.New("consume/rabbitmq", cfg.Inbox, cfg.Tenants)
	if err != nil {
		return nil, err
	}
	if cfg.Prefetch < 0 {
		return nil, &consume.ConfigError{Component: "consume/rabbitmq", Field: "Prefetch", Reason: fmt.Sprintf("must not be negative, got %d", cfg.Prefetch)}
	}
	if cfg.Concurrency < 0 {
		return nil, &consume.ConfigError{Component: "consume/rabbitmq", Field: "Concurrency", Reason: fmt.Sprintf("must not be negative, got %d", cfg.Concurrency)}
	}
	if cfg.Concurrency == 0 {
		cfg.Concurrency = 1
	}
	if cfg.Prefetch == 0 {
		cfg.Prefetch = cfg.Concurrency
	}
	if cfg.Backoff, err = cfg.Backoff.Normalize(); err != nil {
		return nil, err
	}
	if cfg.DrainTimeout, err = consume.DrainTimeout("rabbitmq", cfg.DrainTimeout); err != nil {
		return nil, err
	}
	if cfg.ConsumerTag == "" {
		b := make([]byte, 6)
		_, _ = rand.Read(b)
		cfg.ConsumerTag = "txbox-" + target.Name() + "-" + hex.EncodeToString(b)
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.Default()
	}
	return &Consumer{ch: ch, cfg: cfg, target: target, logger: logger.With("consumer", target.Name(), "queue", cfg.Queue), failures: map[failureKey]int{},
		life: drain.Life{Timeout: cfg.DrainTimeout}}, nil
}

// Start sets the channel's QoS and subscribes to the queue, returning
// that error without starting, then consumes in the background with
// Concurrency workers (one: in order) and returns at once; ctx only
// carries values. When the broker closes the deliveries channel
// (connection or channel lost, queue deleted) the consumer stops by
// itself: Stopped is closed, and Err and Stop return ErrDeliveriesClosed.
// A second Start returns consume.ErrAlreadyStarted, a Start after Stop
// consume.ErrStopped.
func (c *Consumer) Start(ctx context.Context) error { return c.life.Start(ctx, c.prepare) }

// Stop stops gracefully: it cancels the broker consumer (nothing new is
// delivered), requeues at once the deliveries it holds whose handler did
// not start, lets the running handlers finish for up to DrainTimeout or
// until ctx ends, whichever comes first (then cancels their context), and
// acks what they handled. It returns once every goroutine of the
// consumer ended: ctx's error when ctx ended first, else the error that
// stopped the consumer by itself (Err), else nil. A second Stop waits
// for the first; Stop before Start returns consume.ErrNotStarted. The
// channel stays the caller's to close.
func (c *Consumer) Stop(ctx context.Context) error { return c.life.Stop(ctx) }

// Started is closed once Start succeeded.
func (c *Consumer) Started() <-chan struct{} { return c.life.Started() }

// Stopped is closed once the consumer stopped: by Stop, or by itself
// when the deliveries channel closed (Err).
func (c *Consumer) Stopped() <-chan struct{} { return c.life.Stopped() }

// Err returns ErrDeliveriesClosed once the broker closed the deliveries
// channel and the consumer stopped by itself; nil while it runs and
// after a Stop.
func (c *Consumer) Err() error { return c.life.Err() }

// Run is Start, then Stop once ctx ends or the deliveries channel closes.
// It returns Start's error, nil once ctx ended, and ErrDeliveriesClosed
// when the channel closed first. Its Stop has no deadline of its own: the
// running handlers finish for up to DrainTimeout (then their context is
// cancelled), and what they handled is acked. A consumer runs once:
// after Run returned, Run and Start return consume.ErrStopped.
func (c *Consumer) Run(ctx context.Context) error { return c.life.Run(ctx, c.prepare) }

// prepare is Start's check: the QoS and the subscription.
func (c *Consumer) prepare() (drain.Loop, error) {
	if err := c.ch.Qos(c.cfg.Prefetch, 0, false); err != nil {
		return nil, fmt.Errorf("consume/rabbitmq: qos: %w", err)
	}
	deliveries, err := c.ch.Consume(c.cfg.Queue, c.cfg.ConsumerTag, false, false, false, false, nil)
	if err != nil {
		return nil, fmt.Errorf("consume/rabbitmq: consume: %w", err)
	}
	return func(ctx, hctx context.Context) error { return c.consume(ctx, hctx, deliveries) }, nil
}

// consume hands deliveries to Concurrency workers until ctx ends or the
// broker closes deliveries.
func (c *Consumer) consume(ctx, hctx context.Context, deliveries <-chan amqp.Delivery) error {
	// Cancelling the consumer makes amqp091 close deliveries once the
	// deliveries already received are read.
	cancelled := make(chan struct{})
	stopCancel := context.AfterFunc(ctx, func() {
		defer close(cancelled)
		if err := c.ch.Cancel(c.cfg.ConsumerTag, false); err != nil {
			c.logger.WarnContext(ctx, "rabbitmq consumer cancel failed", "error", err)
		}
	})
	var wg sync.WaitGroup
	for w := 0; w < c.cfg.Concurrency; w++ {
		wg.Go(func() {
			for d := range deliveries {
				if ctx.Err() != nil {
					// Stopping: nothing new starts. Requeue it at once for
					// another consumer.
					c.settle(ctx, "nack", d.Nack(false, true), &c.nacked)
					continue
				}
				c.handle(ctx, hctx, d, cancelled)
			}
		})
	}
	wg.Wait()
	if !stopCancel() {
		<-cancelled
	}
	return ErrDeliveriesClosed
}

// delivery is the broker's metadata of d.
func (c *Consumer) delivery(d amqp.Delivery) inbox.Delivery {
	out := inbox.Delivery{Broker: "rabbitmq", Source: c.cfg.Queue, Redelivered: d.Redelivered, DeliveryTag: d.DeliveryTag}
	// Quorum queues count earlier deliveries in x-delivery-count; classic
	// queues only set the redelivered flag.
	switch n := d.Headers["x-delivery-count"].(type) {
	case int64:
		out.Count = int(n) + 1
	case int32:
		out.Count = int(n) + 1
	case int:
		out.Count = n + 1
	default:
		if !d.Redelivered {
			out.Count = 1
		}
	}
	return out
}

// handle runs one delivery through the inbox and settles it. ctx is the
// run context (ended: stopping), hctx the handlers' drain context, cancelled
// closed once the broker confirmed the consumer's cancel.
func (c *Consumer) handle(ctx, hctx context.Context, d amqp.Delivery, cancelled <-chan struct{}) {
	headers := make(map[string]string, len(d.Headers))
	for k, v := range d.Headers {
		switch v := v.(type) {
		case string:
			headers[k] = v
		case []byte:
			headers[k] = string(v)
		default:
			headers[k] = fmt.Sprint(v)
		}
	}
	get := func(name string) string { return headers[name] }
	// The routing key is not the event's key (it is the event type by
	// default): the key travels in the txbox-key header or the
	// cloudEvents:subject attribute.
	msg, err := consume.NewMessageFromHeaders(get, consume.PrefixAMQP, d.MessageId, "", d.Body, headers)
	var in *inbox.Inbox
	if err == nil {
		in, err = c.target.Inbox(msg)
	}
	if err != nil {
		c.logger.ErrorContext(ctx, "rabbitmq delivery rejected", "delivery_tag", d.DeliveryTag, "error", err)
		c.settle(ctx, "reject", d.Reject(false), &c.rejected)
		return
	}
	msg.Delivery = c.delivery(d)
	res, err := in.Handle(hctx, msg, c.cfg.Handler)
	if ctx.Err() != nil {
		// Stopping: settle only after the broker confirmed the cancel.
		// An ack or nack frees a prefetch slot, and before the cancel the
		// broker would fill it with a delivery that could only go back
		// to the queue, flagged redelivered.
		<-cancelled
	}
	switch {
	case res.Acknowledge():
		c.succeeded(msg)
		c.settle(ctx, "ack", d.Ack(false), &c.acked)
	case txbox.Classify(err) == txbox.ClassPermanent:
		// The handler says no redelivery can succeed (txbox.Permanent):
		// reject it to the queue's dead-letter exchange, if any, rather
		// than requeue it forever.
		c.logger.ErrorContext(ctx, "rabbitmq delivery rejected by the handler", "event_id", msg.ID, "error", err)
		c.succeeded(msg)
		c.settle(ctx, "reject", d.Reject(false), &c.rejected)
	default:
		n := c.failed(msg)
		delay := c.cfg.Backoff.Delay(n)
		c.logger.WarnContext(ctx, "rabbitmq delivery failed; requeueing", "event_id", msg.ID, "failures", n, "requeue_in", delay, "error", err)
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
		case <-t.C:
		}
		c.settle(ctx, "nack", d.Nack(false, true), &c.nacked)
	}
}

func (c *Consumer) settle(ctx context.Context, op string, err error, counter *atomic.Int64) {
	if err == nil {
		counter.Add(1)
	} else {
		// The channel is gone: the broker requeues every unacked delivery,
		// and the inbox absorbs the redelivery of those already handled.
		c.logger.WarnContext(ctx, "rabbitmq "+op+" failed", "error", err)
	}
}

// failureKey counts the failures of one event of one tenant: with
// Config.Tenants the same id under two tenants is two events.
type failureKey struct {
	tenant string
	id     txbox.ID
}

func (c *Consumer) failed(msg inbox.Message) int {
	id := failureKey{msg.Tenant(), msg.ID}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.failures) >= maxTrackedFailures {
		clear(c.failures)
	}
	c.failures[id]++
	return c.failures[id]
}

func (c *Consumer) succeeded(msg inbox.Message) {
	id := failureKey{msg.Tenant(), msg.ID}
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.failures, id)
}

package rabbitmq

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/consume"
	"github.com/txbox/txbox/inbox"
)

// DefaultPrefetch is the channel's QoS prefetch count.
const DefaultPrefetch = 32

// ErrDeliveriesClosed is returned by Run when the broker closed the
// deliveries channel (connection or channel lost, queue deleted). Open a
// new channel and Run again; unacked messages are redelivered.
var ErrDeliveriesClosed = errors.New("consume/rabbitmq: deliveries channel closed")

// Config configures a Consumer.
type Config struct {
	// Inbox deduplicates and runs Handler. Required.
	Inbox *inbox.Inbox
	// Handler processes each new message. Required.
	Handler inbox.Handler
	// Queue to consume. Required.
	Queue string
	// ConsumerTag names the consumer on the broker. Defaults to one the
	// broker generates.
	ConsumerTag string
	// Prefetch is the QoS prefetch count: unacked deliveries in flight.
	// Defaults to DefaultPrefetch.
	Prefetch int
	// Concurrency is the number of deliveries handled at once. Above 1,
	// deliveries of the queue are handled out of order. Defaults to 1.
	Concurrency int
	// Backoff delays the nack of a failed delivery, growing with the
	// failures of the same event id seen by this consumer. Defaults to
	// consume.DefaultMinBackoff doubling up to consume.DefaultMaxBackoff.
	Backoff consume.Backoff
	// Logger receives warnings. Payloads are never logged. Defaults to a
	// logger that discards everything.
	Logger *slog.Logger
}

// Consumer feeds one queue's deliveries to an inbox.
type Consumer struct {
	ch     *amqp.Channel
	cfg    Config
	logger *slog.Logger

	mu       sync.Mutex
	failures map[txbox.ID]int

	acked, nacked, rejected atomic.Int64
}

// Stats counts how deliveries were settled since New.
type Stats struct {
	// Acked deliveries were processed or duplicates.
	Acked int64
	// Nacked deliveries failed and were requeued.
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
		return nil, &consume.ConfigError{Adapter: "rabbitmq", Field: "channel", Reason: "is nil"}
	}
	if cfg.Inbox == nil || cfg.Handler == nil || cfg.Queue == "" {
		return nil, &consume.ConfigError{Adapter: "rabbitmq", Field: "Inbox, Handler, Queue", Reason: "are required"}
	}
	if cfg.Prefetch < 0 {
		return nil, &consume.ConfigError{Adapter: "rabbitmq", Field: "Prefetch", Reason: fmt.Sprintf("must not be negative, got %d", cfg.Prefetch)}
	}
	if cfg.Prefetch == 0 {
		cfg.Prefetch = DefaultPrefetch
	}
	if cfg.Concurrency < 0 {
		return nil, &consume.ConfigError{Adapter: "rabbitmq", Field: "Concurrency", Reason: fmt.Sprintf("must not be negative, got %d", cfg.Concurrency)}
	}
	if cfg.Concurrency == 0 {
		cfg.Concurrency = 1
	}
	b, err := cfg.Backoff.Normalize()
	if err != nil {
		return nil, err
	}
	cfg.Backoff = b
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return &Consumer{ch: ch, cfg: cfg, logger: logger.With("consumer", cfg.Inbox.Consumer(), "queue", cfg.Queue), failures: map[txbox.ID]int{}}, nil
}

// Run consumes until ctx ends (it returns nil) or the deliveries channel
// closes (ErrDeliveriesClosed). Deliveries are handled by Concurrency
// workers; with one, in order.
func (c *Consumer) Run(ctx context.Context) error {
	if err := c.ch.Qos(c.cfg.Prefetch, 0, false); err != nil {
		return fmt.Errorf("consume/rabbitmq: qos: %w", err)
	}
	deliveries, err := c.ch.ConsumeWithContext(ctx, c.cfg.Queue, c.cfg.ConsumerTag, false, false, false, false, nil)
	if err != nil {
		return fmt.Errorf("consume/rabbitmq: consume: %w", err)
	}
	var wg sync.WaitGroup
	var closed atomic.Bool
	for w := 0; w < c.cfg.Concurrency; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-ctx.Done():
					return
				case d, ok := <-deliveries:
					if !ok {
						closed.Store(true)
						return
					}
					c.handle(ctx, d)
				}
			}
		}()
	}
	wg.Wait()
	if ctx.Err() != nil {
		drain(deliveries)
		return nil
	}
	if closed.Load() {
		return ErrDeliveriesClosed
	}
	return nil
}

// drain hands back the deliveries amqp091 already buffered after the
// consumer was cancelled: requeued at once for another consumer. Leaving
// them unread would block amqp091's buffer goroutine and with it
// Channel.Close.
func drain(deliveries <-chan amqp.Delivery) {
	t := time.NewTimer(5 * time.Second)
	defer t.Stop()
	for {
		select {
		case d, ok := <-deliveries:
			if !ok {
				return
			}
			_ = d.Nack(false, true)
		case <-t.C:
			return
		}
	}
}

func (c *Consumer) handle(ctx context.Context, d amqp.Delivery) {
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
	id := headers[txbox.HeaderEventID]
	if id == "" {
		id = d.MessageId
	}
	msg, err := consume.NewMessage(id, headers[txbox.HeaderEventType], d.RoutingKey, d.Body, headers)
	if err != nil {
		c.logger.ErrorContext(ctx, "rabbitmq delivery rejected", "delivery_tag", d.DeliveryTag, "error", err)
		c.settle(ctx, "reject", d.Reject(false), &c.rejected)
		return
	}
	if _, err := c.cfg.Inbox.Handle(ctx, msg, c.cfg.Handler); err != nil {
		if txbox.Classify(err) == txbox.ClassPermanent {
			// The handler says no redelivery can succeed (txbox.Permanent):
			// reject it to the queue's dead-letter exchange, if any, rather
			// than requeue it forever.
			c.logger.ErrorContext(ctx, "rabbitmq delivery rejected by the handler", "event_id", msg.ID, "error", err)
			c.succeeded(msg.ID)
			c.settle(ctx, "reject", d.Reject(false), &c.rejected)
			return
		}
		n := c.failed(msg.ID)
		delay := c.cfg.Backoff.Delay(n)
		c.logger.WarnContext(ctx, "rabbitmq delivery failed; requeueing", "event_id", msg.ID, "failures", n, "requeue_in", delay, "error", err)
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
		case <-t.C:
		}
		c.settle(ctx, "nack", d.Nack(false, true), &c.nacked)
		return
	}
	c.succeeded(msg.ID)
	c.settle(ctx, "ack", d.Ack(false), &c.acked)
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

func (c *Consumer) failed(id txbox.ID) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.failures) >= maxTrackedFailures {
		clear(c.failures)
	}
	c.failures[id]++
	return c.failures[id]
}

func (c *Consumer) succeeded(id txbox.ID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.failures, id)
}

package nats

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/consume"
	"github.com/txbox/txbox/inbox"
)

// Config configures a Consumer.
type Config struct {
	// Inbox deduplicates and runs Handler. Required.
	Inbox *inbox.Inbox
	// Handler processes each new message. Required.
	Handler inbox.Handler
	// Backoff is the nak delay of a failed message by its delivery count.
	// Defaults to consume.DefaultMinBackoff doubling up to
	// consume.DefaultMaxBackoff.
	Backoff consume.Backoff
	// Concurrency is the number of messages handled at once. Above 1,
	// messages are handled out of order. Defaults to 1.
	Concurrency int
	// Logger receives warnings. Payloads are never logged. Defaults to a
	// logger that discards everything.
	Logger *slog.Logger
}

// Consumer feeds a JetStream consumer's messages to an inbox.
type Consumer struct {
	cons   jetstream.Consumer
	cfg    Config
	logger *slog.Logger
}

// New returns a Consumer on cons.
func New(cons jetstream.Consumer, cfg Config) (*Consumer, error) {
	if cons == nil {
		return nil, &consume.ConfigError{Adapter: "nats", Field: "consumer", Reason: "is nil"}
	}
	if cfg.Inbox == nil || cfg.Handler == nil {
		return nil, &consume.ConfigError{Adapter: "nats", Field: "Inbox, Handler", Reason: "are required"}
	}
	b, err := cfg.Backoff.Normalize()
	if err != nil {
		return nil, err
	}
	if cfg.Concurrency < 0 {
		return nil, &consume.ConfigError{Adapter: "nats", Field: "Concurrency", Reason: fmt.Sprintf("must not be negative, got %d", cfg.Concurrency)}
	}
	if cfg.Concurrency == 0 {
		cfg.Concurrency = 1
	}
	cfg.Backoff = b
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return &Consumer{cons: cons, cfg: cfg, logger: logger.With("consumer", cfg.Inbox.Consumer())}, nil
}

// Run pulls messages and handles them with Concurrency workers (one: in
// order) until ctx ends; it returns nil then. Pull errors other than the end
// of the iterator are logged and pulling goes on (the iterator
// reconnects).
func (c *Consumer) Run(ctx context.Context) error {
	it, err := c.cons.Messages()
	if err != nil {
		return fmt.Errorf("consume/nats: messages: %w", err)
	}
	stopped := make(chan struct{})
	go func() {
		select {
		case <-ctx.Done():
		case <-stopped:
		}
		it.Stop()
	}()
	work := make(chan jetstream.Msg)
	var wg sync.WaitGroup
	for w := 0; w < c.cfg.Concurrency; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for m := range work {
				c.handle(ctx, m)
			}
		}()
	}
	defer func() {
		close(work)
		wg.Wait()
		close(stopped)
	}()
	for {
		msg, err := it.Next()
		if err != nil {
			if errors.Is(err, jetstream.ErrMsgIteratorClosed) || ctx.Err() != nil {
				return nil
			}
			c.logger.WarnContext(ctx, "nats pull failed", "error", err)
			continue
		}
		select {
		case work <- msg:
		case <-ctx.Done():
			// Not handled: it is redelivered after AckWait.
			return nil
		}
	}
}

func (c *Consumer) handle(ctx context.Context, m jetstream.Msg) {
	h := m.Headers()
	headers := make(map[string]string, len(h))
	for k, vs := range h {
		if len(vs) > 0 {
			headers[k] = vs[0]
		}
	}
	id := h.Get(txbox.HeaderEventID)
	if id == "" {
		id = h.Get(jetstream.MsgIDHeader)
	}
	msg, err := consume.NewMessage(id, h.Get(txbox.HeaderEventType), "", m.Data(), headers)
	if err != nil {
		c.logger.ErrorContext(ctx, "nats message terminated", "subject", m.Subject(), "error", err)
		c.settle(ctx, "term", m.Term())
		return
	}
	if _, err := c.cfg.Inbox.Handle(ctx, msg, c.cfg.Handler); err != nil {
		if txbox.Classify(err) == txbox.ClassPermanent {
			// The handler says no redelivery can succeed (txbox.Permanent).
			c.logger.ErrorContext(ctx, "nats message terminated by the handler", "event_id", msg.ID, "error", err)
			c.settle(ctx, "term", m.Term())
			return
		}
		delivered := 1
		if md, mdErr := m.Metadata(); mdErr == nil {
			delivered = int(md.NumDelivered)
		}
		delay := c.cfg.Backoff.Delay(delivered)
		c.logger.WarnContext(ctx, "nats message failed; nak", "event_id", msg.ID, "delivered", delivered, "redeliver_in", delay, "error", err)
		c.settle(ctx, "nak", m.NakWithDelay(delay))
		return
	}
	c.settle(ctx, "ack", m.Ack())
}

func (c *Consumer) settle(ctx context.Context, op string, err error) {
	if err != nil {
		// Unacked messages are redelivered after AckWait; the inbox absorbs
		// those already handled.
		c.logger.WarnContext(ctx, "nats "+op+" failed", "error", err)
	}
}

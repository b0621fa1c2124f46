package nats

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/consume"
	"github.com/txbox/txbox/consume/internal/drain"
	"github.com/txbox/txbox/consume/internal/route"
	"github.com/txbox/txbox/inbox"
)

// Defaults.
const (
	// DefaultPullExpiry is how long one pull request waits on the server
	// for a message before the adapter sends another. The server's expiry
	// is the client's deadline less a tenth, at most 1 s (nats.go's
	// FetchContext): that margin is what lets a message the server sends
	// at the last moment still reach the client, so an expiry of 10 s or
	// more gets the full second.
	DefaultPullExpiry = 10 * time.Second
	// defaultAckWait is JetStream's own default, assumed when the
	// consumer's configuration is not known.
	defaultAckWait = 30 * time.Second
	// settleTimeout bounds the confirmed ack of a message handled during
	// a stop.
	settleTimeout = 5 * time.Second
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
	// Backoff is the nak delay of a failed message by its delivery count.
	// Defaults to consume.DefaultMinBackoff doubling up to
	// consume.DefaultMaxBackoff.
	Backoff consume.Backoff
	// Concurrency is the number of messages handled at once. Above 1,
	// messages are handled out of order. Defaults to 1.
	Concurrency int
	// PullMaxMessages, when above 0, streams messages through a client
	// buffer of that many messages (jetstream.PullMaxMessages) kept
	// filled ahead of the Concurrency messages being handled: fewer round
	// trips for short handlers, but a buffered message's ack-wait timer
	// runs while it waits, so size the consumer's AckWait above
	// ceil(PullMaxMessages / Concurrency) × the longest handler time (see
	// docs/inbox.md). Defaults to 0: pull on demand, one message for each
	// idle worker, so no message waits in a buffer and none is redelivered
	// while its handler is slow.
	PullMaxMessages int
	// PullMaxBytes is PullMaxMessages bounded by bytes
	// (jetstream.PullMaxBytes); it must exceed the largest message. At
	// most one of the two may be set. Defaults to 0 (see PullMaxMessages).
	PullMaxBytes int
	// PullExpiry is how long one pull request waits on the server for
	// messages; at least 1s. Defaults to DefaultPullExpiry.
	PullExpiry time.Duration
	// ProgressInterval is how often the adapter tells the server that a
	// message whose handler is still running is in progress
	// (jetstream.Msg.InProgress), which restarts its ack-wait timer: a
	// handler may run longer than AckWait without a redelivery. Defaults
	// to a third of the consumer's AckWait.
	ProgressInterval time.Duration
	// DrainTimeout is how long the handlers already running may finish
	// once stopping began (Stop, or Run's context ended); then their
	// context is cancelled. Stop's context may cut them sooner. Defaults
	// to consume.DefaultDrainTimeout.
	DrainTimeout time.Duration
	// Logger receives warnings. Payloads are never logged. Defaults to slog.Default().
	Logger *slog.Logger
}

// Consumer feeds a JetStream consumer's messages to an inbox. Run it
// with Start and Stop (the lifecycle of the relay and the inbox cleaner),
// or with Run(ctx), which is both. A fatal pull error stops it by itself:
// Stopped is closed and Err says why.
type Consumer struct {
	cons   jetstream.Consumer
	cfg    Config
	target route.Target
	logger *slog.Logger
	// life is the consumer's start, loop and stop (Start, Stop, Run).
	life drain.Life
}

// New returns a Consumer on cons. Missing or invalid fields are a
// *consume.ConfigError naming them.
func New(cons jetstream.Consumer, cfg Config) (*Consumer, error) {
	if cons == nil {
		return nil, &consume.ConfigError{Component: "consume/nats", Field: "consumer", Reason: "is nil"}
	}
	if cfg.Handler == nil {
		return nil, &consume.ConfigError{Component: "consume/nats", Field: "Handler", Reason: "is required"}
	}
	target, err := route.New("consume/nats", cfg.Inbox, cfg.Tenants)
	if err != nil {
		return nil, err
	}
	if cfg.Backoff, err = cfg.Backoff.Normalize(); err != nil {
		return nil, err
	}
	for _, f := range []struct {
		name string
		bad  bool
		v    any
	}{
		{"Concurrency", cfg.Concurrency < 0, cfg.Concurrency},
		{"PullMaxMessages", cfg.PullMaxMessages < 0, cfg.PullMaxMessages},
		{"PullMaxBytes", cfg.PullMaxBytes < 0, cfg.PullMaxBytes},
		{"PullExpiry", cfg.PullExpiry < 0, cfg.PullExpiry},
		{"ProgressInterval", cfg.ProgressInterval < 0, cfg.ProgressInterval},
	} {
		if f.bad {
			return nil, &consume.ConfigError{Component: "consume/nats", Field: f.name, Reason: fmt.Sprintf("must not be negative, got %v", f.v)}
		}
	}
	if cfg.PullMaxMessages > 0 && cfg.PullMaxBytes > 0 {
		return nil, &consume.ConfigError{Component: "consume/nats", Field: "PullMaxMessages, PullMaxBytes", Reason: "are exclusive: set at most one"}
	}
	if cfg.Concurrency == 0 {
		cfg.Concurrency = 1
	}
	if cfg.PullExpiry == 0 {
		cfg.PullExpiry = DefaultPullExpiry
	}
	if cfg.PullExpiry < time.Second {
		return nil, &consume.ConfigError{Component: "consume/nats", Field: "PullExpiry", Reason: fmt.Sprintf("must be at least 1s, got %s", cfg.PullExpiry)}
	}
	if cfg.ProgressInterval == 0 {
		ackWait := defaultAckWait
		if info := cons.CachedInfo(); info != nil && info.Config.AckWait > 0 {
			ackWait = info.Config.AckWait
		}
		cfg.ProgressInterval = ackWait / 3
	}
	if cfg.DrainTimeout, err = consume.DrainTimeout("nats", cfg.DrainTimeout); err != nil {
		return nil, err
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.Default()
	}
	return &Consumer{cons: cons, cfg: cfg, target: target, logger: logger.With("consumer", target.Name()), life: drain.Life{Timeout: cfg.DrainTimeout}}, nil
}

// Start starts pulling messages and handling them with Concurrency
// workers (one: in order) in the background and returns at once; ctx
// only carries values. With PullMaxMessages or PullMaxBytes it first
// subscribes (jetstream.Consumer.Messages) and returns that error
// without starting. Pull errors are logged and pulling goes on, except
// when the connection is closed or the consumer deleted: the consumer
// then stops by itself, Stopped is closed, and Err and Stop return that
// error. A second Start returns consume.ErrAlreadyStarted, a Start after
// Stop consume.ErrStopped.
func (c *Consumer) Start(ctx context.Context) error { return c.life.Start(ctx, c.prepare) }

// Stop stops gracefully: it pulls nothing new, hands back (nak) the
// messages it holds whose handler did not start, lets the running
// handlers finish for up to DrainTimeout or until ctx ends, whichever
// comes first (then cancels their context), and acknowledges what they
// handled, confirmed by the server, before it returns. It returns once
// every goroutine of the consumer ended: ctx's error when ctx ended
// first, else the error that stopped the consumer by itself (Err), else
// nil. A second Stop waits for the first; Stop before Start returns
// consume.ErrNotStarted.
func (c *Consumer) Stop(ctx context.Context) error { return c.life.Stop(ctx) }

// Started is closed once Start succeeded.
func (c *Consumer) Started() <-chan struct{} { return c.life.Started() }

// Stopped is closed once the consumer stopped: by Stop, or by itself on
// a fatal pull error (Err).
func (c *Consumer) Stopped() <-chan struct{} { return c.life.Stopped() }

// Err returns the fatal pull error that stopped the consumer by itself
// (the connection closed, the consumer deleted; with PullMaxMessages or
// PullMaxBytes, an error matching jetstream.ErrMsgIteratorClosed for
// both), nil while it runs and after a Stop.
func (c *Consumer) Err() error { return c.life.Err() }

// Run is Start, then Stop once ctx ends or the consumer failed. It
// returns Start's error, nil once ctx ended, and otherwise the fatal
// pull error. Its Stop has no deadline of its own: the running handlers
// finish for up to DrainTimeout (then their context is cancelled), and
// what they handled is acknowledged before Run returns. A consumer runs
// once: after Run returned, Run and Start return consume.ErrStopped.
func (c *Consumer) Run(ctx context.Context) error { return c.life.Run(ctx, c.prepare) }

// prepare is Start's check: in stream mode, the subscription.
func (c *Consumer) prepare() (drain.Loop, error) {
	if c.cfg.PullMaxMessages == 0 && c.cfg.PullMaxBytes == 0 {
		return c.runOnDemand, nil
	}
	opts := []jetstream.PullMessagesOpt{jetstream.PullExpiry(c.cfg.PullExpiry)}
	if c.cfg.PullMaxMessages > 0 {
		opts = append(opts, jetstream.PullMaxMessages(c.cfg.PullMaxMessages))
	} else {
		opts = append(opts, jetstream.PullMaxBytes(c.cfg.PullMaxBytes))
	}
	it, err := c.cons.Messages(opts...)
	if err != nil {
		return nil, fmt.Errorf("consume/nats: messages: %w", err)
	}
	return func(ctx, hctx context.Context) error { return c.runStream(ctx, hctx, it) }, nil
}

// runOnDemand runs Concurrency workers that each pull one message when
// idle: the server's ack-wait timer of a message starts when a worker
// takes it, and InProgress keeps it from expiring while the handler runs.
func (c *Consumer) runOnDemand(ctx, hctx context.Context) error {
	wctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var wg sync.WaitGroup
	for w := 0; w < c.cfg.Concurrency; w++ {
		wg.Go(func() {
			if err := c.worker(wctx, hctx); err != nil {
				cancel(err)
			}
		})
	}
	wg.Wait()
	if err := context.Cause(wctx); err != nil && ctx.Err() == nil {
		return err
	}
	return nil
}

func (c *Consumer) worker(ctx, hctx context.Context) error {
	failures := 0
	for ctx.Err() == nil {
		fctx, cancel := context.WithTimeout(ctx, c.cfg.PullExpiry)
		m, err := c.cons.Next(jetstream.FetchContext(fctx))
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if errors.Is(err, natsgo.ErrTimeout) || errors.Is(err, context.DeadlineExceeded) {
				failures = 0 // an idle stream
				continue
			}
			if err := c.pullFailed(ctx, err, &failures); err != nil {
				return err
			}
			continue
		}
		failures = 0
		c.handle(ctx, hctx, m, false)
	}
	return nil
}

// pullFailed deals with a pull that failed while the run goes on: a fatal
// error ends the run, any other pauses for the backoff of the failures in
// a row, which it counts.
func (c *Consumer) pullFailed(ctx context.Context, err error, failures *int) error {
	if fatal(err) {
		return fmt.Errorf("consume/nats: pull: %w", err)
	}
	*failures++
	c.pause(ctx, "nats pull failed", *failures, err)
	return nil
}

// runStream feeds the workers from it, the client's Messages iterator,
// whose buffer PullMaxMessages or PullMaxBytes bounds. A message is taken from
// the buffer only when a worker is free.
func (c *Consumer) runStream(ctx, hctx context.Context, it jetstream.MessagesContext) error {
	// When ctx ends, stop pulling; Next hands out what is buffered, then
	// reports the iterator closed.
	stopDrain := context.AfterFunc(ctx, it.Drain)
	var wg sync.WaitGroup
	defer func() {
		wg.Wait()
		if stopDrain() {
			it.Stop() // ended by itself: a fatal pull error
		}
	}()
	free := make(chan struct{}, c.cfg.Concurrency)
	failures := 0
	for {
		// Take a worker slot first, so that a message leaves the buffer
		// only for a worker that starts it at once.
		held := false
		if ctx.Err() == nil {
			select {
			case free <- struct{}{}:
				held = true
			case <-ctx.Done():
			}
		}
		m, err := it.Next()
		if err != nil {
			if held {
				<-free
			}
			if ctx.Err() != nil {
				// Closed by the stop, or failing while stopping: what is
				// still buffered is redelivered after AckWait.
				return nil
			}
			if errors.Is(err, jetstream.ErrMsgIteratorClosed) {
				// Closed under a running consumer: the connection was
				// closed or the consumer deleted, which the iterator
				// does not tell apart. Pulling again cannot succeed.
				return fmt.Errorf("consume/nats: messages: %w", err)
			}
			if err := c.pullFailed(ctx, err, &failures); err != nil {
				return err
			}
			continue
		}
		failures = 0
		if ctx.Err() != nil {
			// Stopping: nothing new starts. Hand it back at once, so
			// another consumer need not wait for its ack-wait timer.
			if held {
				<-free
			}
			c.settle(ctx, "nak", m.Nak())
			continue
		}
		wg.Go(func() {
			defer func() { <-free }()
			c.handle(ctx, hctx, m, true)
		})
	}
}

// fatal reports a pull error after which pulling again cannot succeed.
func fatal(err error) bool {
	return errors.Is(err, natsgo.ErrConnectionClosed) || errors.Is(err, jetstream.ErrConsumerDeleted) ||
		errors.Is(err, jetstream.ErrConsumerNotFound)
}

// pause logs a pull failure and waits before the next pull.
func (c *Consumer) pause(ctx context.Context, what string, failures int, err error) {
	delay := c.cfg.Backoff.Delay(failures)
	c.logger.WarnContext(ctx, what, "failures", failures, "retry_in", delay, "error", err)
	t := time.NewTimer(delay)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// message turns a JetStream message into an inbox.Message with its
// delivery metadata.
func message(m jetstream.Msg) (inbox.Message, error) {
	h := m.Headers()
	headers := make(map[string]string, len(h))
	for k, vs := range h {
		if len(vs) > 0 {
			headers[k] = vs[0]
		}
	}
	// NATS has no key field: the key travels in the txbox-key header or
	// the ce-subject attribute, which NewMessageFromHeaders reads.
	msg, err := consume.NewMessageFromHeaders(h.Get, consume.PrefixHTTP, h.Get(jetstream.MsgIDHeader), "", m.Data(), headers)
	if err != nil {
		return msg, err
	}
	msg.Delivery = inbox.Delivery{Broker: "nats"}
	if md, err := m.Metadata(); err == nil {
		msg.Delivery.Source = md.Stream
		msg.Delivery.Count = int(md.NumDelivered)
		msg.Delivery.Redelivered = md.NumDelivered > 1
		msg.Delivery.StreamSeq = md.Sequence.Stream
		msg.Delivery.ConsumerSeq = md.Sequence.Consumer
	}
	return msg, nil
}

// handle runs one message through the inbox and settles it. ctx is the
// run context (ended: stopping), hctx the handlers' drain context. buffered
// says the message may have waited in the client's buffer.
func (c *Consumer) handle(ctx, hctx context.Context, m jetstream.Msg, buffered bool) {
	msg, err := message(m)
	var in *inbox.Inbox
	if err == nil {
		in, err = c.target.Inbox(msg)
	}
	if err != nil {
		c.logger.ErrorContext(ctx, "nats message terminated", "subject", m.Subject(), "error", err)
		c.settle(ctx, "term", m.Term())
		return
	}
	stopProgress := c.keepAlive(m, buffered)
	res, err := in.Handle(hctx, msg, c.cfg.Handler)
	stopProgress()
	switch {
	case res.Acknowledge():
		if ctx.Err() != nil {
			// Stopping: the process may exit as soon as Stop returns, so
			// wait for the server to confirm the ack.
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), settleTimeout)
			c.settle(ctx, "ack", m.DoubleAck(sctx))
			cancel()
			return
		}
		c.settle(ctx, "ack", m.Ack())
	case txbox.Classify(err) == txbox.ClassPermanent:
		// The handler says no redelivery can succeed (txbox.Permanent).
		c.logger.ErrorContext(ctx, "nats message terminated by the handler", "event_id", msg.ID, "error", err)
		c.settle(ctx, "term", m.Term())
	default:
		delay := c.cfg.Backoff.Delay(max(msg.Delivery.Count, 1))
		c.logger.WarnContext(ctx, "nats message failed; nak", "event_id", msg.ID, "delivered", msg.Delivery.Count, "redeliver_in", delay, "error", err)
		c.settle(ctx, "nak", m.NakWithDelay(delay))
	}
}

// keepAlive tells the server every ProgressInterval that m is being
// worked on (and at once when m may have waited in the client's buffer),
// until the returned stop is called; after stop returns, no InProgress is
// sent.
func (c *Consumer) keepAlive(m jetstream.Msg, now bool) (stop func()) {
	if now {
		_ = m.InProgress()
	}
	var mu sync.Mutex
	stopped := false
	var t *time.Timer
	mu.Lock()
	defer mu.Unlock()
	t = time.AfterFunc(c.cfg.ProgressInterval, func() {
		mu.Lock()
		defer mu.Unlock()
		if stopped {
			return
		}
		if err := m.InProgress(); err != nil {
			c.logger.Warn("nats in-progress failed; the message may be redelivered", "error", err)
		}
		t.Reset(c.cfg.ProgressInterval)
	})
	return func() {
		mu.Lock()
		defer mu.Unlock()
		stopped = true
		t.Stop()
	}
}

func (c *Consumer) settle(ctx context.Context, op string, err error) {
	if err != nil {
		// Unacked messages are redelivered after AckWait; the inbox absorbs
		// those already handled.
		c.logger.WarnContext(ctx, "nats "+op+" failed", "error", err)
	}
}

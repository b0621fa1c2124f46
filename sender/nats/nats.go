package nats

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/sender"
)

// Defaults applied to zero Config fields.
const (
	DefaultName           = "txbox"
	DefaultAckTimeout     = 10 * time.Second
	DefaultMaxPending     = 4096
	DefaultConnectTimeout = 5 * time.Second
	DefaultReconnectWait  = time.Second
)

// HeaderMsgID is the JetStream deduplication header; it carries the event
// id.
const HeaderMsgID = "Nats-Msg-Id"

// Config configures a NATS JetStream [Sender]. Only URL is required, and
// only by [New].
type Config struct {
	// URL is the server URL, or several separated by commas, such as
	// "nats://127.0.0.1:4222". It may carry a user and password or a
	// token; it is never logged or put in an error. Required by New;
	// ignored by NewFromConn.
	URL string
	// Name is the connection name the server shows. Defaults to "txbox".
	Name string
	// CredsFile is a NATS credentials file (JWT and NKey seed) for
	// decentralized auth. Defaults to none.
	CredsFile string
	// AckTimeout bounds the wait for each message's ack from JetStream;
	// a message without an ack by then fails Transient. Defaults to 10s.
	AckTimeout time.Duration
	// MaxPending is the most messages awaiting an ack at once, across all
	// Sends of this sender; a larger batch is published as acks free
	// room. Defaults to 4096.
	MaxPending int
	// ConnectTimeout bounds each attempt to connect. Defaults to 5s.
	ConnectTimeout time.Duration
	// ReconnectWait is the pause between reconnect attempts to the same
	// server. Defaults to 1s.
	ReconnectWait time.Duration
	// Logger, for Go callers, receives connection events of a connection
	// New made (connected, disconnected, reconnected, async errors such as
	// a publish permission violation). Server addresses are logged without
	// credentials. Defaults to slog.Default().
	Logger *slog.Logger
}

// ConfigError reports an invalid Config field.
type ConfigError struct {
	Field  string
	Reason string
}

func (e *ConfigError) Error() string {
	return fmt.Sprintf("nats: invalid %s: %s", e.Field, e.Reason)
}

// Errors. Compare with errors.Is.
var (
	// ErrNotConnected is returned, Transient, for a batch sent while the
	// connection to NATS is down or being re-established.
	ErrNotConnected = errors.New("nats: not connected")
	// ErrNoStream is returned, Rejected, for a message whose subject no
	// stream binds. The error also matches jetstream.ErrNoStreamResponse.
	ErrNoStream = errors.New("nats: no stream bound to the subject")
)

// MessageError is returned, Permanent, for a message that cannot be
// published at all: no subject in its route, or a header NATS cannot
// carry or txbox refuses to pass on.
type MessageError struct {
	Reason string
}

func (e *MessageError) Error() string { return "nats: cannot publish message: " + e.Reason }

// Sender publishes messages to NATS JetStream. It is safe for concurrent
// use.
type Sender struct {
	nc         *natsgo.Conn
	ownConn    bool
	js         jetstream.JetStream
	ackTimeout time.Duration
	slots      chan struct{} // one per publish awaiting its ack
	release    func()

	mu     sync.Mutex
	closed bool
	wg     sync.WaitGroup
}

var _ sender.Sender = (*Sender)(nil)

func (cfg *Config) withDefaults() error {
	if cfg.Name == "" {
		cfg.Name = DefaultName
	}
	for _, d := range []struct {
		field string
		v     *time.Duration
		def   time.Duration
	}{
		{"ack-timeout", &cfg.AckTimeout, DefaultAckTimeout},
		{"connect-timeout", &cfg.ConnectTimeout, DefaultConnectTimeout},
		{"reconnect-wait", &cfg.ReconnectWait, DefaultReconnectWait},
	} {
		if *d.v < 0 {
			return &ConfigError{Field: d.field, Reason: "must not be negative"}
		}
		if *d.v == 0 {
			*d.v = d.def
		}
	}
	if cfg.MaxPending < 0 {
		return &ConfigError{Field: "max-pending", Reason: "must not be negative"}
	}
	if cfg.MaxPending == 0 {
		cfg.MaxPending = DefaultMaxPending
	}
	return nil
}

// New connects to cfg.URL and returns a Sender that owns the connection.
// The connection is made in the background: New does not fail because the
// server is down, only for an invalid Config (a *ConfigError).
func New(cfg Config) (*Sender, error) {
	if err := cfg.withDefaults(); err != nil {
		return nil, err
	}
	if strings.TrimSpace(cfg.URL) == "" {
		return nil, &ConfigError{Field: "url", Reason: "is required"}
	}
	opts := []natsgo.Option{
		natsgo.Name(cfg.Name),
		natsgo.Timeout(cfg.ConnectTimeout),
		natsgo.RetryOnFailedConnect(true),
		natsgo.MaxReconnects(-1),
		natsgo.ReconnectWait(cfg.ReconnectWait),
		// No reconnect buffer: a publish while disconnected fails at once
		// (Transient) instead of sitting in memory until the ack times
		// out; the relay keeps the rows and retries.
		natsgo.ReconnectBufSize(-1),
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	log = log.With("component", "txbox.sender.nats", "name", cfg.Name)
	opts = append(opts,
		natsgo.ConnectHandler(func(nc *natsgo.Conn) {
			log.Info("nats connected", "server", nc.ConnectedUrlRedacted())
		}),
		natsgo.DisconnectErrHandler(func(_ *natsgo.Conn, err error) {
			if err != nil {
				log.Warn("nats disconnected", "error", err)
			}
		}),
		natsgo.ReconnectHandler(func(nc *natsgo.Conn) {
			log.Info("nats reconnected", "server", nc.ConnectedUrlRedacted())
		}),
		natsgo.ErrorHandler(func(_ *natsgo.Conn, _ *natsgo.Subscription, err error) {
			// A publish permission violation surfaces only here; the
			// messages then fail on their ack timeout.
			log.Error("nats async error", "error", err)
		}),
	)
	if cfg.CredsFile != "" {
		opts = append(opts, natsgo.UserCredentials(cfg.CredsFile))
	}
	nc, err := natsgo.Connect(cfg.URL, opts...)
	if err != nil {
		// The URL may hold credentials: name the problem, not the URL.
		return nil, &ConfigError{Field: "url", Reason: fmt.Sprintf("cannot connect: %v", redactErr(err, cfg.URL))}
	}
	s, err := newSender(nc, cfg)
	if err != nil {
		nc.Close()
		return nil, err
	}
	s.ownConn = true
	return s, nil
}

// NewFromConn returns a Sender that publishes on nc, which the caller
// keeps managing: Close does not close it. cfg.URL, Name, CredsFile,
// ConnectTimeout and ReconnectWait are ignored.
func NewFromConn(nc *natsgo.Conn, cfg Config) (*Sender, error) {
	if nc == nil {
		return nil, &ConfigError{Field: "conn", Reason: "is nil"}
	}
	if err := cfg.withDefaults(); err != nil {
		return nil, err
	}
	return newSender(nc, cfg)
}

func newSender(nc *natsgo.Conn, cfg Config) (*Sender, error) {
	s := &Sender{nc: nc, ackTimeout: cfg.AckTimeout, slots: make(chan struct{}, cfg.MaxPending)}
	// MaxPending is enforced by the slots, acquired before each publish
	// (so a Send blocked on a full window still sees its context) and
	// released by the callbacks nats.go calls exactly once per publish it
	// registered: an ack, or an error (nack, ack timeout, connection
	// lost). nats.go's own cap is set to the same value; as it removes a
	// publish before the callback runs, it never stalls first.
	release := func() {
		select {
		case <-s.slots:
		default:
		}
	}
	js, err := jetstream.New(nc,
		jetstream.WithPublishAsyncMaxPending(cfg.MaxPending),
		jetstream.WithPublishAsyncTimeout(cfg.AckTimeout),
		jetstream.WithPublishAsyncAckHandler(func(jetstream.JetStream, *natsgo.Msg, *jetstream.PubAck) { release() }),
		jetstream.WithPublishAsyncErrHandler(func(jetstream.JetStream, *natsgo.Msg, error) { release() }),
	)
	if err != nil {
		return nil, fmt.Errorf("nats: jetstream: %w", err)
	}
	s.js = js
	s.release = release
	return s, nil
}

func redactErr(err error, url string) string {
	msg := err.Error()
	if url != "" {
		msg = strings.ReplaceAll(msg, url, "<url>")
	}
	return msg
}

// Send publishes every message asynchronously, then waits for their acks
// (see [sender.Sender]).
func (s *Sender) Send(ctx context.Context, msgs []*sender.Message) error {
	if len(msgs) == 0 {
		return nil
	}
	if !s.enter() {
		return txbox.Transient(fmt.Errorf("nats: send: %w", txbox.ErrClosed))
	}
	defer s.wg.Done()
	if err := ctx.Err(); err != nil {
		return txbox.Transient(fmt.Errorf("nats: not sent: %w", err))
	}
	if !s.nc.IsConnected() {
		return txbox.Transient(ErrNotConnected)
	}

	errs := make([]error, len(msgs))
	futures := make([]jetstream.PubAckFuture, len(msgs))
	// The stall wait bounds a publish blocked by MaxPending; acks free
	// room on their own, so it only expires when JetStream stops acking.
	stall := jetstream.WithStallWait(s.ackTimeout)
	for i, m := range msgs {
		if err := ctx.Err(); err != nil {
			for j := i; j < len(msgs); j++ {
				errs[j] = txbox.Transient(fmt.Errorf("nats: not sent: %w", err))
			}
			break
		}
		if m == nil {
			errs[i] = txbox.Permanent(&MessageError{Reason: "nil message"})
			continue
		}
		nm, err := natsMsg(m)
		if err != nil {
			errs[i] = txbox.Permanent(err)
			continue
		}
		if !s.acquire(ctx) {
			for j := i; j < len(msgs); j++ {
				errs[j] = txbox.Transient(fmt.Errorf("nats: not sent: %w", ctx.Err()))
			}
			break
		}
		f, err := s.js.PublishMsgAsync(nm, stall)
		if err != nil {
			// Not registered, so no callback will free the slot.
			s.release()
			errs[i] = classify(err, m.Route.Subject)
			continue
		}
		futures[i] = f
	}
	for i, f := range futures {
		if f == nil {
			continue
		}
		ok, failed := f.Ok(), f.Err()
		// An ack that already arrived wins over a context cancelled
		// meanwhile: it is durable.
		select {
		case <-ok:
			continue
		case err := <-failed:
			errs[i] = classify(err, msgs[i].Route.Subject)
			continue
		default:
		}
		select {
		case <-ok:
		case err := <-failed:
			errs[i] = classify(err, msgs[i].Route.Subject)
		case <-ctx.Done():
			errs[i] = txbox.Transient(fmt.Errorf("nats: ack not received: %w", ctx.Err()))
		}
	}
	for _, err := range errs {
		if err != nil {
			return &sender.BatchError{Errs: errs}
		}
	}
	return nil
}

// acquire takes a MaxPending slot, or gives up when ctx is done.
func (s *Sender) acquire(ctx context.Context) bool {
	select {
	case s.slots <- struct{}{}:
		return true
	case <-ctx.Done():
		return false
	}
}

func (s *Sender) enter() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.wg.Add(1)
	return true
}

// Close waits for the Sends in flight to get their acks (bounded by ctx),
// then releases the publisher and, when New made it, the connection.
// Later Sends fail with txbox.ErrClosed. Close is idempotent.
func (s *Sender) Close(ctx context.Context) error {
	s.mu.Lock()
	already := s.closed
	s.closed = true
	s.mu.Unlock()
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	var err error
	select {
	case <-done:
	case <-ctx.Done():
		err = fmt.Errorf("nats: close: sends still in flight: %w", ctx.Err())
	}
	if !already {
		if s.ownConn {
			// Closing the connection ends the publisher's reply
			// subscription and status goroutine. CleanupPublisher is not
			// called first: in nats.go v1.55 it can strand that goroutine
			// on a nil channel when it runs before the goroutine started.
			s.nc.Close()
		} else {
			// A borrowed connection stays open: release the reply
			// subscription (subject to the nats.go race above, which can
			// leave one idle goroutine behind).
			s.js.CleanupPublisher()
		}
	}
	return err
}

// natsMsg builds the NATS message for m, or a *MessageError.
func natsMsg(m *sender.Message) (*natsgo.Msg, error) {
	if m.Route.Subject == "" {
		return nil, &MessageError{Reason: fmt.Sprintf("event type %q has no route subject", m.EventType)}
	}
	h := make(natsgo.Header, len(m.Headers)+3)
	for k, v := range m.Headers {
		if err := checkHeader(k, v); err != nil {
			return nil, err
		}
		// Assigned directly, not through Set, to keep the name's case.
		h[k] = []string{v}
	}
	id := m.ID.String()
	h[HeaderMsgID] = []string{id}
	h[txbox.HeaderEventID] = []string{id}
	if m.Key != "" {
		if err := checkHeader(sender.HeaderKey, m.Key); err != nil {
			return nil, err
		}
		h[sender.HeaderKey] = []string{m.Key}
	}
	return &natsgo.Msg{Subject: m.Route.Subject, Data: m.Payload, Header: h}, nil
}

// checkHeader refuses what the NATS header block cannot carry (a name
// with a space, a control character or an HTTP delimiter such as a colon;
// a value with CR or LF, which nats.go would turn into spaces) and
// the Nats-* names that steer JetStream.
func checkHeader(name, value string) error {
	if name == "" {
		return &MessageError{Reason: "empty header name"}
	}
	for i := 0; i < len(name); i++ {
		// nats.go's rule: printable ASCII without the HTTP delimiters.
		if c := name[i]; c <= ' ' || c >= 0x7f || strings.IndexByte(`"(),/:;<=>?@[\]{}`, c) >= 0 {
			return &MessageError{Reason: fmt.Sprintf("header name %q: character %q is not allowed", truncate(name), c)}
		}
	}
	if len(name) >= 5 && strings.EqualFold(name[:5], "nats-") {
		return &MessageError{Reason: fmt.Sprintf("header %q: Nats-* headers steer JetStream and are not passed on from events", truncate(name))}
	}
	if strings.ContainsAny(value, "\r\n") {
		return &MessageError{Reason: fmt.Sprintf("header %q: value contains CR or LF", truncate(name))}
	}
	return nil
}

func truncate(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}

// classify wraps a publish or ack error with its txbox class.
func classify(err error, subject string) error {
	var apiErr *jetstream.APIError
	switch {
	case errors.Is(err, jetstream.ErrNoStreamResponse):
		return txbox.Rejected(fmt.Errorf("nats: subject %q: %w: %w", subject, ErrNoStream, err))
	case errors.Is(err, natsgo.ErrMaxPayload), errors.Is(err, natsgo.ErrBadSubject),
		errors.Is(err, natsgo.ErrBadHeaderMsg):
		return txbox.Permanent(fmt.Errorf("nats: subject %q: %w", subject, err))
	case errors.As(err, &apiErr):
		if apiErr.Code >= 500 {
			return txbox.Transient(fmt.Errorf("nats: subject %q: %w", subject, err))
		}
		return txbox.Rejected(fmt.Errorf("nats: subject %q: %w", subject, err))
	default:
		// Timeouts, disconnects, a closed connection, a stalled
		// publisher: the destination, not the message.
		return txbox.Transient(fmt.Errorf("nats: subject %q: %w", subject, err))
	}
}

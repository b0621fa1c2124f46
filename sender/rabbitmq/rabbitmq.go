package rabbitmq

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/sender"
)

// Defaults applied by [New] to zero fields of [Config].
const (
	DefaultChannels         = 2
	DefaultDialTimeout      = 5 * time.Second
	DefaultReconnectDelay   = time.Second
	DefaultHeartbeat        = 10 * time.Second
	DefaultConfirmTimeout   = 30 * time.Second
	DefaultExchangeCheckTTL = time.Minute
	DefaultConnectionName   = "txbox"
	// DefaultProvisionExchangeType is the type of the exchanges Provision
	// declares: a topic exchange routes exact routing keys like a direct
	// one and also takes wildcard bindings.
	DefaultProvisionExchangeType = "topic"
)

// Sentinel errors.
var (
	// ErrNilMessage is the per-message error (permanent) of a nil entry in
	// the batch given to Send.
	ErrNilMessage = errors.New("rabbitmq sender: nil message")
	// ErrInvalidConfig is returned by New when the configuration is
	// unusable; the message names the field.
	ErrInvalidConfig = errors.New("rabbitmq sender: invalid config")
	// ErrUnroutable is the per-message error (rejected) of a mandatory
	// message the broker returned because no queue is bound for it.
	ErrUnroutable = errors.New("rabbitmq sender: message returned as unroutable")
	// ErrNacked is the per-message error (rejected) of a message the
	// broker negatively confirmed.
	ErrNacked = errors.New("rabbitmq sender: message nacked by the broker")
	// ErrNoExchange is the per-message error (rejected) of a message routed
	// to an exchange that does not exist.
	ErrNoExchange = errors.New("rabbitmq sender: exchange does not exist")
	// ErrInvalidMessage is the per-message error (rejected) of a message
	// AMQP cannot carry: an exchange, routing key or header name longer
	// than 255 bytes (AMQP short strings). It is refused before anything
	// is written, so it cannot break the connection for its neighbours.
	ErrInvalidMessage = errors.New("rabbitmq sender: message cannot be encoded")
	// ErrConnection wraps every transient failure: dial, lost connection
	// or channel, or a confirm that did not come in time. Those of the
	// connection itself (dial, connection lost, publishers blocked) are
	// also marked [sender.Disconnected].
	ErrConnection = errors.New("rabbitmq sender: broker unavailable")
	// ErrTooLarge is the per-message error (permanent) of a message whose
	// body is larger than the broker accepts (max_message_size).
	ErrTooLarge = errors.New("rabbitmq sender: message larger than the broker's max_message_size")
)

// Config configures a RabbitMQ sender. The fields are plain values so the
// command line can fill them from YAML.
type Config struct {
	// URL is the AMQP URI, amqp://user:pass@host:port/vhost. Required. It
	// is never logged or put in an error.
	URL string
	// Channels is the number of confirm-mode channels the sender publishes
	// on. One Send uses one channel and publishes on it under a lock, so
	// this bounds how many Sends publish at once; confirms of different
	// Sends still overlap. Defaults to 2.
	Channels int
	// DialTimeout bounds the TCP connect and the AMQP handshake. Defaults to
	// 5s.
	DialTimeout time.Duration
	// ReconnectDelay is the least time between two dials after a failure:
	// during an outage a Send fails at once with the last dial error rather
	// than dialing again. Defaults to 1s.
	ReconnectDelay time.Duration
	// Heartbeat is the AMQP heartbeat interval; a silent broker is declared
	// dead after about three intervals. Defaults to 10s.
	Heartbeat time.Duration
	// ConfirmTimeout bounds the wait for the publisher confirms of a batch
	// (beyond the context of Send). Unconfirmed messages then fail as
	// transient. Defaults to 30s.
	ConfirmTimeout time.Duration
	// ExchangeCheckTTL is how long the sender trusts that an exchange
	// exists after checking it. Publishing to a missing exchange makes the
	// broker close the channel, failing every message in flight on it, so
	// the sender checks (passive declare) before the first publish to an
	// exchange and again after this long. Defaults to 1m.
	ExchangeCheckTTL time.Duration
	// ConnectionName is shown in the RabbitMQ management UI. Defaults to
	// "txbox".
	ConnectionName string
	// MaxMessageBytes is the largest message body the broker accepts, its
	// max_message_size. A larger message fails permanent before it is
	// published: published, it would make the broker close the channel
	// and fail every message in flight on it. Defaults to the broker's
	// default for the version it reports (128 MiB up to 3.13, 16 MiB from
	// 4.0); when the broker refuses a smaller size than the sender
	// assumed, the sender learns the broker's figure from the refusal.
	MaxMessageBytes int
	// ProvisionExchangeType is the type of the exchanges
	// [Sender.Provision] declares: direct, fanout, topic, headers or a
	// plugin's x-* type. Send does not use it. Defaults to topic.
	ProvisionExchangeType string
	// TLS is the client TLS configuration of an amqps:// URL (a private
	// CA, a client certificate). Ignored for amqp://. Defaults to the
	// system roots for amqps://.
	TLS *tls.Config
	// CloudEvents chooses the format of messages whose route sets none,
	// and the CloudEvents source and default datacontenttype
	// (docs/cloudevents.md). AMQP 0-9-1 has no CloudEvents binding: in
	// the cloudevents format the attributes travel as cloudEvents:
	// headers and the datacontenttype as the content-type property, as
	// the AMQP 1.0 binding has them. Defaults to the txbox format.
	CloudEvents sender.CloudEvents
}

func (c Config) withDefaults() Config {
	if c.Channels == 0 {
		c.Channels = DefaultChannels
	}
	if c.DialTimeout == 0 {
		c.DialTimeout = DefaultDialTimeout
	}
	if c.ReconnectDelay == 0 {
		c.ReconnectDelay = DefaultReconnectDelay
	}
	if c.Heartbeat == 0 {
		c.Heartbeat = DefaultHeartbeat
	}
	if c.ConfirmTimeout == 0 {
		c.ConfirmTimeout = DefaultConfirmTimeout
	}
	if c.ExchangeCheckTTL == 0 {
		c.ExchangeCheckTTL = DefaultExchangeCheckTTL
	}
	if c.ConnectionName == "" {
		c.ConnectionName = DefaultConnectionName
	}
	if c.ProvisionExchangeType == "" {
		c.ProvisionExchangeType = DefaultProvisionExchangeType
	}
	return c
}

func (c Config) validate() error {
	if c.URL == "" {
		return fmt.Errorf("%w: url is empty", ErrInvalidConfig)
	}
	if _, err := amqp.ParseURI(c.URL); err != nil {
		// The parse error may quote the URL, password included.
		return fmt.Errorf("%w: url is not a valid amqp:// or amqps:// URI", ErrInvalidConfig)
	}
	if c.Channels < 0 || c.Channels > 1000 {
		return fmt.Errorf("%w: channels must be in 1..1000, got %d", ErrInvalidConfig, c.Channels)
	}
	// One row a setting that must not be negative: its key and value.
	for _, f := range []struct {
		key string
		bad bool
		got any
	}{
		{"dial-timeout", c.DialTimeout < 0, c.DialTimeout},
		{"reconnect-delay", c.ReconnectDelay < 0, c.ReconnectDelay},
		{"heartbeat", c.Heartbeat < 0, c.Heartbeat},
		{"confirm-timeout", c.ConfirmTimeout < 0, c.ConfirmTimeout},
		{"exchange-check-ttl", c.ExchangeCheckTTL < 0, c.ExchangeCheckTTL},
		{"max-message-bytes", c.MaxMessageBytes < 0, c.MaxMessageBytes},
	} {
		if f.bad {
			return fmt.Errorf("%w: %s must be > 0, got %v", ErrInvalidConfig, f.key, f.got)
		}
	}
	switch t := c.ProvisionExchangeType; {
	case t == "direct", t == "fanout", t == "topic", t == "headers", strings.HasPrefix(t, "x-") && len(t) > 2:
	default:
		return fmt.Errorf("%w: provision-exchange-type must be direct, fanout, topic, headers or x-*, got %q", ErrInvalidConfig, t)
	}
	return nil
}

// Sender publishes txbox messages to RabbitMQ. It is safe for concurrent
// use.
type Sender struct {
	cfg Config

	mu   sync.Mutex // guards the fields below
	conn *amqp.Connection
	// blocked is the state of conn's resource alarm (connection.blocked):
	// while the broker blocks publishers it stops reading their sockets,
	// and a publish would hang instead of failing.
	blocked     *atomic.Pointer[string]
	chans       []*pubChan
	next        int
	lastDialErr error
	lastDialAt  time.Time
	exchanges   map[string]time.Time // exchange -> checked at

	// maxBody is the largest body the broker is known to accept, 0 when
	// unknown: Config.MaxMessageBytes, else the broker version's default,
	// lowered by a refusal that names the broker's figure.
	maxBody atomic.Int64

	// life admits Sends until Close, which waits for those in flight so
	// their confirms are not cut off.
	life sender.Lifecycle
}

var (
	_ sender.Sender        = (*Sender)(nil)
	_ sender.Destinationer = (*Sender)(nil)
	_ sender.QuickAcker    = (*Sender)(nil)
	_ sender.Provisioner   = (*Sender)(nil)
)

// AcksQuickly implements [sender.QuickAcker]: RabbitMQ acknowledges a batch
// within milliseconds, so the relay defaults this sender's event types to
// the lock claim where the store has one.
func (s *Sender) AcksQuickly() bool { return true }

// Destination implements [sender.Destinationer]: the route's exchange,
// where RabbitMQ's routing and its failures begin (a missing exchange,
// publishers blocked). The routing key is left out: a key no queue is
// bound for makes the message unroutable, a rejection of that message,
// not an outage. The default exchange is no destination of its own (it
// hands each message to the queue its routing key names), so its
// destination is "(default exchange) " plus the routing key, i.e. the
// queue.
func (s *Sender) Destination(r sender.Route) string {
	if r.Exchange == "" {
		return "(default exchange) " + r.RoutingKey
	}
	return r.Exchange
}

// New returns a Sender for cfg. It does not connect: the first Send does,
// so a relay can start while the broker is down.
func New(cfg Config) (*Sender, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	ce, err := cfg.CloudEvents.Resolve("", false)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidConfig, err)
	}
	cfg.CloudEvents = ce
	return &Sender{cfg: cfg, exchanges: map[string]time.Time{}}, nil
}

// Send publishes every message, then waits once for all confirms. It
// returns nil when the broker confirmed every message and returned none, a
// *sender.BatchError when only some failed, and a single transient error
// when the broker could not be reached or the whole batch failed for that
// reason.
func (s *Sender) Send(ctx context.Context, msgs []*sender.Message) error {
	return s.life.Send(ctx, "rabbitmq sender", msgs, s.send)
}

// send is Send within the lifecycle, for a batch that is not empty.
func (s *Sender) send(ctx context.Context, msgs []*sender.Message) error {
	errs := make([]error, len(msgs))
	todo := make([]int, 0, len(msgs)) // indexes still to publish
	for i, m := range msgs {
		if m == nil {
			errs[i] = txbox.Permanent(ErrNilMessage)
			continue
		}
		if _, _, err := s.cfg.CloudEvents.Binary(m); err != nil {
			errs[i] = txbox.Permanent(fmt.Errorf("%w: event %s: %w", ErrInvalidMessage, m.ID, err))
			continue
		}
		if err := encodable(m); err != nil {
			errs[i] = err
			continue
		}
		if err := s.checkExchange(ctx, m.Route.Exchange); err != nil {
			errs[i] = err
			continue
		}
		todo = append(todo, i)
	}
	if len(todo) > 0 {
		pc, err := s.channel()
		if err != nil {
			for _, i := range todo {
				errs[i] = err
			}
		} else {
			// Known once connected: the broker's version gives its
			// default limit.
			todo = slices.DeleteFunc(todo, func(i int) bool {
				errs[i] = s.checkSize(msgs[i])
				return errs[i] != nil
			})
			s.publish(ctx, pc, msgs, todo, errs)
		}
	}
	return sender.Summarize(errs)
}

// Close stops new Sends (they fail with txbox.ErrClosed), waits for the
// Sends in flight to get their confirms (bounded by ctx), then closes the
// connection.
func (s *Sender) Close(ctx context.Context) error {
	if !s.life.Shut() {
		return nil
	}
	var waitErr error
	if err := s.life.Wait(ctx); err != nil {
		waitErr = fmt.Errorf("rabbitmq sender: close: sends still in flight: %w", err)
	}

	s.mu.Lock()
	conn := s.conn
	s.mu.Unlock()
	if conn == nil || conn.IsClosed() {
		return waitErr
	}
	done := make(chan error, 1)
	go func() { done <- conn.Close() }()
	select {
	case err := <-done:
		if err != nil && !errors.Is(err, amqp.ErrClosed) && waitErr == nil {
			return fmt.Errorf("rabbitmq sender: close: %w", err)
		}
		return waitErr
	case <-ctx.Done():
		return fmt.Errorf("rabbitmq sender: close: %w", ctx.Err())
	}
}

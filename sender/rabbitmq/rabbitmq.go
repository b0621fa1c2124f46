package rabbitmq

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
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
	switch {
	case c.Channels < 0 || c.Channels > 1000:
		return fmt.Errorf("%w: channels must be in 1..1000, got %d", ErrInvalidConfig, c.Channels)
	case c.DialTimeout < 0:
		return fmt.Errorf("%w: dial-timeout must be > 0, got %s", ErrInvalidConfig, c.DialTimeout)
	case c.ReconnectDelay < 0:
		return fmt.Errorf("%w: reconnect-delay must be > 0, got %s", ErrInvalidConfig, c.ReconnectDelay)
	case c.Heartbeat < 0:
		return fmt.Errorf("%w: heartbeat must be > 0, got %s", ErrInvalidConfig, c.Heartbeat)
	case c.ConfirmTimeout < 0:
		return fmt.Errorf("%w: confirm-timeout must be > 0, got %s", ErrInvalidConfig, c.ConfirmTimeout)
	case c.ExchangeCheckTTL < 0:
		return fmt.Errorf("%w: exchange-check-ttl must be > 0, got %s", ErrInvalidConfig, c.ExchangeCheckTTL)
	case c.MaxMessageBytes < 0:
		return fmt.Errorf("%w: max-message-bytes must be > 0, got %d", ErrInvalidConfig, c.MaxMessageBytes)
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

	// gate admits Sends until Close, which waits for those in flight so
	// their confirms are not cut off.
	gate sender.Gate
}

var (
	_ sender.Sender        = (*Sender)(nil)
	_ sender.Destinationer = (*Sender)(nil)
	_ sender.Provisioner   = (*Sender)(nil)
)

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
	return &Sender{cfg: cfg, exchanges: map[string]time.Time{}}, nil
}

// pubChan is one confirm-mode channel and its return listener.
type pubChan struct {
	conn *amqp.Connection
	ch   *amqp.Channel
	// pub serializes publishes: the delivery tags of one channel are a
	// sequence, and interleaving two batches gains nothing.
	pub sync.Mutex

	// closed is closed once the channel is closed; closeErr is set before.
	closed   chan struct{}
	closeErr atomic.Pointer[amqp.Error]

	// Returned messages, correlated by MessageId to the Send waiting for
	// them. pending maps a message id to the return flags of the sends
	// that published it (normally one).
	rmu     sync.Mutex
	pending map[string][]*atomic.Bool

	syncReq      chan chan struct{}
	listenerDone chan struct{}
}

func (s *Sender) dial() (*amqp.Connection, error) {
	cfg := amqp.Config{
		Dial:       amqp.DefaultDial(s.cfg.DialTimeout),
		Heartbeat:  s.cfg.Heartbeat,
		Properties: amqp.NewConnectionProperties(),
	}
	cfg.Properties.SetClientConnectionName(s.cfg.ConnectionName)
	conn, err := amqp.DialConfig(s.cfg.URL, cfg)
	if err != nil {
		return nil, err
	}
	return conn, nil
}

// connLocked returns the live connection, dialing when there is none. It
// is called with s.mu held.
func (s *Sender) connLocked() (*amqp.Connection, error) {
	if s.gate.Closed() {
		// A Send still in flight during Close must not dial a connection
		// Close would not see.
		return nil, txbox.Transient(fmt.Errorf("rabbitmq sender: %w", txbox.ErrClosed))
	}
	if s.conn != nil && !s.conn.IsClosed() {
		return s.conn, nil
	}
	if s.lastDialErr != nil && time.Since(s.lastDialAt) < s.cfg.ReconnectDelay {
		return nil, sender.Disconnected(txbox.Transient(fmt.Errorf("%w: %v", ErrConnection, s.lastDialErr)))
	}
	s.lastDialAt = time.Now()
	conn, err := s.dial()
	if err != nil {
		s.lastDialErr = err
		return nil, sender.Disconnected(txbox.Transient(fmt.Errorf("%w: dial: %v", ErrConnection, err)))
	}
	s.lastDialErr = nil
	s.learnMaxBody(s.defaultMaxBody(conn))
	s.conn = conn
	s.blocked = watchBlocked(conn)
	s.chans = make([]*pubChan, s.cfg.Channels)
	// Exchanges may have changed while we were away.
	clear(s.exchanges)
	return conn, nil
}

// watchBlocked follows conn's connection.blocked / unblocked notifications.
// The returned pointer holds the broker's reason while it blocks.
func watchBlocked(conn *amqp.Connection) *atomic.Pointer[string] {
	state := new(atomic.Pointer[string])
	ch := conn.NotifyBlocked(make(chan amqp.Blocking, 4))
	go func() {
		// The client closes ch when the connection closes.
		for b := range ch {
			if b.Active {
				reason := b.Reason
				state.Store(&reason)
			} else {
				state.Store(nil)
			}
		}
	}()
	return state
}

// connection returns the live connection, dialing if needed.
func (s *Sender) connection() (*amqp.Connection, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.connLocked()
}

// channel returns a usable channel, connecting or reopening as needed.
func (s *Sender) channel() (*pubChan, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	conn, err := s.connLocked()
	if err != nil {
		return nil, err
	}
	if reason := s.blocked.Load(); reason != nil {
		// A resource alarm (memory or disk) on the broker: it blocks
		// the whole connection, every exchange at once.
		return nil, sender.Disconnected(txbox.Transient(fmt.Errorf("%w: broker blocks publishers: %s", ErrConnection, *reason)))
	}
	i := s.next % len(s.chans)
	s.next++
	pc := s.chans[i]
	if pc != nil && !pc.isClosed() {
		return pc, nil
	}
	pc, err = openPubChan(conn)
	if err != nil {
		return nil, connErr(conn, fmt.Errorf("%w: open channel: %v", ErrConnection, err))
	}
	s.chans[i] = pc
	return pc, nil
}

func openPubChan(conn *amqp.Connection) (*pubChan, error) {
	ch, err := conn.Channel()
	if err != nil {
		return nil, err
	}
	if err := ch.Confirm(false); err != nil {
		_ = ch.Close()
		return nil, err
	}
	pc := &pubChan{
		conn:         conn,
		ch:           ch,
		closed:       make(chan struct{}),
		pending:      map[string][]*atomic.Bool{},
		syncReq:      make(chan chan struct{}),
		listenerDone: make(chan struct{}),
	}
	// Unbuffered on purpose: the client's reader goroutine hands a return
	// over before it processes the next frame (the basic.ack of the same
	// message), so once a confirm is seen the return has been received by
	// the listener. See sync.
	returns := ch.NotifyReturn(make(chan amqp.Return))
	closes := ch.NotifyClose(make(chan *amqp.Error, 1))
	go pc.listen(returns, closes)
	return pc, nil
}

func (pc *pubChan) listen(returns <-chan amqp.Return, closes <-chan *amqp.Error) {
	defer close(pc.listenerDone)
	for {
		select {
		case r, ok := <-returns:
			if !ok {
				returns = nil
				continue
			}
			pc.rmu.Lock()
			for _, f := range pc.pending[r.MessageId] {
				f.Store(true)
			}
			pc.rmu.Unlock()
		case done := <-pc.syncReq:
			close(done)
		case e, ok := <-closes:
			if ok && e != nil {
				pc.closeErr.Store(e)
			}
			close(pc.closed)
			// Returns are closed with the channel; nothing more can
			// arrive, so the listener can stop. Sends that still want a
			// barrier see listenerDone.
			return
		}
	}
}

// sync returns once every return the client handed over before now has
// been recorded.
func (pc *pubChan) sync() {
	done := make(chan struct{})
	select {
	case pc.syncReq <- done:
		<-done
	case <-pc.listenerDone:
	}
}

func (pc *pubChan) isClosed() bool {
	select {
	case <-pc.closed:
		return true
	default:
		return pc.ch.IsClosed()
	}
}

// closeError waits briefly for the listener to record why the channel
// closed (the client closes confirms and notifies listeners in one
// teardown, in no order we can rely on).
func (pc *pubChan) closeError() *amqp.Error {
	select {
	case <-pc.closed:
	case <-time.After(time.Second):
	}
	return pc.closeErr.Load()
}

// Send publishes every message, then waits once for all confirms. It
// returns nil when the broker confirmed every message and returned none, a
// *sender.BatchError when only some failed, and a single transient error
// when the broker could not be reached or the whole batch failed for that
// reason.
func (s *Sender) Send(ctx context.Context, msgs []*sender.Message) error {
	if len(msgs) == 0 {
		return nil
	}
	if err := s.gate.Enter(); err != nil {
		return txbox.Transient(fmt.Errorf("rabbitmq sender: %w", err))
	}
	defer s.gate.Leave()

	errs := make([]error, len(msgs))
	todo := make([]int, 0, len(msgs)) // indexes still to publish
	for i, m := range msgs {
		if m == nil {
			errs[i] = txbox.Permanent(ErrNilMessage)
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

// checkSize fails, permanent, a message whose body is larger than the
// broker accepts: no retry makes it fit, and publishing it would close the
// channel under its neighbours.
func (s *Sender) checkSize(m *sender.Message) error {
	if max := s.maxBody.Load(); max > 0 && int64(len(m.Payload)) > max {
		return txbox.Permanent(fmt.Errorf("%w: the body is %d bytes, the broker accepts %d (max_message_size in rabbitmq.conf, the sender's max-message-bytes: docs/operations.md) (event %s)",
			ErrTooLarge, len(m.Payload), max, m.ID))
	}
	return nil
}

// learnMaxBody lowers the known limit to n (n ≤ 0: no information).
func (s *Sender) learnMaxBody(n int64) {
	for {
		cur := s.maxBody.Load()
		if n <= 0 || (cur > 0 && cur <= n) || s.maxBody.CompareAndSwap(cur, n) {
			return
		}
	}
}

// defaultMaxBody is Config.MaxMessageBytes, else the default
// max_message_size of the broker's version: 128 MiB from 3.8 to 3.13,
// 16 MiB from 4.0, 0 (unknown) otherwise.
func (s *Sender) defaultMaxBody(conn *amqp.Connection) int64 {
	if s.cfg.MaxMessageBytes > 0 {
		return int64(s.cfg.MaxMessageBytes)
	}
	v, _ := conn.Properties["version"].(string)
	major, rest, _ := strings.Cut(v, ".")
	minor, _, _ := strings.Cut(rest, ".")
	ma, err1 := strconv.Atoi(major)
	mi, err2 := strconv.Atoi(minor)
	switch {
	case err1 != nil || err2 != nil:
		return 0
	case ma >= 4:
		return 16 << 20
	case ma == 3 && mi >= 8:
		return 128 << 20
	}
	return 0
}

// tooLargeRe matches the reason of the channel close with which the broker
// refuses a message over max_message_size.
var tooLargeRe = regexp.MustCompile(`message size (\d+) is larger than configured max size (\d+)`)

// sizeRefusal returns the broker's max_message_size when e is its refusal
// of a too large message, else 0.
func sizeRefusal(e *amqp.Error) int64 {
	if e == nil || e.Code != amqp.PreconditionFailed {
		return 0
	}
	m := tooLargeRe.FindStringSubmatch(e.Reason)
	if m == nil {
		return 0
	}
	n, _ := strconv.ParseInt(m[2], 10, 64)
	return n
}

// connErr wraps a transient failure, marked [sender.Disconnected] when the
// connection is gone (the channel went with it).
func connErr(conn *amqp.Connection, err error) error {
	if conn == nil || conn.IsClosed() {
		return sender.Disconnected(txbox.Transient(err))
	}
	return txbox.Transient(err)
}

// publish publishes msgs[todo] on pc and fills errs with their outcomes.
func (s *Sender) publish(ctx context.Context, pc *pubChan, msgs []*sender.Message, todo []int, errs []error) {
	returned := make([]atomic.Bool, len(msgs))
	ids := make([]string, len(msgs))
	pc.rmu.Lock()
	for _, i := range todo {
		ids[i] = msgs[i].ID.String()
		pc.pending[ids[i]] = append(pc.pending[ids[i]], &returned[i])
	}
	pc.rmu.Unlock()
	defer func() {
		pc.rmu.Lock()
		for _, i := range todo {
			fs := slices.DeleteFunc(pc.pending[ids[i]], func(f *atomic.Bool) bool { return f == &returned[i] })
			if len(fs) == 0 {
				delete(pc.pending, ids[i])
			} else {
				pc.pending[ids[i]] = fs
			}
		}
		pc.rmu.Unlock()
	}()

	dcs := make([]*amqp.DeferredConfirmation, len(msgs))
	pc.pub.Lock()
	var pubErr error
	for _, i := range todo {
		if pubErr == nil {
			m := msgs[i]
			var err error
			dcs[i], err = pc.ch.PublishWithDeferredConfirmWithContext(ctx,
				m.Route.Exchange, routingKey(m), true, false, publishing(m))
			if err != nil {
				pubErr = s.publishFailed(ctx, pc, err)
			}
		}
		if pubErr != nil {
			errs[i] = pubErr
			if max := sizeRefusal(pc.closeErr.Load()); max > 0 && int64(len(msgs[i].Payload)) > max {
				// The message the broker refused (its write may have
				// been cut by the close).
				errs[i] = s.checkSize(msgs[i])
			}
		}
	}
	pc.pub.Unlock()

	timer := time.NewTimer(s.cfg.ConfirmTimeout)
	defer timer.Stop()
	var waitErr error
	for _, i := range todo {
		dc := dcs[i]
		if dc == nil {
			continue
		}
		if waitErr == nil {
			select {
			case <-dc.Done():
			case <-ctx.Done():
				waitErr = fmt.Errorf("%w: no confirm before the context ended: %w", ErrConnection, ctx.Err())
			case <-timer.C:
				waitErr = fmt.Errorf("%w: no confirm within %s", ErrConnection, s.cfg.ConfirmTimeout)
			}
		}
		if waitErr != nil {
			errs[i] = txbox.Transient(waitErr)
			continue
		}
		if !dc.Acked() {
			if pc.ch.IsClosed() {
				// The client nacks everything outstanding when the
				// channel closes; that is a loss, not a refusal, unless
				// the channel closed because the exchange is gone.
				errs[i] = s.channelLost(pc, msgs[i])
			} else {
				errs[i] = txbox.Rejected(fmt.Errorf("%w (event %s)", ErrNacked, msgs[i].ID))
			}
		}
	}
	pc.sync()
	for _, i := range todo {
		if errs[i] == nil && returned[i].Load() {
			m := msgs[i]
			errs[i] = txbox.Rejected(fmt.Errorf("%w: no queue bound for exchange %q routing key %q (event %s)",
				ErrUnroutable, m.Route.Exchange, routingKey(m), m.ID))
		}
	}
}

// publishFailed classifies a failed publish: the context ended, or the
// channel or connection is gone (every later publish on it fails too).
func (s *Sender) publishFailed(ctx context.Context, pc *pubChan, err error) error {
	if ctx.Err() != nil {
		return txbox.Transient(fmt.Errorf("%w: publish: %w", ErrConnection, ctx.Err()))
	}
	if pc.ch.IsClosed() {
		e := pc.closeError()
		if e != nil && isMissingExchange(e) {
			s.forgetExchanges()
		}
		s.learnMaxBody(sizeRefusal(e))
	}
	return connErr(pc.conn, fmt.Errorf("%w: publish: %v", ErrConnection, err))
}

func (s *Sender) channelLost(pc *pubChan, m *sender.Message) error {
	e := pc.closeError()
	if max := sizeRefusal(e); max > 0 {
		// The broker refused a message over its max_message_size and
		// closed the channel: that message fails permanent, the others
		// in flight with it are collateral (transient), and later
		// batches are checked against the figure before publishing.
		s.learnMaxBody(max)
		if err := s.checkSize(m); err != nil {
			return err
		}
	}
	if e != nil && isMissingExchange(e) {
		s.forgetExchanges()
		if m.Route.Exchange != "" && strings.Contains(e.Reason, "'"+m.Route.Exchange+"'") {
			return txbox.Rejected(fmt.Errorf("%w: %q (event %s)", ErrNoExchange, m.Route.Exchange, m.ID))
		}
	}
	reason := "channel closed"
	if e != nil {
		reason = fmt.Sprintf("channel closed: %d %s", e.Code, e.Reason)
	}
	return connErr(pc.conn, fmt.Errorf("%w: %s before the confirm of event %s", ErrConnection, reason, m.ID))
}

func isMissingExchange(e *amqp.Error) bool {
	return e.Code == amqp.NotFound && strings.Contains(e.Reason, "exchange")
}

func (s *Sender) forgetExchanges() {
	s.mu.Lock()
	clear(s.exchanges)
	s.mu.Unlock()
}

// checkExchange makes sure the exchange exists before the first publish to
// it (and after ExchangeCheckTTL), on a throwaway channel, because a
// publish to a missing exchange closes the publishing channel and fails
// every message in flight on it.
func (s *Sender) checkExchange(ctx context.Context, name string) error {
	if name == "" || strings.HasPrefix(name, "amq.") {
		return nil // the default and the amq.* exchanges always exist
	}
	s.mu.Lock()
	at, ok := s.exchanges[name]
	s.mu.Unlock()
	if ok && time.Since(at) < s.cfg.ExchangeCheckTTL {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return txbox.Transient(fmt.Errorf("%w: %w", ErrConnection, err))
	}
	conn, err := s.connection()
	if err != nil {
		return err
	}
	ch, err := conn.Channel()
	if err != nil {
		return connErr(conn, fmt.Errorf("%w: open channel: %v", ErrConnection, err))
	}
	err = ch.ExchangeDeclarePassive(name, "direct", false, false, false, false, nil)
	if err == nil {
		_ = ch.Close()
		s.mu.Lock()
		s.exchanges[name] = time.Now()
		s.mu.Unlock()
		return nil
	}
	var ae *amqp.Error
	if errors.As(err, &ae) && ae.Code == amqp.NotFound {
		return txbox.Rejected(fmt.Errorf("%w: %q", ErrNoExchange, name))
	}
	return connErr(conn, fmt.Errorf("%w: check exchange %q: %v", ErrConnection, name, err))
}

// Close stops new Sends (they fail with txbox.ErrClosed), waits for the
// Sends in flight to get their confirms (bounded by ctx), then closes the
// connection.
func (s *Sender) Close(ctx context.Context) error {
	if !s.gate.Shut() {
		return nil
	}
	var waitErr error
	if err := s.gate.Wait(ctx); err != nil {
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

// encodable checks the AMQP short-string limits a publish frame must meet.
func encodable(m *sender.Message) error {
	const max = 255
	bad := func(what string, n int) error {
		return txbox.Rejected(fmt.Errorf("%w: %s is %d bytes, AMQP allows %d (event %s)", ErrInvalidMessage, what, n, max, m.ID))
	}
	if n := len(m.Route.Exchange); n > max {
		return bad("exchange", n)
	}
	if n := len(routingKey(m)); n > max {
		return bad("routing key", n)
	}
	for k := range m.Headers {
		if len(k) > max {
			return bad("a header name", len(k))
		}
	}
	return nil
}

func routingKey(m *sender.Message) string {
	if m.Route.RoutingKey != "" {
		return m.Route.RoutingKey
	}
	return m.EventType
}

func publishing(m *sender.Message) amqp.Publishing {
	h := make(amqp.Table, len(m.Headers)+3)
	for k, v := range m.Headers {
		h[k] = v
	}
	m.MissingHeaders(func(k, v string) { h[k] = v })
	if _, ok := h[sender.HeaderKey]; !ok && m.Key != "" {
		h[sender.HeaderKey] = m.Key
	}
	return amqp.Publishing{
		Headers:      h,
		DeliveryMode: amqp.Persistent,
		MessageId:    m.ID.String(),
		Type:         m.EventType,
		Timestamp:    m.CreatedAt,
		AppId:        "txbox",
		Body:         m.Payload,
	}
}

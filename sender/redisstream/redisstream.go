package redisstream

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/sender"
)

// Defaults applied by [New] to zero fields of [Config].
const (
	DefaultAddr         = "127.0.0.1:6379"
	DefaultDialTimeout  = 5 * time.Second
	DefaultReadTimeout  = 5 * time.Second
	DefaultWriteTimeout = 5 * time.Second
	DefaultPoolSize     = 10
	DefaultMaxRetries   = 1
)

// Sentinel errors.
var (
	// ErrNilMessage is the per-message error (permanent) of a nil entry in
	// the batch given to Send.
	ErrNilMessage = errors.New("redisstream sender: nil message")
	// ErrInvalidConfig is returned by New when the configuration is
	// unusable; the message names the field.
	ErrInvalidConfig = errors.New("redisstream sender: invalid config")
	// ErrNoStream is the per-message error (rejected) of a message whose
	// route has neither Stream nor Topic.
	ErrNoStream = errors.New("redisstream sender: route has no stream")
	// ErrUnavailable wraps every transient failure: dial, lost connection,
	// timeout, cancelled context.
	ErrUnavailable = errors.New("redisstream sender: redis unavailable")
)

// Config configures a Redis Streams sender. The fields are plain values so
// the command line can fill them from YAML.
type Config struct {
	// Addr is the Redis server, host:port. Defaults to "127.0.0.1:6379".
	Addr string
	// Username for Redis 6 ACLs; empty uses the default user.
	Username string
	// Password; empty means none. It is never logged or put in an error.
	Password string
	// DB is the database number. Defaults to 0.
	DB int
	// MaxLen trims each stream to about this many entries on every XADD
	// (MAXLEN ~). Defaults to 0: no trimming.
	MaxLen int64
	// DialTimeout bounds opening a connection. Defaults to 5s.
	DialTimeout time.Duration
	// ReadTimeout bounds waiting for the replies of a batch. Defaults to 5s.
	ReadTimeout time.Duration
	// WriteTimeout bounds writing a batch. Defaults to 5s.
	WriteTimeout time.Duration
	// PoolSize is the number of connections kept to Redis. Defaults to 10.
	PoolSize int
	// MaxRetries is how many times go-redis retries a batch that failed
	// on the network before Send reports it. One retry rides over a pooled
	// connection that went stale (a Redis restart); more only delay the
	// relay learning of an outage (each retry can wait DialTimeout or
	// ReadTimeout), and the relay retries anyway. Defaults to 1; -1
	// disables retries.
	MaxRetries int
	// SendTimeout bounds one Send, go-redis's retries included, so a hung
	// server is reported (as transient) in bounded time. Defaults to
	// DialTimeout + WriteTimeout + ReadTimeout.
	SendTimeout time.Duration
	// TLS, when not nil, makes every connection TLS with this
	// configuration (Redis 6+ built with TLS, or a managed Redis).
	// Defaults to plain TCP.
	TLS *tls.Config
	// CloudEvents chooses the format of messages whose route sets none,
	// and the CloudEvents source and default datacontenttype
	// (docs/cloudevents.md). Redis has no CloudEvents binding: in the
	// cloudevents format each attribute is a field named after it and
	// the payload is the data field. Defaults to the txbox format.
	CloudEvents sender.CloudEvents
}

func (c Config) withDefaults() Config {
	if c.Addr == "" {
		c.Addr = DefaultAddr
	}
	if c.DialTimeout == 0 {
		c.DialTimeout = DefaultDialTimeout
	}
	if c.ReadTimeout == 0 {
		c.ReadTimeout = DefaultReadTimeout
	}
	if c.WriteTimeout == 0 {
		c.WriteTimeout = DefaultWriteTimeout
	}
	if c.PoolSize == 0 {
		c.PoolSize = DefaultPoolSize
	}
	if c.MaxRetries == 0 {
		c.MaxRetries = DefaultMaxRetries
	}
	if c.SendTimeout == 0 {
		c.SendTimeout = c.DialTimeout + c.WriteTimeout + c.ReadTimeout
	}
	return c
}

func (c Config) validate() error {
	if _, _, err := net.SplitHostPort(c.Addr); err != nil {
		return fmt.Errorf("%w: addr %q is not host:port", ErrInvalidConfig, c.Addr)
	}
	// One row a numeric setting: its key, the bound it must keep (as
	// the error says it), whether it breaks it, and its value.
	for _, f := range []struct {
		key, must string
		bad       bool
		got       any
	}{
		{"db", "≥ 0", c.DB < 0, c.DB},
		{"max-len", "≥ 0", c.MaxLen < 0, c.MaxLen},
		{"dial-timeout", "> 0", c.DialTimeout < 0, c.DialTimeout},
		{"read-timeout", "> 0", c.ReadTimeout < 0, c.ReadTimeout},
		{"write-timeout", "> 0", c.WriteTimeout < 0, c.WriteTimeout},
		{"pool-size", "> 0", c.PoolSize < 0, c.PoolSize},
		{"send-timeout", "> 0", c.SendTimeout < 0, c.SendTimeout},
		{"max-retries", "≥ -1", c.MaxRetries < -1, c.MaxRetries},
	} {
		if f.bad {
			return fmt.Errorf("%w: %s must be %s, got %v", ErrInvalidConfig, f.key, f.must, f.got)
		}
	}
	return nil
}

// Sender appends txbox messages to Redis streams. It is safe for
// concurrent use.
type Sender struct {
	rdb         redis.UniversalClient
	owned       bool
	maxLen      int64
	sendTimeout time.Duration // 0: none
	ce          sender.CloudEvents

	// life admits Sends until Close, which waits for those in flight.
	life sender.Lifecycle
}

var (
	_ sender.Sender        = (*Sender)(nil)
	_ sender.Destinationer = (*Sender)(nil)
	_ sender.QuickAcker    = (*Sender)(nil)
)

// AcksQuickly implements [sender.QuickAcker]: Redis acknowledges a batch
// within milliseconds, so the relay defaults this sender's event types to
// the lock claim where the store has one.
func (s *Sender) AcksQuickly() bool { return true }

// Destination implements [sender.Destinationer]: the stream key (the
// route's Stream, else its Topic, as Send uses them). Every stream lives on
// the one server the sender talks to, so a failure to reach that server is
// marked [sender.Disconnected] and pauses them all.
func (s *Sender) Destination(r sender.Route) string {
	if r.Stream != "" {
		return r.Stream
	}
	return r.Topic
}

// New returns a Sender with its own go-redis client. It does not connect:
// an unreachable server shows up as transient Send errors.
func New(cfg Config) (*Sender, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	ce, err := cfg.CloudEvents.Resolve("", false)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidConfig, err)
	}
	rdb := redis.NewClient(&redis.Options{
		Addr:         cfg.Addr,
		Username:     cfg.Username,
		Password:     cfg.Password,
		DB:           cfg.DB,
		DialTimeout:  cfg.DialTimeout,
		ReadTimeout:  cfg.ReadTimeout,
		WriteTimeout: cfg.WriteTimeout,
		PoolSize:     cfg.PoolSize,
		MaxRetries:   cfg.MaxRetries,
		TLSConfig:    cfg.TLS,
		// Let a Send's deadline reach the socket.
		ContextTimeoutEnabled: true,
	})
	return &Sender{rdb: rdb, owned: true, maxLen: cfg.MaxLen, sendTimeout: cfg.SendTimeout, ce: ce}, nil
}

// NewFromClient wraps a client the caller built and owns; Close does not
// close it. maxLen is as Config.MaxLen. A Send is then bounded only by its
// context and the client's own timeouts and retries.
func NewFromClient(rdb redis.UniversalClient, maxLen int64) *Sender {
	return &Sender{rdb: rdb, maxLen: maxLen}
}

// Send pipelines one XADD per message and waits for the replies. It
// returns nil when every entry was added, a *sender.BatchError when only
// some failed, and a single transient error when Redis could not be
// reached.
func (s *Sender) Send(ctx context.Context, msgs []*sender.Message) error {
	return s.life.Send(ctx, "redisstream sender", msgs, s.send)
}

// send is Send within the lifecycle, for a batch that is not empty.
func (s *Sender) send(ctx context.Context, msgs []*sender.Message) error {
	if err := ctx.Err(); err != nil {
		return txbox.Transient(fmt.Errorf("%w: %w", ErrUnavailable, err))
	}
	if s.sendTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, s.sendTimeout)
		defer cancel()
	}
	errs := make([]error, len(msgs))
	pipe := s.rdb.Pipeline()
	cmds := make([]*redis.StringCmd, len(msgs))
	queued := 0
	for i, m := range msgs {
		if m == nil {
			errs[i] = txbox.Permanent(ErrNilMessage)
			continue
		}
		args, err := s.args(m)
		if err != nil {
			errs[i] = err
			continue
		}
		cmds[i] = pipe.XAdd(ctx, args)
		queued++
	}
	if queued > 0 {
		// go-redis bounds a pipeline by its deadline and socket timeouts
		// but not by cancellation; run it aside so a cancelled Send
		// returns at once. The pipeline ends by itself within the
		// timeouts.
		done := make(chan struct{})
		var execErr error
		go func() {
			defer close(done)
			_, execErr = pipe.Exec(ctx)
		}()
		select {
		case <-done:
		case <-ctx.Done():
			cause := txbox.Transient(fmt.Errorf("%w: no reply before the context ended: %w", ErrUnavailable, ctx.Err()))
			for i, c := range cmds {
				if c != nil {
					errs[i] = cause
				}
			}
			return sender.Summarize(errs)
		}
		for i, c := range cmds {
			if c == nil {
				continue
			}
			errs[i] = classify(c.Err())
			if c.Err() == nil && c.Val() == "" && execErr != nil {
				// The connection failed before the command ran: a
				// refused AUTH (WRONGPASS, a disabled user) fails the
				// pipeline but leaves each command's own error nil,
				// so a nil error here is no proof of a written entry.
				errs[i] = sender.Disconnected(txbox.Transient(fmt.Errorf("%w: %w", ErrUnavailable, execErr)))
			}
		}
	}
	return sender.Summarize(errs)
}

func (s *Sender) args(m *sender.Message) (*redis.XAddArgs, error) {
	stream := m.Route.Stream
	if stream == "" {
		stream = m.Route.Topic
	}
	if stream == "" {
		return nil, txbox.Rejected(fmt.Errorf("%w (event %s, type %q)", ErrNoStream, m.ID, m.EventType))
	}
	e, binary, err := s.ce.Binary(m)
	if err != nil {
		return nil, txbox.Permanent(fmt.Errorf("redisstream sender: event %s: %w", m.ID, err))
	}
	h := m.Headers
	// The relay fills the txbox-* headers; copy the map only when one is
	// missing (a sender used on its own), never modifying the caller's.
	copied := false
	m.MissingHeaders(func(k, v string) {
		if !copied {
			h = maps.Clone(m.Headers)
			if h == nil {
				h = make(map[string]string, 3)
			}
			copied = true
		}
		h[k] = v
	})
	if h == nil {
		h = map[string]string{}
	}
	hj, err := json.Marshal(h)
	if err != nil { // a map[string]string always marshals; kept for safety
		return nil, txbox.Permanent(fmt.Errorf("redisstream sender: encode headers of event %s: %w", m.ID, err))
	}
	a := &redis.XAddArgs{
		Stream: stream,
		Values: []any{"id", m.ID.String(), "type", m.EventType, "key", m.Key, "payload", m.Payload, "headers", hj},
	}
	if binary {
		vals := make([]any, 0, 22)
		e.Attributes(func(name, v string) { vals = append(vals, name, v) })
		a.Values = append(vals, "datacontenttype", e.DataContentType, "data", m.Payload, "headers", hj)
	}
	if s.maxLen > 0 {
		a.MaxLen = s.maxLen
		a.Approx = true
	}
	return a, nil
}

// unavailableReplies are the error-reply codes with which Redis refuses
// every write for a while, whatever the message: out of memory, loading
// its dataset, a failed background save, a read-only replica, a cluster
// or replication problem, a busy script, an authentication failure. They
// are outages (no attempt counted), not faults of the message.
var unavailableReplies = []string{
	"OOM", "LOADING", "MISCONF", "READONLY", "MASTERDOWN", "CLUSTERDOWN",
	"TRYAGAIN", "NOREPLICAS", "BUSY", "NOAUTH", "WRONGPASS",
}

func serverUnavailable(reply string) bool {
	code, _, _ := strings.Cut(reply, " ")
	return slices.Contains(unavailableReplies, code)
}

// classify sorts the outcome of one XADD.
func classify(err error) error {
	if err == nil {
		return nil
	}
	var re redis.Error
	if errors.As(err, &re) && !errors.Is(err, redis.ErrClosed) {
		if serverUnavailable(re.Error()) {
			return txbox.Transient(fmt.Errorf("%w: %v", ErrUnavailable, err))
		}
		// An error reply about this command (WRONGTYPE, an invalid
		// stream id): the message's fault, the server is fine.
		return txbox.Rejected(fmt.Errorf("redisstream sender: %w", err))
	}
	if connectionLost(err) {
		return sender.Disconnected(txbox.Transient(fmt.Errorf("%w: %w", ErrUnavailable, err)))
	}
	return txbox.Transient(fmt.Errorf("%w: %w", ErrUnavailable, err))
}

// connectionLost reports whether err is the connection to Redis itself
// failing: a dial that failed (refused, unresolvable, timed out), a
// connection reset or closed by the server. A read timeout is not: the
// server may only be slow with this batch.
func connectionLost(err error) bool {
	var op *net.OpError
	if errors.As(err, &op) {
		return op.Op == "dial" || !op.Timeout()
	}
	var dns *net.DNSError
	return errors.As(err, &dns) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.EPIPE) || errors.Is(err, net.ErrClosed)
}

// Close stops new Sends (they fail with txbox.ErrClosed), waits for the
// Sends in flight (bounded by ctx), then closes the client if New created
// it.
func (s *Sender) Close(ctx context.Context) error {
	if !s.life.Shut() {
		return nil
	}
	var err error
	if werr := s.life.Wait(ctx); werr != nil {
		err = fmt.Errorf("redisstream sender: close: sends still in flight: %w", werr)
	}
	if s.owned {
		if cerr := s.rdb.Close(); cerr != nil && err == nil && !errors.Is(cerr, redis.ErrClosed) {
			err = fmt.Errorf("redisstream sender: close: %w", cerr)
		}
	}
	return err
}

// CheckRoute implements [sender.Checker]. Redis creates a stream on its
// first entry, so every stream "exists": CheckRoute checks the connection
// (CheckConnection).
func (s *Sender) CheckRoute(ctx context.Context, _ sender.Route) error {
	return s.CheckConnection(ctx)
}

// CheckConnection implements [sender.ConnectionChecker]: the server
// answers a PING on a new or pooled connection, which the client opens
// with AUTH (and SELECT) as configured, so a wrong password fails it.
func (s *Sender) CheckConnection(ctx context.Context) error {
	if err := s.rdb.Ping(ctx).Err(); err != nil {
		return classify(err)
	}
	return nil
}

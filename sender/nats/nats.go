package nats

import (
	"context"
	"crypto/tls"
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
	// DefaultProvisionStream is the stream Provision creates or updates
	// when Config.ProvisionStream is empty.
	DefaultProvisionStream = "TXBOX"
)

// streamLookupTTL is how long the answer of a stream lookup (does a stream
// bind this subject?) is reused: a batch of messages to a subject without
// a stream costs one lookup, not one per message.
const streamLookupTTL = 5 * time.Second

// maxStreamLookup bounds one stream lookup.
const maxStreamLookup = 2 * time.Second

// redialLogEvery is how often a connection that keeps failing is logged
// again (the first failure of an outage is logged at once).
const redialLogEvery = time.Minute

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
	// New made (connected, disconnected, reconnected, a failed connect or
	// reconnect with the dial error, async errors such as a publish
	// permission violation). Server addresses are logged without
	// credentials. Defaults to slog.Default().
	Logger *slog.Logger
	// ProvisionStream is the JetStream stream [Sender.Provision] creates,
	// or extends with the subjects it lacks. Send does not use it.
	// Defaults to "TXBOX".
	ProvisionStream string
	// User and Password authenticate with a user name and password
	// (instead of putting them in URL). Defaults to none.
	User, Password string
	// Token authenticates with a token. Defaults to none.
	Token string
	// NKeySeedFile is a file holding an NKey seed ("SU..."), which signs
	// the server's nonce. Defaults to none.
	NKeySeedFile string
	// TLS, when not nil, makes the connection TLS with this
	// configuration (a private CA, a client certificate). Defaults to
	// TLS only when the server requires it or the URL is tls://, with
	// the system roots.
	TLS *tls.Config
	// CloudEvents chooses the format of messages whose route sets none,
	// and the CloudEvents source and default datacontenttype
	// (docs/cloudevents.md). In the cloudevents format the attributes
	// travel as ce- headers and the datacontenttype as content-type, as
	// the NATS binding has them. Defaults to the txbox format.
	CloudEvents sender.CloudEvents
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
	// ErrNotConnected is returned, Transient and marked
	// [sender.Disconnected], for a batch sent while the connection to NATS
	// is down or being re-established. The error names the servers
	// (without credentials) and the last dial error.
	ErrNotConnected = errors.New("nats: not connected")
	// ErrNoStream is returned, Rejected, for a message whose subject no
	// stream binds, confirmed by a stream lookup. The error also matches
	// jetstream.ErrNoStreamResponse.
	ErrNoStream = errors.New("nats: no stream bound to the subject")
	// ErrStreamUnavailable is returned, Transient, for a message that got
	// no answer from JetStream ("no responders") although the subject is
	// not known to be unbound: the stream exists but has no leader (an
	// election, a restore), or JetStream itself did not answer the lookup.
	// The error also matches jetstream.ErrNoStreamResponse.
	ErrStreamUnavailable = errors.New("nats: stream temporarily unavailable")
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
	stream     string // the stream Provision creates or updates
	log        *slog.Logger
	ce         sender.CloudEvents

	// dial follows the connects of a connection New made (nil for
	// NewFromConn); Send reports its last error with ErrNotConnected.
	dial *dialLog

	lmu     sync.Mutex
	lookups map[string]*streamLookup // by subject

	// life admits Sends until Close, which waits for those in flight.
	life sender.Lifecycle
}

// streamLookup is one answer to "does a stream bind this subject?".
type streamLookup struct {
	done chan struct{} // closed once the fields below are set
	at   time.Time
	// stream is the stream found, "" when none binds the subject (and err
	// is nil).
	stream string
	// err is why the lookup failed (JetStream did not answer).
	err error
}

var (
	_ sender.Sender           = (*Sender)(nil)
	_ sender.Destinationer    = (*Sender)(nil)
	_ sender.QuickAcker       = (*Sender)(nil)
	_ sender.Provisioner      = (*Sender)(nil)
	_ sender.ProvisionChecker = (*Sender)(nil)
)

// AcksQuickly implements [sender.QuickAcker]: NATS JetStream acknowledges a batch
// within milliseconds, so the relay defaults this sender's event types to
// the lock claim where the store has one.
func (s *Sender) AcksQuickly() bool { return true }

// Destination implements [sender.Destinationer]: the route's subject. The
// subject, not the stream, is the failure domain the relay keys its
// circuit breaker by: it is known without asking the server, a subject
// that no stream binds fails alone, and when a whole stream is
// unavailable each of its subjects opens its own circuit on its first
// failing batch without burning attempts. A failure of the connection
// itself is marked [sender.Disconnected] and pauses every subject at once.
func (s *Sender) Destination(r sender.Route) string { return r.Subject }

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
	if cfg.ProvisionStream == "" {
		cfg.ProvisionStream = DefaultProvisionStream
	}
	if !validStreamName(cfg.ProvisionStream) {
		return &ConfigError{Field: "provision-stream", Reason: fmt.Sprintf("%q is not a valid stream name (no spaces, '.', '*', '>', '/' or '\\')", truncate(cfg.ProvisionStream))}
	}
	ce, err := cfg.CloudEvents.Resolve("", false)
	if err != nil {
		var cerr *txbox.ConfigError
		errors.As(err, &cerr)
		return &ConfigError{Field: cerr.Field, Reason: cerr.Reason}
	}
	cfg.CloudEvents = ce
	return nil
}

// validStreamName applies the JetStream rules for a stream name.
func validStreamName(n string) bool {
	if n == "" || len(n) > 255 {
		return false
	}
	for _, c := range n {
		if c <= ' ' || c == 0x7f || strings.ContainsRune(".*>/\\", c) {
			return false
		}
	}
	return true
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
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	log = log.With("component", "txbox.sender.nats", "name", cfg.Name)
	dial := newDialLog(log)
	opts, err := connectOptions(cfg, log, dial)
	if err != nil {
		return nil, err
	}
	nc, err := natsgo.Connect(cfg.URL, opts...)
	if err != nil {
		// The URL may hold credentials: name the problem, not the URL.
		return nil, &ConfigError{Field: "url", Reason: fmt.Sprintf("cannot connect: %v", redactErr(err, cfg.URL))}
	}
	s, err := newSender(nc, cfg, log)
	if err != nil {
		nc.Close()
		return nil, err
	}
	s.ownConn = true
	s.dial = dial
	return s, nil
}

// connectOptions are the nats.go options of a connection New makes: it
// retries for ever in the background, logs its state changes on log and
// its dial failures through dial, and authenticates as cfg says.
func connectOptions(cfg Config, log *slog.Logger, dial *dialLog) ([]natsgo.Option, error) {
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
	opts = append(opts,
		natsgo.ConnectHandler(func(nc *natsgo.Conn) {
			dial.connected()
			log.Info("nats connected", "server", nc.ConnectedUrlRedacted())
		}),
		natsgo.DisconnectErrHandler(func(_ *natsgo.Conn, err error) {
			if err != nil {
				log.Warn("nats disconnected", "error", err)
			}
		}),
		natsgo.ReconnectHandler(func(nc *natsgo.Conn) {
			dial.connected()
			log.Info("nats reconnected", "server", nc.ConnectedUrlRedacted())
		}),
		natsgo.ReconnectErrHandler(func(nc *natsgo.Conn, err error) {
			// Called for every failed connect or reconnect attempt,
			// including the first connect (RetryOnFailedConnect): the
			// dial error says why ("connection refused", "no such
			// host"), which "not connected" alone never does.
			dial.failed(nc.Servers(), redactErr(err, cfg.URL))
		}),
		natsgo.ClosedHandler(func(*natsgo.Conn) { close(dial.callbacksDone) }),
		natsgo.ErrorHandler(func(_ *natsgo.Conn, _ *natsgo.Subscription, err error) {
			// A publish permission violation surfaces only here; the
			// messages then fail on their ack timeout.
			log.Error("nats async error", "error", err)
		}),
	)
	if cfg.CredsFile != "" {
		opts = append(opts, natsgo.UserCredentials(cfg.CredsFile))
	}
	if cfg.User != "" || cfg.Password != "" {
		opts = append(opts, natsgo.UserInfo(cfg.User, cfg.Password))
	}
	if cfg.Token != "" {
		opts = append(opts, natsgo.Token(cfg.Token))
	}
	if cfg.NKeySeedFile != "" {
		o, err := natsgo.NkeyOptionFromSeed(cfg.NKeySeedFile)
		if err != nil {
			// The error may quote the file's content: name the file only.
			return nil, &ConfigError{Field: "nkey-seed-file", Reason: fmt.Sprintf("%s is not a readable NKey seed file", cfg.NKeySeedFile)}
		}
		opts = append(opts, o)
	}
	if cfg.TLS != nil {
		opts = append(opts, natsgo.Secure(cfg.TLS.Clone()))
	}
	return opts, nil
}

// dialLog logs failed connects without flooding: the first failure of an
// outage at once, then again when the error changes or a minute passed.
type dialLog struct {
	log *slog.Logger
	// callbacksDone is closed by the connection's closed callback.
	// nats.go runs a connection's callbacks in order on a goroutine of
	// its own, the closed one last, so once it is closed no callback of
	// the connection logs again.
	callbacksDone chan struct{}

	mu       sync.Mutex
	attempts int
	lastMsg  string
	lastAt   time.Time
}

func newDialLog(log *slog.Logger) *dialLog {
	return &dialLog{log: log, callbacksDone: make(chan struct{})}
}

func (d *dialLog) connected() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.attempts, d.lastMsg, d.lastAt = 0, "", time.Time{}
}

// last returns the error of the latest failed attempt since the last
// (re)connect, or "".
func (d *dialLog) last() string {
	if d == nil {
		return ""
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.lastMsg
}

func (d *dialLog) failed(servers []string, msg string) {
	d.mu.Lock()
	d.attempts++
	n := d.attempts
	logIt := n == 1 || msg != d.lastMsg || time.Since(d.lastAt) >= redialLogEvery
	d.lastMsg = msg
	if logIt {
		d.lastAt = time.Now()
	}
	d.mu.Unlock()
	if logIt {
		// nc.Servers() gives scheme://host only: no user, password or
		// token.
		d.log.Warn("nats connect failed; retrying", "servers", strings.Join(servers, ","), "attempts", n, "error", msg)
	}
}

// NewFromConn returns a Sender that publishes on nc, which the caller
// keeps managing: Close does not close it. cfg.URL, Name, CredsFile,
// ConnectTimeout and ReconnectWait are ignored, and connection events are
// not logged (the caller set nc's handlers).
func NewFromConn(nc *natsgo.Conn, cfg Config) (*Sender, error) {
	if nc == nil {
		return nil, &ConfigError{Field: "conn", Reason: "is nil"}
	}
	if err := cfg.withDefaults(); err != nil {
		return nil, err
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	return newSender(nc, cfg, log.With("component", "txbox.sender.nats"))
}

func newSender(nc *natsgo.Conn, cfg Config, log *slog.Logger) (*Sender, error) {
	s := &Sender{
		nc: nc, ackTimeout: cfg.AckTimeout, slots: make(chan struct{}, cfg.MaxPending),
		stream: cfg.ProvisionStream, log: log, lookups: map[string]*streamLookup{},
		ce: cfg.CloudEvents,
	}
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
	return s.life.Send(ctx, "nats: send", msgs, s.send)
}

// send is Send within the lifecycle, for a batch that is not empty.
func (s *Sender) send(ctx context.Context, msgs []*sender.Message) error {
	if err := ctx.Err(); err != nil {
		return txbox.Transient(fmt.Errorf("nats: not sent: %w", err))
	}
	if !s.nc.IsConnected() {
		return s.notConnected()
	}
	errs := make([]error, len(msgs))
	futures := s.publishAll(ctx, msgs, errs)
	s.awaitAcks(ctx, msgs, futures, errs)
	return sender.Summarize(errs)
}

// publishAll publishes msgs asynchronously, within MaxPending, and returns
// their futures (nil for a message not published: errs says why).
func (s *Sender) publishAll(ctx context.Context, msgs []*sender.Message, errs []error) []jetstream.PubAckFuture {
	// The server's max_payload, learnt at connect (and at each
	// reconnect, from the server reached then).
	maxPayload := s.nc.MaxPayload()
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
		nm, hdrBound, err := s.build(m)
		if err != nil {
			errs[i] = txbox.Permanent(err)
			continue
		}
		if err := checkSize(nm, hdrBound, maxPayload); err != nil {
			errs[i] = err
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
			errs[i] = s.classify(ctx, err, m.Route.Subject)
			continue
		}
		futures[i] = f
	}
	return futures
}

// awaitAcks waits for the ack of each future, or for ctx, and records the
// failures in errs.
func (s *Sender) awaitAcks(ctx context.Context, msgs []*sender.Message, futures []jetstream.PubAckFuture, errs []error) {
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
			errs[i] = s.classify(ctx, err, msgs[i].Route.Subject)
			continue
		default:
		}
		select {
		case <-ok:
		case err := <-failed:
			errs[i] = s.classify(ctx, err, msgs[i].Route.Subject)
		case <-ctx.Done():
			errs[i] = txbox.Transient(fmt.Errorf("nats: ack not received: %w", ctx.Err()))
		}
	}
}

// notConnected is the error of a Send while the connection is down: it
// names the servers (nc.Servers gives scheme://host, never credentials)
// and the last dial error, so "not connected" comes with its cause.
func (s *Sender) notConnected() error {
	err := fmt.Errorf("%w to %s", ErrNotConnected, strings.Join(s.nc.Servers(), ","))
	if last := s.dial.last(); last != "" {
		err = fmt.Errorf("%w (last error: %s)", err, last)
	}
	return sender.Disconnected(txbox.Transient(err))
}

// checkSize refuses, Permanent, a message larger than the server's
// max_payload (payload plus the encoded header block, as the server
// counts it): no retry can make it fit. maxPayload 0 (no server info yet)
// skips the check; nats.go's own check then still applies.
//
// hdrBound is an upper bound of the header block's size (buildMsg): a
// message that fits with it fits, without nats.go counting the header
// block again; only one that might not is counted exactly.
func checkSize(nm *natsgo.Msg, hdrBound int, maxPayload int64) error {
	if maxPayload <= 0 {
		return nil
	}
	payload := int64(len(nm.Data))
	if payload+int64(hdrBound) <= maxPayload {
		return nil
	}
	// Size is subject + reply + header block + data; nm has no reply.
	headers := int64(nm.Size()) - int64(len(nm.Subject)) - payload
	if total := payload + headers; total > maxPayload {
		return txbox.Permanent(fmt.Errorf("nats: subject %q: %w: the message is %d bytes (payload %d + headers %d), the server's max_payload is %d bytes (raise max_payload in the NATS server configuration, or lower the publish limit: docs/operations.md)",
			nm.Subject, natsgo.ErrMaxPayload, total, payload, headers, maxPayload))
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

// Close waits for the Sends in flight to get their acks (bounded by ctx),
// then releases the publisher and, when New made it, the connection,
// whose last callbacks (connection log lines) have run when it returns.
// Later Sends fail with txbox.ErrClosed. Close is idempotent.
func (s *Sender) Close(ctx context.Context) error {
	first := s.life.Shut()
	var err error
	if werr := s.life.Wait(ctx); werr != nil {
		err = fmt.Errorf("nats: close: sends still in flight: %w", werr)
	}
	if first {
		if s.ownConn {
			// Closing the connection ends the publisher's reply
			// subscription and status goroutine. CleanupPublisher is not
			// called first: in nats.go v1.55 it can strand that goroutine
			// on a nil channel when it runs before the goroutine started.
			s.nc.Close()
			// A callback queued before the close (a failed dial's
			// "connect failed; retrying") would otherwise log after
			// Close returned, into a log its caller may be closing.
			select {
			case <-s.dial.callbacksDone:
			case <-ctx.Done():
			}
		} else {
			// A borrowed connection stays open: release the reply
			// subscription (subject to the nats.go race above, which can
			// leave one idle goroutine behind).
			s.js.CleanupPublisher()
		}
	}
	return err
}

// build is buildMsg in the message's format: in the cloudevents format
// the context attributes are added as ce- headers and the
// datacontenttype as content-type (an event's own Content-Type header,
// in any case, gives way to it).
func (s *Sender) build(m *sender.Message) (*natsgo.Msg, int, error) {
	e, binary, err := s.ce.Binary(m)
	if err != nil {
		return nil, 0, fmt.Errorf("nats: event %s: %w", m.ID, err)
	}
	nm, size, err := buildMsg(m)
	if err != nil || !binary {
		return nm, size, err
	}
	for k := range nm.Header {
		if sender.IsContentType(k) {
			delete(nm.Header, k)
		}
	}
	// The one-value slices share one array, as in buildMsg.
	vals := make([]string, 0, 9)
	add := func(k, v string) {
		vals = append(vals, v)
		nm.Header[k] = vals[len(vals)-1 : len(vals) : len(vals)]
		size += len(k) + len(v) + 4
	}
	e.Attributes(func(name, v string) { add(ceHeaders[name], v) })
	if err := checkHeader(HeaderContentType, e.DataContentType); err != nil {
		return nil, 0, err
	}
	add(HeaderContentType, e.DataContentType)
	return nm, size, nil
}

// ceHeaders are the binding's header names of the attributes.
var ceHeaders = sender.PrefixedNames(HeaderPrefixCloudEvents)

// Header names of the NATS CloudEvents binding in binary content mode.
const (
	// HeaderPrefixCloudEvents prefixes each context attribute's name.
	HeaderPrefixCloudEvents = "ce-"
	// HeaderContentType carries the datacontenttype attribute.
	HeaderContentType = "content-type"
)

// natsMsg builds the NATS message for m, or a *MessageError.
func natsMsg(m *sender.Message) (*natsgo.Msg, error) {
	nm, _, err := buildMsg(m)
	return nm, err
}

// buildMsg is natsMsg, and also returns an upper bound of the encoded
// header block's size (checkSize), counted while the headers are copied
// so that no extra pass over them is needed per message.
func buildMsg(m *sender.Message) (*natsgo.Msg, int, error) {
	if m.Route.Subject == "" {
		return nil, 0, &MessageError{Reason: fmt.Sprintf("event type %q has no route subject", m.EventType)}
	}
	n := len(m.Headers) + 3
	h := make(natsgo.Header, n)
	// The one-value slices share one array: one allocation per message,
	// not one per header.
	vals := make([]string, 0, n)
	set := func(k, v string) {
		vals = append(vals, v)
		h[k] = vals[len(vals)-1 : len(vals) : len(vals)]
	}
	size := len(natsHdrLine) + 2 // the status line and the final CRLF
	for k, v := range m.Headers {
		if err := checkHeader(k, v); err != nil {
			return nil, 0, err
		}
		// Assigned directly, not through Set, to keep the name's case.
		set(k, v)
		// A value replaced below is counted with its replacement.
		if k != txbox.HeaderEventID && (k != sender.HeaderKey || m.Key == "") {
			size += len(k) + len(v) + 4 // ": " and CRLF
		}
	}
	id := m.ID.String()
	set(HeaderMsgID, id)
	set(txbox.HeaderEventID, id)
	size += len(HeaderMsgID) + len(txbox.HeaderEventID) + 2*(len(id)+4)
	if m.Key != "" {
		if err := checkHeader(sender.HeaderKey, m.Key); err != nil {
			return nil, 0, err
		}
		set(sender.HeaderKey, m.Key)
		size += len(sender.HeaderKey) + len(m.Key) + 4
	}
	return &natsgo.Msg{Subject: m.Route.Subject, Data: m.Payload, Header: h}, size, nil
}

// natsHdrLine is the first line of nats.go's header block.
const natsHdrLine = "NATS/1.0\r\n"

// checkHeader refuses what the NATS header block cannot carry (a name
// with a space, a control character or an HTTP delimiter such as a colon;
// a value with CR or LF, which nats.go would turn into spaces) and
// the Nats-* names that steer JetStream.
func checkHeader(name, value string) error {
	if name == "" {
		return &MessageError{Reason: "empty header name"}
	}
	for i := 0; i < len(name); i++ {
		if c := name[i]; !headerNameByte[c] {
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

// headerNameByte is nats.go's rule for a header name's bytes: printable
// ASCII without the HTTP delimiters. A table, as every header of every
// message is checked.
var headerNameByte = func() (t [256]bool) {
	for c := '!'; c < 0x7f; c++ {
		t[c] = !strings.ContainsRune(`"(),/:;<=>?@[\]{}`, c)
	}
	return t
}()

func truncate(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}

// classify wraps a publish or ack error with its txbox class.
func (s *Sender) classify(ctx context.Context, err error, subject string) error {
	var apiErr *jetstream.APIError
	switch {
	case errors.Is(err, jetstream.ErrNoStreamResponse):
		// "No responders": nothing answered on the subject. Either no
		// stream binds it (a rejection of this message), or the stream
		// has no leader right now (an election, a restore) or JetStream
		// is down (an outage). Only a lookup tells them apart.
		stream, lerr := s.lookupStream(ctx, subject)
		switch {
		case lerr != nil:
			return txbox.Transient(fmt.Errorf("nats: subject %q: %w: %w (the stream lookup failed too: %v)", subject, ErrStreamUnavailable, err, lerr))
		case stream == "":
			return txbox.Rejected(fmt.Errorf("nats: subject %q: %w: %w", subject, ErrNoStream, err))
		default:
			return txbox.Transient(fmt.Errorf("nats: subject %q: %w: stream %q exists but did not answer (leader election or restore?): %w", subject, ErrStreamUnavailable, stream, err))
		}
	case errors.Is(err, natsgo.ErrMaxPayload), errors.Is(err, natsgo.ErrBadSubject),
		errors.Is(err, natsgo.ErrBadHeaderMsg):
		return txbox.Permanent(fmt.Errorf("nats: subject %q: %w", subject, err))
	case errors.Is(err, natsgo.ErrConnectionClosed), errors.Is(err, natsgo.ErrDisconnected),
		errors.Is(err, natsgo.ErrConnectionReconnecting), errors.Is(err, natsgo.ErrConnectionDraining),
		errors.Is(err, natsgo.ErrReconnectBufExceeded), errors.Is(err, jetstream.ErrConnectionClosed):
		// The connection itself: every subject of this sender is down
		// with it. (No reconnect buffer: a publish while reconnecting
		// fails with ErrReconnectBufExceeded.)
		return sender.Disconnected(txbox.Transient(fmt.Errorf("nats: subject %q: %w", subject, err)))
	case errors.As(err, &apiErr):
		switch {
		case apiErr.ErrorCode == jetstream.JSErrCodeStreamMessageExceedsMaximum:
			// Larger than the stream's max_msg_size: it never fits.
			return txbox.Permanent(fmt.Errorf("nats: subject %q: %w (the stream's max_msg_size; raise it with `nats stream edit --max-msg-size`)", subject, err))
		case apiErr.Code >= 500:
			// JetStream not enabled, a stream full under DiscardNew, no
			// quorum: the destination, not the message.
			return txbox.Transient(fmt.Errorf("nats: subject %q: %w", subject, err))
		}
		return txbox.Rejected(fmt.Errorf("nats: subject %q: %w", subject, err))
	default:
		// Timeouts, a stalled publisher: the destination, not the
		// message.
		return txbox.Transient(fmt.Errorf("nats: subject %q: %w", subject, err))
	}
}

// lookupStream returns the stream that binds subject, "" when none does,
// or why JetStream could not tell. Answers are reused for
// streamLookupTTL, and concurrent lookups of one subject share one
// request, so a batch to an unbound subject costs one lookup.
func (s *Sender) lookupStream(ctx context.Context, subject string) (string, error) {
	s.lmu.Lock()
	l := s.lookups[subject]
	if l != nil {
		select {
		case <-l.done:
			if time.Since(l.at) >= streamLookupTTL {
				l = nil
			}
		default: // in flight: wait for it
		}
	}
	if l != nil {
		s.lmu.Unlock()
		select {
		case <-l.done:
			return l.stream, l.err
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}
	l = &streamLookup{done: make(chan struct{})}
	s.lookups[subject] = l
	s.lmu.Unlock()

	lctx, cancel := context.WithTimeout(ctx, min(s.ackTimeout, maxStreamLookup))
	stream, err := s.js.StreamNameBySubject(lctx, subject)
	cancel()
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		stream, err = "", nil
	}
	l.stream, l.err, l.at = stream, err, time.Now()
	if err != nil && ctx.Err() != nil {
		// Our caller gave up, which says nothing about the stream: do
		// not keep the answer.
		s.lmu.Lock()
		if s.lookups[subject] == l {
			delete(s.lookups, subject)
		}
		s.lmu.Unlock()
	}
	close(l.done)
	return stream, err
}

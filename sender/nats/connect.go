package nats

import (
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// redialLogEvery is how often a connection that keeps failing is logged
// again (the first failure of an outage is logged at once).
const redialLogEvery = time.Minute

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

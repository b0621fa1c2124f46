package nats

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

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

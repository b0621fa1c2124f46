package config

import (
	"time"

	"github.com/txbox/txbox/relay"
)

// Default values applied by Load for keys the file, the environment and the
// flags leave unset. The relay settings take relay's Default* constants
// (relay.DefaultEventSettings); these are the keys only the txbox command
// has.
const (
	// DefaultDialect is the database used when none is configured: an
	// embedded SQLite file, so `txbox relay` works with nothing installed.
	DefaultDialect = "sqlite"
	// DefaultSQLitePath is the SQLite file used when the dialect is sqlite
	// and no dsn is given.
	DefaultSQLitePath = "./txbox.db"
	// DefaultShutdownTimeout bounds the graceful stop
	// (relay.shutdown-timeout).
	DefaultShutdownTimeout = 30 * time.Second
	// DefaultLogLevel is log.level.
	DefaultLogLevel = "info"
	// DefaultLogFormat is log.format.
	DefaultLogFormat = "text"
	// DefaultMetricsPath is metrics.path.
	DefaultMetricsPath = "/metrics"
	// DefaultMetricsStatsInterval is metrics.stats-interval.
	DefaultMetricsStatsInterval = 5 * time.Second
	// DefaultSenderTimeout is the timeout of the senders that have one,
	// except RabbitMQ's (30s).
	DefaultSenderTimeout = 10 * time.Second
	// DefaultDefaultSenderRoute is every field of the defaults route but
	// the RabbitMQ exchange and the webhook URL: one destination per event
	// type.
	DefaultDefaultSenderRoute = "{event_type}"
)

// Accepted values of enumerated keys. The polling modes and orderings are
// relay's (relay.PollingAdaptive, relay.OrderingKey, ...).
const (
	DialectPostgres = "postgres"
	DialectMySQL    = "mysql"
	DialectSQLite   = "sqlite"

	SenderNATS     = "nats"
	SenderWebhook  = "webhook"
	SenderKafka    = "kafka"
	SenderRabbitMQ = "rabbitmq"
	SenderRedis    = "redis"
)

// Config is a loaded txbox configuration: the YAML file with environment
// and flag overrides applied. The relay's settings are relay's own types,
// decoded through their yaml tags. After Load every pointer field of
// Defaults is set; fields of Events entries stay nil where the type
// inherits from Defaults (see Effective).
type Config struct {
	// Database selects the store. Defaults to SQLite at ./txbox.db.
	Database Database `yaml:"database"`
	// Senders are the named destinations. Events pick one by name.
	Senders map[string]*Sender `yaml:"senders"`
	// Defaults are the settings of every event type, including types the
	// file does not list.
	Defaults relay.EventSettings `yaml:"defaults"`
	// Events override Defaults per event type; unset keys inherit, those
	// of polling, backoff and route one by one.
	Events map[string]*relay.EventSettings `yaml:"events"`
	// Cleanup controls deletion of old processed rows and resolved dead
	// letters.
	Cleanup relay.CleanupConfig `yaml:"cleanup"`
	// Relay holds the relay-wide settings that are not per event type.
	Relay RelaySettings `yaml:"relay"`
	// Log controls the relay's own log output.
	Log Log `yaml:"log"`
	// Metrics serves Prometheus metrics on a listener of their own.
	Metrics Metrics `yaml:"metrics"`
	// Health serves the /livez and /readyz probes on a listener of their
	// own.
	Health Health `yaml:"health"`
	// Admin configures the admin HTTP API and dashboard. Off by default.
	Admin Admin `yaml:"admin"`

	// origins maps the key paths Load saw to where their values came
	// from (Settings); nil for a Config built in Go.
	origins map[string]string
}

// RelaySettings are the relay-wide settings under the relay key; they
// become the fields of the same names of relay.Config.
type RelaySettings struct {
	// InstanceID names this relay in leases and logs. Defaults to
	// hostname-pid-random.
	InstanceID string `yaml:"instance-id"`
	// DiscoverInterval is the shortest time between two looks for event
	// types with pending rows that have no poller yet. Defaults to 10s.
	DiscoverInterval time.Duration `yaml:"discover-interval"`
	// DiscoverMaxInterval caps the discovery interval, which doubles while
	// nothing new appears. Zero (unset) defaults to 5m, or DiscoverInterval
	// when that is longer.
	DiscoverMaxInterval time.Duration `yaml:"discover-max-interval"`
	// RecoverInterval is the shortest time between two sweeps that put
	// rows whose lease expired back to PENDING. Defaults to 5s.
	RecoverInterval time.Duration `yaml:"recover-interval"`
	// RecoverMaxInterval caps the recovery interval, which doubles while
	// sweeps find nothing and nothing is claimed: a lease is recovered at
	// most this long after it expired. Zero (unset) defaults to 2m, or
	// RecoverInterval when that is longer.
	RecoverMaxInterval time.Duration `yaml:"recover-max-interval"`
	// DeadLetterInterval is the shortest time between two sweeps that move
	// FAILED rows to the dead-letter table (a batch that failed rows moves
	// them at once). Defaults to 5s.
	DeadLetterInterval time.Duration `yaml:"dead-letter-interval"`
	// HeartbeatInterval is how often the relay writes its heartbeat row
	// (docs/operations.md, "Relay instances"). Defaults to 30s; negative
	// disables it.
	HeartbeatInterval time.Duration `yaml:"heartbeat-interval"`
	// DeadLetterMaxInterval caps the dead-letter sweep's interval, which
	// doubles while it finds nothing. Zero (unset) defaults to 10m, or
	// DeadLetterInterval when that is longer.
	DeadLetterMaxInterval time.Duration `yaml:"dead-letter-max-interval"`
	// ShutdownTimeout bounds the graceful stop after SIGTERM or SIGINT:
	// batches in flight finish or are released within it. Defaults to 30s.
	ShutdownTimeout time.Duration `yaml:"shutdown-timeout"`
	// Circuit configures the circuit breakers (one per destination, one
	// per sender's connection).
	Circuit relay.CircuitConfig `yaml:"circuit"`
}

// Database selects and configures the store.
type Database struct {
	// Dialect is postgres, mysql or sqlite. Defaults to sqlite.
	Dialect string `yaml:"dialect"`
	// DSN is the connection string: a PostgreSQL URL or key=value string,
	// a go-sql-driver/mysql DSN, or a SQLite file path. It is a secret: it
	// prints with its password redacted. Defaults to ./txbox.db for
	// sqlite; required for the other dialects.
	DSN DSN `yaml:"dsn"`
	// DSNEnv names an environment variable holding the DSN, so the file
	// need not contain a password. Used when DSN is empty.
	DSNEnv string `yaml:"dsn-env"`
	// Schema holds txbox's tables: a PostgreSQL schema (migrate creates
	// it) or a MySQL database. Not allowed for sqlite. Defaults to the
	// connection's default (PostgreSQL's search_path, the DSN's database).
	Schema string `yaml:"schema"`
	// TablePrefix prefixes every txbox table. Defaults to txbox_.
	TablePrefix string `yaml:"table-prefix"`
	// MaxConns bounds the relay's connection pool. Defaults to the
	// driver's default.
	MaxConns int `yaml:"max-conns"`
	// NotifyTrigger makes migrate create the PostgreSQL wake-up trigger
	// for producers that insert with plain SQL (postgres.Config's field of
	// the same name). PostgreSQL only; defaults to false.
	NotifyTrigger bool `yaml:"notify-trigger"`
}

// Sender is one named destination. Type selects which of the other fields
// apply; a key that does not belong to the type is rejected at load.
type Sender struct {
	// Type is nats, webhook, kafka, rabbitmq or redis. Required.
	Type string `yaml:"type"`

	// NATS holds the settings when Type is nats; nil otherwise. The
	// same holds for the other types below.
	NATS *NATSSender `yaml:"-"`
	// Webhook holds the settings when Type is webhook.
	Webhook *WebhookSender `yaml:"-"`
	// Kafka holds the settings when Type is kafka.
	Kafka *KafkaSender `yaml:"-"`
	// RabbitMQ holds the settings when Type is rabbitmq.
	RabbitMQ *RabbitMQSender `yaml:"-"`
	// Redis holds the settings when Type is redis.
	Redis *RedisSender `yaml:"-"`
}

// NATSSender configures a NATS JetStream sender (sender/nats). The
// subject of each event comes from its route.
type NATSSender struct {
	// URL of the NATS server(s), comma-separated; it may carry a user and
	// password, which are redacted when printed. Defaults to
	// nats://127.0.0.1:4222.
	URL DSN `yaml:"url"`
	// Name is the connection name the server shows. Defaults to txbox.
	Name string `yaml:"name"`
	// CredsFile is a NATS credentials file. Defaults to none.
	CredsFile string `yaml:"creds-file"`
	// Timeout bounds the wait for each message's ack. Defaults to 10s.
	Timeout time.Duration `yaml:"timeout"`
	// MaxPending is the most messages awaiting an ack at once. Defaults
	// to 4096.
	MaxPending int `yaml:"max-pending"`
	// Provision makes the relay create or update, at start, the JetStream
	// stream ProvisionStream so that it binds every subject of the routes
	// that use this sender (see sender/nats Sender.Provision). Defaults to
	// false: txbox changes nothing on the server.
	Provision bool `yaml:"provision"`
	// ProvisionStream names the stream Provision creates or updates.
	// Defaults to TXBOX.
	ProvisionStream string `yaml:"provision-stream"`
	// ProvisionSubjects replaces the route subjects as the subjects to
	// bind (wildcards allowed). Defaults to the subjects of the event
	// types listed under events that use this sender, and of the defaults
	// route when it uses it ("x.{event_type}" is bound as "x.>").
	ProvisionSubjects []string `yaml:"provision-subjects"`
	// User authenticates with a user name; its password comes from
	// PasswordEnv or PasswordFile. Defaults to none.
	User string `yaml:"user"`
	// PasswordEnv names an environment variable holding User's password.
	PasswordEnv string `yaml:"password-env"`
	// PasswordFile is a file holding User's password.
	PasswordFile string `yaml:"password-file"`
	// TokenEnv names an environment variable holding an auth token.
	TokenEnv string `yaml:"token-env"`
	// TokenFile is a file holding an auth token.
	TokenFile string `yaml:"token-file"`
	// NKeySeedFile is a file holding an NKey seed (SU...). Defaults to
	// none.
	NKeySeedFile string `yaml:"nkey-seed-file"`
	// TLS configures TLS. Defaults to TLS only when the server requires
	// it, with the system roots.
	TLS *TLS `yaml:"tls"`
}

// WebhookSender configures the HTTP webhook sender (sender/webhook).
type WebhookSender struct {
	// URL is the default endpoint; a route's url overrides it.
	URL string `yaml:"url"`
	// HMACSecretEnv names an environment variable holding the HMAC-SHA256
	// signing secret; the secret itself never goes in the file. No
	// signature is sent when empty.
	HMACSecretEnv string `yaml:"hmac-secret-env"`
	// SignatureHeader names the signature header. Defaults to
	// Txbox-Signature.
	SignatureHeader string `yaml:"signature-header"`
	// Timeout bounds one request. Defaults to 10s.
	Timeout time.Duration `yaml:"timeout"`
	// Concurrency bounds the requests in flight. Defaults to 16.
	Concurrency int `yaml:"concurrency"`
	// ContentType is sent for messages without a content-type header.
	// Defaults to application/octet-stream.
	ContentType string `yaml:"content-type"`
	// HMACSecretFile is a file holding the signing secret, instead of
	// HMACSecretEnv.
	HMACSecretFile string `yaml:"hmac-secret-file"`
	// TLS configures https requests (a private CA, a client certificate).
	// Defaults to the system roots.
	TLS *TLS `yaml:"tls"`
}

// KafkaSender configures the Kafka sender (sender/kafka).
type KafkaSender struct {
	// Brokers are the seed brokers, host:port. Required.
	Brokers []string `yaml:"brokers"`
	// ClientID names the producer. Defaults to txbox.
	ClientID string `yaml:"client-id"`
	// Timeout bounds how long a record may wait to be produced, retries
	// included (delivery timeout). Defaults to 10s.
	Timeout time.Duration `yaml:"timeout"`
	// Linger is how long a partition waits for more records before it
	// cuts a produce request; it only adds latency to the relay's whole
	// batches. Defaults to 0 (no linger).
	Linger time.Duration `yaml:"linger"`
	// MaxBufferedRecords bounds the records buffered in the client.
	// Defaults to 10000.
	MaxBufferedRecords int `yaml:"max-buffered-records"`
	// MaxRecordBytes caps one record batch (so one record), the producer's
	// twin of the topic's max.message.bytes. Defaults to franz-go's
	// 1000012.
	MaxRecordBytes int `yaml:"max-record-bytes"`
	// Provision makes the relay create, at start, every topic of the
	// routes that use this sender that does not exist yet. Defaults to
	// false.
	Provision bool `yaml:"provision"`
	// ProvisionTopics replaces the route topics as the topics to create.
	// Defaults to the topics of the event types listed under events that
	// use this sender, and of the defaults route when it has no
	// {event_type} placeholder.
	ProvisionTopics []string `yaml:"provision-topics"`
	// ProvisionPartitions is the partition count of created topics.
	// Defaults to the broker's num.partitions.
	ProvisionPartitions int `yaml:"provision-partitions"`
	// ProvisionReplicationFactor is the replication factor of created
	// topics. Defaults to the broker's default.replication.factor.
	ProvisionReplicationFactor int `yaml:"provision-replication-factor"`
	// TLS makes the broker connections TLS. Defaults to plain TCP.
	TLS *TLS `yaml:"tls"`
	// SASL authenticates the connections (PLAIN, SCRAM-SHA-256/512).
	// Defaults to none.
	SASL *KafkaSASL `yaml:"sasl"`
}

// RabbitMQSender configures the RabbitMQ sender (sender/rabbitmq). The
// exchange and routing key of each event come from its route.
type RabbitMQSender struct {
	// URL is the AMQP URL, amqp://user:pass@host:port/vhost; its password
	// is redacted when printed. Required.
	URL DSN `yaml:"url"`
	// Timeout bounds the wait for a batch's publisher confirms. Defaults
	// to 30s.
	Timeout time.Duration `yaml:"timeout"`
	// Channels is the number of confirm-mode channels. Defaults to 2.
	Channels int `yaml:"channels"`
	// MaxMessageBytes is the broker's max_message_size: larger bodies
	// fail permanent before they are published. Defaults to the broker
	// version's default (128 MiB up to 3.13, 16 MiB from 4.0), lowered to
	// what the broker reports when it refuses a message.
	MaxMessageBytes int `yaml:"max-message-bytes"`
	// Provision makes the relay declare, at start, every exchange of the
	// routes that use this sender that does not exist yet (durable, of
	// ProvisionExchangeType). It binds no queue. Defaults to false.
	Provision bool `yaml:"provision"`
	// ProvisionExchanges replaces the route exchanges as the exchanges to
	// declare. Defaults to the exchanges of the event types listed under
	// events that use this sender, and of the defaults route.
	ProvisionExchanges []string `yaml:"provision-exchanges"`
	// ProvisionExchangeType is the type of declared exchanges: direct,
	// fanout, topic, headers or x-*. Defaults to topic.
	ProvisionExchangeType string `yaml:"provision-exchange-type"`
	// PasswordEnv names an environment variable holding the password of
	// the URL's user, so the URL in the file carries none. Defaults to
	// the URL's own password.
	PasswordEnv string `yaml:"password-env"`
	// PasswordFile is a file holding that password, instead of
	// PasswordEnv.
	PasswordFile string `yaml:"password-file"`
	// TLS configures an amqps:// URL (a private CA, a client
	// certificate); it requires amqps://. Defaults to the system roots
	// for amqps://.
	TLS *TLS `yaml:"tls"`
}

// RedisSender configures the Redis Streams sender (sender/redisstream).
// The stream of each event comes from its route.
type RedisSender struct {
	// Addr is host:port. Defaults to 127.0.0.1:6379.
	Addr string `yaml:"addr"`
	// Username for Redis ACLs. Defaults to the default user.
	Username string `yaml:"username"`
	// PasswordEnv names an environment variable holding the password.
	// Defaults to no password.
	PasswordEnv string `yaml:"password-env"`
	// DB selects the Redis database. Defaults to 0.
	DB int `yaml:"db"`
	// MaxLen caps each stream approximately (XADD MAXLEN ~). Defaults to
	// 0: no cap.
	MaxLen int64 `yaml:"max-len"`
	// Timeout bounds writing a batch and reading its replies. Defaults to
	// 10s.
	Timeout time.Duration `yaml:"timeout"`
	// PoolSize is the number of connections. Defaults to 10.
	PoolSize int `yaml:"pool-size"`
	// PasswordFile is a file holding the password, instead of
	// PasswordEnv.
	PasswordFile string `yaml:"password-file"`
	// TLS makes the connections TLS (Redis built with TLS, a managed
	// Redis). Defaults to plain TCP.
	TLS *TLS `yaml:"tls"`
}

// Log controls logging.
type Log struct {
	// Level is debug, info, warn or error. Defaults to info.
	Level string `yaml:"level"`
	// Format is text or json. Defaults to text.
	Format string `yaml:"format"`
}

// Metrics configures the Prometheus endpoint of `txbox relay`
// (docs/metrics.md).
type Metrics struct {
	// Listen is the host:port to serve metrics on, such as
	// 127.0.0.1:9090. Empty (the default) serves none. It has no
	// authentication: bind it where only the scraper can reach it.
	Listen string `yaml:"listen"`
	// Path is the URL path of the metrics. Defaults to /metrics.
	Path string `yaml:"path"`
	// StatsInterval is the most often the backlog gauges query the
	// database; scrapes in between reuse the last result. Defaults to 5s.
	StatsInterval time.Duration `yaml:"stats-interval"`
}

// Health configures the probes of `txbox relay` (docs/operations.md,
// "Health").
type Health struct {
	// Listen is the host:port to serve /livez and /readyz on, without a
	// token. Empty (the default) serves none. The same address as
	// metrics.listen serves both on one listener.
	Listen string `yaml:"listen"`
	// LagThreshold is the lag (age of the oldest due event of a type)
	// above which /readyz reports degraded. 0 (the default) turns the
	// check off.
	LagThreshold time.Duration `yaml:"lag-threshold"`
	// FailWhenDegraded makes /readyz answer 503 when degraded, not only
	// when not ready. Defaults to false.
	FailWhenDegraded bool `yaml:"fail-when-degraded"`
	// RejectThreshold is how long the destination of a type may refuse
	// every message, acknowledging none, before /readyz reports degraded.
	// 0 (unset) is health.DefaultRejectThreshold, 1m; negative turns the
	// check off.
	RejectThreshold time.Duration `yaml:"reject-threshold"`
}

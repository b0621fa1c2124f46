package config

import (
	"time"
)

// Default values applied by Load for keys the file, the environment and the
// flags leave unset. They mirror SPEC §4.
const (
	// DefaultDialect is the database used when none is configured: an
	// embedded SQLite file, so `txbox relay` works with nothing installed.
	DefaultDialect = "sqlite"
	// DefaultSQLitePath is the SQLite file used when the dialect is sqlite
	// and no dsn is given.
	DefaultSQLitePath = "./txbox.db"

	DefaultBatchSize          = 200
	DefaultPollingMode        = PollingAdaptive
	DefaultPollingMinDelay    = 250 * time.Millisecond
	DefaultPollingMultiplier  = 1.5
	DefaultPollingMaxDelay    = time.Minute
	DefaultMaxAttempts        = 4
	DefaultBackoffDelay       = 10 * time.Second
	DefaultBackoffMultiplier  = 3.0
	DefaultBackoffMax         = time.Hour
	DefaultBackoffJitter      = 0.0
	DefaultOrdering           = OrderingNone
	DefaultRetention          = 24 * time.Hour
	DefaultLease              = 5 * time.Minute
	DefaultCleanupInterval    = time.Minute
	DefaultCleanupMaxInterval = 10 * time.Minute
	DefaultCleanupBatchSize   = 1000
	DefaultPollingDelay       = 250 * time.Millisecond
	DefaultInFlight           = 4
	DefaultShutdownTimeout    = 30 * time.Second
	DefaultDiscoverInterval   = 10 * time.Second
	DefaultRecoverInterval    = 5 * time.Second
	DefaultDeadLetterInterval = 5 * time.Second
	DefaultCircuitCoolDown    = time.Second
	DefaultCircuitMaxCoolDown = time.Minute
	DefaultCircuitMultiplier  = 2.0
	DefaultDeadLetterTTL      = 7 * 24 * time.Hour
	DefaultLogLevel           = "info"
	DefaultLogFormat          = "text"
	DefaultSenderTimeout      = 10 * time.Second
	DefaultDefaultSenderRoute = "{event_type}"
)

// Accepted values of enumerated keys.
const (
	PollingAdaptive = "adaptive"
	PollingFixed    = "fixed"
	OrderingNone    = "none"
	OrderingKey     = "key"

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
// and flag overrides applied. After Load every pointer field of Defaults is
// set; fields of Events entries stay nil where the type inherits from
// Defaults (see Effective).
type Config struct {
	// Database selects the store. Defaults to SQLite at ./txbox.db.
	Database Database `yaml:"database"`
	// Senders are the named destinations. Events pick one by name.
	Senders map[string]*Sender `yaml:"senders"`
	// Defaults are the settings of every event type, including types the
	// file does not list.
	Defaults EventSettings `yaml:"defaults"`
	// Events override Defaults per event type; unset keys inherit.
	Events map[string]*EventSettings `yaml:"events"`
	// Cleanup controls deletion of old processed rows and resolved dead
	// letters.
	Cleanup Cleanup `yaml:"cleanup"`
	// Relay holds the relay-wide settings that are not per event type.
	Relay RelaySettings `yaml:"relay"`
	// Log controls the relay's own log output.
	Log Log `yaml:"log"`
}

// RelaySettings are relay-wide settings.
type RelaySettings struct {
	// InstanceID names this relay in leases and logs. Defaults to
	// hostname-pid-random.
	InstanceID string `yaml:"instance-id"`
	// DiscoverInterval is how often the relay looks for event types with
	// pending rows that have no poller yet. Defaults to 10s.
	DiscoverInterval time.Duration `yaml:"discover-interval"`
	// RecoverInterval is how often rows whose lease expired are put back
	// to PENDING. Defaults to 5s.
	RecoverInterval time.Duration `yaml:"recover-interval"`
	// DeadLetterInterval is how often FAILED rows move to the dead-letter
	// table. Defaults to 5s.
	DeadLetterInterval time.Duration `yaml:"dead-letter-interval"`
	// ShutdownTimeout bounds the graceful stop after SIGTERM or SIGINT:
	// batches in flight finish or are released within it. Defaults to 30s.
	ShutdownTimeout time.Duration `yaml:"shutdown-timeout"`
	// Circuit configures the per-sender circuit breakers.
	Circuit Circuit `yaml:"circuit"`
}

// Circuit configures the circuit breaker that pauses a sender's pollers
// while its destination is down.
type Circuit struct {
	// CoolDown is the first wait before a probe batch. Defaults to 1s.
	CoolDown time.Duration `yaml:"cool-down"`
	// MaxCoolDown caps the doubling cool-down. Defaults to 1m.
	MaxCoolDown time.Duration `yaml:"max-cool-down"`
	// Multiplier grows the cool-down after a failed probe. Defaults to 2.
	Multiplier float64 `yaml:"multiplier"`
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
	// Schema is the PostgreSQL schema (MySQL: unused, the DSN's database
	// is used). Defaults to the connection's default.
	Schema string `yaml:"schema"`
	// TablePrefix prefixes every txbox table. Defaults to txbox_.
	TablePrefix string `yaml:"table-prefix"`
	// MaxConns bounds the relay's connection pool. Defaults to the
	// driver's default.
	MaxConns int `yaml:"max-conns"`
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
}

// EventSettings are the relay settings of one event type. A nil field
// inherits the value of Config.Defaults.
type EventSettings struct {
	// Sender names the destination in Config.Senders. Defaults to the only
	// sender when exactly one is configured.
	Sender *string `yaml:"sender"`
	// Route says where the event goes; "{event_type}" in any field is
	// replaced by the event type. A route replaces the inherited route as
	// a whole. Defaults to topic/subject/routing key "{event_type}".
	Route *Route `yaml:"route"`
	// BatchSize is the number of rows claimed per poll. Defaults to 200.
	BatchSize *int `yaml:"batch-size"`
	// Polling is the polling strategy; its keys inherit one by one.
	Polling *Polling `yaml:"polling"`
	// MaxAttempts is the number of delivery attempts before the event is
	// dead-lettered (1 try + retries). Defaults to 4.
	MaxAttempts *int `yaml:"max-attempts"`
	// Backoff is the delay before retries; its keys inherit one by one.
	Backoff *Backoff `yaml:"backoff"`
	// Ordering is none or key (events with the same key delivered in id
	// order). Defaults to none.
	Ordering *string `yaml:"ordering"`
	// Retention is how long acked rows are kept as PROCESSED before
	// cleanup deletes them; 0 deletes them on ack. Defaults to 24h.
	Retention *time.Duration `yaml:"retention"`
	// Lease is how long a claim is exclusive before another relay may
	// recover the rows (max batch processing time). Defaults to 5m.
	Lease *time.Duration `yaml:"lease"`
	// InFlight bounds the batches of the type between claim and finish at
	// once. Defaults to 4.
	InFlight *int `yaml:"in-flight"`
}

// Route is where an event goes. Each sender reads the fields it
// understands (see sender.Route).
type Route struct {
	// Topic is the Kafka topic. Defaults to {event_type}.
	Topic string `yaml:"topic"`
	// Subject is the NATS subject. Defaults to {event_type}.
	Subject string `yaml:"subject"`
	// Exchange is the RabbitMQ exchange. Defaults to the default
	// exchange.
	Exchange string `yaml:"exchange"`
	// RoutingKey is the RabbitMQ routing key. Defaults to {event_type}.
	RoutingKey string `yaml:"routing-key"`
	// URL is the webhook URL. Defaults to the webhook sender's url.
	URL string `yaml:"url"`
	// Stream is the Redis stream. Defaults to {event_type}.
	Stream string `yaml:"stream"`
}

// Polling is a polling strategy.
type Polling struct {
	// Mode is adaptive or fixed. Defaults to adaptive.
	Mode *string `yaml:"mode"`
	// MinDelay is the adaptive delay after a full batch. Defaults to
	// 250ms.
	MinDelay *time.Duration `yaml:"min-delay"`
	// Multiplier grows the delay after a partial or empty batch
	// (adaptive). Defaults to 1.5.
	Multiplier *float64 `yaml:"multiplier"`
	// MaxDelay caps the adaptive delay: the worst pickup wait when idle.
	// Defaults to 1m.
	MaxDelay *time.Duration `yaml:"max-delay"`
	// Delay is the constant delay of fixed polling. Defaults to 250ms.
	Delay *time.Duration `yaml:"delay"`
}

// Backoff is the retry delay: delay × multiplier^(n-1), capped by max,
// spread by ± jitter (a fraction).
type Backoff struct {
	// Delay before the first retry. Defaults to 10s.
	Delay *time.Duration `yaml:"delay"`
	// Multiplier per further retry. Defaults to 3.0.
	Multiplier *float64 `yaml:"multiplier"`
	// Max caps the delay. Defaults to 1h.
	Max *time.Duration `yaml:"max"`
	// Jitter is the random spread as a fraction in [0, 1]. Defaults to 0.
	Jitter *float64 `yaml:"jitter"`
}

// Cleanup controls the deletion of old rows.
type Cleanup struct {
	// Disabled turns cleanup off on this instance (another instance, or
	// a cron job, does it). Defaults to false.
	Disabled bool `yaml:"disabled"`
	// Interval is the shortest time between cleanup rounds; it doubles up
	// to MaxInterval while a round finds nothing to delete. Defaults to 1m.
	Interval time.Duration `yaml:"interval"`
	// MaxInterval caps the interval. Defaults to 10m.
	MaxInterval time.Duration `yaml:"max-interval"`
	// BatchSize bounds one delete statement. Defaults to 1000.
	BatchSize int `yaml:"batch-size"`
	// OutboxTTL is how long PROCESSED rows are kept. Cleanup is not per
	// event type, so when it is not set it defaults to the longest
	// retention of defaults and every listed event type (24h when none
	// sets one): no type loses its processed rows before its own
	// retention.
	OutboxTTL *time.Duration `yaml:"outbox-ttl"`
	// DeadLetterTTL is how long resolved dead letters are kept. Defaults
	// to 168h (7 days).
	DeadLetterTTL time.Duration `yaml:"dead-letter-ttl"`
}

// Log controls logging.
type Log struct {
	// Level is debug, info, warn or error. Defaults to info.
	Level string `yaml:"level"`
	// Format is text or json. Defaults to text.
	Format string `yaml:"format"`
}

package config

import (
	"time"

	"github.com/txbox/txbox/relay"
	"github.com/txbox/txbox/sender"
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
	// DefaultHealthHorizonThreshold is health.horizon-threshold.
	DefaultHealthHorizonThreshold = time.Minute
	// DefaultHealthFenceThreshold is the former name of
	// DefaultHealthHorizonThreshold.
	//
	// Deprecated: use DefaultHealthHorizonThreshold.
	DefaultHealthFenceThreshold = DefaultHealthHorizonThreshold
	// DefaultMetricsStatsInterval is metrics.stats-interval.
	DefaultMetricsStatsInterval = 5 * time.Second
	// DefaultSenderTimeout is senders.<name>.timeout of a redis sender,
	// which bounds both writing a batch and reading its replies (the
	// redisstream package's ReadTimeout and WriteTimeout bound them one
	// by one). The other sender types take their package's default.
	DefaultSenderTimeout = 10 * time.Second
	// DefaultDefaultSenderRoute is every field of the defaults route but
	// the RabbitMQ exchange and the webhook URL: one destination per event
	// type.
	DefaultDefaultSenderRoute = "{event_type}"
	// DefaultTenantsInterval is tenants-interval: how often the relay
	// re-reads the tenants. A new tenant waits up to this long to be
	// served, and each round runs tenants-query once.
	DefaultTenantsInterval = 30 * time.Second
	// DefaultTenantsParkAfter is tenants-park-after: how long a PostgreSQL
	// tenant's relay has had nothing to do before it is parked.
	DefaultTenantsParkAfter = time.Minute
	// DefaultTenantsSweepInterval is tenants-sweep-interval: how often the
	// parked tenants of a database are swept.
	DefaultTenantsSweepInterval = 30 * time.Second
)

// Accepted values of enumerated keys. The polling modes and orderings are
// relay's (relay.PollingAdaptive, txbox.OrderingKey, ...).
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
// whose keys this package maps (keys.go); each field of this package's
// types is the key its yaml tag names. docs/configuration.md gives every
// key's default and meaning, in tables generated from this code (config/internal/keydoc), so the
// defaults are written in one place: the Default* constants that Default
// and the sender packages apply. After Load every pointer field of
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
	// Tracing exports the relay's spans over OTLP. Off unless enabled or
	// an OTEL_EXPORTER_OTLP endpoint is set.
	Tracing Tracing `yaml:"tracing"`
	// Tenants are the tenants one relay process serves, each with its
	// own outbox, dead-letter and inbox tables in a database or a schema
	// of its own (docs/multi-tenant.md). Empty: the relay serves the one
	// database of Database.
	Tenants []Tenant `yaml:"tenants"`
	// TenantsQuery is a SQL query run against database.dsn whose rows
	// are further tenants (ResolveTenants), so that tenants can be added
	// without editing the file.
	TenantsQuery string `yaml:"tenants-query"`
	// TenantsInterval is how often the tenants (the list and the rows of
	// TenantsQuery) are re-read. Defaults to DefaultTenantsInterval.
	TenantsInterval time.Duration `yaml:"tenants-interval"`
	// TenantsParkAfter is how long a PostgreSQL tenant's relay has had
	// nothing to do (no row claimed, no batch, no maintenance work)
	// before it is parked: stopped, its connections closed, its tables
	// watched with the other parked tenants of its database from one
	// connection (docs/multi-tenant.md, "Idle tenants"). A new tenant
	// starts parked. 0 never parks. Defaults to DefaultTenantsParkAfter.
	TenantsParkAfter time.Duration `yaml:"tenants-park-after"`
	// TenantsSweepInterval is how often the parked tenants of a database
	// are swept in one statement for rows due within the interval,
	// leases running out, FAILED rows and rows past their cleanup TTL,
	// which wake their tenant; a wake-up notification wakes it at once.
	// Defaults to DefaultTenantsSweepInterval.
	TenantsSweepInterval time.Duration `yaml:"tenants-sweep-interval"`

	// origins maps the key paths Load saw to where their values came
	// from (Settings); nil for a Config built in Go.
	origins map[string]string
	// getenv reads the environment Load was given, so NewLogger can
	// scrub the secrets that variables hold; nil for a Config built in
	// Go.
	getenv func(string) string
	// tenant is the name of the tenant ForTenant derived this
	// configuration for; "" for the file's own.
	tenant string
	// walShared is set by ForTenant for a tenant in a schema of
	// database.dsn in WAL mode: its slot and publication are shared with
	// the other schemas (postgres.WALConfig.Shared).
	walShared bool
}

// RelaySettings are the relay-wide settings under the relay key; they
// become the fields of the same names of relay.Config.
type RelaySettings struct {
	// InstanceID is the key relay.instance-id.
	InstanceID string `yaml:"instance-id"`
	// DiscoverInterval is the key relay.discover-interval.
	DiscoverInterval time.Duration `yaml:"discover-interval"`
	// DiscoverMaxInterval is the key relay.discover-max-interval.
	DiscoverMaxInterval time.Duration `yaml:"discover-max-interval"`
	// RecoverInterval is the key relay.recover-interval.
	RecoverInterval time.Duration `yaml:"recover-interval"`
	// RecoverMaxInterval is the key relay.recover-max-interval.
	RecoverMaxInterval time.Duration `yaml:"recover-max-interval"`
	// DeadLetterInterval is the key relay.dead-letter-interval.
	DeadLetterInterval time.Duration `yaml:"dead-letter-interval"`
	// HeartbeatInterval is the key relay.heartbeat-interval.
	HeartbeatInterval time.Duration `yaml:"heartbeat-interval"`
	// DeadLetterMaxInterval is the key relay.dead-letter-max-interval.
	DeadLetterMaxInterval time.Duration `yaml:"dead-letter-max-interval"`
	// ShutdownTimeout is the key relay.shutdown-timeout.
	ShutdownTimeout time.Duration `yaml:"shutdown-timeout"`
	// Circuit is the key relay.circuit.
	Circuit relay.CircuitConfig `yaml:"circuit"`
}

// Database selects and configures the store.
type Database struct {
	// Dialect is the key database.dialect.
	Dialect string `yaml:"dialect"`
	// DSN is the key database.dsn.
	DSN DSN `yaml:"dsn"`
	// DSNEnv is the key database.dsn-env.
	DSNEnv string `yaml:"dsn-env"`
	// Schema is the key database.schema.
	Schema string `yaml:"schema"`
	// TablePrefix is the key database.table-prefix.
	TablePrefix string `yaml:"table-prefix"`
	// MaxConns is the key database.max-conns.
	MaxConns int `yaml:"max-conns"`
	// NotifyTrigger is the key database.notify-trigger.
	NotifyTrigger bool `yaml:"notify-trigger"`
	// Source is the key database.source: SourceTable or SourceWAL.
	Source string `yaml:"source"`
	// WAL is the key database.wal.
	WAL WAL `yaml:"wal"`
}

// Values of database.source.
const (
	SourceTable = "table"
	SourceWAL   = "wal"
)

// WAL is the key database.wal: WAL mode's settings (docs/concepts.md,
// "WAL mode"), used with database.source wal.
type WAL struct {
	// Slot is the key database.wal.slot.
	Slot string `yaml:"slot"`
	// Publication is the key database.wal.publication.
	Publication string `yaml:"publication"`
	// ApplicationName is the key database.wal.application-name.
	ApplicationName string `yaml:"application-name"`
	// SenderTimeout is the key database.wal.sender-timeout.
	SenderTimeout time.Duration `yaml:"sender-timeout"`
	// Failover is the key database.wal.failover; nil is true.
	Failover *bool `yaml:"failover"`
	// Window is the key database.wal.window.
	Window int `yaml:"window"`
	// WindowBytes is the key database.wal.window-bytes.
	WindowBytes int64 `yaml:"window-bytes"`
	// LaneQueue is the key database.wal.lane-queue.
	LaneQueue int `yaml:"lane-queue"`
	// BatchSize is the key database.wal.batch-size.
	BatchSize int `yaml:"batch-size"`
	// StatusInterval is the key database.wal.status-interval.
	StatusInterval time.Duration `yaml:"status-interval"`
	// StandbyInterval is the key database.wal.standby-interval.
	StandbyInterval time.Duration `yaml:"standby-interval"`
	// PauseLimit is the key database.wal.pause-limit.
	PauseLimit time.Duration `yaml:"pause-limit"`
	// LagThreshold is the key database.wal.lag-threshold, in bytes of WAL.
	LagThreshold int64 `yaml:"lag-threshold"`
	// OnSlotLost is the key database.wal.on-slot-lost: recreate or stop.
	OnSlotLost string `yaml:"on-slot-lost"`
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
	// URL is the key url of a sender of this type.
	URL DSN `yaml:"url"`
	// Name is the key name of a sender of this type.
	Name string `yaml:"name"`
	// CredsFile is the key creds-file of a sender of this type.
	CredsFile string `yaml:"creds-file"`
	// Timeout is the key timeout of a sender of this type.
	Timeout time.Duration `yaml:"timeout"`
	// MaxPending is the key max-pending of a sender of this type.
	MaxPending int `yaml:"max-pending"`
	// Provision is the key provision of a sender of this type.
	Provision bool `yaml:"provision"`
	// ProvisionStream is the key provision-stream of a sender of this type.
	ProvisionStream string `yaml:"provision-stream"`
	// ProvisionSubjects is the key provision-subjects of a sender of this type.
	ProvisionSubjects []string `yaml:"provision-subjects"`
	// User is the key user of a sender of this type.
	User string `yaml:"user"`
	// PasswordEnv is the key password-env of a sender of this type.
	PasswordEnv string `yaml:"password-env"`
	// PasswordFile is the key password-file of a sender of this type.
	PasswordFile string `yaml:"password-file"`
	// TokenEnv is the key token-env of a sender of this type.
	TokenEnv string `yaml:"token-env"`
	// TokenFile is the key token-file of a sender of this type.
	TokenFile string `yaml:"token-file"`
	// NKeySeedFile is the key nkey-seed-file of a sender of this type.
	NKeySeedFile string `yaml:"nkey-seed-file"`
	// TLS is the key tls of a sender of this type.
	TLS *TLS `yaml:"tls"`
	// SenderFormat holds the keys format and cloudevents.
	SenderFormat `yaml:",inline"`
}

// WebhookSender configures the HTTP webhook sender (sender/webhook).
type WebhookSender struct {
	// URL is the key url of a sender of this type.
	URL string `yaml:"url"`
	// HMACSecretEnv is the key hmac-secret-env of a sender of this type.
	HMACSecretEnv string `yaml:"hmac-secret-env"`
	// SignatureHeader is the key signature-header of a sender of this type.
	SignatureHeader string `yaml:"signature-header"`
	// Timeout is the key timeout of a sender of this type.
	Timeout time.Duration `yaml:"timeout"`
	// Concurrency is the key concurrency of a sender of this type.
	Concurrency int `yaml:"concurrency"`
	// ContentType is the key content-type of a sender of this type.
	ContentType string `yaml:"content-type"`
	// HMACSecretFile is the key hmac-secret-file of a sender of this type.
	HMACSecretFile string `yaml:"hmac-secret-file"`
	// TLS is the key tls of a sender of this type.
	TLS *TLS `yaml:"tls"`
	// PermanentStatus is the key permanent-status of a sender of this
	// type: the 4xx status codes that dead-letter a message at once
	// (webhook.Config.PermanentStatus).
	PermanentStatus []int `yaml:"permanent-status"`
	// SenderFormat holds the keys format and cloudevents.
	SenderFormat `yaml:",inline"`
}

// KafkaSender configures the Kafka sender (sender/kafka).
type KafkaSender struct {
	// Brokers is the key brokers of a sender of this type.
	Brokers []string `yaml:"brokers"`
	// ClientID is the key client-id of a sender of this type.
	ClientID string `yaml:"client-id"`
	// Timeout is the key timeout of a sender of this type.
	Timeout time.Duration `yaml:"timeout"`
	// Linger is the key linger of a sender of this type.
	Linger time.Duration `yaml:"linger"`
	// MaxBufferedRecords is the key max-buffered-records of a sender of this type.
	MaxBufferedRecords int `yaml:"max-buffered-records"`
	// MaxRecordBytes is the key max-record-bytes of a sender of this type.
	MaxRecordBytes int `yaml:"max-record-bytes"`
	// Provision is the key provision of a sender of this type.
	Provision bool `yaml:"provision"`
	// ProvisionTopics is the key provision-topics of a sender of this type.
	ProvisionTopics []string `yaml:"provision-topics"`
	// ProvisionPartitions is the key provision-partitions of a sender of this type.
	ProvisionPartitions int `yaml:"provision-partitions"`
	// ProvisionReplicationFactor is the key provision-replication-factor of a sender of this type.
	ProvisionReplicationFactor int `yaml:"provision-replication-factor"`
	// TLS is the key tls of a sender of this type.
	TLS *TLS `yaml:"tls"`
	// SASL is the key sasl of a sender of this type.
	SASL *KafkaSASL `yaml:"sasl"`
	// SenderFormat holds the keys format and cloudevents.
	SenderFormat `yaml:",inline"`
}

// RabbitMQSender configures the RabbitMQ sender (sender/rabbitmq). The
// exchange and routing key of each event come from its route.
type RabbitMQSender struct {
	// URL is the key url of a sender of this type.
	URL DSN `yaml:"url"`
	// Timeout is the key timeout of a sender of this type.
	Timeout time.Duration `yaml:"timeout"`
	// Channels is the key channels of a sender of this type.
	Channels int `yaml:"channels"`
	// MaxMessageBytes is the key max-message-bytes of a sender of this type.
	MaxMessageBytes int `yaml:"max-message-bytes"`
	// Provision is the key provision of a sender of this type.
	Provision bool `yaml:"provision"`
	// ProvisionExchanges is the key provision-exchanges of a sender of this type.
	ProvisionExchanges []string `yaml:"provision-exchanges"`
	// ProvisionExchangeType is the key provision-exchange-type of a sender of this type.
	ProvisionExchangeType string `yaml:"provision-exchange-type"`
	// PasswordEnv is the key password-env of a sender of this type.
	PasswordEnv string `yaml:"password-env"`
	// PasswordFile is the key password-file of a sender of this type.
	PasswordFile string `yaml:"password-file"`
	// TLS is the key tls of a sender of this type.
	TLS *TLS `yaml:"tls"`
	// SenderFormat holds the keys format and cloudevents.
	SenderFormat `yaml:",inline"`
}

// RedisSender configures the Redis Streams sender (sender/redisstream).
// The stream of each event comes from its route.
type RedisSender struct {
	// Addr is the key addr of a sender of this type.
	Addr string `yaml:"addr"`
	// Username is the key username of a sender of this type.
	Username string `yaml:"username"`
	// PasswordEnv is the key password-env of a sender of this type.
	PasswordEnv string `yaml:"password-env"`
	// DB is the key db of a sender of this type.
	DB int `yaml:"db"`
	// MaxLen is the key max-len of a sender of this type.
	MaxLen int64 `yaml:"max-len"`
	// Timeout is the key timeout of a sender of this type.
	Timeout time.Duration `yaml:"timeout"`
	// PoolSize is the key pool-size of a sender of this type.
	PoolSize int `yaml:"pool-size"`
	// PasswordFile is the key password-file of a sender of this type.
	PasswordFile string `yaml:"password-file"`
	// TLS is the key tls of a sender of this type.
	TLS *TLS `yaml:"tls"`
	// SenderFormat holds the keys format and cloudevents.
	SenderFormat `yaml:",inline"`
}

// SenderFormat holds the keys every sender type has, embedded in each
// type's settings: how its messages are written.
type SenderFormat struct {
	// Format is the wire format of the messages whose route sets none:
	// txbox or cloudevents, or, for a webhook sender only,
	// cloudevents-structured (docs/cloudevents.md). Defaults to txbox.
	Format string `yaml:"format"`
	// CloudEvents sets the CloudEvents attributes that do not come from
	// the event. Defaults to source /txbox, datacontenttype
	// application/octet-stream (for a webhook sender, its content-type
	// key).
	CloudEvents *CloudEventsSettings `yaml:"cloudevents"`
}

// CloudEventsSettings are the cloudevents keys of a sender: the
// attributes of its CloudEvents messages that do not come from the event
// (sender.CloudEvents).
type CloudEventsSettings struct {
	// Source is the source attribute, a URI-reference such as /orders.
	// Defaults to /txbox.
	Source string `yaml:"source"`
	// ContentType is the datacontenttype of events without a
	// content-type header. Defaults to application/octet-stream; for a
	// webhook sender, to its content-type.
	ContentType string `yaml:"content-type"`
}

// format returns the format and cloudevents keys of s, whatever its type
// (nil when s has no settings).
func (s *Sender) format() *SenderFormat {
	switch {
	case s.NATS != nil:
		return &s.NATS.SenderFormat
	case s.Webhook != nil:
		return &s.Webhook.SenderFormat
	case s.Kafka != nil:
		return &s.Kafka.SenderFormat
	case s.RabbitMQ != nil:
		return &s.RabbitMQ.SenderFormat
	case s.Redis != nil:
		return &s.Redis.SenderFormat
	}
	return nil
}

// senderCloudEvents is the sender.CloudEvents of s's keys.
func (s *Sender) senderCloudEvents() sender.CloudEvents {
	f := s.format()
	if f == nil {
		return sender.CloudEvents{}
	}
	out := sender.CloudEvents{Format: sender.Format(f.Format)}
	if ce := f.CloudEvents; ce != nil {
		out.Source, out.DataContentType = ce.Source, ce.ContentType
	}
	return out
}

// Log controls logging.
type Log struct {
	// Level is the key log.level.
	Level string `yaml:"level"`
	// Format is the key log.format.
	Format string `yaml:"format"`
}

// Metrics configures the Prometheus endpoint of `txbox relay`
// (docs/metrics.md).
type Metrics struct {
	// Listen is the key metrics.listen.
	Listen string `yaml:"listen"`
	// Path is the key metrics.path.
	Path string `yaml:"path"`
	// StatsInterval is the key metrics.stats-interval.
	StatsInterval time.Duration `yaml:"stats-interval"`
}

// Health configures the probes of `txbox relay` (docs/operations.md,
// "Health").
type Health struct {
	// Listen is the key health.listen.
	Listen string `yaml:"listen"`
	// LagThreshold is the key health.lag-threshold.
	LagThreshold time.Duration `yaml:"lag-threshold"`
	// HorizonThreshold is the key health.horizon-threshold (the
	// deprecated key health.fence-threshold is its alias for one
	// release, docs/upgrading.md).
	HorizonThreshold time.Duration `yaml:"horizon-threshold"`
	// FenceThreshold is the former name of HorizonThreshold, for programs
	// that set it in Go (a file's health.fence-threshold decodes into
	// HorizonThreshold). When non-zero it wins over HorizonThreshold,
	// which a loaded configuration always has set; set HorizonThreshold
	// to 0 to turn the check off.
	//
	// Deprecated: use HorizonThreshold.
	FenceThreshold time.Duration `yaml:"-"`
	// FailWhenDegraded is the key health.fail-when-degraded.
	FailWhenDegraded bool `yaml:"fail-when-degraded"`
	// RejectThreshold is how long the destination of a type may refuse
	// every message, acknowledging none, before /readyz reports degraded.
	// 0 (unset) is health.DefaultRejectThreshold, 1m; negative turns the
	// check off.
	RejectThreshold time.Duration `yaml:"reject-threshold"`
}

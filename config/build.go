package config

import (
	"context"
	"crypto/tls"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/relay"
	"github.com/txbox/txbox/sender"
	"github.com/txbox/txbox/sender/kafka"
	"github.com/txbox/txbox/sender/nats"
	"github.com/txbox/txbox/sender/rabbitmq"
	"github.com/txbox/txbox/sender/redisstream"
	"github.com/txbox/txbox/sender/webhook"
	"github.com/txbox/txbox/store"
	"github.com/txbox/txbox/store/mysql"
	"github.com/txbox/txbox/store/postgres"
	"github.com/txbox/txbox/store/sqlite"
)

// ErrUnsupportedSender is returned by OpenSenders for a sender type this
// build of txbox has no implementation for yet.
var ErrUnsupportedSender = errors.New("config: sender type not available in this build")

// Store is an opened store: the driver plus the pool the caller's own
// transactions run on.
type Store struct {
	store.Driver
	// Pool is the pgx pool (postgres); nil for the other dialects.
	Pool *pgxpool.Pool
	// DB is the database/sql pool (mysql, sqlite); nil for postgres.
	DB *sql.DB
}

// Close closes the driver and the pool OpenStore opened.
func (s *Store) Close() error {
	err := s.Driver.Close()
	if s.Pool != nil {
		s.Pool.Close()
	}
	return err
}

// Ping checks that the database answers.
func (s *Store) Ping(ctx context.Context) error {
	if s.Pool != nil {
		return s.Pool.Ping(ctx)
	}
	return s.DB.PingContext(ctx)
}

// Tx is a business transaction on a Store: publish in it through Native,
// run your own statements with Exec.
type Tx interface {
	// Native is what store.Outbox.OutboxInsert and outbox publishing
	// accept: a pgx.Tx or a *sql.Tx.
	Native() any
	// Exec runs one statement with the dialect's placeholders ($1 on
	// postgres, ? elsewhere; see Store.Placeholder).
	Exec(ctx context.Context, query string, args ...any) error
	Commit(ctx context.Context) error
	Rollback(ctx context.Context) error
}

// Begin starts a transaction on the store's pool.
func (s *Store) Begin(ctx context.Context) (Tx, error) {
	if s.Pool != nil {
		tx, err := s.Pool.Begin(ctx)
		if err != nil {
			return nil, err
		}
		return pgxTx{tx}, nil
	}
	tx, err := s.DB.BeginTx(ctx, nil)
	if err != nil {
		return nil, err
	}
	return sqlTx{tx}, nil
}

// Placeholder returns the n-th (1-based) bind placeholder of the dialect.
func (s *Store) Placeholder(n int) string {
	if s.Pool != nil {
		return fmt.Sprintf("$%d", n)
	}
	return "?"
}

type pgxTx struct{ tx pgx.Tx }

func (t pgxTx) Native() any { return t.tx }
func (t pgxTx) Exec(ctx context.Context, q string, args ...any) error {
	_, err := t.tx.Exec(ctx, q, args...)
	return err
}
func (t pgxTx) Commit(ctx context.Context) error   { return t.tx.Commit(ctx) }
func (t pgxTx) Rollback(ctx context.Context) error { return t.tx.Rollback(ctx) }

type sqlTx struct{ tx *sql.Tx }

func (t sqlTx) Native() any { return t.tx }
func (t sqlTx) Exec(ctx context.Context, q string, args ...any) error {
	_, err := t.tx.ExecContext(ctx, q, args...)
	return err
}
func (t sqlTx) Commit(context.Context) error   { return t.tx.Commit() }
func (t sqlTx) Rollback(context.Context) error { return t.tx.Rollback() }

// DatabaseDSN returns the DSN to connect with: database.dsn, else the
// variable named by database.dsn-env (read with getenv), else the SQLite
// default path.
func (c *Config) DatabaseDSN(getenv func(string) string) (DSN, error) {
	db := c.Database
	if db.DSN != "" {
		return db.DSN, nil
	}
	if db.DSNEnv != "" {
		v, err := secretEnv(getenv, "database", "dsn-env", db.DSNEnv)
		return DSN(v), err
	}
	if db.Dialect == DialectSQLite {
		return DefaultSQLitePath, nil
	}
	return "", &Error{Path: "database.dsn", Msg: "required"}
}

// OpenStore connects to the configured database and returns the store.
// It does not migrate. Errors never contain the DSN's password. On a
// configuration with tenants (not ForTenant's), database.dsn's store is
// opened with database.source table: it is no tenant's outbox.
func (c *Config) OpenStore(ctx context.Context, getenv func(string) string, logger *slog.Logger) (*Store, error) {
	if getenv == nil {
		getenv = os.Getenv
	}
	if logger == nil {
		logger = slog.Default()
	}
	dsn, err := c.DatabaseDSN(getenv)
	if err != nil {
		return nil, err
	}
	secrets := append(c.Secrets(getenv), passwordsIn(dsn.Reveal())...)
	wrap := func(what string, err error) error {
		return Scrub(fmt.Errorf("config: %s %s: %w", what, c.Database.Dialect, err), secrets)
	}
	switch c.Database.Dialect {
	case DialectPostgres:
		pc, err := pgxpool.ParseConfig(dsn.Reveal())
		if err != nil {
			// pgx quotes the connection string in some parse errors.
			return nil, wrap("parse dsn for", err)
		}
		if c.Database.MaxConns > 0 {
			pc.MaxConns = int32(c.Database.MaxConns)
		} else if n := c.LockConns(); n > int(pc.MaxConns) {
			pc.MaxConns = int32(n)
		}
		pc.ShouldPing = shouldPing
		pool, err := pgxpool.NewWithConfig(ctx, pc)
		if err != nil {
			return nil, wrap("connect to", err)
		}
		source, wal := c.Database.Source, c.postgresWAL()
		if c.HasTenants() {
			// database.dsn is no tenant's outbox (ForTenant gives each
			// its own slot): it is opened to connect, never to stream.
			source, wal = SourceTable, postgres.WALConfig{}
		}
		d, err := postgres.New(pool, postgres.Config{
			Schema: c.Database.Schema, TablePrefix: c.Database.TablePrefix, Logger: logger, NotifyTrigger: c.Database.NotifyTrigger,
			Source: source,
			WAL:    wal,
		})
		if err != nil {
			pool.Close()
			return nil, wrap("open", err)
		}
		return &Store{Driver: d, Pool: pool}, nil
	case DialectMySQL:
		d, err := mysql.Open(dsn.Reveal(), mysql.Config{Schema: c.Database.Schema, TablePrefix: c.Database.TablePrefix})
		if err != nil {
			return nil, wrap("open", err)
		}
		if c.Database.MaxConns > 0 {
			d.DB().SetMaxOpenConns(c.Database.MaxConns)
		}
		return &Store{Driver: d, DB: d.DB()}, nil
	case DialectSQLite:
		path := strings.TrimPrefix(dsn.Reveal(), "file:")
		d, err := sqlite.Open(path, sqlite.Config{TablePrefix: c.Database.TablePrefix, MaxOpenConns: c.Database.MaxConns})
		if err != nil {
			return nil, wrap("open", err)
		}
		return &Store{Driver: d, DB: d.DB()}, nil
	}
	return nil, &Error{Path: "database.dialect", Msg: fmt.Sprintf("unknown dialect %q", c.Database.Dialect)}
}

// PingAfterIdle is how long a pooled PostgreSQL connection may sit idle
// before the pool pings it when it is next acquired. pgx pings after one
// second, which costs an idle relay one extra transaction (an empty
// "-- ping" query, which PostgreSQL counts as one) for nearly every real
// one: its pollers and jobs each use a connection every few seconds to
// minutes (docs/concepts.md, "Background jobs"). A connection that broke
// without being pinged fails its statement, the pool drops it, and the
// relay's poller or job retries after its error backoff.
const PingAfterIdle = 5 * time.Minute

func shouldPing(_ context.Context, p pgxpool.ShouldPingParams) bool {
	return p.IdleDuration > PingAfterIdle
}

// OpenSenders creates every configured sender. Secrets named by *-env keys
// are read with getenv (nil means os.Getenv); a named variable that is
// empty is an error. Senders that log (NATS connection events) use logger
// (nil means slog.Default()). On error the senders already created are
// closed.
func (c *Config) OpenSenders(ctx context.Context, getenv func(string) string, logger *slog.Logger) (map[string]sender.Sender, error) {
	if getenv == nil {
		getenv = os.Getenv
	}
	if logger == nil {
		logger = slog.Default()
	}
	out := make(map[string]sender.Sender, len(c.Senders))
	for _, name := range c.SenderNames() {
		s, err := c.openSender(name, getenv, logger)
		if err == nil {
			out[name] = s
			err = c.provision(ctx, name, s, logger)
		}
		if err != nil {
			for _, s := range out {
				_ = s.Close(ctx)
			}
			return nil, Scrub(err, c.Secrets(getenv))
		}
	}
	return out, nil
}

// secretEnv reads the secret held by the environment variable that key
// (under path p) names; "" when the key is not set, an error when the
// variable is empty.
func secretEnv(getenv func(string) string, p, key, variable string) (string, error) {
	if variable == "" {
		return "", nil
	}
	if v := getenv(variable); v != "" {
		return v, nil
	}
	return "", &Error{Path: join(p, key), Msg: fmt.Sprintf("environment variable %s is empty", variable)}
}

// openSender creates sender name.
func (c *Config) openSender(name string, getenv func(string) string, logger *slog.Logger) (sender.Sender, error) {
	sc, p := c.Senders[name], join("senders", name)
	cfg, err := c.senderConfig(name, getenv, logger)
	if err != nil {
		return nil, err
	}
	var s sender.Sender
	switch v := cfg.(type) {
	case nats.Config:
		s, err = nats.New(v)
	case webhook.Config:
		s, err = webhook.New(v)
	case kafka.Config:
		s, err = kafka.New(v)
	case rabbitmq.Config:
		s, err = rabbitmq.New(v)
	case redisstream.Config:
		s, err = redisstream.New(v)
	default:
		err = fmt.Errorf("%w: %s", ErrUnsupportedSender, sc.Type)
	}
	if err != nil {
		return nil, fmt.Errorf("config: %s: %w", p, err)
	}
	return s, nil
}

// senderConfig returns the sender package's Config for sender name (a
// nats.Config, kafka.Config, ...), with its secrets read (getenv, files)
// and its TLS files loaded, without connecting to anything. Errors name the
// key at fault. logger gets the insecure-skip-verify warning.
func (c *Config) senderConfig(name string, getenv func(string) string, logger *slog.Logger) (any, error) {
	sc, p := c.Senders[name], join("senders", name)
	if getenv == nil {
		getenv = os.Getenv
	}
	log := logger
	if log != nil {
		log = log.With("sender", name)
	}
	tlsOf := func(t *TLS) (*tls.Config, error) { return t.build(join(p, "tls"), log) }
	switch sc.Type {
	case SenderNATS:
		return natsSenderConfig(sc, p, getenv, log, tlsOf)
	case SenderWebhook:
		w := sc.Webhook
		secret, err := readSecret(getenv, p, "hmac-secret", w.HMACSecretEnv, w.HMACSecretFile)
		if err != nil {
			return nil, err
		}
		tc, err := tlsOf(w.TLS)
		if err != nil {
			return nil, err
		}
		return webhook.Config{Timeout: w.Timeout, MaxConcurrency: w.Concurrency, ContentType: w.ContentType, Secret: secret, SignatureHeader: w.SignatureHeader, TLS: tc,
			CloudEvents: sc.senderCloudEvents(), PermanentStatus: w.PermanentStatus}, nil
	case SenderKafka:
		return kafkaSenderConfig(sc, p, getenv, tlsOf)
	case SenderRabbitMQ:
		r := sc.RabbitMQ
		u := r.URL.Reveal()
		pw, err := readSecret(getenv, p, "password", r.PasswordEnv, r.PasswordFile)
		if err != nil {
			return nil, err
		}
		if pw != "" {
			if u, err = withPassword(u, pw); err != nil {
				return nil, &Error{Path: join(p, "url"), Msg: err.Error()}
			}
		}
		tc, err := tlsOf(r.TLS)
		if err != nil {
			return nil, err
		}
		return rabbitmq.Config{URL: u, ConfirmTimeout: r.Timeout, Channels: r.Channels,
			MaxMessageBytes: r.MaxMessageBytes, ProvisionExchangeType: r.ProvisionExchangeType, TLS: tc,
			CloudEvents: sc.senderCloudEvents()}, nil
	case SenderRedis:
		r := sc.Redis
		password, err := readSecret(getenv, p, "password", r.PasswordEnv, r.PasswordFile)
		if err != nil {
			return nil, err
		}
		tc, err := tlsOf(r.TLS)
		if err != nil {
			return nil, err
		}
		return redisstream.Config{Addr: r.Addr, Username: r.Username, Password: password, DB: r.DB, MaxLen: r.MaxLen,
			ReadTimeout: r.Timeout, WriteTimeout: r.Timeout, PoolSize: r.PoolSize, TLS: tc,
			CloudEvents: sc.senderCloudEvents()}, nil
	}
	return nil, fmt.Errorf("%w: %s", ErrUnsupportedSender, sc.Type)
}

// natsSenderConfig is senderConfig for a NATS sender at key path p.
func natsSenderConfig(sc *Sender, p string, getenv func(string) string, log *slog.Logger, tlsOf func(*TLS) (*tls.Config, error)) (any, error) {
	n := sc.NATS
	pw, err := readSecret(getenv, p, "password", n.PasswordEnv, n.PasswordFile)
	if err != nil {
		return nil, err
	}
	token, err := readSecret(getenv, p, "token", n.TokenEnv, n.TokenFile)
	if err != nil {
		return nil, err
	}
	tc, err := tlsOf(n.TLS)
	if err != nil {
		return nil, err
	}
	// The seed and the credentials are read by the NATS client when
	// it connects: reading them here finds an unreadable file
	// before a deploy, not at the first connection.
	for _, f := range []struct{ key, file string }{{"nkey-seed-file", n.NKeySeedFile}, {"creds-file", n.CredsFile}} {
		if f.file == "" {
			continue
		}
		if _, err := readSecret(nil, p, strings.TrimSuffix(f.key, "-file"), "", f.file); err != nil {
			return nil, err
		}
	}
	return nats.Config{URL: n.URL.Reveal(), Name: n.Name, CredsFile: n.CredsFile, AckTimeout: n.Timeout, MaxPending: n.MaxPending,
		Logger: log, ProvisionStream: n.ProvisionStream, User: n.User, Password: pw, Token: token, NKeySeedFile: n.NKeySeedFile, TLS: tc,
		CloudEvents: sc.senderCloudEvents()}, nil
}

// kafkaSenderConfig is senderConfig for a Kafka sender at key path p.
func kafkaSenderConfig(sc *Sender, p string, getenv func(string) string, tlsOf func(*TLS) (*tls.Config, error)) (any, error) {
	k := sc.Kafka
	tc, err := tlsOf(k.TLS)
	if err != nil {
		return nil, err
	}
	kc := kafka.Config{Brokers: k.Brokers, ClientID: k.ClientID, DeliveryTimeout: k.Timeout, Linger: k.Linger, MaxBufferedRecords: k.MaxBufferedRecords,
		MaxRecordBytes: k.MaxRecordBytes, ProvisionPartitions: int32(k.ProvisionPartitions), ProvisionReplicationFactor: int16(k.ProvisionReplicationFactor), TLS: tc,
		CloudEvents: sc.senderCloudEvents()}
	if k.SASL != nil {
		sp := join(p, "sasl")
		pw, err := readSecret(getenv, sp, "password", k.SASL.PasswordEnv, k.SASL.PasswordFile)
		if err != nil {
			return nil, err
		}
		kc.SASL = k.SASL.mechanism(pw)
	}
	return kc, nil
}

// CheckSenders reads every sender's secrets (environment variables,
// files) and TLS files, as OpenSenders would, without connecting: a
// missing variable or an unreadable certificate is found before a deploy.
// The errors name the key at fault and are joined.
func (c *Config) CheckSenders(getenv func(string) string, logger *slog.Logger) error {
	var errs []error
	for _, name := range c.SenderNames() {
		if _, err := c.senderConfig(name, getenv, logger); err != nil {
			errs = append(errs, err)
		}
	}
	return Scrub(errors.Join(errs...), c.Secrets(getenv))
}

// CheckSecrets resolves, without connecting, every value the relay reads
// at start from an environment variable or a file: database.dsn-env, each
// sender's secrets and TLS files (CheckSenders), and the admin tokens
// when the admin server is enabled. An unset variable or a missing,
// unreadable or empty file is an error naming its key, so `txbox config
// check` fails where `txbox relay` would. The errors are joined and hold
// no secret.
func (c *Config) CheckSecrets(getenv func(string) string, logger *slog.Logger) error {
	var errs []error
	if _, err := c.DatabaseDSN(getenv); err != nil {
		errs = append(errs, err)
	}
	if err := c.CheckSenders(getenv, logger); err != nil {
		errs = append(errs, err)
	}
	if c.Admin.Enabled {
		if _, _, err := c.AdminTokens(getenv); err != nil {
			errs = append(errs, err)
		}
	}
	return Scrub(errors.Join(errs...), c.Secrets(getenv))
}

// provision creates what the routes of sender name need, when its
// provision key is on (ProvisionRoutes).
func (c *Config) provision(ctx context.Context, name string, s sender.Sender, logger *slog.Logger) error {
	routes, on := c.ProvisionRoutes(name)
	if !on {
		return nil
	}
	p := join(join("senders", name), "provision")
	pv, ok := s.(sender.Provisioner)
	if !ok {
		return &Error{Path: p, Msg: fmt.Sprintf("sender type %s cannot provision", c.Senders[name].Type)}
	}
	pctx, cancel := context.WithTimeout(ctx, ProvisionTimeout)
	defer cancel()
	if err := pv.Provision(pctx, routes); err != nil {
		return fmt.Errorf("config: %s: %w", p, err)
	}
	logger.Info("sender provisioned", "sender", name, "type", c.Senders[name].Type)
	return nil
}

// ProvisionTimeout bounds the provisioning of one sender at start,
// connecting included: a broker that does not answer within it stops the
// start with an error rather than letting every event be rejected.
const ProvisionTimeout = 30 * time.Second

// ProvisionRoutes returns what sender name provisions at start, and
// whether its provision key is on. With an explicit list
// (provision-subjects, provision-topics, provision-exchanges) the routes
// are that list. Otherwise they are the routes of the event types listed
// under events that use the sender (each such route of a fanned-out type),
// expanded for each type, plus the
// defaults route as a template when the sender is the default one (it
// serves the types the file does not list; NATS binds "x.{event_type}" as
// "x.>", the others skip templates).
func (c *Config) ProvisionRoutes(name string) ([]sender.Route, bool) {
	sc := c.Senders[name]
	if sc == nil {
		return nil, false
	}
	var explicit []sender.Route
	switch {
	case sc.NATS != nil && sc.NATS.Provision:
		for _, v := range sc.NATS.ProvisionSubjects {
			explicit = append(explicit, sender.Route{Subject: v})
		}
	case sc.Kafka != nil && sc.Kafka.Provision:
		for _, v := range sc.Kafka.ProvisionTopics {
			explicit = append(explicit, sender.Route{Topic: v})
		}
	case sc.RabbitMQ != nil && sc.RabbitMQ.Provision:
		for _, v := range sc.RabbitMQ.ProvisionExchanges {
			explicit = append(explicit, sender.Route{Exchange: v})
		}
	default:
		return nil, false
	}
	if len(explicit) > 0 {
		return explicit, true
	}
	var routes []sender.Route
	for _, t := range c.EventTypes() {
		if fan := c.Routes(t); fan != nil {
			// A fanned-out type: each route that uses the sender.
			for _, r := range fan {
				if r.Sender == name {
					routes = append(routes, r.Route)
				}
			}
			continue
		}
		eff := c.Effective(t)
		if *eff.Sender == name {
			routes = append(routes, eff.Route.Expand(t))
		}
	}
	if deref(c.Defaults.Sender) == name && c.Defaults.Route != nil {
		routes = append(routes, *c.Defaults.Route)
	}
	return routes, true
}

// RelayConfig builds the relay configuration: the store, the senders, and
// every setting of the file. Each listed event type gets its complete
// effective settings (so inheritance is the file's, key by key), and
// Defaults serves the types the file does not list.
//
// A *Store from OpenStore is unwrapped to its dialect driver: the relay
// looks for optional interfaces on the store it is given (store.Waker for
// PostgreSQL's LISTEN wake-ups), and the embedding struct has only the
// methods of store.Driver, so the relay would quietly poll instead.
func (c *Config) RelayConfig(st store.Driver, senders map[string]sender.Sender, logger *slog.Logger) relay.Config {
	if s, ok := st.(*Store); ok && s != nil {
		st = s.Driver
	}
	rc := c.relayConfig()
	rc.Store, rc.Senders, rc.Logger = st, senders, logger
	rc.Tenant = c.tenant // a tenant's configuration (ForTenant): its messages name it
	rc.Defaults = c.relaySettings(c.Defaults.Inherit(relay.EventSettings{}))
	for t := range rc.Events {
		s := c.relaySettings(c.Effective(t))
		if !c.batchSizeSet(t) {
			// Unset, so that WAL mode's stream batches of the type
			// are database.wal.batch-size (claims take the relay's
			// default, as Effective says).
			s.BatchSize = nil
		}
		if len(s.Routes) > 1 && c.Events[t].Claim == nil && c.Defaults.Claim == nil {
			// Unset, so that the relay chooses each route's claim
			// for the route's sender (Routes shows the same), not
			// the type's sender's for all of them.
			s.Claim = nil
		}
		rc.Events[t] = s
	}
	// Cleanup.OutboxTTL unset (nil): the relay takes the longest
	// retention of the types, so none loses processed rows before its own.
	rc.Cleanup.OutboxTTL = pick(c.Cleanup.OutboxTTL)
	rc.Cleanup.DeadLetterTTL = pick(c.Cleanup.DeadLetterTTL)
	rc.Cleanup.AuditTTL = pick(c.Cleanup.AuditTTL)
	return rc
}

// relayConfig is the part of relay.Config that the file holds, as it holds
// it: Events are the entries of Events, not merged with Defaults.
func (c *Config) relayConfig() relay.Config {
	rc := relay.Config{
		Defaults:              c.Defaults,
		Events:                make(map[string]relay.EventSettings, len(c.Events)),
		DiscoverInterval:      c.Relay.DiscoverInterval,
		RecoverInterval:       c.Relay.RecoverInterval,
		DeadLetterInterval:    c.Relay.DeadLetterInterval,
		DiscoverMaxInterval:   c.Relay.DiscoverMaxInterval,
		RecoverMaxInterval:    c.Relay.RecoverMaxInterval,
		DeadLetterMaxInterval: c.Relay.DeadLetterMaxInterval,
		HeartbeatInterval:     c.Relay.HeartbeatInterval,
		Cleanup:               c.Cleanup,
		Circuit:               c.Relay.Circuit,
		InstanceID:            c.Relay.InstanceID,
	}
	if c.Database.Source == SourceWAL {
		// An unset pause-limit stays unset: relay.New makes it half the
		// driver's sender timeout, database.wal.sender-timeout or its
		// default.
		rc.Stream = c.streamConfig()
		rc.Stream.Enabled = true
	}
	for t, ev := range c.Events {
		rc.Events[t] = deref(ev)
	}
	return rc
}

// streamConfig is the relay's stream as database.wal holds it, not
// enabled.
func (c *Config) streamConfig() relay.StreamConfig {
	w := c.Database.WAL
	return relay.StreamConfig{
		Window: w.Window, WindowBytes: w.WindowBytes, LaneQueue: w.LaneQueue, BatchSize: w.BatchSize, StatusInterval: w.StatusInterval,
		StandbyInterval: w.StandbyInterval, PauseLimit: w.PauseLimit, LagThreshold: w.LagThreshold,
		OnSlotLost: relay.SlotLostPolicy(w.OnSlotLost),
	}
}

// postgresWAL is the PostgreSQL driver's WAL configuration as
// database.wal holds it.
func (c *Config) postgresWAL() postgres.WALConfig {
	w := c.Database.WAL
	return postgres.WALConfig{Slot: w.Slot, Publication: w.Publication, ApplicationName: w.ApplicationName, SenderTimeout: w.SenderTimeout,
		DisableFailover: w.Failover != nil && !*w.Failover, Shared: c.walShared}
}

// effectiveWAL is database.wal with every key the file leaves unset at the
// value WAL mode uses: the PostgreSQL driver's defaults for the slot, the
// publication, the application name and the sender timeout, the relay
// stream's for the rest, and a pause-limit of half the sender-timeout.
func (c *Config) effectiveWAL() WAL {
	pw := c.postgresWAL().WithDefaults(c.Database.Schema, c.Database.TablePrefix)
	sc := c.streamConfig().WithDefaults(pw.SenderTimeout)
	return WAL{
		Slot: pw.Slot, Publication: pw.Publication, ApplicationName: pw.ApplicationName, SenderTimeout: pw.SenderTimeout, Failover: new(!pw.DisableFailover),
		Window: sc.Window, WindowBytes: sc.WindowBytes, LaneQueue: sc.LaneQueue, BatchSize: sc.BatchSize, StatusInterval: sc.StatusInterval,
		StandbyInterval: sc.StandbyInterval, PauseLimit: sc.PauseLimit, LagThreshold: sc.LagThreshold,
		OnSlotLost: string(sc.OnSlotLost),
	}
}

// batchSizeSet reports whether event type t's batch-size is set, by its
// entry in events or by defaults. Unset, claims take
// relay.DefaultBatchSize and WAL mode's stream batches
// database.wal.batch-size.
func (c *Config) batchSizeSet(t string) bool {
	ev := c.Events[t]
	switch {
	case c.Defaults.BatchSize != nil:
		return true
	case ev == nil:
		return false
	case len(ev.Routes) == 1 && ev.Routes[0].BatchSize != nil:
		// A one-entry routes list is the type's route (Effective).
		return true
	}
	return ev.BatchSize != nil
}

// StreamBatchSize is the most events of one batch of WAL mode's stream for
// event type t ("" for the types events does not list): its batch-size
// when events or defaults set one, else database.wal.batch-size (1000
// unset). Its claims of the rows in the outbox table take Effective's
// batch size.
func (c *Config) StreamBatchSize(t string) int {
	if c.batchSizeSet(t) {
		return *c.Effective(t).BatchSize
	}
	return c.effectiveWAL().BatchSize
}

// pick returns a pointer to a copy of *p, or nil.
func pick[T any](p *T) *T {
	if p == nil {
		return nil
	}
	return new(*p)
}

// relaySettings adjusts settings s (a copy) for the relay: an empty sender
// is unset, and a webhook route without a url takes the sender's url.
func (c *Config) relaySettings(s relay.EventSettings) relay.EventSettings {
	if deref(s.Sender) == "" {
		s.Sender = nil
	}
	if s.Route != nil && s.Route.URL == "" {
		if sc := c.Senders[deref(s.Sender)]; sc != nil && sc.Webhook != nil {
			s.Route.URL = sc.Webhook.URL
		}
	}
	if len(s.Routes) > 0 {
		// Effective merged defaults.route into Route; a type with routes
		// has its destinations there, not in a route of its own.
		s.Route = nil
	}
	for i := range s.Routes {
		r := &s.Routes[i]
		name := deref(r.Sender)
		if name == "" {
			name = deref(s.Sender)
		}
		if sc := c.Senders[name]; r.URL == "" && sc != nil && sc.Webhook != nil {
			r.URL = sc.Webhook.URL
		}
	}
	return s
}

// NewLogger returns the slog logger log.level and log.format ask for,
// writing to w.
func (c *Config) NewLogger(w io.Writer) *slog.Logger {
	var lvl slog.Level
	_ = lvl.UnmarshalText([]byte(c.Log.Level))
	// A driver or broker client may quote what it was given (a URL with
	// its query, a DSN) in an error the relay logs: every secret the
	// configuration holds or points to is scrubbed from each message and
	// attribute.
	secrets := c.Secrets(c.getenv)
	opts := &slog.HandlerOptions{Level: lvl, ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
		return scrubAttr(a, secrets)
	}}
	if c.Log.Format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// OpenSender creates the one sender name, as OpenSenders does but without
// provisioning: `txbox config check --connect` looks at the destinations
// and changes nothing. The caller closes it.
func (c *Config) OpenSender(name string, getenv func(string) string, logger *slog.Logger) (sender.Sender, error) {
	if c.Senders[name] == nil {
		return nil, &Error{Path: join("senders", name), Msg: "no such sender"}
	}
	if getenv == nil {
		getenv = os.Getenv
	}
	if logger == nil {
		logger = slog.Default()
	}
	s, err := c.openSender(name, getenv, logger)
	return s, Scrub(err, c.Secrets(getenv))
}

// fanoutLockConns is LockConns's part for the fanned-out type t: each
// route has its own claim and in-flight batches, and the shared claim
// (docs/concepts.md, "Fan-out": no route in key order, table mode) claims
// by lock, with the type's in-flight bound, when every route does.
func (c *Config) fanoutLockConns(t string, routes []RouteView) int {
	n := 0
	shared := c.Database.Source != SourceWAL
	for _, r := range routes {
		if r.Claim == txbox.ClaimLock {
			n += r.InFlight
		} else {
			shared = false
		}
		if r.Ordering == txbox.OrderingKey {
			shared = false
		}
	}
	if shared {
		n += deref(c.Effective(t).InFlight)
	}
	return n
}

// LockConns is the smallest pool that lets every batch of the lock claim
// (claim: lock) be in flight at once, each holding its connection until
// its finish commits: the in-flight batches of every configured type (of
// every route of a fanned-out type, and its shared claim) in lock mode, those of one discovered type when defaults use it, plus 4
// for everything else (claims of lease types, background jobs, the
// wake-up listener). 0 when no type uses the lock claim. Store uses it
// as the PostgreSQL pool size when database.max-conns is not set and the
// driver's default is smaller (docs/configuration.md).
func (c *Config) LockConns() int {
	n := 0
	add := func(eff relay.EventSettings) {
		if eff.Claim != nil && *eff.Claim == txbox.ClaimLock {
			n += deref(eff.InFlight)
		}
	}
	add(c.Effective(""))
	for _, t := range c.EventTypes() {
		if routes := c.Routes(t); routes != nil {
			n += c.fanoutLockConns(t, routes)
			continue
		}
		add(c.Effective(t))
	}
	if n == 0 {
		return 0
	}
	return n + relay.LockReserve
}

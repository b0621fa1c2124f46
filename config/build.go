package config

import (
	"context"
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
		if v := getenv(db.DSNEnv); v != "" {
			return DSN(v), nil
		}
		return "", &Error{Path: "database.dsn-env", Msg: fmt.Sprintf("environment variable %s is empty", db.DSNEnv)}
	}
	if db.Dialect == DialectSQLite {
		return DefaultSQLitePath, nil
	}
	return "", &Error{Path: "database.dsn", Msg: "required"}
}

// OpenStore connects to the configured database and returns the store.
// It does not migrate. Errors never contain the DSN's password.
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
		}
		pool, err := pgxpool.NewWithConfig(ctx, pc)
		if err != nil {
			return nil, wrap("connect to", err)
		}
		d, err := postgres.New(pool, postgres.Config{Schema: c.Database.Schema, TablePrefix: c.Database.TablePrefix, Logger: logger})
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
	fail := func(err error) (map[string]sender.Sender, error) {
		for _, s := range out {
			_ = s.Close(ctx)
		}
		return nil, Scrub(err, c.Secrets(getenv))
	}
	for _, name := range c.SenderNames() {
		sc := c.Senders[name]
		p := join("senders", name)
		var (
			s   sender.Sender
			err error
		)
		switch sc.Type {
		case SenderNATS:
			s, err = nats.New(nats.Config{URL: sc.NATS.URL.Reveal(), Name: sc.NATS.Name, CredsFile: sc.NATS.CredsFile, AckTimeout: sc.NATS.Timeout, MaxPending: sc.NATS.MaxPending, Logger: logger.With("sender", name),
				ProvisionStream: sc.NATS.ProvisionStream})
		case SenderWebhook:
			w := sc.Webhook
			secret := ""
			if w.HMACSecretEnv != "" {
				if secret = getenv(w.HMACSecretEnv); secret == "" {
					return fail(&Error{Path: join(p, "hmac-secret-env"), Msg: fmt.Sprintf("environment variable %s is empty", w.HMACSecretEnv)})
				}
			}
			s, err = webhook.New(webhook.Config{Timeout: w.Timeout, MaxConcurrency: w.Concurrency, ContentType: w.ContentType, Secret: secret, SignatureHeader: w.SignatureHeader})
		case SenderKafka:
			k := sc.Kafka
			s, err = kafka.New(kafka.Config{Brokers: k.Brokers, ClientID: k.ClientID, DeliveryTimeout: k.Timeout, Linger: k.Linger, MaxBufferedRecords: k.MaxBufferedRecords,
				MaxRecordBytes: k.MaxRecordBytes, ProvisionPartitions: int32(k.ProvisionPartitions), ProvisionReplicationFactor: int16(k.ProvisionReplicationFactor)})
		case SenderRabbitMQ:
			rc := sc.RabbitMQ
			s, err = rabbitmq.New(rabbitmq.Config{URL: rc.URL.Reveal(), ConfirmTimeout: rc.Timeout, Channels: rc.Channels,
				MaxMessageBytes: rc.MaxMessageBytes, ProvisionExchangeType: rc.ProvisionExchangeType})
		case SenderRedis:
			rc := sc.Redis
			password := ""
			if rc.PasswordEnv != "" {
				if password = getenv(rc.PasswordEnv); password == "" {
					return fail(&Error{Path: join(p, "password-env"), Msg: fmt.Sprintf("environment variable %s is empty", rc.PasswordEnv)})
				}
			}
			s, err = redisstream.New(redisstream.Config{Addr: rc.Addr, Username: rc.Username, Password: password, DB: rc.DB, MaxLen: rc.MaxLen, ReadTimeout: rc.Timeout, WriteTimeout: rc.Timeout, PoolSize: rc.PoolSize})
		default:
			err = fmt.Errorf("%w: %s", ErrUnsupportedSender, sc.Type)
		}
		if err != nil {
			return fail(fmt.Errorf("config: %s: %w", p, err))
		}
		out[name] = s
		if routes, on := c.ProvisionRoutes(name); on {
			pv, ok := s.(sender.Provisioner)
			if !ok {
				return fail(&Error{Path: join(p, "provision"), Msg: fmt.Sprintf("sender type %s cannot provision", sc.Type)})
			}
			pctx, cancel := context.WithTimeout(ctx, ProvisionTimeout)
			err := pv.Provision(pctx, routes)
			cancel()
			if err != nil {
				return fail(fmt.Errorf("config: %s: %w", join(p, "provision"), err))
			}
			logger.Info("sender provisioned", "sender", name, "type", sc.Type)
		}
	}
	return out, nil
}

// ProvisionTimeout bounds the provisioning of one sender at start,
// connecting included: a broker that does not answer within it stops the
// start with an error rather than letting every event be rejected.
const ProvisionTimeout = 30 * time.Second

// ProvisionRoutes returns what sender name provisions at start, and
// whether its provision key is on. With an explicit list
// (provision-subjects, provision-topics, provision-exchanges) the routes
// are that list. Otherwise they are the routes of the event types listed
// under events that use the sender, expanded for each type, plus the
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
		eff := c.Effective(t)
		if deref(eff.Sender) == name && eff.Route != nil {
			routes = append(routes, senderRoute(*eff.Route).Expand(t))
		}
	}
	if deref(c.Defaults.Sender) == name && c.Defaults.Route != nil {
		routes = append(routes, senderRoute(*c.Defaults.Route))
	}
	return routes, true
}

func senderRoute(r Route) sender.Route {
	return sender.Route{Topic: r.Topic, Subject: r.Subject, Exchange: r.Exchange,
		RoutingKey: r.RoutingKey, URL: r.URL, Stream: r.Stream}
}

// RelayConfig builds the relay configuration: the store, the senders, and
// every setting of the file. Each listed event type gets its complete
// effective settings (so inheritance is the file's, key by key), and
// Defaults serves the types the file does not list.
func (c *Config) RelayConfig(st store.Driver, senders map[string]sender.Sender, logger *slog.Logger) relay.Config {
	rc := relay.Config{
		Store:              st,
		Senders:            senders,
		Defaults:           c.relaySettings(c.Defaults),
		Events:             make(map[string]relay.EventSettings, len(c.Events)),
		DiscoverInterval:   c.Relay.DiscoverInterval,
		RecoverInterval:    c.Relay.RecoverInterval,
		DeadLetterInterval: c.Relay.DeadLetterInterval,
		Cleanup: relay.CleanupConfig{
			Disabled:    c.Cleanup.Disabled,
			Interval:    c.Cleanup.Interval,
			MaxInterval: c.Cleanup.MaxInterval,
			// Unset (nil): the relay takes the longest retention of the
			// types, so none loses processed rows before its own.
			OutboxTTL:     copyPtr(c.Cleanup.OutboxTTL),
			DeadLetterTTL: ptr(c.Cleanup.DeadLetterTTL),
			BatchSize:     c.Cleanup.BatchSize,
		},
		Circuit: relay.CircuitConfig{
			CoolDown:    c.Relay.Circuit.CoolDown,
			MaxCoolDown: c.Relay.Circuit.MaxCoolDown,
			Multiplier:  c.Relay.Circuit.Multiplier,
		},
		InstanceID: c.Relay.InstanceID,
		Logger:     logger,
	}
	for _, t := range c.EventTypes() {
		rc.Events[t] = c.relaySettings(c.Effective(t))
	}
	return rc
}

// copyPtr returns a pointer to a copy of *p, or nil.
func copyPtr[T any](p *T) *T {
	if p == nil {
		return nil
	}
	return ptr(*p)
}

func (c *Config) relaySettings(s EventSettings) relay.EventSettings {
	var out relay.EventSettings
	if v := deref(s.Sender); v != "" {
		out.Sender = ptr(v)
	}
	if s.Route != nil {
		r := senderRoute(*s.Route)
		// A webhook route without a url takes the sender's url.
		if r.URL == "" {
			if sc := c.Senders[deref(s.Sender)]; sc != nil && sc.Webhook != nil {
				r.URL = sc.Webhook.URL
			}
		}
		out.Route = &r
	}
	out.BatchSize = s.BatchSize
	out.MaxAttempts = s.MaxAttempts
	out.Retention = s.Retention
	out.LeaseDuration = s.Lease
	out.InFlight = s.InFlight
	if s.Ordering != nil {
		out.Ordering = ptr(relay.Ordering(*s.Ordering))
	}
	if p := s.Polling; p != nil {
		out.Polling = &relay.PollingSettings{Mode: deref(p.Mode), MinDelay: deref(p.MinDelay), MaxDelay: deref(p.MaxDelay), Multiplier: deref(p.Multiplier), Delay: deref(p.Delay)}
	}
	if b := s.Backoff; b != nil {
		out.Backoff = &relay.BackoffSettings{Delay: deref(b.Delay), Multiplier: deref(b.Multiplier), Max: deref(b.Max), Jitter: deref(b.Jitter)}
	}
	return out
}

// NewLogger returns the slog logger log.level and log.format ask for,
// writing to w.
func (c *Config) NewLogger(w io.Writer) *slog.Logger {
	var lvl slog.Level
	_ = lvl.UnmarshalText([]byte(c.Log.Level))
	opts := &slog.HandlerOptions{Level: lvl}
	if c.Log.Format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

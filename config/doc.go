// Package config loads txbox's YAML configuration (docs/configuration.md) and
// builds the store, the senders and the relay configuration from it.
//
// A file has seven top-level keys: database, senders, defaults, events,
// cleanup, relay and log. defaults holds the relay settings of every event
// type; each entry of events overrides any part of them, and every key it
// leaves unset is inherited (polling, backoff and route key by key). Types
// that events does not list get defaults, so a producer may publish any
// type. The relay settings are decoded into relay's own types
// (relay.EventSettings, relay.CleanupConfig, relay.CircuitConfig) and
// checked by relay's validator (relay.Config.Validate); a key the file sets
// to zero is set, so backoff.jitter: 0 overrides a default's jitter.
//
// Load is strict, because a typo in an outbox configuration silently
// changes delivery: unknown keys, duplicate keys, values of the wrong type,
// durations without a unit and out-of-range values are rejected, every one
// of them reported with its key path and line, such as
//
//	txbox.yaml:14: events.order-created.polling.max-delay: must be ≥ min-delay (250ms < 1s)
//
// Every key can be overridden by an environment variable named after its
// path (EnvName: defaults.batch-size is TXBOX_DEFAULTS_BATCH_SIZE) and by
// a key=value flag, in that order of precedence.
//
// Secrets never print: DSN is a string type whose String, GoString,
// LogValue and marshalers redact the password, secrets themselves can be
// kept out of the file (database.dsn-env, hmac-secret-env, password-env),
// and Scrub cleans driver errors that echo a connection string.
package config

package postgres

import (
	"fmt"
	"regexp"
	"time"

	"github.com/txbox/txbox/store"
)

// Sources of events (Config.Source).
const (
	// SourceTable: producers insert rows into the outbox table and the
	// relay claims them. The default.
	SourceTable = store.SourceTable
	// SourceWAL: producers emit each event as a transactional logical
	// decoding message, and the relay streams them from a replication
	// slot (docs/concepts.md, "WAL mode"). Needs PostgreSQL 15+ and
	// wal_level = logical.
	SourceWAL = store.SourceWAL
)

// Defaults of WALConfig.
const (
	// DefaultApplicationName is the replication connection's
	// application_name: fixed, so that an operator can see the relay in
	// pg_stat_replication and keep it out of synchronous_standby_names.
	DefaultApplicationName = "txbox-relay"
	// DefaultSenderTimeout is the wal_sender_timeout the relay sets on
	// its replication connection: how long the server waits for a
	// stopped (SIGSTOP) relay before it frees the slot for a standby.
	DefaultSenderTimeout = 10 * time.Second
)

// WALConfig configures WAL mode (Config.Source = SourceWAL).
type WALConfig struct {
	// Slot is the logical replication slot. Defaults to the table prefix
	// followed by "slot" ("txbox_slot"), with the schema in front when
	// one is configured ("billing_txbox_slot").
	Slot string
	// Publication captures the rows producers still insert into the
	// outbox table. Defaults to the table prefix followed by "pub",
	// with the schema in front when one is configured.
	Publication string
	// ApplicationName names the replication connection. Defaults to
	// DefaultApplicationName.
	ApplicationName string
	// SenderTimeout is wal_sender_timeout on the replication connection.
	// Defaults to DefaultSenderTimeout.
	SenderTimeout time.Duration
	// DisableFailover makes CreateStream create the slot without
	// failover = true, and turn it off on an existing slot. On
	// PostgreSQL 17+ a failover slot is copied to the standbys that have
	// sync_replication_slots = on and survives a promotion
	// (docs/operations.md, "Failover"); PostgreSQL 15 and 16 have no
	// failover slots and ignore the setting. Turn it off to keep a
	// primary whose standby is down from holding the stream back
	// (synchronized_standby_slots), at the price of the slot on a
	// failover. Defaults to false: failover slots.
	DisableFailover bool
	// Shared says that the slot and the publication are shared by the
	// schemas of one database (schema-per-tenant, docs/multi-tenant.md,
	// "WAL mode"): each schema's driver adds its outbox table to the
	// publication without removing the others', joins an existing slot
	// without moving it, and its OpenStream attaches to the one
	// replication connection of the slot in the process
	// (stream_shared.go). Defaults to false: the slot and the
	// publication are this driver's alone.
	Shared bool
}

// slotName is the rule for slot and publication names: PostgreSQL allows
// lower-case letters, digits and underscores in a slot name, up to 63
// bytes; publications follow the same rule here so that both are safe to
// print into SQL and logs.
var slotName = regexp.MustCompile(`^[a-z0-9_]{1,63}$`)

// WithDefaults returns c with every unset field set to the value a driver
// with Config.Schema schema and Config.TablePrefix tablePrefix uses (""
// for either: the driver's default), as New sets them, without checking
// the names: a loader uses it to show the effective values.
func (c WALConfig) WithDefaults(schema, tablePrefix string) WALConfig {
	if tablePrefix == "" {
		tablePrefix = store.DefaultTablePrefix
	}
	base := tablePrefix
	if schema != "" {
		base = schema + "_" + tablePrefix
	}
	if c.Slot == "" {
		c.Slot = base + "slot"
	}
	if c.Publication == "" {
		c.Publication = base + "pub"
	}
	if c.ApplicationName == "" {
		c.ApplicationName = DefaultApplicationName
	}
	if c.SenderTimeout == 0 {
		c.SenderTimeout = DefaultSenderTimeout
	}
	return c
}

// withDefaults fills WALConfig's defaults for tables and prefix, and
// validates the names.
func (c WALConfig) withDefaults(tables store.Tables, prefix string) (WALConfig, error) {
	c = c.WithDefaults(tables.Schema, prefix)
	if !slotName.MatchString(c.Slot) {
		return c, fmt.Errorf("postgres: WAL.Slot %q must be 1 to 63 lower-case letters, digits and underscores", c.Slot)
	}
	if !slotName.MatchString(c.Publication) {
		return c, fmt.Errorf("postgres: WAL.Publication %q must be 1 to 63 lower-case letters, digits and underscores", c.Publication)
	}
	if c.SenderTimeout < 0 {
		return c, fmt.Errorf("postgres: WAL.SenderTimeout %s must not be negative", c.SenderTimeout)
	}
	return c, nil
}

// messagePrefix is the logical decoding message prefix of this driver's
// events: "txbox:" and the quoted outbox table, so that two txbox
// installations in one database (other schemas or prefixes) each read only
// their own. The emit function of migration 6 builds the same string.
func (d *Driver) messagePrefix() string { return "txbox:" + d.table(d.tables.Outbox) }

// Source returns the configured source of events, SourceTable or
// SourceWAL.
func (d *Driver) Source() string { return d.source }

// WAL returns the WAL mode settings with their defaults filled in.
func (d *Driver) WAL() WALConfig { return d.wal }

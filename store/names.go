package store

import (
	"fmt"

	"github.com/txbox/txbox"
)

// DefaultTablePrefix is the prefix of txbox's table names when none is
// configured: txbox_outbox, txbox_dead_letter, txbox_inbox, txbox_lease,
// txbox_schema_version.
const DefaultTablePrefix = "txbox_"

// maxIdentifierLength keeps every derived table name (prefix + the longest
// suffix, "schema_version") within MySQL's 64 and PostgreSQL's 63 limits.
const maxIdentifierLength = 40

// Tables holds the validated names of txbox's tables. Dialects quote each
// part with their own quoting rule; names are never concatenated into SQL
// before ValidateIdentifier accepted them.
type Tables struct {
	// Schema is the database schema (PostgreSQL) or empty for the
	// connection's default. MySQL uses it as the database name; SQLite
	// ignores it.
	Schema     string
	Outbox     string
	DeadLetter string
	Inbox      string
	Lease      string
	// Instance holds the relay heartbeats (store.Instances).
	Instance string
	// Audit holds the audit trail of operators' actions (store.AuditLog).
	Audit         string
	SchemaVersion string
}

// NewTables validates schema and prefix and derives the table names. An
// empty prefix means DefaultTablePrefix.
func NewTables(schema, prefix string) (Tables, error) {
	if prefix == "" {
		prefix = DefaultTablePrefix
	}
	if schema != "" {
		if err := ValidateIdentifier(schema); err != nil {
			return Tables{}, fmt.Errorf("schema: %w", err)
		}
	}
	if err := ValidateIdentifier(prefix); err != nil {
		return Tables{}, fmt.Errorf("table prefix: %w", err)
	}
	return Tables{
		Schema:        schema,
		Outbox:        prefix + "outbox",
		DeadLetter:    prefix + "dead_letter",
		Inbox:         prefix + "inbox",
		Lease:         prefix + "lease",
		Instance:      prefix + "instance",
		Audit:         prefix + "audit",
		SchemaVersion: prefix + "schema_version",
	}, nil
}

// ValidateIdentifier accepts 1 to 40 characters from [A-Za-z0-9_] that do
// not start with a digit. Anything else, including quotes, spaces,
// backticks and non-ASCII letters, is rejected with an error matching
// txbox.ErrInvalidIdentifier.
func ValidateIdentifier(name string) error {
	if len(name) == 0 || len(name) > maxIdentifierLength {
		return fmt.Errorf("%w: %q must be 1..%d characters", txbox.ErrInvalidIdentifier, truncate(name), maxIdentifierLength)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		ok := c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (i > 0 && c >= '0' && c <= '9')
		if !ok {
			return fmt.Errorf("%w: %q: only [A-Za-z_][A-Za-z0-9_]* is allowed", txbox.ErrInvalidIdentifier, truncate(name))
		}
	}
	return nil
}

func truncate(s string) string {
	if len(s) > 48 {
		return s[:48] + "…"
	}
	return s
}

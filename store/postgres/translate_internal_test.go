package postgres

import (
	"errors"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/txbox/txbox/store"
)

// TestTranslateDataRefused: SQLSTATE classes 22, 23 and 54 match
// store.ErrDataRefused, except a unique violation (ErrDuplicateID), and
// the server's error stays in the chain; other classes do not.
func TestTranslateDataRefused(t *testing.T) {
	cases := []struct {
		code         string
		refused, dup bool
		conflict     bool
		notMigrated  bool
	}{
		{code: "22021", refused: true}, // invalid UTF-8, a NUL in text
		{code: "22P05", refused: true}, // \u0000 in jsonb
		{code: "22003", refused: true}, // out of range
		{code: "23514", refused: true}, // CHECK
		{code: "23502", refused: true}, // NOT NULL
		{code: "54000", refused: true}, // an index row over its size limit
		{code: "23505", dup: true},
		{code: "40001", conflict: true},
		{code: "42P01", notMigrated: true},
		{code: "08006"},
		{code: "57P01"},
		{code: "2"}, // malformed: no class to read
	}
	for _, c := range cases {
		pe := &pgconn.PgError{Code: c.code, Message: "server says " + c.code}
		err := translate("op", fmt.Errorf("wrapped: %w", pe))
		var got *pgconn.PgError
		if !errors.As(err, &got) || got != pe {
			t.Errorf("%s: %v lost the server's error", c.code, err)
		}
		if errors.Is(err, store.ErrDataRefused) != c.refused || errors.Is(err, ErrDuplicateID) != c.dup ||
			errors.Is(err, store.ErrTxConflict) != c.conflict || errors.Is(err, ErrNotMigrated) != c.notMigrated {
			t.Errorf("%s: %v", c.code, err)
		}
	}
}

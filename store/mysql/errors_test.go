package mysql

import (
	"errors"
	"fmt"
	"testing"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/txbox/txbox/store"
)

func TestWrapTranslatesByErrorNumber(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		err  error
		want error
	}{
		{&gomysql.MySQLError{Number: 1146, Message: "Table 'x' doesn't exist"}, ErrNotMigrated},
		{&gomysql.MySQLError{Number: 1153}, ErrPacketTooLarge},
		{gomysql.ErrPktTooLarge, ErrPacketTooLarge},
		{&gomysql.MySQLError{Number: 1406}, ErrInvalidParams},
		{fmt.Errorf("exec: %w", &gomysql.MySQLError{Number: 1213}), store.ErrTxConflict},
	} {
		got := wrap("op", c.err)
		if !errors.Is(got, c.want) || !errors.Is(got, c.err) {
			t.Errorf("wrap(%v) = %v, want it to match %v and keep the cause", c.err, got, c.want)
		}
	}
	// Matching is by number only: the same text under another number is
	// not translated.
	other := wrap("op", &gomysql.MySQLError{Number: 1064, Message: "Table 'x' doesn't exist"})
	for _, s := range []error{ErrNotMigrated, ErrPacketTooLarge, ErrInvalidParams, store.ErrTxConflict} {
		if errors.Is(other, s) {
			t.Errorf("error 1064 matched %v", s)
		}
	}
	if wrap("op", nil) != nil {
		t.Error("wrap(nil) is not nil")
	}
}

package txbox_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/txbox/txbox"
)

func TestValidateEventType(t *testing.T) {
	t.Parallel()
	valid := []string{"order-created", "a", "billing.invoice:v2", "A_b-9", strings.Repeat("x", 200)}
	for _, v := range valid {
		if err := txbox.ValidateEventType(v); err != nil {
			t.Errorf("%q: %v", v, err)
		}
	}
	invalid := []string{"", strings.Repeat("x", 201), `x"; DROP TABLE t;--`, "with space", "`tick`", "ünïcode", "a/b", "a\x00b"}
	for _, v := range invalid {
		err := txbox.ValidateEventType(v)
		var ite *txbox.InvalidEventTypeError
		if !errors.As(err, &ite) {
			t.Errorf("%q: got %v, want *InvalidEventTypeError", v, err)
		}
	}
}

func TestClassify(t *testing.T) {
	t.Parallel()
	base := errors.New("boom")
	cases := []struct {
		err  error
		want txbox.ErrorClass
	}{
		{base, txbox.ClassRejected},
		{txbox.Rejected(base), txbox.ClassRejected},
		{txbox.Transient(base), txbox.ClassTransient},
		{txbox.Permanent(base), txbox.ClassPermanent},
		// The outermost marker wins, and wrapping keeps the class.
		{fmt.Errorf("send: %w", txbox.Transient(base)), txbox.ClassTransient},
		{txbox.Permanent(txbox.Transient(base)), txbox.ClassPermanent},
	}
	for i, c := range cases {
		if got := txbox.Classify(c.err); got != c.want {
			t.Errorf("case %d (%v): %v, want %v", i, c.err, got, c.want)
		}
		if !errors.Is(c.err, base) {
			t.Errorf("case %d: classification hides the cause", i)
		}
	}
	if txbox.Permanent(nil) != nil || txbox.Transient(nil) != nil || txbox.Rejected(nil) != nil {
		t.Fatal("classifying nil must stay nil")
	}
}

func TestUnsupportedTxMatchesErrNoTransaction(t *testing.T) {
	t.Parallel()
	err := error(&txbox.UnsupportedTxError{Dialect: "postgres", Type: "int"})
	if !errors.Is(err, txbox.ErrNoTransaction) {
		t.Fatal("UnsupportedTxError should match ErrNoTransaction")
	}
}

// FuzzValidateEventType checks that every accepted event type is 1..200
// bytes from the documented alphabet, so nothing else reaches SQL, broker
// subjects or URLs as a type.
func FuzzValidateEventType(f *testing.F) {
	for _, s := range []string{"order-created", "", `x"; DROP TABLE t;--`, "ünï", "a.b:c_d-e"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if txbox.ValidateEventType(s) != nil {
			return
		}
		if len(s) < 1 || len(s) > txbox.MaxEventTypeLength {
			t.Fatalf("accepted %d bytes", len(s))
		}
		if strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._:-") != "" {
			t.Fatalf("accepted %q", s)
		}
	})
}

// TestConfigError: one error type for every configuration problem, found
// by errors.Is / errors.As through wrapping, with its cause reachable.
func TestConfigError(t *testing.T) {
	t.Parallel()
	ce := &txbox.ConfigError{Component: "inbox", Field: "Consumer", Reason: "is not valid", Err: txbox.ErrInvalidIdentifier}
	err := fmt.Errorf("start: %w", ce)
	if got := ce.Error(); got != "inbox: Consumer is not valid" {
		t.Errorf("Error() = %q", got)
	}
	var as *txbox.ConfigError
	if !errors.Is(err, txbox.ErrInvalidConfig) || !errors.As(err, &as) || as.Field != "Consumer" {
		t.Errorf("%v does not match ErrInvalidConfig / *ConfigError", err)
	}
	if !errors.Is(err, txbox.ErrInvalidIdentifier) {
		t.Errorf("%v does not unwrap to its cause", err)
	}
	if errors.Is(errors.New("other"), txbox.ErrInvalidConfig) {
		t.Error("an unrelated error matches ErrInvalidConfig")
	}
}

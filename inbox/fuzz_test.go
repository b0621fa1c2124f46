package inbox_test

import (
	"errors"
	"testing"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/store"
)

// FuzzValidateConsumerName: a name is accepted only when it is 1..100
// characters from [A-Za-z0-9._:-]; every rejection matches
// txbox.ErrInvalidIdentifier.
func FuzzValidateConsumerName(f *testing.F) {
	for _, s := range []string{"orders", "a.b:c-d_e", "", `x"; DROP TABLE t;--`, "a`b", "ünï", "a\x00b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		err := store.ValidateConsumerName(s)
		ok := len(s) >= 1 && len(s) <= store.MaxConsumerNameLength
		for i := 0; i < len(s) && ok; i++ {
			c := s[i]
			ok = c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == ':' || c == '-'
		}
		if ok != (err == nil) {
			t.Fatalf("%q: valid=%v err=%v", s, ok, err)
		}
		if err != nil && !errors.Is(err, txbox.ErrInvalidIdentifier) {
			t.Fatalf("%q: error %v does not match ErrInvalidIdentifier", s, err)
		}
	})
}

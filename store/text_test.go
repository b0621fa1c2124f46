package store_test

import (
	"testing"
	"unicode/utf8"

	"github.com/txbox/txbox/store"
)

func TestSanitizeText(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"plain":            "plain",
		"a\x00b":           "ab",
		"bad \xff\xfe end": "bad \uFFFD end",
		"ünï":              "ünï",
		"":                 "",
	} {
		got := store.SanitizeText(in)
		if got != want || !utf8.ValidString(got) {
			t.Errorf("SanitizeText(%q) = %q, want %q", in, got, want)
		}
	}
}

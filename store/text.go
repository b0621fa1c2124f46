package store

import "strings"

// SanitizeText returns s as text every dialect stores: valid UTF-8 (each
// invalid byte sequence becomes U+FFFD) and no NUL characters (PostgreSQL
// text refuses them, SQLSTATE 22021). Dialects apply it to every string
// the relay writes back, such as a destination's error reply, so that one
// odd byte never makes a finish statement fail.
func SanitizeText(s string) string {
	if strings.IndexByte(s, 0) >= 0 {
		s = strings.ReplaceAll(s, "\x00", "")
	}
	return strings.ToValidUTF8(s, "\uFFFD")
}

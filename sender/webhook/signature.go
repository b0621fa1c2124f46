package webhook

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strconv"
	"strings"
	"time"
)

// DefaultTolerance is a sensible tolerance for [Verify]: how far a
// signature's timestamp may be from the receiver's clock.
const DefaultTolerance = 5 * time.Minute

// Errors returned by [Verify]. Compare with errors.Is.
var (
	// ErrSignatureMissing: the request carries no signature header.
	ErrSignatureMissing = errors.New("webhook: signature header missing")
	// ErrSignatureMalformed: the header is not "t=<unix>,v1=<hex>[,v1=…]".
	ErrSignatureMalformed = errors.New("webhook: signature header malformed")
	// ErrSignatureMismatch: no v1 signature matches the body and secret.
	ErrSignatureMismatch = errors.New("webhook: signature does not match")
	// ErrSignatureExpired: the timestamp is further from now than the
	// tolerance, in either direction (a replay, or a skewed clock).
	ErrSignatureExpired = errors.New("webhook: signature timestamp outside tolerance")
)

// Sign returns the signature header value for body sent at t:
// "t=<unix seconds>,v1=<hex HMAC-SHA256(secret, "<t>." + body)>". Signing
// the timestamp with the body lets [Verify] refuse replays.
func Sign(secret string, t time.Time, body []byte) string {
	return sign([]byte(secret), t, body)
}

func sign(secret []byte, t time.Time, body []byte) string {
	ts := strconv.FormatInt(t.Unix(), 10)
	return "t=" + ts + ",v1=" + hex.EncodeToString(mac(secret, ts, body))
}

func mac(secret []byte, ts string, body []byte) []byte {
	h := hmac.New(sha256.New, secret)
	h.Write([]byte(ts))
	h.Write([]byte{'.'})
	h.Write(body)
	return h.Sum(nil)
}

// Verify checks a signature header made by [Sign] (or the webhook sender)
// against body and secret, and that its timestamp is within tolerance of
// now. Several v1 entries are accepted, any one matching, so a sender can
// sign with an old and a new secret while they rotate. It returns nil, one
// of the ErrSignature* errors, or a *ConfigError for an empty secret or a
// tolerance ≤ 0. The comparison takes constant time.
func Verify(secret, header string, body []byte, tolerance time.Duration) error {
	return verifyAt(secret, header, body, tolerance, time.Now())
}

func verifyAt(secret, header string, body []byte, tolerance time.Duration, now time.Time) error {
	if secret == "" {
		return &ConfigError{Field: "secret", Reason: "must not be empty"}
	}
	if tolerance <= 0 {
		return &ConfigError{Field: "tolerance", Reason: "must be > 0"}
	}
	if header == "" {
		return ErrSignatureMissing
	}
	var ts string
	var sigs [][]byte
	for _, part := range strings.Split(header, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			return ErrSignatureMalformed
		}
		switch k {
		case "t":
			if ts != "" {
				return ErrSignatureMalformed
			}
			ts = v
		case "v1":
			sig, err := hex.DecodeString(v)
			if err != nil || len(sig) != sha256.Size {
				return ErrSignatureMalformed
			}
			sigs = append(sigs, sig)
		default:
			// Unknown schemes (a future v2) are ignored so receivers keep
			// working while senders add them.
		}
	}
	if ts == "" || len(sigs) == 0 {
		return ErrSignatureMalformed
	}
	unix, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || unix < 0 {
		return ErrSignatureMalformed
	}
	// Compare in seconds: durations of extreme timestamps would overflow.
	age := now.Unix() - unix
	if age < 0 {
		age = -age
	}
	if age > int64(tolerance/time.Second) {
		return ErrSignatureExpired
	}
	want := mac([]byte(secret), ts, body)
	ok := false
	for _, sig := range sigs {
		if hmac.Equal(sig, want) {
			ok = true
		}
	}
	if !ok {
		return ErrSignatureMismatch
	}
	return nil
}

package admin

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"net"
	"net/http"
	"strings"
)

// Access is what a route requires of the caller's token.
type Access int

const (
	// AccessRead routes read; the read token and the admin token both
	// pass.
	AccessRead Access = iota + 1
	// AccessAdmin routes change something; only the admin token passes.
	AccessAdmin
)

// String returns "read" or "admin".
func (a Access) String() string {
	if a == AccessAdmin {
		return "admin"
	}
	return "read"
}

// Token names, used as the "who" of audit lines.
const (
	whoRead  = "read-token"
	whoAdmin = "admin-token"
)

// SessionCookie is the cookie the dashboard's login sets. It holds a
// digest of the token, never the token itself: HMAC-SHA256 keyed with the
// token, so it changes when the token is rotated.
const SessionCookie = "txbox_admin_session"

// MinTokenLength is the shortest token New accepts: a token is a
// password an attacker on the network can guess at.
const MinTokenLength = 16

// principal is one configured token.
type principal struct {
	who     string
	access  Access
	token   []byte
	session []byte
}

func newPrincipal(who string, access Access, token string) *principal {
	if token == "" {
		return nil
	}
	return &principal{who: who, access: access, token: []byte(token), session: []byte(sessionValue(token))}
}

func sessionValue(token string) string {
	m := hmac.New(sha256.New, []byte(token))
	m.Write([]byte("txbox admin session v1"))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// authenticate returns the principal whose token the request carries, or
// nil. Every configured token is compared, each in constant time, so the
// time taken does not tell which one (or how much of one) matched.
func (h *Handler) authenticate(r *http.Request) *principal {
	var bearer, session []byte
	if v := r.Header.Get("Authorization"); v != "" {
		if scheme, tok, ok := strings.Cut(v, " "); ok && strings.EqualFold(scheme, "Bearer") {
			bearer = []byte(strings.TrimSpace(tok))
		}
	}
	if c, err := r.Cookie(SessionCookie); err == nil {
		session = []byte(c.Value)
	}
	return h.match(bearer, session)
}

func (h *Handler) match(bearer, session []byte) *principal {
	var found *principal
	for _, p := range h.principals {
		ok := 0
		if bearer != nil {
			ok |= subtle.ConstantTimeCompare(bearer, p.token)
		}
		if session != nil {
			ok |= subtle.ConstantTimeCompare(session, p.session)
		}
		if ok == 1 && (found == nil || p.access > found.access) {
			found = p
		}
	}
	return found
}

// hostAllowed reports whether the request's Host (port ignored) is on the
// allowlist. It defends against DNS rebinding: a page on evil.example
// that resolves its name to 127.0.0.1 reaches the listener with
// Host: evil.example.
func (h *Handler) hostAllowed(r *http.Request) bool {
	host := r.Host
	if hh, _, err := net.SplitHostPort(host); err == nil {
		host = hh
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	return h.hosts[strings.ToLower(host)]
}

// DefaultAllowedHosts are the Host names accepted when Config.AllowedHosts
// is empty: the loopback names.
var DefaultAllowedHosts = []string{"localhost", "127.0.0.1", "::1"}

// contentSecurityPolicy allows the dashboard's own script and style and
// nothing else: no inline script, no other origin, no framing.
const contentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"

func securityHeaders(w http.ResponseWriter) {
	hd := w.Header()
	hd.Set("Content-Security-Policy", contentSecurityPolicy)
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("X-Frame-Options", "DENY")
	hd.Set("Referrer-Policy", "no-referrer")
	hd.Set("Cache-Control", "no-store")
	hd.Set("Cross-Origin-Resource-Policy", "same-origin")
}

package webhook

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"

	"github.com/txbox/txbox/sender"
)

var _ sender.Checker = (*Sender)(nil)

// CheckRoute implements [sender.Checker] without sending a request, which
// would be a delivery: it opens a TCP connection to r's URL and, for
// https, completes the TLS handshake with the sender's TLS settings (the
// server's certificate is verified, a client certificate is presented).
// A closed port or an unknown host fails it. The HMAC secret is not
// checked: only the receiver can verify a signature, on a real request.
// A webhook has no connection of its own besides its URLs, so it does not
// implement [sender.ConnectionChecker].
func (s *Sender) CheckRoute(ctx context.Context, r sender.Route) error {
	u, err := url.Parse(r.URL)
	if err != nil || u.Host == "" {
		return &MessageError{Reason: "the route's url is not an absolute URL"}
	}
	scheme := strings.ToLower(u.Scheme)
	port := u.Port()
	switch {
	case port != "":
	case scheme == "https":
		port = "443"
	case scheme == "http":
		port = "80"
	default:
		return &MessageError{Reason: fmt.Sprintf("the route's url has scheme %q, not http or https", u.Scheme)}
	}
	addr := net.JoinHostPort(u.Hostname(), port)
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return fmt.Errorf("webhook: connect to %s: %w", destination(r.URL), unwrapOp(err))
	}
	defer conn.Close()
	if scheme != "https" {
		return nil
	}
	cfg := &tls.Config{}
	if tr, ok := s.client.Transport.(*http.Transport); ok && tr.TLSClientConfig != nil {
		cfg = tr.TLSClientConfig.Clone()
	}
	if cfg.ServerName == "" {
		cfg.ServerName = u.Hostname()
	}
	tc := tls.Client(conn, cfg)
	if err := tc.HandshakeContext(ctx); err != nil {
		return fmt.Errorf("webhook: TLS handshake with %s: %w", destination(r.URL), err)
	}
	return nil
}

// unwrapOp drops the *net.OpError's own text, which repeats the address.
func unwrapOp(err error) error {
	var op *net.OpError
	if errors.As(err, &op) && op.Err != nil {
		return op.Err
	}
	return err
}

package webhook

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/sender"
)

// Defaults applied by [New] to zero Config fields.
const (
	DefaultTimeout         = 10 * time.Second
	DefaultMaxConcurrency  = 16
	DefaultContentType     = "application/octet-stream"
	DefaultSignatureHeader = "Txbox-Signature"
)

// HeaderIdempotencyKey carries the event id on every request.
const HeaderIdempotencyKey = "Idempotency-Key"

// maxDrain is how much of a response body is read (and discarded) so the
// connection can be reused; a longer body costs a new connection instead.
const maxDrain = 64 << 10

// stopAfter is how many requests of one batch to one destination must fail
// as an outage would (no response, 429, 502, 503, 504), with none of them
// answered 2xx, before the rest of the batch to it is not sent: the relay
// then sees the whole batch fail and pauses the destination, after about
// stopAfter + MaxConcurrency requests instead of one per message. A 500
// does not count: it is the receiver failing this request (consume/webhook
// answers 500 for a handler error), which may be the message's own fault.
const stopAfter = 8

// maxDetail bounds the receiver's problem detail quoted in an error.
const maxDetail = 256

// Config configures a webhook [Sender]. The zero value is valid.
type Config struct {
	// Timeout bounds one request, from dialing to reading the response.
	// A request that times out fails Transient: its outcome is unknown,
	// so the relay retries and the receiver's idempotency absorbs a
	// duplicate. Defaults to 10s.
	Timeout time.Duration
	// MaxConcurrency is the most requests in flight at once, across all
	// Sends of this sender; it is also the number of keep-alive
	// connections kept per host. Defaults to 16.
	MaxConcurrency int
	// ContentType is sent for messages without a "content-type" header.
	// Defaults to "application/octet-stream".
	ContentType string
	// Secret, when not empty, signs every request with HMAC-SHA256 (see
	// [Sign]). It is never logged or put in an error. Defaults to no
	// signature.
	Secret string
	// SignatureHeader names the signature header. Defaults to
	// "Txbox-Signature".
	SignatureHeader string
	// Headers are added to every request, such as an Authorization
	// header. Their values are never logged or put in an error. They
	// override an event header of the same name, so event data cannot
	// change credentials. Content-Type belongs in ContentType. Defaults
	// to none.
	Headers map[string]string
	// HTTPClient, for Go callers only, replaces the sender's own
	// keep-alive client (custom TLS, a test transport). Its redirect
	// policy is left alone. Defaults to a client built from Timeout and
	// MaxConcurrency that does not follow redirects.
	HTTPClient *http.Client
	// TLS, when not nil, is the client TLS configuration of https
	// requests (a private CA, a client certificate for mutual TLS).
	// Ignored when HTTPClient is set. Defaults to the system roots.
	TLS *tls.Config
	// CloudEvents chooses the format of messages whose route sets none,
	// and the CloudEvents source and default datacontenttype, which
	// defaults to ContentType (docs/cloudevents.md). In the cloudevents
	// format the attributes travel as ce- headers (percent-encoded as the
	// HTTP binding requires) and the datacontenttype as Content-Type; in
	// cloudevents-structured the body is the JSON event format. Defaults
	// to the txbox format.
	CloudEvents sender.CloudEvents
	// PermanentStatus lists response status codes that fail a message
	// Permanent (dead-lettered at once, no retry) rather than Rejected
	// (an attempt counted, retried with backoff, dead-lettered after
	// max-attempts): for a receiver whose 4xx answers, a 422 say, mean
	// "never", so that a rejected event does not wait through the whole
	// backoff schedule before it reaches the dead-letter table. Each must
	// be a 4xx other than 408 and 429, which say the receiver is
	// overloaded, not that the message is wrong. Defaults to none: only
	// 413 is Permanent.
	PermanentStatus []int
}

// ConfigError reports an invalid Config field or Verify argument.
type ConfigError struct {
	Field  string
	Reason string
}

func (e *ConfigError) Error() string {
	return fmt.Sprintf("webhook: invalid %s: %s", e.Field, e.Reason)
}

// StatusError is a non-2xx response. Classify it with txbox.Classify.
type StatusError struct {
	// StatusCode is the response's status code.
	StatusCode int
	// URL is the request URL without user info and query, which may hold
	// credentials.
	URL string
	// RetryAfter is the receiver's Retry-After (seconds or an HTTP date),
	// when it sent one, typically with 429 or 503; zero otherwise.
	RetryAfter time.Duration
	// Detail is the title and detail of the receiver's RFC 9457 problem
	// body (application/problem+json), when it sent one, at most 256
	// bytes; "" otherwise.
	Detail string
}

func (e *StatusError) Error() string {
	msg := fmt.Sprintf("webhook: POST %s: %d %s", e.URL, e.StatusCode, http.StatusText(e.StatusCode))
	if e.Detail != "" {
		msg += ": " + e.Detail
	}
	return msg
}

// MessageError is returned, Permanent, for a message that cannot be sent
// as an HTTP request at all: its route has no usable URL, or a header
// name or value is not valid in HTTP.
type MessageError struct {
	Reason string
}

func (e *MessageError) Error() string { return "webhook: cannot send message: " + e.Reason }

// Sender POSTs messages to their route's URL. It is safe for concurrent
// use.
type Sender struct {
	client      *http.Client
	ownClient   bool
	timeout     time.Duration
	sem         chan struct{}
	contentType string
	secret      []byte
	sigHeader   string
	headers     http.Header
	ce          sender.CloudEvents
	// permanent holds Config.PermanentStatus.
	permanent map[int]bool

	// life admits Sends until Close, which waits for those in flight.
	life sender.Lifecycle
}

var (
	_ sender.Sender        = (*Sender)(nil)
	_ sender.Destinationer = (*Sender)(nil)
)

// Destination implements [sender.Destinationer]: the scheme, host and path
// of the route's URL, without user info, query or fragment (they may hold
// credentials, and do not name another endpoint). Each endpoint is its own
// failure domain: one answering 503 pauses only the event types routed to
// it. The webhook sender never marks a failure [sender.Disconnected]: it
// has no connection shared by all its routes.
func (s *Sender) Destination(r sender.Route) string { return destination(r.URL) }

func destination(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return "(invalid url)"
	}
	path := u.EscapedPath()
	if path == "" {
		path = "/"
	}
	return strings.ToLower(u.Scheme) + "://" + strings.ToLower(u.Host) + path
}

// New returns a Sender for cfg, or a *ConfigError naming the bad field.
func New(cfg Config) (*Sender, error) {
	if cfg.Timeout < 0 {
		return nil, &ConfigError{Field: "timeout", Reason: "must not be negative"}
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.MaxConcurrency < 0 {
		return nil, &ConfigError{Field: "max-concurrency", Reason: "must not be negative"}
	}
	if cfg.MaxConcurrency == 0 {
		cfg.MaxConcurrency = DefaultMaxConcurrency
	}
	if cfg.ContentType == "" {
		cfg.ContentType = DefaultContentType
	}
	if err := checkValue(cfg.ContentType); err != nil {
		return nil, &ConfigError{Field: "content-type", Reason: err.Error()}
	}
	if cfg.SignatureHeader == "" {
		cfg.SignatureHeader = DefaultSignatureHeader
	}
	if err := checkName(cfg.SignatureHeader); err != nil {
		return nil, &ConfigError{Field: "signature-header", Reason: err.Error()}
	}
	if reserved(cfg.SignatureHeader, "") {
		return nil, &ConfigError{Field: "signature-header", Reason: fmt.Sprintf("%q is set by the transport or the sender", cfg.SignatureHeader)}
	}
	headers, err := configHeaders(cfg.Headers, cfg.SignatureHeader)
	if err != nil {
		return nil, err
	}
	ce, err := cfg.CloudEvents.Resolve(cfg.ContentType, true)
	if err != nil {
		var cerr *txbox.ConfigError
		errors.As(err, &cerr)
		return nil, &ConfigError{Field: cerr.Field, Reason: cerr.Reason}
	}
	if err := checkValue(ce.DataContentType); err != nil {
		return nil, &ConfigError{Field: "content-type", Reason: err.Error()}
	}
	permanent, err := permanentStatus(cfg.PermanentStatus)
	if err != nil {
		return nil, err
	}
	s := &Sender{
		permanent:   permanent,
		client:      cfg.HTTPClient,
		timeout:     cfg.Timeout,
		sem:         make(chan struct{}, cfg.MaxConcurrency),
		contentType: cfg.ContentType,
		sigHeader:   cfg.SignatureHeader,
		headers:     headers,
		ce:          ce,
	}
	if cfg.Secret != "" {
		s.secret = []byte(cfg.Secret)
	}
	if s.client == nil {
		s.client = newClient(cfg.MaxConcurrency, cfg.TLS)
		s.ownClient = true
	}
	return s, nil
}

// permanentStatus checks Config.PermanentStatus: 4xx codes only, and not
// 408 or 429, which the sender reads as an overloaded receiver (an
// outage, not the message's fault).
func permanentStatus(codes []int) (map[int]bool, error) {
	if len(codes) == 0 {
		return nil, nil
	}
	m := make(map[int]bool, len(codes))
	for _, c := range codes {
		switch {
		case c == http.StatusRequestTimeout || c == http.StatusTooManyRequests:
			return nil, &ConfigError{Field: "permanent-status", Reason: fmt.Sprintf("%d says the receiver is overloaded, not that the message is wrong: it stays transient", c)}
		case c < 400 || c > 499:
			return nil, &ConfigError{Field: "permanent-status", Reason: fmt.Sprintf("%d is not a 4xx status code (5xx stay transient: the relay judges them by destination)", c)}
		}
		m[c] = true
	}
	return m, nil
}

// configHeaders checks Config.Headers: HTTP names and values, none that
// the transport or the sender sets, no content-type (ContentType is for
// that).
func configHeaders(hs map[string]string, sigHeader string) (http.Header, error) {
	headers := make(http.Header, len(hs))
	for k, v := range hs {
		if err := checkName(k); err != nil {
			return nil, &ConfigError{Field: "headers", Reason: err.Error()}
		}
		if err := checkValue(v); err != nil {
			// The value may be a secret: name the header only.
			return nil, &ConfigError{Field: "headers." + k, Reason: "value contains a control character"}
		}
		if reserved(k, sigHeader) {
			return nil, &ConfigError{Field: "headers." + k, Reason: "is set by the transport or the sender"}
		}
		if strings.EqualFold(k, "content-type") {
			return nil, &ConfigError{Field: "headers." + k, Reason: "set content-type instead"}
		}
		headers.Set(k, v)
	}
	return headers, nil
}

// newClient is the sender's own keep-alive client: as many connections per
// host as requests in flight, and redirects not followed.
func newClient(maxConcurrency int, tlsConfig *tls.Config) *http.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	if tlsConfig != nil {
		tr.TLSClientConfig = tlsConfig.Clone()
	}
	// The default keeps 2 idle connections per host: a batch of
	// parallel requests would open and close connections every time.
	tr.MaxIdleConnsPerHost = maxConcurrency
	// A request may start the moment an earlier one released its
	// concurrency slot, before that connection went back to the idle
	// pool; capping connections per host makes it wait for the
	// returning connection instead of dialing a new one.
	tr.MaxConnsPerHost = maxConcurrency
	if tr.MaxIdleConns < maxConcurrency {
		tr.MaxIdleConns = maxConcurrency
	}
	return &http.Client{
		Transport: tr,
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		},
	}
}

// Send POSTs every message, up to MaxConcurrency at once, and reports the
// outcome per message (see [sender.Sender]).
func (s *Sender) Send(ctx context.Context, msgs []*sender.Message) error {
	return s.life.Send(ctx, "webhook: send", msgs, s.send)
}

// send is Send within the lifecycle, for a batch that is not empty.
func (s *Sender) send(ctx context.Context, msgs []*sender.Message) error {
	errs := make([]error, len(msgs))
	var wg sync.WaitGroup
	var hmu sync.Mutex
	health := map[string]*destHealth{}
	healthOf := func(m *sender.Message) *destHealth {
		d := destination(m.Route.URL)
		h := health[d]
		if h == nil {
			h = &destHealth{dest: d}
			health[d] = h
		}
		return h
	}
	for i, m := range msgs {
		if m == nil {
			errs[i] = txbox.Permanent(&MessageError{Reason: "nil message"})
			continue
		}
		hmu.Lock()
		h := healthOf(m)
		skip := h.failing()
		hmu.Unlock()
		if !skip {
			select {
			case s.sem <- struct{}{}:
			case <-ctx.Done():
				for j := i; j < len(msgs); j++ {
					errs[j] = txbox.Transient(fmt.Errorf("webhook: not sent: %w", ctx.Err()))
				}
				wg.Wait()
				return result(errs)
			}
			// Requests that finished while this one waited for a slot
			// may have shown the destination down.
			hmu.Lock()
			skip = h.failing()
			hmu.Unlock()
			if skip {
				<-s.sem
			}
		}
		if skip {
			hmu.Lock()
			errs[i] = h.notSent()
			hmu.Unlock()
			continue
		}
		wg.Add(1)
		go func() {
			defer func() { <-s.sem; wg.Done() }()
			err := s.post(ctx, m)
			errs[i] = err
			hmu.Lock()
			h.record(err)
			hmu.Unlock()
		}()
	}
	wg.Wait()
	return result(errs)
}

// destHealth is what one batch has seen of one destination so far.
type destHealth struct {
	dest    string
	outages int // requests failed as an outage would
	ok      bool
	last    error
}

func (h *destHealth) record(err error) {
	switch {
	case err == nil:
		h.ok = true
	case looksDown(err):
		h.outages++
		h.last = err
	}
}

func (h *destHealth) failing() bool { return !h.ok && h.outages >= stopAfter }

func (h *destHealth) notSent() error {
	return txbox.Transient(fmt.Errorf("webhook: not sent to %s: %d requests of this batch to it failed and none succeeded; last: %w", h.dest, h.outages, h.last))
}

// looksDown reports whether err is how an unavailable receiver fails: no
// response at all (refused, reset, timed out), or 429, 502, 503, 504.
func looksDown(err error) bool {
	if txbox.Classify(err) != txbox.ClassTransient {
		return false
	}
	var se *StatusError
	if !errors.As(err, &se) {
		return true // no response
	}
	switch se.StatusCode {
	case http.StatusTooManyRequests, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return true
	}
	return false
}

func result(errs []error) error {
	for _, err := range errs {
		if err != nil {
			return &sender.BatchError{Errs: errs}
		}
	}
	return nil
}

// Close waits for the Sends in flight (bounded by ctx), then releases idle
// connections. Later Sends fail with txbox.ErrClosed. Close is idempotent.
func (s *Sender) Close(ctx context.Context) error {
	s.life.Shut()
	if err := s.life.Wait(ctx); err != nil {
		return fmt.Errorf("webhook: close: sends still in flight: %w", err)
	}
	if s.ownClient {
		s.client.CloseIdleConnections()
	}
	return nil
}

func (s *Sender) post(ctx context.Context, m *sender.Message) error {
	req, err := s.request(ctx, m)
	if err != nil {
		return txbox.Permanent(err)
	}
	rctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	req = req.WithContext(rctx)
	resp, err := s.client.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return txbox.Transient(fmt.Errorf("webhook: POST %s: %w", redact(req.URL), ctx.Err()))
		}
		// url.Error repeats the full URL, query included: keep only the
		// cause.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return txbox.Transient(fmt.Errorf("webhook: POST %s: %w", redact(req.URL), err))
	}
	var body []byte
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		body, _ = io.ReadAll(io.LimitReader(resp.Body, maxDrain))
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxDrain))
	resp.Body.Close()
	return classifyStatus(resp, body, len(m.Payload), time.Now(), s.permanent)
}

// classifyStatus classifies a response. 5xx stay transient whatever the
// request: whether the receiver as a whole is down or only this message
// fails there is the relay's call, from how the destination's other
// messages fare (docs/concepts.md). Other 4xx are Rejected, or Permanent
// when the sender's Config.PermanentStatus lists them.
func classifyStatus(resp *http.Response, body []byte, size int, now time.Time, permanent map[int]bool) error {
	code := resp.StatusCode
	if code >= 200 && code < 300 {
		return nil
	}
	se := &StatusError{StatusCode: code, URL: redact(resp.Request.URL), RetryAfter: retryAfter(resp.Header.Get("Retry-After"), now),
		Detail: problemDetail(resp.Header.Get("Content-Type"), body)}
	switch {
	case code == http.StatusRequestTimeout || code == http.StatusTooManyRequests || code >= 500:
		return txbox.Transient(se)
	case code == http.StatusRequestEntityTooLarge:
		// The receiver will never take a body this large: dead-letter it
		// now rather than after max attempts.
		return txbox.Permanent(fmt.Errorf("%w (the body was %d bytes)", se, size))
	case permanent[code]:
		return txbox.Permanent(fmt.Errorf("%w (a permanent status by the sender's permanent-status)", se))
	}
	return txbox.Rejected(se)
}

// problemDetail returns "title: detail" of an RFC 9457 problem body, or
// "" for any other body. The text is the receiver's; it is cut to
// maxDetail bytes.
func problemDetail(contentType string, body []byte) string {
	mt, _, err := mime.ParseMediaType(contentType)
	if err != nil || mt != "application/problem+json" || len(body) == 0 {
		return ""
	}
	var p struct {
		Title  string `json:"title"`
		Detail string `json:"detail"`
	}
	if json.Unmarshal(body, &p) != nil {
		return ""
	}
	d := p.Title
	if p.Detail != "" {
		if d != "" {
			d += ": "
		}
		d += p.Detail
	}
	d = strings.Map(func(r rune) rune {
		if r < ' ' || r == 0x7f {
			return ' '
		}
		return r
	}, d)
	if len(d) > maxDetail {
		d = strings.ToValidUTF8(d[:maxDetail], "") + "…"
	}
	return d
}

// retryAfter parses a Retry-After value: delay seconds or an HTTP date.
// Anything else, a time in the past, or a delay over a day (not a hint
// the relay should follow) is zero.
func retryAfter(v string, now time.Time) time.Duration {
	if v == "" {
		return 0
	}
	if secs, err := strconv.ParseInt(v, 10, 64); err == nil {
		if secs <= 0 || secs > int64(24*time.Hour/time.Second) {
			return 0
		}
		return time.Duration(secs) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
}

// request builds the POST for m, or a *MessageError.
func (s *Sender) request(ctx context.Context, m *sender.Message) (*http.Request, error) {
	if m.Route.URL == "" {
		return nil, &MessageError{Reason: fmt.Sprintf("event type %q has no route URL", m.EventType)}
	}
	format := s.ce.FormatOf(m)
	if _, err := sender.ParseFormat(string(format)); err != nil {
		return nil, &MessageError{Reason: fmt.Sprintf("route format of event type %q %v", m.EventType, err)}
	}
	var e sender.CloudEvent
	body := m.Payload
	if format.IsCloudEvents() {
		e = s.ce.Event(m)
		if format == sender.FormatCloudEventsStructured {
			var err error
			if body, err = e.Structured(m.Payload); err != nil {
				return nil, &MessageError{Reason: fmt.Sprintf("structured event: %v", err)}
			}
		}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, m.Route.URL, bytes.NewReader(body))
	if err != nil || (req.URL.Scheme != "http" && req.URL.Scheme != "https") || req.URL.Host == "" {
		// Not the parse error itself: it repeats the URL, which may
		// carry credentials.
		return nil, &MessageError{Reason: fmt.Sprintf("route URL of event type %q is not an absolute http(s) URL", m.EventType)}
	}
	contentType := s.contentType
	for k, v := range m.Headers {
		if err := checkName(k); err != nil {
			return nil, &MessageError{Reason: err.Error()}
		}
		if err := checkValue(v); err != nil {
			return nil, &MessageError{Reason: fmt.Sprintf("header %q: %v", k, err)}
		}
		if strings.EqualFold(k, "content-type") {
			contentType = v
			continue
		}
		if reserved(k, s.sigHeader) {
			return nil, &MessageError{Reason: fmt.Sprintf("header %q is set by the transport or the sender", k)}
		}
		req.Header.Set(k, v)
	}
	// Configured headers (credentials, typically) override event
	// headers: event data must not be able to change them.
	for k, vs := range s.headers {
		req.Header[k] = vs
	}
	switch format {
	case sender.FormatCloudEvents:
		if err := checkValue(e.DataContentType); err != nil {
			return nil, &MessageError{Reason: fmt.Sprintf("datacontenttype: %v", err)}
		}
		contentType = e.DataContentType
		e.Attributes(func(name, v string) { req.Header.Set(HeaderPrefixCloudEvents+name, percentEncode(v)) })
	case sender.FormatCloudEventsStructured:
		contentType = sender.ContentTypeStructured
	}
	req.Header.Set("Content-Type", contentType)
	id := m.ID.String()
	req.Header.Set(HeaderIdempotencyKey, id)
	req.Header.Set(txbox.HeaderEventID, id)
	if m.Key != "" {
		if err := checkValue(m.Key); err != nil {
			return nil, &MessageError{Reason: fmt.Sprintf("key: %v", err)}
		}
		req.Header.Set(sender.HeaderKey, m.Key)
	}
	if req.Header.Get("User-Agent") == "" {
		req.Header.Set("User-Agent", "txbox-webhook")
	}
	if s.secret != nil {
		req.Header.Set(s.sigHeader, sign(s.secret, time.Now(), body))
	}
	return req, nil
}

// HeaderPrefixCloudEvents prefixes each CloudEvents context attribute's
// name in the headers of a request in the cloudevents format (the HTTP
// binding's binary content mode).
const HeaderPrefixCloudEvents = "ce-"

// percentEncode encodes v as the HTTP binding requires of a ce- header
// value: space, '"', '%' and every byte outside printable ASCII as %XX of
// its UTF-8 bytes. Values without such a byte (ids, types, times) are
// returned as they are.
func percentEncode(v string) string {
	n := 0
	for i := 0; i < len(v); i++ {
		if mustEncode(v[i]) {
			n++
		}
	}
	if n == 0 {
		return v
	}
	const hex = "0123456789ABCDEF"
	b := make([]byte, 0, len(v)+2*n)
	for i := 0; i < len(v); i++ {
		if c := v[i]; mustEncode(c) {
			b = append(b, '%', hex[c>>4], hex[c&15])
		} else {
			b = append(b, c)
		}
	}
	return string(b)
}

func mustEncode(c byte) bool { return c <= ' ' || c > '~' || c == '"' || c == '%' }

// redact drops user info and query from u for errors: both may carry
// credentials.
func redact(u *url.URL) string {
	c := *u
	c.User = nil
	c.RawQuery = ""
	c.ForceQuery = false
	c.Fragment = ""
	return c.String()
}

// reserved reports whether header name is one a message or the config
// must not set: framing and hop-by-hop headers the transport owns, and
// the headers the sender itself sets.
func reserved(name, sigHeader string) bool {
	switch strings.ToLower(name) {
	case "host", "content-length", "transfer-encoding", "connection", "keep-alive",
		"te", "trailer", "upgrade", "proxy-connection", "proxy-authorization",
		"idempotency-key":
		return true
	}
	return sigHeader != "" && strings.EqualFold(name, sigHeader)
}

// checkName reports whether name is an HTTP token (RFC 9110 §5.6.2).
func checkName(name string) error {
	if name == "" {
		return errors.New("empty header name")
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
			strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0 {
			continue
		}
		return fmt.Errorf("header name %q: character %q is not allowed in HTTP", truncate(name), c)
	}
	return nil
}

// checkValue reports whether v can travel as an HTTP field value: no
// control characters other than tab (CR or LF would split the header).
func checkValue(v string) error {
	for i := 0; i < len(v); i++ {
		if c := v[i]; c < ' ' && c != '\t' || c == 0x7f {
			return fmt.Errorf("control character %q at %d", c, i)
		}
	}
	return nil
}

func truncate(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}

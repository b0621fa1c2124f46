package sender

import (
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"net/url"
	"strings"
	"time"

	"github.com/txbox/txbox"
)

// Format is how a sender lays an event out on the wire
// (docs/cloudevents.md).
type Format string

// The formats. The zero Format means "not set": a route without a format
// takes its sender's, and a sender without one takes FormatTxbox.
const (
	// FormatTxbox sends the payload as the body and the event's identity
	// in the txbox-* headers.
	FormatTxbox Format = "txbox"
	// FormatCloudEvents sends CloudEvents 1.0 in binary content mode: the
	// payload as the body, the context attributes in the headers the
	// broker's CloudEvents binding names. The txbox-* headers are sent too.
	FormatCloudEvents Format = "cloudevents"
	// FormatCloudEventsStructured sends CloudEvents 1.0 in structured
	// content mode: the body is the JSON event format
	// (application/cloudevents+json) holding the attributes and the
	// payload. Webhooks only.
	FormatCloudEventsStructured Format = "cloudevents-structured"
)

// CloudEvents defaults and constants.
const (
	// SpecVersion is the CloudEvents specversion txbox sends.
	SpecVersion = "1.0"
	// DefaultSource is the source attribute when none is configured. The
	// event id is unique on its own, so any stable source keeps
	// source + id unique; name your service to tell consumers where the
	// event comes from.
	DefaultSource = "/txbox"
	// DefaultDataContentType is the datacontenttype of an event without
	// a content-type header when none is configured: the payload is
	// opaque bytes to txbox.
	DefaultDataContentType = "application/octet-stream"
	// ContentTypeStructured is the media type of a structured-mode body.
	ContentTypeStructured = "application/cloudevents+json; charset=utf-8"
)

// ParseFormat returns the Format named s: "txbox", "cloudevents" or
// "cloudevents-structured". The empty string is the zero Format (not set).
// The error reads as a predicate of the key that held s.
func ParseFormat(s string) (Format, error) {
	switch f := Format(s); f {
	case "", FormatTxbox, FormatCloudEvents, FormatCloudEventsStructured:
		return f, nil
	}
	return "", fmt.Errorf("must be %s, %s or %s, not %q", FormatTxbox, FormatCloudEvents, FormatCloudEventsStructured, truncated(s))
}

// IsCloudEvents reports whether f is one of the CloudEvents formats.
func (f Format) IsCloudEvents() bool {
	return f == FormatCloudEvents || f == FormatCloudEventsStructured
}

// CloudEvents configures how a sender formats messages: its default
// format and, for the CloudEvents formats, the attributes that do not come
// from the event. The zero value sends the txbox format.
type CloudEvents struct {
	// Format is the format of the messages whose route sets none
	// (Route.Format). Defaults to FormatTxbox.
	Format Format
	// Source is the CloudEvents source attribute, a URI-reference such as
	// "/orders" or "https://orders.example.com". Defaults to
	// DefaultSource.
	Source string
	// DataContentType is the datacontenttype of events without a
	// content-type header. Defaults to DefaultDataContentType; the
	// webhook sender's default is its Config.ContentType.
	DataContentType string
}

// Resolve fills the zero fields of c with the defaults (dataContentType
// for DataContentType) and checks them; structured says whether the
// sender has a structured mode. The error is a *txbox.ConfigError whose
// Field is the YAML key (format, source, content-type).
func (c CloudEvents) Resolve(dataContentType string, structured bool) (CloudEvents, error) {
	if _, err := ParseFormat(string(c.Format)); err != nil {
		return c, &txbox.ConfigError{Component: "sender", Field: "format", Reason: err.Error()}
	}
	if c.Format == FormatCloudEventsStructured && !structured {
		return c, &txbox.ConfigError{Component: "sender", Field: "format", Reason: fmt.Sprintf("%s is for webhooks: use %s", c.Format, FormatCloudEvents)}
	}
	if c.Format == "" {
		c.Format = FormatTxbox
	}
	if c.Source == "" {
		c.Source = DefaultSource
	}
	if err := CheckSource(c.Source); err != nil {
		return c, &txbox.ConfigError{Component: "sender", Field: "source", Reason: err.Error()}
	}
	if c.DataContentType == "" {
		c.DataContentType = dataContentType
	}
	if c.DataContentType == "" {
		c.DataContentType = DefaultDataContentType
	}
	if mt, _, err := mime.ParseMediaType(c.DataContentType); err != nil || !strings.Contains(mt, "/") {
		return c, &txbox.ConfigError{Component: "sender", Field: "content-type", Reason: fmt.Sprintf("must be a media type such as application/json, not %q", truncated(c.DataContentType))}
	}
	return c, nil
}

// CheckSource reports whether s can be a source attribute: a non-empty
// URI-reference without control characters or spaces. The error reads as
// a predicate of the key that held s.
func CheckSource(s string) error {
	bad := s == ""
	for i := 0; i < len(s) && !bad; i++ {
		c := s[i]
		bad = c <= ' ' || c == 0x7f
	}
	if !bad {
		_, err := url.Parse(s)
		bad = err != nil
	}
	if bad {
		return fmt.Errorf("must be a URI-reference without spaces or control characters, such as /orders, not %q", truncated(s))
	}
	return nil
}

// FormatOf returns the format of m: its route's, else c's.
func (c CloudEvents) FormatOf(m *Message) Format {
	if m.Route.Format != "" {
		return m.Route.Format
	}
	if c.Format == "" {
		return FormatTxbox
	}
	return c.Format
}

// ErrFormatUnsupported is returned, wrapped, for a message whose route
// asks for a format its sender cannot send (structured mode on a broker)
// or that does not exist. Senders fail such a message permanent: no retry
// changes its route.
var ErrFormatUnsupported = errors.New("sender: format not supported")

// Binary returns the CloudEvents context of m and true when m is to be
// sent in binary content mode, false for the txbox format, or an error
// wrapping ErrFormatUnsupported for any other format: it is for the
// senders that have no structured mode.
func (c CloudEvents) Binary(m *Message) (CloudEvent, bool, error) {
	switch f := c.FormatOf(m); f {
	case FormatTxbox:
		return CloudEvent{}, false, nil
	case FormatCloudEvents:
		return c.Event(m), true, nil
	default:
		return CloudEvent{}, false, unsupported(f, m)
	}
}

// unsupported is the error of a message whose format f its sender cannot
// send.
func unsupported(f Format, m *Message) error {
	if _, err := ParseFormat(string(f)); err != nil {
		return fmt.Errorf("%w: the route format of event type %q %v", ErrFormatUnsupported, m.EventType, err)
	}
	return fmt.Errorf("%w: %s is for webhooks (event type %q); use %s", ErrFormatUnsupported, f, m.EventType, FormatCloudEvents)
}

// CloudEvent is the CloudEvents context of one message. Empty fields are
// attributes the message does not have.
type CloudEvent struct {
	SpecVersion     string
	ID              string
	Source          string
	Type            string
	Subject         string
	Time            string
	DataContentType string
	// TraceParent and TraceState are the distributed tracing extension,
	// from the event's traceparent and tracestate headers.
	TraceParent string
	TraceState  string
}

// Event returns the CloudEvents context of m: id the event id, type the
// event type, subject the key, time the creation time (RFC 3339 in UTC),
// datacontenttype the event's content-type header or c.DataContentType,
// source c.Source, and the traceparent and tracestate extensions when the
// event carries a trace.
func (c CloudEvents) Event(m *Message) CloudEvent {
	e := CloudEvent{
		SpecVersion: SpecVersion, ID: m.ID.String(), Source: c.Source, Type: m.EventType,
		Subject: m.Key, DataContentType: c.DataContentType,
		TraceParent: m.Headers[txbox.HeaderTraceParent], TraceState: m.Headers[txbox.HeaderTraceState],
	}
	if e.Source == "" {
		e.Source = DefaultSource
	}
	if e.DataContentType == "" {
		e.DataContentType = DefaultDataContentType
	}
	if ct, ok := contentTypeHeader(m.Headers); ok {
		e.DataContentType = ct
	}
	if !m.CreatedAt.IsZero() {
		e.Time = m.CreatedAt.UTC().Format(time.RFC3339Nano)
	}
	return e
}

// IsContentType reports whether header name k is Content-Type, in any
// case. In the CloudEvents formats the sender replaces such an event
// header with the datacontenttype in the binding's place.
func IsContentType(k string) bool { return strings.EqualFold(k, "content-type") }

func contentTypeHeader(h map[string]string) (string, bool) {
	if v, ok := h["content-type"]; ok {
		return v, true
	}
	for k, v := range h {
		if IsContentType(k) {
			return v, true
		}
	}
	return "", false
}

// attributeNames are the attributes Attributes gives, in its order.
var attributeNames = [...]string{"specversion", "id", "source", "type", "subject", "time", "traceparent", "tracestate"}

// Attributes calls set for each attribute e has, in the order of the
// CloudEvents specification, except datacontenttype: every binding
// carries that one in its own place (a content-type header or property).
func (e *CloudEvent) Attributes(set func(name, value string)) {
	for i, v := range [...]string{e.SpecVersion, e.ID, e.Source, e.Type, e.Subject, e.Time, e.TraceParent, e.TraceState} {
		if v != "" {
			set(attributeNames[i], v)
		}
	}
}

// PrefixedNames maps each attribute name Attributes gives to prefix + the
// name: a binding's header names, built once rather than per message.
func PrefixedNames(prefix string) map[string]string {
	m := make(map[string]string, len(attributeNames))
	for _, n := range attributeNames {
		m[n] = prefix + n
	}
	return m
}

// Structured returns the JSON event format of e with data as its data:
// data as it is, byte for byte, when the datacontenttype is JSON and data
// is valid JSON, else data_base64 (which carries any bytes unchanged).
func (e *CloudEvent) Structured(data []byte) ([]byte, error) {
	env := map[string]any{}
	e.Attributes(func(name, value string) { env[name] = value })
	env["datacontenttype"] = e.DataContentType
	asJSON := IsJSONMediaType(e.DataContentType) && json.Valid(data)
	if !asJSON && data != nil {
		env["data_base64"] = data // encoding/json writes []byte as base64
	}
	b, err := json.Marshal(env)
	if err != nil || !asJSON {
		return b, err
	}
	// Spliced in rather than marshalled as a json.RawMessage, which
	// encoding/json would compact: the receiver gets the payload's bytes.
	out := make([]byte, 0, len(b)+len(data)+8)
	out = append(out, b[:len(b)-1]...)
	out = append(out, `,"data":`...)
	out = append(out, data...)
	return append(out, '}'), nil
}

// IsJSONMediaType reports whether ct is application/json, text/json or
// a +json media type, parameters aside.
func IsJSONMediaType(ct string) bool {
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil {
		return false
	}
	return mt == "application/json" || mt == "text/json" || strings.HasSuffix(mt, "+json")
}

func truncated(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}

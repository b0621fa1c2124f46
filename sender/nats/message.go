package nats

import (
	"fmt"
	"strings"

	natsgo "github.com/nats-io/nats.go"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/sender"
)

// HeaderMsgID is the JetStream deduplication header; it carries the event
// id.
const HeaderMsgID = "Nats-Msg-Id"

// checkSize refuses, Permanent, a message larger than the server's
// max_payload (payload plus the encoded header block, as the server
// counts it): no retry can make it fit. maxPayload 0 (no server info yet)
// skips the check; nats.go's own check then still applies.
//
// hdrBound is an upper bound of the header block's size (buildMsg): a
// message that fits with it fits, without nats.go counting the header
// block again; only one that might not is counted exactly.
func checkSize(nm *natsgo.Msg, hdrBound int, maxPayload int64) error {
	if maxPayload <= 0 {
		return nil
	}
	payload := int64(len(nm.Data))
	if payload+int64(hdrBound) <= maxPayload {
		return nil
	}
	// Size is subject + reply + header block + data; nm has no reply.
	headers := int64(nm.Size()) - int64(len(nm.Subject)) - payload
	if total := payload + headers; total > maxPayload {
		return txbox.Permanent(fmt.Errorf("nats: subject %q: %w: the message is %d bytes (payload %d + headers %d), the server's max_payload is %d bytes (raise max_payload in the NATS server configuration, or lower the publish limit: docs/operations.md)",
			nm.Subject, natsgo.ErrMaxPayload, total, payload, headers, maxPayload))
	}
	return nil
}

// build is buildMsg in the message's format: in the cloudevents format
// the context attributes are added as ce- headers and the
// datacontenttype as content-type (an event's own Content-Type header,
// in any case, gives way to it).
func (s *Sender) build(m *sender.Message) (*natsgo.Msg, int, error) {
	e, binary, err := s.ce.Binary(m)
	if err != nil {
		return nil, 0, fmt.Errorf("nats: event %s: %w", m.ID, err)
	}
	nm, size, err := buildMsg(m)
	if err != nil || !binary {
		return nm, size, err
	}
	for k := range nm.Header {
		if sender.IsContentType(k) {
			delete(nm.Header, k)
		}
	}
	// The one-value slices share one array, as in buildMsg.
	vals := make([]string, 0, 9)
	add := func(k, v string) {
		vals = append(vals, v)
		nm.Header[k] = vals[len(vals)-1 : len(vals) : len(vals)]
		size += len(k) + len(v) + 4
	}
	e.Attributes(func(name, v string) { add(ceHeaders[name], v) })
	if err := checkHeader(HeaderContentType, e.DataContentType); err != nil {
		return nil, 0, err
	}
	add(HeaderContentType, e.DataContentType)
	return nm, size, nil
}

// ceHeaders are the binding's header names of the attributes.
var ceHeaders = sender.PrefixedNames(HeaderPrefixCloudEvents)

// Header names of the NATS CloudEvents binding in binary content mode.
const (
	// HeaderPrefixCloudEvents prefixes each context attribute's name.
	HeaderPrefixCloudEvents = "ce-"
	// HeaderContentType carries the datacontenttype attribute.
	HeaderContentType = "content-type"
)

// natsMsg builds the NATS message for m, or a *MessageError.
func natsMsg(m *sender.Message) (*natsgo.Msg, error) {
	nm, _, err := buildMsg(m)
	return nm, err
}

// buildMsg is natsMsg, and also returns an upper bound of the encoded
// header block's size (checkSize), counted while the headers are copied
// so that no extra pass over them is needed per message.
func buildMsg(m *sender.Message) (*natsgo.Msg, int, error) {
	if m.Route.Subject == "" {
		return nil, 0, &MessageError{Reason: fmt.Sprintf("event type %q has no route subject", m.EventType)}
	}
	n := len(m.Headers) + 3
	h := make(natsgo.Header, n)
	// The one-value slices share one array: one allocation per message,
	// not one per header.
	vals := make([]string, 0, n)
	set := func(k, v string) {
		vals = append(vals, v)
		h[k] = vals[len(vals)-1 : len(vals) : len(vals)]
	}
	size := len(natsHdrLine) + 2 // the status line and the final CRLF
	for k, v := range m.Headers {
		if err := checkHeader(k, v); err != nil {
			return nil, 0, err
		}
		// Assigned directly, not through Set, to keep the name's case.
		set(k, v)
		// A value replaced below is counted with its replacement.
		if k != txbox.HeaderEventID && (k != sender.HeaderKey || m.Key == "") {
			size += len(k) + len(v) + 4 // ": " and CRLF
		}
	}
	id, dedup := m.ID.String(), m.Delivery().String()
	set(HeaderMsgID, dedup)
	set(txbox.HeaderEventID, id)
	size += len(HeaderMsgID) + len(txbox.HeaderEventID) + len(id) + len(dedup) + 8
	if m.Key != "" {
		if err := checkHeader(sender.HeaderKey, m.Key); err != nil {
			return nil, 0, err
		}
		set(sender.HeaderKey, m.Key)
		size += len(sender.HeaderKey) + len(m.Key) + 4
	}
	return &natsgo.Msg{Subject: m.Route.Subject, Data: m.Payload, Header: h}, size, nil
}

// natsHdrLine is the first line of nats.go's header block.
const natsHdrLine = "NATS/1.0\r\n"

// checkHeader refuses what the NATS header block cannot carry (a name
// with a space, a control character or an HTTP delimiter such as a colon;
// a value with CR or LF, which nats.go would turn into spaces) and
// the Nats-* names that steer JetStream.
func checkHeader(name, value string) error {
	if name == "" {
		return &MessageError{Reason: "empty header name"}
	}
	for i := 0; i < len(name); i++ {
		if c := name[i]; !headerNameByte[c] {
			return &MessageError{Reason: fmt.Sprintf("header name %q: character %q is not allowed", truncate(name), c)}
		}
	}
	if len(name) >= 5 && strings.EqualFold(name[:5], "nats-") {
		return &MessageError{Reason: fmt.Sprintf("header %q: Nats-* headers steer JetStream and are not passed on from events", truncate(name))}
	}
	// Two byte scans, not ContainsAny, which builds a set on every call.
	if strings.IndexByte(value, '\r') >= 0 || strings.IndexByte(value, '\n') >= 0 {
		return &MessageError{Reason: fmt.Sprintf("header %q: value contains CR or LF", truncate(name))}
	}
	return nil
}

// headerNameByte is nats.go's rule for a header name's bytes: printable
// ASCII without the HTTP delimiters. A table, as every header of every
// message is checked.
var headerNameByte = func() (t [256]bool) {
	for c := '!'; c < 0x7f; c++ {
		t[c] = !strings.ContainsRune(`"(),/:;<=>?@[\]{}`, c)
	}
	return t
}()

func truncate(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}

package consume

import (
	"bytes"
	"encoding/json"
	"fmt"
	"mime"
	"strings"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/inbox"
	"github.com/txbox/txbox/sender"
)

// Header prefixes of the CloudEvents bindings in binary content mode
// (docs/cloudevents.md): the adapters read the attributes under them.
const (
	// PrefixHTTP is the prefix of the HTTP and NATS bindings: ce-id.
	PrefixHTTP = "ce-"
	// PrefixKafka is the prefix of the Kafka binding: ce_id.
	PrefixKafka = "ce_"
	// PrefixAMQP is the prefix of the AMQP binding's application
	// properties, which txbox's RabbitMQ sender uses as headers:
	// cloudEvents:id.
	PrefixAMQP = "cloudEvents:"
)

// MediaTypeStructured is the media type of a CloudEvent in structured
// content mode, JSON event format.
const MediaTypeStructured = "application/cloudevents+json"

// NewMessageFromHeaders builds the inbox.Message of a received message
// whose headers get looks up, in either format: a CloudEvents message in
// binary content mode (a prefix+"specversion" header) gives the id, type
// and key from its id, type and subject attributes (the senders put the
// event's key in subject); any other message from the txbox-event-id,
// txbox-event-type and txbox-key (sender.HeaderKey) headers. A message
// without either id takes fallbackID (the broker's message id, which
// txbox's senders set to the event id). brokerKey is the broker's own
// field for the event's key, where it has one (the Kafka record key,
// which the Kafka sender sets to the key); it is used only when the
// message carries neither a subject attribute nor a txbox-key header.
// Pass "" for a broker field that is not the event's key, such as an
// AMQP routing key (the event type by default): Key must be the key the
// event was published with, or "" when it had none. The error is an
// *InvalidMessageError.
func NewMessageFromHeaders(get func(name string) string, prefix, fallbackID, brokerKey string, payload []byte, headers map[string]string) (inbox.Message, error) {
	id, eventType, key := get(txbox.HeaderEventID), get(txbox.HeaderEventType), get(sender.HeaderKey)
	if key == "" {
		key = brokerKey
	}
	if sv := get(prefix + "specversion"); sv != "" {
		if err := checkSpecVersion(sv); err != nil {
			return inbox.Message{}, err
		}
		if ceID := get(prefix + "id"); ceID != "" {
			id = ceID
		}
		if t := get(prefix + "type"); t != "" {
			eventType = t
		}
		if s := get(prefix + "subject"); s != "" {
			key = s
		}
	}
	if id == "" {
		id = fallbackID
	}
	return NewMessage(id, eventType, key, payload, headers)
}

// checkSpecVersion accepts the CloudEvents 1.x versions.
func checkSpecVersion(sv string) error {
	if sv == "1.0" || strings.HasPrefix(sv, "1.") {
		return nil
	}
	return &InvalidMessageError{Reason: fmt.Sprintf("unsupported CloudEvents specversion %q (1.0 is)", clip(sv))}
}

// ParseStructured reads a CloudEvent in the JSON event format into the
// inbox.Message: the id, type and subject attributes as ID, Type and Key;
// data as Payload, as it is when it is JSON (the bytes of the string when
// the datacontenttype is not JSON and data is a string), data_base64
// decoded; every attribute as a header named PrefixHTTP + its name
// (values that are not strings as their JSON text) and the
// datacontenttype also as content-type, so that a handler sees the
// headers of the binary content mode. The error is an
// *InvalidMessageError.
func ParseStructured(body []byte) (inbox.Message, error) {
	var env map[string]json.RawMessage
	d := json.NewDecoder(bytes.NewReader(body))
	if err := d.Decode(&env); err != nil || env == nil {
		return inbox.Message{}, &InvalidMessageError{Reason: "the body is not a CloudEvent in the JSON event format (a JSON object)"}
	}
	headers := make(map[string]string, len(env)+1)
	var data, data64 json.RawMessage
	for name, raw := range env {
		switch name {
		case "data":
			data = raw
			continue
		case "data_base64":
			data64 = raw
			continue
		}
		var s string
		if json.Unmarshal(raw, &s) != nil {
			s = string(raw)
		}
		headers[PrefixHTTP+name] = s
	}
	if err := checkSpecVersion(headers[PrefixHTTP+"specversion"]); err != nil {
		return inbox.Message{}, err
	}
	ct := headers[PrefixHTTP+"datacontenttype"]
	if ct != "" {
		headers["content-type"] = ct
	}
	var payload []byte
	switch {
	case data64 != nil && data != nil:
		return inbox.Message{}, &InvalidMessageError{Reason: "the CloudEvent has both data and data_base64"}
	case data64 != nil:
		var b []byte // encoding/json decodes base64 into a []byte
		if err := json.Unmarshal(data64, &b); err != nil {
			return inbox.Message{}, &InvalidMessageError{Reason: "data_base64 is not a base64 string"}
		}
		payload = b
	case data != nil:
		payload = []byte(data)
		var s string
		if !isJSONMediaType(ct) && json.Unmarshal(data, &s) == nil {
			payload = []byte(s)
		}
	}
	return NewMessage(headers[PrefixHTTP+"id"], headers[PrefixHTTP+"type"], headers[PrefixHTTP+"subject"], payload, headers)
}

// IsStructured reports whether contentType is the CloudEvents JSON event
// format (application/cloudevents+json, any parameters).
func IsStructured(contentType string) bool {
	mt, _, err := mime.ParseMediaType(contentType)
	return err == nil && mt == MediaTypeStructured
}

// isJSONMediaType reports whether ct is JSON: no datacontenttype (the JSON
// format's default), application/json, text/json or a +json type.
func isJSONMediaType(ct string) bool {
	if ct == "" {
		return true
	}
	mt, _, err := mime.ParseMediaType(ct)
	return err == nil && (mt == "application/json" || mt == "text/json" || strings.HasSuffix(mt, "+json"))
}

func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}

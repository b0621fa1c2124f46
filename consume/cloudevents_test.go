package consume_test

import (
	"bytes"
	"errors"
	"testing"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/consume"
	"github.com/txbox/txbox/sender"
)

func getter(h map[string]string) func(string) string {
	return func(k string) string { return h[k] }
}

// TestNewMessageFromHeaders: a CloudEvents message takes its identity
// from the attributes; any other from the txbox headers, then the
// broker's message id.
func TestNewMessageFromHeaders(t *testing.T) {
	t.Parallel()
	id, other := txbox.NewID(), txbox.NewID()
	for name, tc := range map[string]struct {
		h                map[string]string
		fallback, key    string
		wantID           txbox.ID
		wantType, wantKy string
	}{
		"cloudevents": {h: map[string]string{"ce_specversion": "1.0", "ce_id": id.String(), "ce_type": "t", "ce_subject": "k"}, key: "record-key", wantID: id, wantType: "t", wantKy: "k"},
		"ce wins":     {h: map[string]string{"ce_specversion": "1.0", "ce_id": id.String(), txbox.HeaderEventID: other.String()}, wantID: id},
		"txbox":       {h: map[string]string{txbox.HeaderEventID: id.String(), txbox.HeaderEventType: "t", "ce_id": other.String()}, key: "rk", wantID: id, wantType: "t", wantKy: "rk"},
		"fallback":    {h: map[string]string{"ce_specversion": "1.0"}, fallback: id.String(), wantID: id},
	} {
		m, err := consume.NewMessageFromHeaders(getter(tc.h), consume.PrefixKafka, tc.fallback, tc.key, nil, tc.h)
		if err != nil || m.ID != tc.wantID || m.Type != tc.wantType || m.Key != tc.wantKy {
			t.Errorf("%s: %+v, %v; want id %s type %q key %q", name, m, err, tc.wantID, tc.wantType, tc.wantKy)
		}
	}
	for name, h := range map[string]map[string]string{
		"specversion 2": {"ce-specversion": "2.0", "ce-id": id.String()},
		"not a uuid":    {"ce-specversion": "1.0", "ce-id": "A234-1234-1234"},
		"no id":         {"ce-specversion": "1.0"},
	} {
		_, err := consume.NewMessageFromHeaders(getter(h), consume.PrefixHTTP, "", "", nil, h)
		var ime *consume.InvalidMessageError
		if !errors.As(err, &ime) {
			t.Errorf("%s: %v, want an InvalidMessageError", name, err)
		}
	}
}

// TestParseStructured reads what the webhook sender's structured mode
// writes, for a JSON payload and for bytes, and refuses envelopes a
// retry cannot fix.
func TestParseStructured(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		ct      string
		payload []byte
	}{
		{"application/json", []byte(`{"a": [1, 2]}`)},
		{"application/octet-stream", []byte("\x00\xff bytes")},
		{"text/plain", []byte("plain text")},
	} {
		id := txbox.NewID()
		e := sender.CloudEvents{Source: "/s", DataContentType: tc.ct}.Event(&sender.Message{ID: id, EventType: "t", Key: "k"})
		body, err := e.Structured(tc.payload)
		if err != nil {
			t.Fatal(err)
		}
		m, err := consume.ParseStructured(body)
		if err != nil {
			t.Fatalf("%s: %v", tc.ct, err)
		}
		if m.ID != id || m.Type != "t" || m.Key != "k" || !bytes.Equal(m.Payload, tc.payload) {
			t.Errorf("%s: %+v from %s", tc.ct, m, body)
		}
		if m.Headers["ce-source"] != "/s" || m.Headers["content-type"] != tc.ct {
			t.Errorf("%s: headers %v", tc.ct, m.Headers)
		}
	}
	// data as a JSON string with a text datacontenttype is that text.
	m, err := consume.ParseStructured([]byte(`{"specversion":"1.0","id":"` + txbox.NewID().String() + `","source":"/s","type":"t","datacontenttype":"text/plain","data":"hi"}`))
	if err != nil || string(m.Payload) != "hi" {
		t.Errorf("string data: %q, %v", m.Payload, err)
	}
	for name, body := range map[string]string{
		"not json":    `{`,
		"array":       `[{"specversion":"1.0"}]`,
		"both data":   `{"specversion":"1.0","id":"` + txbox.NewID().String() + `","data":1,"data_base64":"AA=="}`,
		"bad base64":  `{"specversion":"1.0","id":"` + txbox.NewID().String() + `","data_base64":"%%"}`,
		"specversion": `{"specversion":"0.3","id":"` + txbox.NewID().String() + `"}`,
		"no id":       `{"specversion":"1.0"}`,
	} {
		_, err := consume.ParseStructured([]byte(body))
		var ime *consume.InvalidMessageError
		if !errors.As(err, &ime) {
			t.Errorf("%s: %v, want an InvalidMessageError", name, err)
		}
	}
}

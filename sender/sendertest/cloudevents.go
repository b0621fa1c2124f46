package sendertest

import (
	"bytes"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/binding/spec"
	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/sender"
)

// WantCloudEvent returns the attributes, by name, that the CloudEvent of
// m must carry when its sender has source and the default
// datacontenttype contentType (docs/cloudevents.md): id the event id,
// type the event type, subject the key, time the creation time, the
// traceparent and tracestate extensions when m has those headers.
func WantCloudEvent(m *sender.Message, source, contentType string) map[string]string {
	want := map[string]string{
		"specversion": sender.SpecVersion, "id": m.ID.String(), "source": source,
		"type": m.EventType, "datacontenttype": contentType,
	}
	for k, v := range m.Headers {
		if sender.IsContentType(k) {
			want["datacontenttype"] = v
		}
	}
	if m.Key != "" {
		want["subject"] = m.Key
	}
	if !m.CreatedAt.IsZero() {
		want["time"] = m.CreatedAt.UTC().Format(time.RFC3339Nano)
	}
	for _, h := range []string{txbox.HeaderTraceParent, txbox.HeaderTraceState} {
		if v := m.Headers[h]; v != "" {
			want[h] = v
		}
	}
	return want
}

// SDKAttributes returns every attribute of e, as the CloudEvents Go SDK
// decoded it, by name: the context attributes and the extensions, time
// in RFC 3339 with nanoseconds.
func SDKAttributes(e event.Event) map[string]string {
	got := map[string]string{"specversion": e.SpecVersion(), "id": e.ID(), "source": e.Source(), "type": e.Type()}
	if v := e.Subject(); v != "" {
		got["subject"] = v
	}
	if v := e.DataContentType(); v != "" {
		got["datacontenttype"] = v
	}
	if v := e.DataSchema(); v != "" {
		got["dataschema"] = v
	}
	if !e.Time().IsZero() {
		got["time"] = e.Time().UTC().Format(time.RFC3339Nano)
	}
	for k, v := range e.Extensions() {
		got[k] = fmt.Sprint(v)
	}
	return got
}

// CheckCloudEvent fails t unless e, as the SDK decoded it from what the
// sender sent for m, has exactly the attributes WantCloudEvent gives and
// m's payload as its data, byte for byte.
func CheckCloudEvent(t testing.TB, e event.Event, m *sender.Message, source, contentType string) {
	t.Helper()
	if err := e.Validate(); err != nil {
		t.Errorf("event %s: the SDK finds it invalid: %v", m.ID, err)
	}
	got, want := SDKAttributes(e), WantCloudEvent(m, source, contentType)
	if !maps.Equal(got, want) {
		keys := slices.Sorted(maps.Keys(want))
		t.Errorf("event %s: attributes\n got  %v\n want %v (keys %v)", m.ID, got, want, keys)
	}
	if !bytes.Equal(e.Data(), m.Payload) {
		t.Errorf("event %s: data %q, want %q", m.ID, e.Data(), m.Payload)
	}
}

// DecodeBinary decodes a binary-mode CloudEvent with the SDK's attribute
// rules (binding/spec) for a transport without an SDK binding: every
// header named prefix + attribute is that attribute (an extension when
// the name is not a context attribute), dataContentType is the
// datacontenttype from the transport's own content-type field ("" to
// read it from the prefixed headers, as Redis fields carry it), data the
// body.
func DecodeBinary(prefix string, headers map[string]string, dataContentType string, data []byte) (event.Event, error) {
	sv := headers[prefix+"specversion"]
	version := spec.New().Version(sv)
	if version == nil {
		return event.Event{}, fmt.Errorf("no %sspecversion of a known version: %q", prefix, sv)
	}
	e := event.New(sv)
	for k, v := range headers {
		name, ok := strings.CutPrefix(k, prefix)
		if !ok || name == "specversion" {
			continue
		}
		if err := version.SetAttribute(e.Context, name, v); err != nil {
			return e, fmt.Errorf("%s: %w", k, err)
		}
	}
	if dataContentType != "" {
		e.SetDataContentType(dataContentType)
	}
	e.DataEncoded = data
	return e, nil
}

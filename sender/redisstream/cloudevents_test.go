package redisstream_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/sender"
	"github.com/txbox/txbox/sender/redisstream"
	"github.com/txbox/txbox/sender/sendertest"
)

// TestCloudEventsFields sends in the cloudevents format and decodes each
// stream entry with the SDK's attribute rules, each field named after its
// attribute (Redis has no binding): every attribute and the data bytes
// must be the event's, and the headers field still carries the txbox
// headers.
func TestCloudEventsFields(t *testing.T) {
	t.Parallel()
	rdb := direct(t)
	stream := newStream(t, rdb)
	s := newSender(t, redisstream.Config{CloudEvents: sender.CloudEvents{Source: "/orders"}})
	msgs := sendertest.NewMessages(3, sender.Route{Stream: stream, Format: sender.FormatCloudEvents})
	msgs[0].Headers[txbox.HeaderTraceParent] = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	msgs[1].Key = ""
	msgs[2].Headers["Content-Type"] = "application/json"
	if err := s.Send(context.Background(), msgs); err != nil {
		t.Fatal(err)
	}
	xs := read(t, rdb, stream)
	if len(xs) != len(msgs) {
		t.Fatalf("%d entries, want %d", len(xs), len(msgs))
	}
	for i, x := range xs {
		m := msgs[i]
		fields := map[string]string{}
		for k, v := range x.Values {
			fields[k] = str(v)
		}
		for _, f := range []string{"payload", "key"} {
			if _, ok := fields[f]; ok {
				t.Errorf("entry %d has the txbox field %q too: %v", i, f, fields)
			}
		}
		data := []byte(fields["data"])
		delete(fields, "data")
		var h map[string]string
		if err := json.Unmarshal([]byte(fields["headers"]), &h); err != nil {
			t.Fatal(err)
		}
		delete(fields, "headers")
		e, err := sendertest.DecodeBinary("", fields, "", data)
		if err != nil {
			t.Fatalf("entry %d: %v", i, err)
		}
		sendertest.CheckCloudEvent(t, e, m, "/orders", sender.DefaultDataContentType)
		if h[txbox.HeaderEventID] != m.ID.String() {
			t.Errorf("entry %d headers = %v", i, h)
		}
	}
}

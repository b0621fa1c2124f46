package sender_test

import (
	"errors"
	"maps"
	"testing"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/sender"
)

func TestSummarizeAndResults(t *testing.T) {
	t.Parallel()
	down := txbox.Transient(errors.New("connection refused"))
	bad := txbox.Rejected(errors.New("too large"))

	if err := sender.Summarize([]error{nil, nil}); err != nil {
		t.Fatalf("all acked: %v", err)
	}
	// A whole batch lost to an outage is one error, which Results fans out.
	err := sender.Summarize([]error{down, down, down})
	if err != down {
		t.Fatalf("all transient: got %v, want the first error", err)
	}
	for i, e := range sender.Results(err, 3) {
		if txbox.Classify(e) != txbox.ClassTransient {
			t.Fatalf("result %d: %v, want transient", i, e)
		}
	}
	// Mixed outcomes keep their positions.
	err = sender.Summarize([]error{nil, bad, down})
	var be *sender.BatchError
	if !errors.As(err, &be) {
		t.Fatalf("mixed: got %T, want *BatchError", err)
	}
	got := sender.Results(err, 3)
	if got[0] != nil || got[1] != bad || got[2] != down {
		t.Fatalf("mixed results out of place: %v", got)
	}
	// A BatchError of the wrong length is not trusted position by position.
	for i, e := range sender.Results(&sender.BatchError{Errs: []error{bad}}, 2) {
		if e == nil {
			t.Fatalf("result %d of a mismatched BatchError is nil: a message would be marked acked", i)
		}
	}
}

func TestRouteExpand(t *testing.T) {
	t.Parallel()
	r := sender.Route{Subject: "events.{event_type}", URL: "https://h/{event_type}"}.Expand("order-created")
	if r.Subject != "events.order-created" || r.URL != "https://h/order-created" || r.Topic != "" {
		t.Fatalf("expand: %+v", r)
	}
}

func TestMissingHeadersFillsOnlyWhatIsMissing(t *testing.T) {
	t.Parallel()
	id := txbox.NewID()
	at := time.Date(2026, 1, 2, 3, 4, 5, 6, time.FixedZone("x", 3600))
	collect := func(m *sender.Message) map[string]string {
		got := map[string]string{}
		m.MissingHeaders(func(k, v string) {
			if _, dup := got[k]; dup {
				t.Errorf("header %s set twice", k)
			}
			got[k] = v
		})
		return got
	}
	got := collect(&sender.Message{ID: id, EventType: "order-created", CreatedAt: at})
	want := map[string]string{
		txbox.HeaderEventID:   id.String(),
		txbox.HeaderEventType: "order-created",
		txbox.HeaderCreatedAt: "2026-01-02T02:04:05.000000006Z",
	}
	if !maps.Equal(got, want) {
		t.Errorf("bare message: %v, want %v", got, want)
	}
	// Present headers win, an empty type and a zero time add nothing.
	got = collect(&sender.Message{ID: id, Headers: map[string]string{txbox.HeaderEventID: "given"}})
	if len(got) != 0 {
		t.Errorf("id given, no type, no time: %v, want nothing", got)
	}
}

package sender_test

import (
	"errors"
	"testing"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/sender"
)

func TestCloudEventsResolve(t *testing.T) {
	t.Parallel()
	got, err := sender.CloudEvents{}.Resolve("text/plain", false)
	if err != nil || got != (sender.CloudEvents{Format: sender.FormatTxbox, Source: sender.DefaultSource, DataContentType: "text/plain"}) {
		t.Fatalf("Resolve of the zero value = %+v, %v", got, err)
	}
	for field, ce := range map[string]sender.CloudEvents{
		"format":       {Format: "CloudEvents"},
		"source":       {Source: "/a\nb"},
		"content-type": {DataContentType: "json"},
	} {
		_, err := ce.Resolve("", true)
		var cerr *txbox.ConfigError
		if !errors.As(err, &cerr) || cerr.Field != field || !errors.Is(err, txbox.ErrInvalidConfig) {
			t.Errorf("Resolve(%+v) = %v, want a ConfigError for %s", ce, err, field)
		}
	}
	if _, err := (sender.CloudEvents{Format: sender.FormatCloudEventsStructured}).Resolve("", false); err == nil {
		t.Error("structured accepted by a sender without a structured mode")
	}
}

func TestCloudEventsFormatOfAndBinary(t *testing.T) {
	t.Parallel()
	ce := sender.CloudEvents{Format: sender.FormatCloudEvents}
	m := &sender.Message{ID: txbox.NewID(), EventType: "t", Headers: map[string]string{"CONTENT-TYPE": "application/xml"}}
	if e, ok, err := ce.Binary(m); !ok || err != nil || e.DataContentType != "application/xml" || e.Subject != "" || e.Time != "" {
		t.Fatalf("Binary = %+v, %v, %v", e, ok, err)
	}
	m.Route.Format = sender.FormatTxbox
	if _, ok, err := ce.Binary(m); ok || err != nil {
		t.Fatalf("route txbox: %v, %v", ok, err)
	}
	for _, f := range []sender.Format{sender.FormatCloudEventsStructured, "yaml"} {
		m.Route.Format = f
		if _, _, err := ce.Binary(m); !errors.Is(err, sender.ErrFormatUnsupported) {
			t.Errorf("route %q: %v, want ErrFormatUnsupported", f, err)
		}
	}
}

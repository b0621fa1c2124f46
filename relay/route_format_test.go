package relay

import (
	"errors"
	"testing"

	"github.com/txbox/txbox/sender"
)

// TestRouteFormatIsChecked: an unknown route format is a ConfigError
// naming its key when the relay is built, before any message is sent.
func TestRouteFormatIsChecked(t *testing.T) {
	t.Parallel()
	cfg := Config{Store: fakeDriver{}, Senders: map[string]sender.Sender{"s": nopSender{}},
		Events: map[string]EventSettings{"orders": {Route: &sender.Route{Subject: "o", Format: "cloudevent"}}}}
	_, err := New(cfg)
	var ce *ConfigError
	if !errors.As(err, &ce) || ce.Field != `Events["orders"].Route.Format` {
		t.Fatalf("New = %v, want a ConfigError for Events[\"orders\"].Route.Format", err)
	}
	cfg.Events["orders"] = EventSettings{Route: &sender.Route{Subject: "o", Format: sender.FormatCloudEvents}}
	if _, err := cfg.settingsFor("orders"); err != nil {
		t.Fatalf("format cloudevents: %v", err)
	}
}

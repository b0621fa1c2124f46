package config

import (
	"slices"
	"strings"
	"testing"

	"github.com/txbox/txbox/sender/webhook"
)

// TestWebhookPermanentStatus: a webhook sender's permanent-status reaches
// webhook.Config.PermanentStatus; a code that is not a 4xx, or 408/429,
// is refused at load, naming the key.
func TestWebhookPermanentStatus(t *testing.T) {
	t.Parallel()
	c, err := Load(Source{Name: "txbox.yaml", YAML: []byte(`
senders:
  h: { type: webhook, url: "http://127.0.0.1:9/", permanent-status: [422, 409] }
`)})
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := c.senderConfig("h", func(string) string { return "" }, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.(webhook.Config).PermanentStatus; !slices.Equal(got, []int{422, 409}) {
		t.Fatalf("PermanentStatus %v, want [422 409]", got)
	}
	for _, bad := range []string{"[500]", "[429]", "[408]", "[200]", "[abc]"} {
		_, err := Load(Source{Name: "txbox.yaml", YAML: []byte(`
senders:
  h: { type: webhook, url: "http://127.0.0.1:9/", permanent-status: ` + bad + ` }
`)})
		if err == nil || !strings.Contains(err.Error(), "senders.h.permanent-status") {
			t.Errorf("permanent-status %s: %v, want an error naming senders.h.permanent-status", bad, err)
		}
	}
}

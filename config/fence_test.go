package config

import (
	"strings"
	"testing"

	"github.com/txbox/txbox/relay"
)

// TestOrderingFenceKey: ordering-fence decodes per type (off is the string
// "off", not YAML 1.1's false), a bad value names its key path, and the
// fence-threshold check is on only while a type orders behind the fence.
func TestOrderingFenceKey(t *testing.T) {
	t.Parallel()
	c, err := Load(Source{Name: "txbox.yaml", YAML: []byte(`
defaults: { ordering: key }
events:
  a: { ordering-fence: off }
  b: {}
`)})
	if err != nil {
		t.Fatal(err)
	}
	if f := c.Effective("a").OrderingFence; f == nil || *f != relay.OrderingFenceOff {
		t.Errorf("a: ordering-fence = %v, want off", f)
	}
	if f := c.Effective("b").OrderingFence; f == nil || *f != relay.OrderingFenceOn {
		t.Errorf("b: ordering-fence = %v, want the default on", f)
	}
	if !c.HasFencedOrdering() {
		t.Error("HasFencedOrdering = false with b ordered behind the fence")
	}
	if c.Health.FenceThreshold != DefaultHealthFenceThreshold {
		t.Errorf("health.fence-threshold = %s, want %s", c.Health.FenceThreshold, DefaultHealthFenceThreshold)
	}

	c, err = Load(Source{Name: "txbox.yaml", YAML: []byte(`
defaults: { ordering: key, ordering-fence: off }
events: { a: {}, b: { ordering: none } }
health: { fence-threshold: 0s }
`)})
	if err != nil {
		t.Fatal(err)
	}
	if c.HasFencedOrdering() {
		t.Error("HasFencedOrdering = true with every ordered type's fence off")
	}
	if c.Health.FenceThreshold != 0 {
		t.Errorf("health.fence-threshold = %s, want 0 (off)", c.Health.FenceThreshold)
	}

	for yaml, want := range map[string]string{
		"events: { a: { ordering: key, ordering-fence: maybe } }": `events.a.ordering-fence: must be on or off, not "maybe"`,
		"health: { fence-threshold: -1s }":                        "health.fence-threshold: must not be negative",
	} {
		if _, err := Load(Source{Name: "txbox.yaml", YAML: []byte(yaml)}); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: error = %v, want %q", yaml, err, want)
		}
	}
}

package config

import (
	"strings"
	"testing"
	"time"

	"github.com/txbox/txbox"
)

// TestCommitHorizonKey: commit-horizon decodes per type (off is the string
// "off", not YAML 1.1's false), a bad value names its key path, and the
// horizon-threshold check is on only while a type orders below the commit
// horizon.
func TestCommitHorizonKey(t *testing.T) {
	t.Parallel()
	c, err := Load(Source{Name: "txbox.yaml", YAML: []byte(`
defaults: { ordering: key }
events:
  a: { commit-horizon: off }
  b: {}
`)})
	if err != nil {
		t.Fatal(err)
	}
	if f := c.Effective("a").CommitHorizon; f == nil || *f != txbox.CommitHorizonOff {
		t.Errorf("a: commit-horizon = %v, want off", f)
	}
	if f := c.Effective("b").CommitHorizon; f == nil || *f != txbox.CommitHorizonOn {
		t.Errorf("b: commit-horizon = %v, want the default on", f)
	}
	if !c.HasCommitHorizon() {
		t.Error("HasCommitHorizon = false with b ordered below the commit horizon")
	}
	if c.Health.HorizonThreshold != DefaultHealthHorizonThreshold {
		t.Errorf("health.horizon-threshold = %s, want %s", c.Health.HorizonThreshold, DefaultHealthHorizonThreshold)
	}

	c, err = Load(Source{Name: "txbox.yaml", YAML: []byte(`
defaults: { ordering: key, commit-horizon: off }
events: { a: {}, b: { ordering: none } }
health: { horizon-threshold: 0s }
`)})
	if err != nil {
		t.Fatal(err)
	}
	if c.HasCommitHorizon() {
		t.Error("HasCommitHorizon = true with every ordered type's horizon off")
	}
	if c.Health.HorizonThreshold != 0 {
		t.Errorf("health.horizon-threshold = %s, want 0 (off)", c.Health.HorizonThreshold)
	}

	for yaml, want := range map[string]string{
		"events: { a: { ordering: key, commit-horizon: maybe } }": `events.a.commit-horizon: must be on or off, not "maybe"`,
		"health: { horizon-threshold: -1s }":                      "health.horizon-threshold: must not be negative",
	} {
		if _, err := Load(Source{Name: "txbox.yaml", YAML: []byte(yaml)}); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: error = %v, want %q", yaml, err, want)
		}
	}
}

// TestDeprecatedHorizonKeys: the keys this release renamed still work
// for one release (docs/upgrading.md): ordering-fence is commit-horizon
// and fence-threshold is horizon-threshold, in the file, in environment
// variables and in --set; a bad value names the key the file has; both
// names in one mapping is an error naming both key paths.
func TestDeprecatedHorizonKeys(t *testing.T) {
	t.Parallel()
	c, err := Load(Source{Name: "txbox.yaml", YAML: []byte(`
defaults: { ordering: key, ordering-fence: off }
events:
  a: { ordering-fence: on }
  b: {}
health: { fence-threshold: 5s }
`)})
	if err != nil {
		t.Fatal(err)
	}
	if f := c.Effective("a").CommitHorizon; f == nil || *f != txbox.CommitHorizonOn {
		t.Errorf("a: commit-horizon = %v, want on from ordering-fence", f)
	}
	if f := c.Effective("b").CommitHorizon; f == nil || *f != txbox.CommitHorizonOff {
		t.Errorf("b: commit-horizon = %v, want off from defaults.ordering-fence", f)
	}
	if c.Health.HorizonThreshold != 5*time.Second {
		t.Errorf("health.horizon-threshold = %s, want 5s from fence-threshold", c.Health.HorizonThreshold)
	}
	for _, st := range c.Settings() {
		if st.Path == "health.horizon-threshold" && !strings.Contains(st.Source, "deprecated key health.fence-threshold") {
			t.Errorf("health.horizon-threshold: source %q, want it to name the deprecated key", st.Source)
		}
	}

	c, err = Load(Source{Name: "txbox.yaml", YAML: []byte("defaults: { ordering: key }\nevents: { a: {} }\n"),
		Env: []string{"TXBOX_HEALTH_FENCE_THRESHOLD=0s", "TXBOX_EVENTS_A_ORDERING_FENCE=off"}})
	if err != nil {
		t.Fatal(err)
	}
	if c.Health.HorizonThreshold != 0 {
		t.Errorf("TXBOX_HEALTH_FENCE_THRESHOLD=0s: horizon-threshold = %s, want 0", c.Health.HorizonThreshold)
	}
	if f := c.Effective("a").CommitHorizon; f == nil || *f != txbox.CommitHorizonOff {
		t.Errorf("TXBOX_EVENTS_A_ORDERING_FENCE=off: commit-horizon = %v, want off", f)
	}

	c, err = Load(Source{Name: "txbox.yaml", YAML: []byte("defaults: { ordering: key }\n"),
		Set: []string{"events.new.ordering-fence=off"}})
	if err != nil {
		t.Fatal(err)
	}
	if f := c.Effective("new").CommitHorizon; f == nil || *f != txbox.CommitHorizonOff {
		t.Errorf("--set events.new.ordering-fence=off: commit-horizon = %v, want off", f)
	}

	for yaml, want := range map[string][]string{
		"events: { a: { ordering: key, ordering-fence: maybe } }": {`events.a.ordering-fence: must be on or off, not "maybe"`},
		"events: { a: { commit-horizon: on, ordering-fence: on } }": {
			"events.a.ordering-fence: is the deprecated name of events.a.commit-horizon, which is also set"},
		"defaults: { commit-horizon: off, ordering-fence: off }": {
			"defaults.ordering-fence: is the deprecated name of defaults.commit-horizon"},
		"health: { horizon-threshold: 1s, fence-threshold: 2s }": {
			"health.fence-threshold: is the deprecated name of health.horizon-threshold, which is also set"},
		"health: { fence-threshold: -1s }": {"health.fence-threshold: must not be negative"},
	} {
		_, err := Load(Source{Name: "txbox.yaml", YAML: []byte(yaml)})
		for _, w := range want {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error = %v, want %q", yaml, err, w)
			}
		}
	}
}

package config

import (
	"errors"
	"testing"
)

// FuzzLoad feeds arbitrary bytes to the loader. It must never panic, every
// failure must be a typed ErrInvalid, and every accepted configuration must
// give complete settings for its event types. Seeds live in
// testdata/fuzz/FuzzLoad; run with
//
//	go test -run '^$' -fuzz FuzzLoad -fuzztime 60s ./config
func FuzzLoad(f *testing.F) {
	f.Add([]byte(fullYAML), "TXBOX_DEFAULTS_BATCH_SIZE=7")
	f.Add([]byte("events: { a: { polling: { min-delay: 2s } } }"), "")
	f.Add([]byte("a: &a [*a, *a]"), "")
	f.Fuzz(func(t *testing.T, data []byte, env string) {
		c, err := Load(Source{YAML: data, Env: []string{env}})
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("error %T %v does not match ErrInvalid", err, err)
			}
			return
		}
		for _, et := range append(c.EventTypes(), "unlisted") {
			e := c.Effective(et)
			if e.BatchSize == nil || *e.BatchSize < 1 || e.Polling.MaxDelay == nil || *e.Polling.MaxDelay < *e.Polling.MinDelay {
				t.Fatalf("accepted config has bad settings for %q: %+v", et, e)
			}
		}
	})
}

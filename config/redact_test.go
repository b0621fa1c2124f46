package config

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"
)

// TestNewLoggerScrubsSecrets: a secret the configuration points to (here
// a variable named by password-env, and a webhook URL's query value)
// appears in no log line, whether it comes in the message, a string, an
// error or a group, in both formats.
func TestNewLoggerScrubsSecrets(t *testing.T) {
	t.Parallel()
	const pw, key = "Env-Secret-6Hq2", "Url-Key-9Kx4"
	for _, format := range []string{"text", "json"} {
		c, err := Load(Source{
			YAML: []byte(`
senders:
  r: { type: redis, password-env: PW }
  w: { type: webhook, url: "https://h/in?api_key=` + key + `" }
defaults: { sender: r }
log: { format: ` + format + ` }
`),
			Env: []string{"PW=" + pw},
		})
		if err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		log := c.NewLogger(&buf)
		log.Error("auth "+pw+" refused", "error", errors.New("WRONGPASS "+pw), "url", "https://h/in?api_key="+key,
			slog.Group("g", "s", pw))
		out := buf.String()
		if strings.Contains(out, pw) || strings.Contains(out, key) || !strings.Contains(out, "xxxxx") {
			t.Errorf("%s: %s", format, out)
		}
	}
}

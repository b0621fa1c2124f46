package main

import (
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode"

	"github.com/txbox/txbox/internal/testenv"
)

// secretForms are the ways a secret reaches the configuration: every DSN
// form of each dialect and every sender URL, token and password key.
// Each builds the YAML (and environment) holding secret; closed is a
// loopback address nothing listens on, db a SQLite file.
var secretForms = []struct {
	name  string
	build func(secret, closed, db string) (yml string, env []string)
}{
	{"postgres url", func(s, c, _ string) (string, []string) {
		return dbYAML("postgres", "postgres://app:"+s+"@"+c+"/db?sslmode=disable&connect_timeout=2", c), nil
	}},
	{"postgres url escaped", func(s, c, _ string) (string, []string) {
		return dbYAML("postgres", "postgres://app:"+url.QueryEscape(s)+"@"+c+"/db", c), nil
	}},
	{"postgres url query password", func(s, c, _ string) (string, []string) {
		return dbYAML("postgres", "postgres://app@"+c+"/db?password="+url.QueryEscape(s), c), nil
	}},
	{"postgres key=value", func(s, c, _ string) (string, []string) {
		host, port, _ := strings.Cut(c, ":")
		q := strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(s)
		return dbYAML("postgres", fmt.Sprintf("host=%s port=%s user=app password='%s' dbname=db connect_timeout=2", host, port, q), c), nil
	}},
	{"postgres dsn-env", func(s, c, _ string) (string, []string) {
		y := fmt.Sprintf("database: { dialect: postgres, dsn-env: APP_DSN }\n%s", webhookAt(c))
		return y, []string{"APP_DSN=postgres://app:" + s + "@" + c + "/db"}
	}},
	{"mysql", func(s, c, _ string) (string, []string) {
		return dbYAML("mysql", "app:"+s+"@tcp("+c+")/db?parseTime=true&timeout=2s", c), nil
	}},
	{"sqlite path with parameters", func(s, c, db string) (string, []string) {
		return dbYAML("sqlite", db+"?_auth_pass="+url.QueryEscape(s), c), nil
	}},
	{"nats user password", func(s, c, db string) (string, []string) {
		return senderYAML(db, fmt.Sprintf(`{ type: nats, url: %q }`, "nats://u:"+s+"@"+c)), nil
	}},
	{"nats server list", func(s, c, db string) (string, []string) {
		return senderYAML(db, fmt.Sprintf(`{ type: nats, url: %q }`, "nats://u:"+s+"@"+c+",nats://"+c)), nil
	}},
	{"nats token", func(s, c, db string) (string, []string) {
		return senderYAML(db, fmt.Sprintf(`{ type: nats, url: %q }`, "nats://"+url.QueryEscape(s)+"@"+c)), nil
	}},
	{"nats password-env", func(s, c, db string) (string, []string) {
		return senderYAML(db, fmt.Sprintf(`{ type: nats, url: %q, user: u, password-env: PW }`, "nats://"+c)), []string{"PW=" + s}
	}},
	{"rabbitmq url", func(s, c, db string) (string, []string) {
		return senderYAML(db, fmt.Sprintf(`{ type: rabbitmq, url: %q }`, "amqp://guest:"+url.QueryEscape(s)+"@"+c+"/")), nil
	}},
	{"rabbitmq password-env", func(s, c, db string) (string, []string) {
		return senderYAML(db, fmt.Sprintf(`{ type: rabbitmq, url: %q, password-env: PW }`, "amqp://guest@"+c+"/")), []string{"PW=" + s}
	}},
	{"webhook url query", func(s, c, db string) (string, []string) {
		return senderYAML(db, fmt.Sprintf(`{ type: webhook, url: %q }`, "http://"+c+"/hook?api_key="+url.QueryEscape(s)+"&v=1")), nil
	}},
	{"webhook route url", func(s, c, db string) (string, []string) {
		y := senderYAML(db, `{ type: webhook }`)
		return y + fmt.Sprintf("events:\n  e: { route: { url: %q } }\n", "http://"+c+"/in?sig="+url.QueryEscape(s)), nil
	}},
	{"webhook hmac-secret-env", func(s, c, db string) (string, []string) {
		return senderYAML(db, fmt.Sprintf(`{ type: webhook, url: %q, hmac-secret-env: HS }`, "http://"+c+"/")), []string{"HS=" + s}
	}},
	{"redis password-env", func(s, c, db string) (string, []string) {
		return senderYAML(db, fmt.Sprintf(`{ type: redis, addr: %q, password-env: PW }`, c)), []string{"PW=" + s}
	}},
	{"kafka sasl", func(s, c, db string) (string, []string) {
		return senderYAML(db, fmt.Sprintf(`{ type: kafka, brokers: [%q], sasl: { mechanism: plain, username: u, password-env: PW } }`, c)), []string{"PW=" + s}
	}},
}

func dbYAML(dialect, dsn, closed string) string {
	return fmt.Sprintf("database: { dialect: %s, dsn: %q }\n%s", dialect, dsn, webhookAt(closed))
}

func webhookAt(closed string) string {
	return fmt.Sprintf("senders:\n  s: { type: webhook, url: %q }\n", "http://"+closed+"/")
}

func senderYAML(db, sender string) string {
	return fmt.Sprintf("database: { dsn: %q }\nsenders:\n  s: %s\n", db, sender)
}

// FuzzSecretsNeverPrinted: a password or token of any form, for every
// dialect and sender, appears in no output of `config print`, `config
// check` (with and without --connect, to closed ports so that the
// drivers' error texts are exercised), `status` and `relay` (their error
// texts and logs), each run in-process through the command's own
// functions. The seed corpus runs with the normal tests; `go test -fuzz
// FuzzSecretsNeverPrinted ./cmd/txbox` looks for more.
func FuzzSecretsNeverPrinted(f *testing.F) {
	for i := range secretForms {
		f.Add(i, "pa,ssW0rd-Canary")
		f.Add(i, "S3cret/with@odd?chars#and:colons")
	}
	f.Add(0, "Zq9'quote\\back slash")
	closed := closedPort(f)
	dir := f.TempDir()
	db := filepath.Join(dir, "t.db")
	// A migrated database, so that --connect goes on to the senders.
	if code, _, errOut := runInProcess(f, nil, "migrate", "--dsn", db); code != exitOK {
		f.Fatalf("migrate: %s", errOut)
	}
	f.Fuzz(func(t *testing.T, form int, secret string) {
		if form < 0 || form >= len(secretForms) {
			return
		}
		secret = strings.Map(func(r rune) rune {
			if r > unicode.MaxASCII || !unicode.IsPrint(r) || r == '"' {
				return -1
			}
			return r
		}, secret)
		// Scrubbing works on secrets of at least 4 characters (shorter
		// ones would blank out ordinary words); a canary of 8 is
		// unmistakable in the output.
		if len(secret) < 8 || strings.TrimSpace(secret) != secret || strings.Contains(secret, "xxxxx") {
			return
		}
		fm := secretForms[form]
		yml, env := fm.build(secret, closed, db)
		path := filepath.Join(t.TempDir(), "txbox.yaml")
		if err := os.WriteFile(path, []byte(yml), 0o600); err != nil {
			t.Fatal(err)
		}
		runs := [][]string{
			{"config", "print", "--config", path},
			{"config", "check", "--config", path},
			{"config", "check", "--config", path, "--connect", "--timeout", "1s"},
			{"status", "--config", path},
		}
		if strings.HasPrefix(yml, "database: { dialect: postgres") || strings.HasPrefix(yml, "database: { dialect: mysql") {
			// The database is down: the relay logs and exits.
			runs = append(runs, []string{"relay", "--config", path})
		}
		for _, args := range runs {
			_, out, errOut := runInProcess(t, env, args...)
			for _, leak := range []string{secret, url.QueryEscape(secret)} {
				if strings.Contains(out, leak) || strings.Contains(errOut, leak) {
					t.Fatalf("%s: %v prints the secret %q:\nstdout:\n%s\nstderr:\n%s", fm.name, args, leak, out, errOut)
				}
			}
		}
	})
}

// TestRelayLogsScrubURLSecrets: a webhook URL's query secret appears in
// no log line of the relay at debug level, a failed send's error and the
// opened circuit's destination included (the sender leaves the query out
// of both, and the logger scrubs the configuration's secrets from any
// text that would still quote it).
func TestRelayLogsScrubURLSecrets(t *testing.T) {
	t.Parallel()
	const secret = "Query-Canary-4f8"
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "txbox.yaml")
	yml := fmt.Sprintf(`
database: { dsn: %s/relay.db }
senders: { hooks: { type: webhook, url: "http://%s/in?api_key=%s" } }
defaults: { polling: { min-delay: 5ms, max-delay: 50ms }, max-attempts: 1 }
relay: { discover-interval: 20ms, shutdown-timeout: 10s }
`, dir, closedPort(t), secret)
	if err := os.WriteFile(cfgPath, []byte(yml), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, _, errOut := runInProcess(t, nil, "migrate", "--config", cfgPath); code != exitOK {
		t.Fatalf("migrate: %s", errOut)
	}
	stderr, _, stop := startRelay(t, "--config", cfgPath, "--set", "log.level=debug")
	if code, _, errOut := runInProcess(t, nil, "publish", "--config", cfgPath, "--type", "t", "--payload", `{}`); code != exitOK {
		t.Fatalf("publish: %s", errOut)
	}
	testenv.WaitFor(t, 30*time.Second, "a logged send failure", func() bool {
		return strings.Contains(stderr.String(), "connection refused")
	})
	stop()
	if strings.Contains(stderr.String(), secret) {
		t.Fatalf("the URL's query secret is logged:\n%s", stderr.String())
	}
}

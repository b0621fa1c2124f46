package main

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/txbox/txbox/internal/natstest"
	"github.com/txbox/txbox/internal/testenv"
)

// lineOf returns the output line that contains every part, or "".
func lineOf(out string, parts ...string) string {
	for _, l := range strings.Split(out, "\n") {
		ok := true
		for _, p := range parts {
			ok = ok && strings.Contains(l, p)
		}
		if ok {
			return l
		}
	}
	return ""
}

// TestConfigCheck: check resolves each type's settings and destination
// from the file; with --connect it finds the destinations that exist
// (a JetStream stream, a Kafka topic, a RabbitMQ exchange) and those that
// do not, including the destination of a type only the database knows,
// and exits 1 until every one exists.
func TestConfigCheck(t *testing.T) {
	t.Parallel()
	testenv.RequireTCP(t, "NATS", "127.0.0.1:4222")
	testenv.RequireTCP(t, "RabbitMQ", "127.0.0.1:5672")
	db := t.TempDir() + "/t.db"
	if code, _, errOut := runInProcess(t, nil, "migrate", "--dsn", db); code != exitOK {
		t.Fatalf("migrate: %s", errOut)
	}
	if code, _, errOut := runInProcess(t, nil, "publish", "--dsn", db, "--type", "only.in.db", "--payload", "{}"); code != exitOK {
		t.Fatalf("publish: %s", errOut)
	}
	// A stream binding one subject of the test's own prefix.
	prefix := strings.ReplaceAll(testenv.UniqueName("cfgchk"), "_", "")
	js := natstest.JetStream(t, testenv.NATSURL)
	ctx := context.Background()
	stream := strings.ToUpper(prefix)
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: stream, Subjects: []string{prefix + ".present"}, Storage: jetstream.MemoryStorage}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = js.DeleteStream(context.Background(), stream) })
	kc, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "topic-present"))
	if err != nil {
		t.Fatal(err)
	}
	defer kc.Close()

	file := func(withMissing bool) string {
		y := fmt.Sprintf(`
database: { dialect: sqlite, dsn: %q }
senders:
  n: { type: nats, url: %q }
  k: { type: kafka, brokers: [%s] }
  r: { type: rabbitmq, url: "amqp://guest@127.0.0.1:5672/", password-env: RMQ_PW }
defaults: { sender: n, route: { subject: "%s.{event_type}" } }
events:
  present: { batch-size: 50 }
  kafka.present: { sender: k, route: { topic: topic-present } }
  rabbit.present: { sender: r, route: { exchange: amq.topic } }
`, db, testenv.NATSURL, kc.ListenAddrs()[0], prefix)
		if withMissing {
			y += `  absent: { max-attempts: 9 }
  kafka.absent: { sender: k, route: { topic: topic-absent } }
  rabbit.absent: { sender: r, route: { exchange: txbox-no-such-exchange } }
`
		}
		p := t.TempDir() + "/txbox.yaml"
		if err := os.WriteFile(p, []byte(y), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	env := []string{"RMQ_PW=guest"}
	code, out, errOut := runInProcess(t, env, "config", "check", "--config", file(true))
	if code != exitOK {
		t.Fatalf("check: code %d\n%s\n%s", code, out, errOut)
	}
	for _, want := range [][]string{
		{"present", "n", "subject " + prefix + ".present", "50", "4"},
		{"absent", "n", "subject " + prefix + ".absent", "200", "9"},
		{"kafka.absent", "k", "topic topic-absent"},
		{"(other types)", "subject " + prefix + ".{event_type}"},
		{"subject " + prefix + ".present", "not checked (use --connect)"},
	} {
		if lineOf(out, want...) == "" {
			t.Errorf("no line with %q in:\n%s", want, out)
		}
	}

	code, out, errOut = runInProcess(t, env, "config", "check", "--config", file(true), "--connect", "--timeout", "5s")
	if code != exitFailure || !strings.Contains(errOut, "4 destination(s) missing") {
		t.Fatalf("check --connect with missing destinations: code %d\n%s\n%s", code, out, errOut)
	}
	for _, want := range [][]string{
		{"database sqlite: connected"},
		{"subject " + prefix + ".present", "ok: exists"},
		{"subject " + prefix + ".absent", "MISSING", "no stream binds"},
		{"topic topic-present", "ok: exists"},
		{"topic topic-absent", "MISSING"},
		{"exchange amq.topic", "ok: exists"},
		{"exchange txbox-no-such-exchange", "MISSING"},
		// The type only the database has goes to the defaults route.
		{"subject " + prefix + ".only.in.db", "only.in.db", "MISSING"},
	} {
		if lineOf(out, want...) == "" {
			t.Errorf("no line with %q in:\n%s", want, out)
		}
	}

	// Bind the database's type too: every destination exists.
	if _, err := js.UpdateStream(ctx, jetstream.StreamConfig{Name: stream, Subjects: []string{prefix + ".present", prefix + ".only.in.db"}, Storage: jetstream.MemoryStorage}); err != nil {
		t.Fatal(err)
	}
	code, out, errOut = runInProcess(t, env, "config", "check", "--config", file(false), "--connect", "--timeout", "5s")
	if code != exitOK || !strings.Contains(out, "all checks passed") || strings.Contains(out, "MISSING") {
		t.Fatalf("check --connect, all present: code %d\n%s\n%s", code, out, errOut)
	}
}

// TestConfigCheckBadInput: mistakes are reported with their key path and
// exit code 2, before anything connects.
func TestConfigCheckBadInput(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, tc := range []struct {
		yaml, want string
		env        []string
	}{
		{"senders: { k: { type: kafka, brokers: [h:1], sasl: { mechanism: plain, username: u, password: hunter2 } } }\n",
			"bad.yaml:1: senders.k.sasl.password: secrets are not written in the configuration: use password-env or password-file", nil},
		{"defaults: { batch-size: lots }\n", `bad.yaml:1: defaults.batch-size: must be an integer, not "lots"`, nil},
		{"senders: { r: { type: redis, password-env: REDIS_PW } }\n", "senders.r.password-env: environment variable REDIS_PW is empty", nil},
		{"senders: { n: { type: nats, tls: { ca-file: " + dir + "/missing.pem } } }\n", "senders.n.tls.ca-file: cannot read", nil},
		{"log: { level: debug }\n", "environment variable TXBOX_LOG_LEVEL: log.level", []string{"TXBOX_LOG_LEVEL=loud"}},
		// Every *-env and *-file is resolved without --connect, as the
		// relay resolves them at start.
		{"database: { dialect: postgres, dsn-env: APP_DSN }\n", "database.dsn-env: environment variable APP_DSN is empty", nil},
		{"senders: { n: { type: nats, nkey-seed-file: " + dir + "/no-seed } }\n", "senders.n.nkey-seed-file: cannot read", nil},
		{"senders: { n: { type: nats, creds-file: " + dir + "/no.creds } }\n", "senders.n.creds-file: cannot read", nil},
		{"senders: { w: { type: webhook, url: \"http://h/\", hmac-secret-file: " + dir + "/no-secret } }\n", "senders.w.hmac-secret-file: cannot read", nil},
		{"admin: { enabled: true, admin-token-env: ADMIN_TOKEN }\n", "admin.admin-token-env: environment variable ADMIN_TOKEN is empty", nil},
	} {
		path := dir + "/bad.yaml"
		if err := os.WriteFile(path, []byte(tc.yaml), 0o600); err != nil {
			t.Fatal(err)
		}
		code, _, errOut := runInProcess(t, tc.env, "config", "check", "--config", path)
		if code != exitUsage || !strings.Contains(errOut, tc.want) {
			t.Errorf("check %q: code %d, stderr %q; want 2 and %q", tc.yaml, code, errOut, tc.want)
		}
		if strings.Contains(errOut, "hunter2") {
			t.Errorf("the literal secret is quoted: %s", errOut)
		}
	}
	for _, args := range [][]string{{"config"}, {"config", "frob"}, {"config", "check", "--frob"}, {"config", "print", "extra"}} {
		if code, _, errOut := runInProcess(t, nil, args...); code != exitUsage {
			t.Errorf("%v: code %d, stderr %q; want 2", args, code, errOut)
		}
	}
}

// TestConfigPrint: every key with its value and where it came from: the
// file (with its line), the environment, a flag, the default, and for an
// event type what it inherits; the DSN's password is redacted.
func TestConfigPrint(t *testing.T) {
	t.Parallel()
	path := t.TempDir() + "/txbox.yaml"
	if err := os.WriteFile(path, []byte(`database:
  dialect: postgres
  dsn: "postgres://app:Print-Canary-1@db.internal/app"
senders:
  n: { type: nats }
defaults:
  sender: n
events:
  order.created:
    batch-size: 50
`), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := runInProcess(t, []string{"TXBOX_LOG_LEVEL=debug"}, "config", "print", "--config", path, "--set", "defaults.max-attempts=7")
	if code != exitOK {
		t.Fatalf("print: code %d %s", code, errOut)
	}
	if strings.Contains(out, "Print-Canary-1") {
		t.Fatalf("the password is printed:\n%s", out)
	}
	space := regexp.MustCompile(`\s+`)
	for _, want := range []string{
		"database.dialect postgres file " + path + ":2",
		"database.dsn postgres://app:xxxxx@db.internal/app file " + path + ":3",
		"log.level debug environment variable TXBOX_LOG_LEVEL",
		"defaults.max-attempts 7 flag --set defaults.max-attempts",
		"defaults.lease 5m0s default",
		"senders.n.url nats://127.0.0.1:4222 default",
		`events["order.created"].batch-size 50 file ` + path + ":10",
		`events["order.created"].max-attempts 7 inherited from defaults.max-attempts (flag --set defaults.max-attempts)`,
		`events["order.created"].sender n inherited from defaults.sender (file ` + path + ":7)",
		// Effective values, not the zeros that mean "unset".
		"relay.recover-max-interval 2m0s default",
		"relay.discover-max-interval 5m0s default",
		"relay.dead-letter-max-interval 10m0s default",
		"senders.n.max-pending 4096 default",
		"senders.n.provision-stream TXBOX default",
		"database.table-prefix txbox_ default",
	} {
		found := false
		for _, l := range strings.Split(out, "\n") {
			if strings.TrimSpace(space.ReplaceAllString(l, " ")) == want {
				found = true
			}
		}
		if !found {
			t.Errorf("no line %q in:\n%s", want, out)
		}
	}
}

// TestConfigPrintDerivedDefault: a cap left unset follows its interval
// when that is longer than the cap's default, as the relay does.
func TestConfigPrintDerivedDefault(t *testing.T) {
	t.Parallel()
	code, out, errOut := runInProcess(t, nil, "config", "print", "--set", "relay.recover-interval=5m", "--set", "senders.n.type=nats")
	if code != exitOK {
		t.Fatalf("print: code %d %s", code, errOut)
	}
	if l := lineOf(out, "relay.recover-max-interval "); !strings.Contains(l, " 5m0s ") || !strings.Contains(l, "default") {
		t.Errorf("recover-max-interval line %q, want 5m0s default", l)
	}
}

// TestVersionFlag: --version is the version command.
func TestVersionFlag(t *testing.T) {
	t.Parallel()
	_, want, _ := runInProcess(t, nil, "version")
	code, out, _ := runInProcess(t, nil, "--version")
	if code != exitOK || out != want || !strings.HasPrefix(out, "txbox ") {
		t.Fatalf("--version: code %d, %q; version says %q", code, out, want)
	}
}

// walConfig writes a WAL mode configuration (nothing connects to its
// database without --connect) and returns its path.
func walConfig(t *testing.T, extra string) string {
	t.Helper()
	p := t.TempDir() + "/txbox.yaml"
	y := `database: { dialect: postgres, dsn: "postgres://app@127.0.0.1/test", source: wal` + extra + ` }
senders:
  n: { type: nats }
  h: { type: webhook, url: "http://127.0.0.1:9/" }
defaults: { sender: n }
events:
  wide: {}
  narrow: { batch-size: 50 }
  hooked: { sender: h }
`
	if err := os.WriteFile(p, []byte(y), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestConfigCheckWAL: in WAL mode the table shows the batches the stream
// sends, database.wal.batch-size (its default, or the file's) for a type
// without a batch-size of its own, with the claims' size beside it, and
// a claim that says the type is streamed and how its rows in the outbox
// table are claimed.
func TestConfigCheckWAL(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		extra, batch string
	}{{"", "1000 (claims 200)"}, {", wal: { batch-size: 700 }", "700 (claims 200)"}} {
		code, out, errOut := runInProcess(t, nil, "config", "check", "--config", walConfig(t, tc.extra))
		if code != exitOK {
			t.Fatalf("check: code %d\n%s\n%s", code, out, errOut)
		}
		for _, want := range [][]string{
			{"wide", "subject wide", "stream (+lock)", tc.batch},
			{"narrow", "subject narrow", "stream (+lock)", " 50 "},
			{"hooked", "url http://127.0.0.1:9/", "stream (+lease)", tc.batch},
			{"(other types)", "stream (+lock)", tc.batch},
			{"source wal: events are streamed"},
		} {
			if lineOf(out, want...) == "" {
				t.Errorf("no line with %q in:\n%s", want, out)
			}
		}
		if lineOf(out, "narrow", "claims") != "" {
			t.Errorf("the type with a batch-size of its own names other claims:\n%s", out)
		}
	}
}

// TestConfigPrintWAL: every database.wal key shows the value WAL mode
// uses, not the zero that means unset, and pause-limit half of the
// sender-timeout, the default one or the file's.
func TestConfigPrintWAL(t *testing.T) {
	t.Parallel()
	space := regexp.MustCompile(`\s+`)
	for _, tc := range []struct {
		extra string
		want  []string
	}{
		{"", []string{
			"database.wal.slot txbox_slot default",
			"database.wal.publication txbox_pub default",
			"database.wal.application-name txbox-relay default",
			"database.wal.sender-timeout 10s default",
			"database.wal.failover true default",
			"database.wal.window 20000 default",
			"database.wal.window-bytes 67108864 default",
			"database.wal.lane-queue 5000 default",
			"database.wal.batch-size 1000 default",
			"database.wal.status-interval 1s default",
			"database.wal.standby-interval 1s default",
			"database.wal.pause-limit 5s default (half of database.wal.sender-timeout)",
			"database.wal.lag-threshold 1073741824 default",
			"defaults.batch-size 200 default (claims; the stream's batches are database.wal.batch-size)",
		}},
		{", schema: billing, wal: { sender-timeout: 4s }", []string{
			"database.wal.slot billing_txbox_slot default",
			"database.wal.publication billing_txbox_pub default",
			"database.wal.pause-limit 2s default (half of database.wal.sender-timeout)",
		}},
	} {
		path := walConfig(t, tc.extra)
		code, out, errOut := runInProcess(t, nil, "config", "print", "--config", path)
		if code != exitOK {
			t.Fatalf("print: code %d %s", code, errOut)
		}
		lines := map[string]bool{}
		for _, l := range strings.Split(out, "\n") {
			lines[strings.TrimSpace(space.ReplaceAllString(l, " "))] = true
		}
		for _, want := range tc.want {
			if !lines[want] {
				t.Errorf("no line %q in:\n%s", want, out)
			}
		}
	}
}

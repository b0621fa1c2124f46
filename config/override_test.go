package config

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	yaml "go.yaml.in/yaml/v3"
)

func TestEnvName(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		segs []string
		want string
	}{
		{[]string{"database", "dsn"}, "TXBOX_DATABASE_DSN"},
		{[]string{"defaults", "batch-size"}, "TXBOX_DEFAULTS_BATCH_SIZE"},
		{[]string{"events", "order.created", "polling", "max-delay"}, "TXBOX_EVENTS_ORDER_CREATED_POLLING_MAX_DELAY"},
		{[]string{"senders", "main", "url"}, "TXBOX_SENDERS_MAIN_URL"},
	} {
		if got := EnvName(tc.segs...); got != tc.want {
			t.Errorf("EnvName(%v) = %s, want %s", tc.segs, got, tc.want)
		}
	}
}

func TestEnvOverrides(t *testing.T) {
	t.Parallel()
	file := `
database: { dialect: postgres, dsn: "postgres://file@127.0.0.1/db" }
senders:
  main: { type: nats }
  k: { type: kafka, brokers: [a:1] }
defaults: { sender: main, batch-size: 10 }
events:
  order.created: { batch-size: 20 }
`
	c, err := Load(Source{YAML: []byte(file), Env: []string{
		"TXBOX_DATABASE_DSN=postgres://env@127.0.0.1/db",
		"TXBOX_DEFAULTS_BATCH_SIZE=300",
		"TXBOX_DEFAULTS_POLLING_MAX_DELAY=2m",
		"TXBOX_EVENTS_ORDER_CREATED_BATCH_SIZE=40",
		"TXBOX_SENDERS_MAIN_URL=nats://10.0.0.1:4222",
		"TXBOX_SENDERS_K_BROKERS=b:1, c:2",
		"TXBOX_LOG_LEVEL=",                         // empty: ignored
		"TXBOX_TEST_POSTGRES_URL=postgres://x@y/z", // not a key: ignored
		"OTHER_DEFAULTS_BATCH_SIZE=1",              // not the prefix
	}})
	if err != nil {
		t.Fatal(err)
	}
	if c.Database.DSN.Reveal() != "postgres://env@127.0.0.1/db" {
		t.Errorf("dsn = %s", c.Database.DSN)
	}
	if *c.Defaults.BatchSize != 300 || *c.Defaults.Polling.MaxDelay != 2*time.Minute {
		t.Errorf("defaults = %d %s", *c.Defaults.BatchSize, *c.Defaults.Polling.MaxDelay)
	}
	if *c.Effective("order.created").BatchSize != 40 {
		t.Errorf("event batch = %d", *c.Effective("order.created").BatchSize)
	}
	if c.Senders["main"].NATS.URL != "nats://10.0.0.1:4222" {
		t.Errorf("nats url = %s", c.Senders["main"].NATS.URL)
	}
	if b := c.Senders["k"].Kafka.Brokers; len(b) != 2 || b[0] != "b:1" || b[1] != "c:2" {
		t.Errorf("brokers = %q", b)
	}
	if c.Log.Level != "info" {
		t.Errorf("empty env var changed log level to %q", c.Log.Level)
	}
}

func TestEnvBadValueNamesVariable(t *testing.T) {
	t.Parallel()
	_, err := Load(Source{Env: []string{"TXBOX_DEFAULTS_BATCH_SIZE=lots"}})
	if err == nil || !strings.Contains(err.Error(), `environment variable TXBOX_DEFAULTS_BATCH_SIZE: defaults.batch-size: must be an integer, not "lots"`) {
		t.Fatalf("error = %v", err)
	}
}

func TestSetOverrides(t *testing.T) {
	t.Parallel()
	c, err := Load(Source{
		YAML: []byte("senders: { main: { type: nats } }\ndefaults: { batch-size: 10 }"),
		Env:  []string{"TXBOX_DEFAULTS_BATCH_SIZE=20"},
		Set: []string{
			"defaults.batch-size=30", // flag beats env
			"events.order.created.polling.max-delay=3s",
			"events.order.created.route.subject=orders.x",
			"senders.hooks.type=webhook",
			"senders.hooks.url=http://127.0.0.1:1/h",
			"defaults.sender=main",
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if *c.Defaults.BatchSize != 30 {
		t.Errorf("batch = %d, want the flag's 30", *c.Defaults.BatchSize)
	}
	e := c.Effective("order.created")
	if *e.Polling.MaxDelay != 3*time.Second || e.Route.Subject != "orders.x" {
		t.Errorf("order.created = %s %q", *e.Polling.MaxDelay, e.Route.Subject)
	}
	if c.Senders["hooks"] == nil || c.Senders["hooks"].Webhook.URL != "http://127.0.0.1:1/h" {
		t.Errorf("hooks sender = %+v", c.Senders["hooks"])
	}
	for _, bad := range []string{"defaults.batchsize=1", "nokey", "events.x.nope=1"} {
		if _, err := Load(Source{Set: []string{bad}}); err == nil || !strings.Contains(err.Error(), "flag --set") {
			t.Errorf("--set %s: error = %v", bad, err)
		}
	}
}

func TestRedactDSN(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, want string }{
		{"postgres://app:s3cret@127.0.0.1:5432/db?sslmode=disable", "postgres://app:xxxxx@127.0.0.1:5432/db?sslmode=disable"},
		{"postgres://app:p@ss/w#rd@host/db", "postgres://app:xxxxx@host/db"},
		{"postgres://app@host/db?password=s3cret&sslmode=disable", "postgres://app@host/db?password=xxxxx&sslmode=disable"},
		{"host=h user=u password='s3 cret' dbname=d", "host=h user=u password=xxxxx dbname=d"},
		{"host=h user=u password=s3cret", "host=h user=u password=xxxxx"},
		{"root:s3cret@tcp(127.0.0.1:3306)/db?parseTime=true", "root:xxxxx@tcp(127.0.0.1:3306)/db?parseTime=true"},
		{"root@tcp(127.0.0.1:3306)/db", "root@tcp(127.0.0.1:3306)/db"},
		{"amqp://guest:guest@127.0.0.1:5672/", "amqp://guest:xxxxx@127.0.0.1:5672/"},
		{"nats://a:1@h1:4222,nats://b:2@h2:4222", "nats://a:xxxxx@h1:4222,nats://b:xxxxx@h2:4222"},
		{"nats://s3cretToken@127.0.0.1:4222", "nats://xxxxx@127.0.0.1:4222"},
		{"postgres://app@127.0.0.1/db", "postgres://app@127.0.0.1/db"},
		{"redis://:pw@127.0.0.1:6379/0", "redis://:xxxxx@127.0.0.1:6379/0"},
		// A comma in the password does not split it (a NATS server list
		// splits only where a new scheme:// follows).
		{"postgres://app:pa,ssW0rd@127.0.0.1:5432/x", "postgres://app:xxxxx@127.0.0.1:5432/x"},
		{"nats://a:p,w@h1:4222, nats://h2:4222", "nats://a:xxxxx@h1:4222, nats://h2:4222"},
		{"postgres://app:pa?ss@h/db", "postgres://app:xxxxx@h/db"},
		{"postgres://app:@000?0000@h:5432/db?sslmode=disable", "postgres://app:xxxxx@h:5432/db?sslmode=disable"},
		{"https://h/x?email=a@b&key=K", "https://h/x?email=xxxxx&key=xxxxx"},
		{"host=h password=pa\\ ss dbname=d", "host=h password=xxxxx dbname=d"},
		{"host=h password=pa;ss,w dbname=d", "host=h password=xxxxx dbname=d"},
		{"root:pa,s@s:w@tcp(h:3306)/db?parseTime=true&foo=bar", "root:xxxxx@tcp(h:3306)/db?parseTime=true&foo=xxxxx"},
		// Every query value of a URL is a secret unless its name is a
		// known driver setting; a bare one and a fragment too.
		{"https://h/hook?api_key=k1&sig=k2&sslmode=require", "https://h/hook?api_key=xxxxx&sig=xxxxx&sslmode=require"},
		{"https://h/hook?K3Y#frag", "https://h/hook?xxxxx#xxxxx"},
		{"amqp://guest:g@h:5672/?heartbeat=10&auth_token=t", "amqp://guest:xxxxx@h:5672/?heartbeat=10&auth_token=xxxxx"},
		{"/var/lib/txbox.db?_auth_pass=s3cret", "/var/lib/txbox.db?_auth_pass=xxxxx"},
		{"file:txbox.db?_pragma=key(s3cret)&mode=rwc", "file:txbox.db?_pragma=xxxxx&mode=xxxxx"},
		{"./txbox.db", "./txbox.db"},
		{"", ""},
	} {
		if got := RedactDSN(tc.in); got != tc.want {
			t.Errorf("RedactDSN(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// TestSecretNeverPrinted is the secrets canary for the configuration: a
// password given in the DSN (file and environment) appears in no rendering
// of the loaded configuration, no log line and no error text.
func TestSecretNeverPrinted(t *testing.T) {
	t.Parallel()
	const canary = "Canary-pw-7Q9z"
	file := fmt.Sprintf(`
database: { dialect: postgres, dsn: "postgres://app:%s@127.0.0.1:1/db" }
senders:
  main: { type: rabbitmq, url: "amqp://guest:%s@127.0.0.1:1/" }
  m2: { type: nats, url: "nats://u:%s@127.0.0.1:1" }
defaults: { sender: main }
`, canary, canary, canary)
	c, err := Load(Source{YAML: []byte(file)})
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&buf, nil))
	log.Info("loaded", "dsn", c.Database.DSN, "database", c.Database, "config", c)
	slog.New(slog.NewTextHandler(&buf, nil)).Info("loaded", "dsn", c.Database.DSN, "sender", c.Senders["main"].RabbitMQ)
	fmt.Fprintf(&buf, "%v %+v %#v %s %q\n", c, *c, c.Database, c.Database.DSN, c.Database.DSN)
	fmt.Fprintf(&buf, "%v %+v %#v\n", *c.Senders["main"].RabbitMQ, *c.Senders["m2"].NATS, *c.Senders["m2"].NATS)
	y, err := yaml.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	buf.Write(y)
	j, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	buf.Write(j)
	// A bad value elsewhere: the error must not quote the DSN.
	_, err = Load(Source{YAML: []byte(file + "log: { level: loud }\n"), Set: []string{"database.dsn=postgres://x:" + canary + "@h/db"}})
	if err == nil {
		t.Fatal("bad log level accepted")
	}
	buf.WriteString(err.Error())
	// Scrub cleans an error that echoes the connection string.
	echo := fmt.Errorf("dial %s: refused", c.Database.DSN.Reveal())
	buf.WriteString(Scrub(echo, c.Secrets(nil)).Error())
	if strings.Contains(buf.String(), canary) {
		t.Fatalf("the password leaked:\n%s", buf.String())
	}
	if !strings.Contains(buf.String(), "app:xxxxx@127.0.0.1") {
		t.Fatalf("the redacted DSN is missing from the output, so the test proves nothing:\n%s", buf.String())
	}
}

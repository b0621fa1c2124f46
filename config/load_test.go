package config

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/relay"
)

const fullYAML = `
database: { dialect: postgres, dsn: "postgres://app:s3cret@127.0.0.1:5432/test", schema: app, table-prefix: txbox_ }
senders:
  main: { type: nats, url: nats://127.0.0.1:4222 }
  hooks: { type: webhook, hmac-secret-env: HOOK_SECRET, timeout: 10s, url: "http://127.0.0.1:9/hook" }
  kafka: { type: kafka, brokers: [127.0.0.1:9092, 127.0.0.2:9092] }
  rabbit: { type: rabbitmq, url: "amqp://guest:guest@127.0.0.1:5672/" }
defaults:
  sender: main
  route: { subject: "events.{event_type}" }
  batch-size: 200
  polling: { mode: adaptive, min-delay: 250ms, multiplier: 1.5, max-delay: 1m }
  max-attempts: 4
  backoff: { delay: 10s, multiplier: 3.0, max: 1h, jitter: 0.1 }
  ordering: none
  retention: 24h
  lease: 5m
events:
  order-created: { batch-size: 500, route: { subject: orders.created } }
  order.shipped: { sender: hooks, polling: { max-delay: 5s }, ordering: key }
cleanup: { interval: 1m, outbox-ttl: 24h, dead-letter-ttl: 168h }
log: { level: info, format: json }
`

func TestLoadFull(t *testing.T) {
	t.Parallel()
	c, err := Load(Source{Name: "txbox.yaml", YAML: []byte(fullYAML)})
	if err != nil {
		t.Fatal(err)
	}
	if c.Database.Dialect != "postgres" || c.Database.Schema != "app" {
		t.Errorf("database = %+v", c.Database)
	}
	if got := c.Senders["kafka"].Kafka.Brokers; len(got) != 2 || got[1] != "127.0.0.2:9092" {
		t.Errorf("kafka brokers = %v", got)
	}
	if c.Senders["hooks"].Webhook.HMACSecretEnv != "HOOK_SECRET" {
		t.Errorf("webhook = %+v", c.Senders["hooks"].Webhook)
	}
	oc := c.Effective("order-created")
	if *oc.BatchSize != 500 || oc.Route.Subject != "orders.created" || *oc.Sender != "main" || *oc.Polling.MaxDelay != time.Minute {
		t.Errorf("order-created = batch %d subject %q sender %q max-delay %s", *oc.BatchSize, oc.Route.Subject, *oc.Sender, *oc.Polling.MaxDelay)
	}
	os := c.Effective("order.shipped")
	if *os.Sender != "hooks" || *os.Polling.MaxDelay != 5*time.Second || *os.Polling.MinDelay != 250*time.Millisecond || *os.Ordering != txbox.OrderingKey || *os.BatchSize != 200 {
		t.Errorf("order.shipped inherits wrongly: %+v", os)
	}
	un := c.Effective("never-listed")
	if un.Route.Subject != "events.{event_type}" || *un.Backoff.Jitter != 0.1 {
		t.Errorf("unlisted type = %+v", un.Route)
	}
	if c.Log.Format != "json" || *c.Cleanup.DeadLetterTTL != 168*time.Hour {
		t.Errorf("log/cleanup = %+v %+v", c.Log, c.Cleanup)
	}
}

func TestLoadEmptyGivesDefaults(t *testing.T) {
	t.Parallel()
	c, err := Load(Source{})
	if err != nil {
		t.Fatal(err)
	}
	d := c.Effective("x")
	if c.Database.Dialect != "sqlite" || *d.BatchSize != 200 || *d.Polling.MinDelay != 250*time.Millisecond ||
		*d.Polling.Multiplier != 1.5 || *d.Polling.MaxDelay != time.Minute || *d.MaxAttempts != 4 ||
		*d.Backoff.Delay != 10*time.Second || *d.Backoff.Multiplier != 3 || *d.LeaseDuration != 5*time.Minute ||
		c.Cleanup.OutboxTTL != nil || c.Log.Level != "info" {
		t.Errorf("defaults wrong: %+v", d)
	}
}

func TestLoadRejects(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, yaml, want string
	}{
		{"unknown top key", "databse: {}", "databse: unknown key"},
		{"unknown nested key", "defaults: { polling: { max-dealy: 1s } }", "defaults.polling.max-dealy: unknown key"},
		{"unknown sender type", "senders: { main: { type: natz } }", `senders.main.type: unknown sender type "natz"`},
		{"missing sender type", "senders: { main: { url: x } }", "senders.main.type: required"},
		{"key of another sender type", "senders: { main: { type: nats, brokers: [a:1] } }", "senders.main.brokers: unknown key for sender type nats"},
		{"max-delay below min-delay", "events: { order-created: { polling: { min-delay: 2s, max-delay: 1s } } }", "events.order-created.polling.max-delay: must be ≥ min-delay"},
		{"inherited max-delay below own min-delay", "events: { order-created: { polling: { min-delay: 2m } } }", "events.order-created.polling.max-delay: must be ≥ min-delay"},
		{"duration without unit", "defaults: { lease: 300 }", "defaults.lease: must be a duration"},
		{"negative duration", "cleanup: { outbox-ttl: -1h }", "cleanup.outbox-ttl: must not be negative"},
		{"bad duration text", "defaults: { backoff: { delay: soon } }", `defaults.backoff.delay: must be a duration such as 250ms, 10s or 1h30m, not "soon"`},
		{"int not a number", "defaults: { batch-size: many }", `defaults.batch-size: must be an integer, not "many"`},
		{"batch-size zero", "events: { a: { batch-size: 0 } }", "events.a.batch-size: must be between 1 and 10000"},
		{"float not a number", "defaults: { polling: { multiplier: fast } }", "defaults.polling.multiplier: must be a number"},
		{"multiplier below one", "defaults: { polling: { multiplier: 0.5 } }", "defaults.polling.multiplier: must be ≥ 1"},
		{"jitter above one", "defaults: { backoff: { jitter: 2 } }", "defaults.backoff.jitter: must be between 0 and 1"},
		{"backoff max below delay", "defaults: { backoff: { delay: 1m, max: 10s } }", "defaults.backoff.max: must be ≥ delay"},
		{"bad event type", "events: { 'order created': { batch-size: 1 } }", `events.order created: txbox: invalid event type "order created"`},
		{"bad ordering", "defaults: { ordering: fifo }", `defaults.ordering: must be none or key, not "fifo"`},
		{"bad claim", "defaults: { claim: grab }", `defaults.claim: must be lease or lock, not "grab"`},
		{"lock claim on sqlite", "database: { dialect: sqlite, dsn: x.db }\nevents: { a: { claim: lock } }", "events.a.claim: lock is not available on sqlite"},
		{"bad polling mode", "events: { a: { polling: { mode: eager } } }", `events.a.polling.mode: must be adaptive or fixed, not "eager"`},
		{"bad dialect", "database: { dialect: oracle }", `database.dialect: unknown dialect "oracle"`},
		{"sqlite dsn with parameters", "database: { dsn: 'file:x.db?_pragma=busy_timeout(1)' }", "database.dsn: sqlite takes a file path"},
		{"sqlite in memory", "database: { dsn: ':memory:' }", "database.dsn: sqlite takes a file path"},
		{"postgres without dsn", "database: { dialect: postgres }", "database.dsn: required for dialect postgres"},
		{"hostile prefix", `database: { table-prefix: 'x"; DROP TABLE t;--' }`, "database.table-prefix: txbox: invalid identifier"},
		{"hostile schema", "database: { dialect: postgres, dsn: x, schema: 'a`b' }", "database.schema: txbox: invalid identifier"},
		{"unknown sender referenced", "senders: { main: { type: nats } }\nevents: { a: { sender: nope } }", `events.a.sender: no sender named "nope"`},
		{"sender ambiguous", "senders: { a: { type: nats }, b: { type: nats } }", "defaults.sender: required when more than one sender"},
		{"kafka without brokers", "senders: { k: { type: kafka } }", "senders.k.brokers: required"},
		{"kafka without topic", "senders: { k: { type: kafka, brokers: [a:1] } }\ndefaults: { route: { topic: '' } }", `defaults.route.topic: required for kafka sender "k"`},
		{"webhook without url", "senders: { h: { type: webhook } }", "defaults.route.url: required for webhook sender"},
		{"duplicate key", "log: { level: info, level: debug }", "log.level: duplicate key"},
		{"mapping expected", "defaults: 5", "defaults: must be a mapping, not a scalar"},
		{"scalar expected", "defaults: { batch-size: [1, 2] }", "defaults.batch-size: must be a single value, not a list"},
		{"top level not a mapping", "- a\n- b", "the top level must be a mapping"},
		{"not yaml", "defaults: { batch-size: 1", "not valid YAML"},
		{"two documents", "log: { level: info }\n---\nlog: { level: debug }", "more than one YAML document"},
		{"bad log level", "log: { level: loud }", `log.level: must be debug, info, warn or error, not "loud"`},
		{"cleanup interval zero", "cleanup: { interval: 0s }", "cleanup.interval: must be ≥ 1s"},
		{"dotted event type path", "events: { order.created: { batch-size: -1 } }", `events["order.created"].batch-size: must be between 1 and 10000`},
		{"lease too short", "defaults: { lease: 10ms }", "defaults.lease: must be ≥ 1s"},
		{"notify trigger on sqlite", "database: { notify-trigger: true }", "database.notify-trigger: only supported by postgres"},
		{"recover max below interval", "relay: { recover-interval: 2m, recover-max-interval: 1m }", "relay.recover-max-interval: must be ≥ recover-interval"},
		{"bool as int", "database: { max-conns: true }", `database.max-conns: must be an integer, not "true"`},
		{"bad dsn-env", "database: { dsn-env: 'A B' }", `database.dsn-env: "A B" is not an environment variable name`},
		{"provision key without provision", "senders: { n: { type: nats, provision-stream: ORDERS } }", "senders.n.provision-stream: only used with provision: true"},
		{"bad stream name", "senders: { n: { type: nats, provision: true, provision-stream: a.b } }", `senders.n.provision-stream: "a.b" is not a JetStream stream name`},
		{"bad subject", "senders: { n: { type: nats, provision: true, provision-subjects: ['a..b'] } }", `senders.n.provision-subjects[0]: "a..b" is not a NATS subject`},
		{"provision not a bool", "senders: { n: { type: nats, provision: yes } }", `senders.n.provision: must be true or false, not "yes"`},
		{"bad partitions", "senders: { k: { type: kafka, brokers: [a:1], provision: true, provision-partitions: -5 } }", "senders.k.provision-partitions: must be ≥ 1, or -1"},
		{"kafka topic template", "senders: { k: { type: kafka, brokers: [a:1], provision: true, provision-topics: ['{event_type}'] } }", "senders.k.provision-topics[0]: must name one topic"},
		{"kafka provision without provision", "senders: { k: { type: kafka, brokers: [a:1], provision-replication-factor: 3 } }", "senders.k.provision-replication-factor: only used with provision: true"},
		{"bad max-record-bytes", "senders: { k: { type: kafka, brokers: [a:1], max-record-bytes: 10 } }", "senders.k.max-record-bytes: must be in 512..1073741824"},
		{"bad exchange type", "senders: { r: { type: rabbitmq, url: 'amqp://h/', provision: true, provision-exchange-type: fancy } }", `senders.r.provision-exchange-type: must be direct, fanout, topic, headers or x-*, not "fancy"`},
		{"exchanges without provision", "senders: { r: { type: rabbitmq, url: 'amqp://h/', provision-exchanges: [orders] } }", "senders.r.provision-exchanges: only used with provision: true"},
		{"metrics listen without port", "metrics: { listen: localhost }", `metrics.listen: must be host:port, such as 127.0.0.1:9090, not "localhost"`},
		{"health listen bad port", "health: { listen: '127.0.0.1:http' }", `health.listen: port "http" must be a number from 0 to 65535`},
		{"metrics path relative", "metrics: { path: metrics }", `metrics.path: must be a URL path starting with /, not "metrics"`},
		{"metrics path on a probe", "metrics: { path: /readyz }", "metrics.path: /readyz is the health probe's path"},
		{"stats interval too short", "metrics: { stats-interval: 10ms }", "metrics.stats-interval: must be ≥ 1s"},
		{"lag threshold not a duration", "health: { lag-threshold: big }", `health.lag-threshold: must be a duration`},
		{"unknown health key", "health: { listn: ':8080' }", "health.listn: unknown key"},
		{"provision on redis", "senders: { s: { type: redis, provision: true } }", "senders.s.provision: unknown key for sender type redis"},
		{"wal keys in table mode", "database: { dialect: postgres, dsn: x, wal: { batch-size: 100 } }", "database.wal: is set but database.source is \"table\""},
		{"wal batch-size negative", "database: { dialect: postgres, dsn: x, source: wal, wal: { batch-size: -1 } }", "database.wal.batch-size: must be ≥ 0"},
		{"wal batch-size too large", "database: { dialect: postgres, dsn: x, source: wal, wal: { batch-size: 20000 } }", "database.wal.batch-size: must be at most 10000, not 20000"},
		{"wal on sqlite", "database: { dsn: x.db, source: wal }", "database.source: wal is only supported by postgres"},
		{"routes beside route", "senders: { n: { type: nats } }\nevents: { a: { route: { subject: x }, routes: [{ subject: y }, { name: z, subject: z }] } }", "events.a.routes: is set beside Route"},
		{"route of an unknown sender", "senders: { n: { type: nats } }\nevents: { a: { routes: [{ subject: y }, { sender: nope, subject: z }] } }", `events.a.routes[1].sender: no sender named "nope"`},
		{"route key the sender does not read", "senders: { n: { type: nats } }\nevents: { a: { routes: [{ subject: y }, { name: h, subject: z, url: 'http://x' }] } }", `events.a.routes[1].url: the nats sender "n" has no url`},
		{"two routes one destination", "senders: { n: { type: nats } }\nevents: { a: { routes: [{ subject: y }, { name: two, subject: y }] } }", "events.a.routes[1]: goes to the same destination as routes[0]"},
		{"two routes one name", "senders: { n: { type: nats } }\nevents: { a: { routes: [{ subject: y }, { subject: z }] } }", `events.a.routes[1].name: route name "n" is also routes[0]'s`},
		{"route without its destination", "senders: { n: { type: nats } }\nevents: { a: { routes: [{ subject: y }, { name: b }] } }", `events.a.routes[1].subject: required for nats sender "n"`},
		{"bad route name", "senders: { n: { type: nats } }\nevents: { a: { routes: [{ subject: y }, { name: 'a b', subject: z }] } }", `events.a.routes[1].name: "a b" is not a valid route name`},
		{"route setting out of range", "senders: { n: { type: nats } }\nevents: { a: { routes: [{ subject: y }, { name: b, subject: z, max-attempts: 0 }] } }", "events.a.routes[1].max-attempts: must be between 1 and 1000"},
		{"unknown route key", "senders: { n: { type: nats } }\nevents: { a: { routes: [{ subject: y, topik: z }] } }", "events.a.routes[0].topik: unknown key"},
		{"routes in defaults", "senders: { n: { type: nats } }\ndefaults: { routes: [{ subject: y }] }", "defaults.routes: routes are set per event type"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := Load(Source{Name: "txbox.yaml", YAML: []byte(tc.yaml)})
			if err == nil {
				t.Fatalf("Load accepted %q", tc.yaml)
			}
			if !errors.Is(err, ErrInvalid) || !errors.Is(err, txbox.ErrInvalidConfig) {
				t.Errorf("error %v does not match ErrInvalid and txbox.ErrInvalidConfig", err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error = %q\nwant it to contain %q", err, tc.want)
			}
		})
	}
}

func TestLoadRefusesHugeInput(t *testing.T) {
	t.Parallel()
	big := []byte("log: { level: info }\n#" + strings.Repeat("x", 4<<20))
	if _, err := Load(Source{YAML: big}); err == nil || !strings.Contains(err.Error(), "larger than 4194304 bytes") || !errors.Is(err, ErrInvalid) {
		t.Fatalf("error = %v", err)
	}
}

func TestLoadErrorHasLine(t *testing.T) {
	t.Parallel()
	_, err := Load(Source{Name: "txbox.yaml", YAML: []byte("log:\n  level: info\n  colour: red\n")})
	if err == nil || !strings.Contains(err.Error(), "txbox.yaml:3: log.colour: unknown key") {
		t.Fatalf("error = %v, want file:line prefix", err)
	}
	var es Errors
	if !errors.As(err, &es) || len(es) != 1 || es[0].Path != "log.colour" || es[0].Line != 3 {
		t.Fatalf("Errors = %#v", es)
	}
}

func TestLoadReportsEveryProblem(t *testing.T) {
	t.Parallel()
	_, err := Load(Source{YAML: []byte("log: { colour: red }\ndefaults: { batch-size: x }")})
	var es Errors
	if !errors.As(err, &es) || len(es) != 2 {
		t.Fatalf("want 2 problems, got %v", err)
	}
}

// TestExampleFileLoads keeps examples/txbox.yaml, which the documentation
// points to, valid.
func TestExampleFileLoads(t *testing.T) {
	t.Parallel()
	c, err := LoadFile("../examples/txbox.yaml", nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Senders) != 5 || len(c.Events) != 5 {
		t.Fatalf("example has %d senders and %d events, want 5 and 5", len(c.Senders), len(c.Events))
	}
	if e := c.Effective("audit-entry"); *e.Polling.Mode != relay.PollingFixed || *e.Polling.Delay != 5*time.Second || *e.BatchSize != 200 {
		t.Errorf("audit-entry = %+v", e)
	}
}

// TestSetZeroOverridesDefault: a zero the file sets overrides a
// non-zero default instead of being taken for unset, in the loaded
// settings and in the relay configuration built from them. Unset keys
// still inherit.
func TestSetZeroOverridesDefault(t *testing.T) {
	t.Parallel()
	c, err := Load(Source{YAML: []byte(`
senders: { main: { type: nats } }
defaults: { backoff: { delay: 2s, jitter: 0.2 } }
events:
  exact: { backoff: { delay: 0s, max: 0s, jitter: 0 } }
`)})
	if err != nil {
		t.Fatal(err)
	}
	rc := c.RelayConfig(nil, nil, nil)
	for _, b := range []*relay.BackoffSettings{c.Effective("exact").Backoff, rc.Events["exact"].Backoff} {
		if *b.Delay != 0 || *b.Max != 0 || *b.Jitter != 0 || *b.Multiplier != relay.DefaultBackoffMultiplier {
			t.Errorf("exact backoff = delay %v max %v jitter %v multiplier %v; want the set zeros and the default multiplier", *b.Delay, *b.Max, *b.Jitter, *b.Multiplier)
		}
	}
	if b := c.Effective("unlisted").Backoff; *b.Jitter != 0.2 || *b.Delay != 2*time.Second {
		t.Errorf("unlisted backoff = delay %v jitter %v, want the defaults' 2s and 0.2", *b.Delay, *b.Jitter)
	}
}

// TestLoadClaimMode: claim is a per-type key with a default and an
// override, decoded into the relay's own settings.
func TestLoadClaimMode(t *testing.T) {
	t.Parallel()
	c, err := Load(Source{Name: "txbox.yaml", YAML: []byte("database: { dialect: postgres, dsn: 'postgres://h/db' }\n" +
		"defaults: { claim: lock }\nevents: { hooks: { claim: lease } }")})
	if err != nil {
		t.Fatal(err)
	}
	if got := *c.Effective("orders").Claim; got != txbox.ClaimLock {
		t.Errorf("orders claim = %q, want lock (defaults)", got)
	}
	if got := *c.Effective("hooks").Claim; got != txbox.ClaimLease {
		t.Errorf("hooks claim = %q, want lease (its override)", got)
	}
	// One discovered type in lock mode (defaults) with 4 batches in
	// flight, hooks in lease mode: 4 + 4 connections.
	if got := c.LockConns(); got != 8 {
		t.Errorf("LockConns = %d, want 8", got)
	}
	d, err := Load(Source{Name: "txbox.yaml", YAML: []byte("database: { dialect: postgres, dsn: 'postgres://h/db' }")})
	if err != nil {
		t.Fatal(err)
	}
	if got := *d.Effective("orders").Claim; got != relay.DefaultClaim {
		t.Errorf("default claim = %q, want %q", got, relay.DefaultClaim)
	}
	if got := d.LockConns(); got != 0 {
		t.Errorf("LockConns without the lock claim = %d, want 0", got)
	}
}

// TestLoadFanoutInWALMode: fan-out routes are accepted with
// database.source: wal (docs/concepts.md, "Fan-out"), and the relay's
// configuration streams and keeps the type's routes in their order.
func TestLoadFanoutInWALMode(t *testing.T) {
	t.Parallel()
	c, err := Load(Source{Name: "txbox.yaml", YAML: []byte("database: { dialect: postgres, dsn: x, source: wal }\n" +
		"senders: { n: { type: nats } }\nevents: { a: { routes: [{ subject: y }, { name: b, subject: z }] } }")})
	if err != nil {
		t.Fatalf("Load refused fan-out in WAL mode: %v", err)
	}
	rc := c.RelayConfig(nil, nil, nil)
	if !rc.Stream.Enabled {
		t.Error("the relay's configuration does not stream")
	}
	routes := rc.Events["a"].Routes
	if len(routes) != 2 || routes[0].Subject != "y" || routes[1].Name != "b" || routes[1].Subject != "z" {
		t.Errorf("routes of a = %+v, want [subject y, b: subject z]", routes)
	}
}

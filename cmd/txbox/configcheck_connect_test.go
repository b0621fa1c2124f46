package main

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/txbox/txbox/internal/testenv"
)

// closedPort returns a loopback address nothing listens on: a port the
// kernel handed out and that was closed again.
func closedPort(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	return addr
}

// natsWithAuth starts a NATS server with JetStream that accepts one user
// and password, in this process: the shared server has no authentication.
func natsWithAuth(t *testing.T, user, password string) string {
	t.Helper()
	ns, err := natsserver.NewServer(&natsserver.Options{
		Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: filepath.Join(t.TempDir(), "js"),
		Username: user, Password: password, NoLog: true, NoSigs: true, DisableJetStreamBanner: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	go ns.Start()
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("embedded NATS did not start within 10s")
	}
	return ns.ClientURL()
}

// TestConfigCheckConnectDialsEverySender: `config check --connect` dials
// and authenticates every sender whatever its route, the RabbitMQ default
// exchange and a route template included: for each sender type a wrong
// port fails, and so do wrong credentials where the type has any (a
// webhook's are checked as far as they can be without a request: the
// server's certificate). The right ones pass, and no password is printed.
func TestConfigCheckConnectDialsEverySender(t *testing.T) {
	t.Parallel()
	testenv.RequireTCP(t, "RabbitMQ", "127.0.0.1:5672")
	testenv.RequireTCP(t, "Redis", "127.0.0.1:6379")
	natsURL := natsWithAuth(t, "relay", "Nats-Right-Pw-1")
	kc, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "sasl-topic"), kfake.EnableSASL(),
		kfake.Superuser("PLAIN", "kuser", "Kafka-Right-Pw-2"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kc.Close)
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		t.Error("config check sent a webhook request")
	}))
	t.Cleanup(hook.Close)
	tlsHook := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		t.Error("config check sent a webhook request")
	}))
	t.Cleanup(tlsHook.Close)
	nats := strings.TrimPrefix(natsURL, "nats://")
	dir := t.TempDir()
	db := filepath.Join(dir, "t.db")
	if code, _, errOut := runInProcess(t, nil, "migrate", "--dsn", db); code != exitOK {
		t.Fatalf("migrate: %s", errOut)
	}
	const wrongPw = "Wrong-Pw-Canary-9"
	for _, tc := range []struct {
		name, sender, route string
		env                 []string
		ok                  bool
	}{
		// The default exchange "" and amq.* are never declared, so only
		// a real connection can tell these apart.
		{"rabbitmq right", `{ type: rabbitmq, url: "amqp://guest@127.0.0.1:5672/", password-env: PW }`, `{ exchange: "" }`, []string{"PW=guest"}, true},
		{"rabbitmq closed port", fmt.Sprintf(`{ type: rabbitmq, url: "amqp://guest@%s/", password-env: PW }`, closedPort(t)), `{ exchange: "" }`, []string{"PW=guest"}, false},
		{"rabbitmq wrong password", `{ type: rabbitmq, url: "amqp://guest@127.0.0.1:5672/", password-env: PW }`, `{ exchange: "" }`, []string{"PW=" + wrongPw}, false},
		{"rabbitmq wrong password amq.topic", `{ type: rabbitmq, url: "amqp://guest@127.0.0.1:5672/", password-env: PW }`, `{ exchange: amq.topic }`, []string{"PW=" + wrongPw}, false},
		// A template route checks no destination: the sender's own
		// connection is what fails.
		{"nats right", fmt.Sprintf(`{ type: nats, url: "nats://%s", user: relay, password-env: PW }`, nats), `{ subject: "x.{event_type}" }`, []string{"PW=Nats-Right-Pw-1"}, true},
		{"nats closed port", fmt.Sprintf(`{ type: nats, url: "nats://%s", user: relay, password-env: PW }`, closedPort(t)), `{ subject: "x.{event_type}" }`, []string{"PW=Nats-Right-Pw-1"}, false},
		{"nats wrong password", fmt.Sprintf(`{ type: nats, url: "nats://%s", user: relay, password-env: PW }`, nats), `{ subject: "x.{event_type}" }`, []string{"PW=" + wrongPw}, false},
		{"kafka right", fmt.Sprintf(`{ type: kafka, brokers: [%s], sasl: { mechanism: plain, username: kuser, password-env: PW } }`, kc.ListenAddrs()[0]), `{ topic: "{event_type}" }`, []string{"PW=Kafka-Right-Pw-2"}, true},
		{"kafka closed port", fmt.Sprintf(`{ type: kafka, brokers: [%s] }`, closedPort(t)), `{ topic: "{event_type}" }`, nil, false},
		{"kafka wrong password", fmt.Sprintf(`{ type: kafka, brokers: [%s], sasl: { mechanism: plain, username: kuser, password-env: PW } }`, kc.ListenAddrs()[0]), `{ topic: "{event_type}" }`, []string{"PW=" + wrongPw}, false},
		{"redis right", `{ type: redis, addr: "127.0.0.1:6379" }`, `{ stream: "{event_type}" }`, nil, true},
		{"redis closed port", fmt.Sprintf(`{ type: redis, addr: %q }`, closedPort(t)), `{ stream: "{event_type}" }`, nil, false},
		{"redis wrong credentials", `{ type: redis, addr: "127.0.0.1:6379", username: txbox-no-such-user, password-env: PW }`, `{ stream: "{event_type}" }`, []string{"PW=" + wrongPw}, false},
		{"webhook right", fmt.Sprintf(`{ type: webhook, url: %q }`, hook.URL+"/in"), `{}`, nil, true},
		{"webhook closed port", fmt.Sprintf(`{ type: webhook, url: "http://%s/in" }`, closedPort(t)), `{}`, nil, false},
		{"webhook untrusted certificate", fmt.Sprintf(`{ type: webhook, url: %q }`, tlsHook.URL+"/in"), `{}`, nil, false},
	} {
		path := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "-")+".yaml")
		y := fmt.Sprintf("database: { dsn: %q }\nsenders:\n  s: %s\ndefaults: { route: %s }\n", db, tc.sender, tc.route)
		if err := os.WriteFile(path, []byte(y), 0o600); err != nil {
			t.Fatal(err)
		}
		code, out, errOut := runInProcess(t, tc.env, "config", "check", "--config", path, "--connect", "--timeout", "3s")
		all := out + errOut
		switch {
		case tc.ok && (code != exitOK || !strings.Contains(out, "all checks passed")):
			t.Errorf("%s: code %d, want 0 and all checks passed\n%s", tc.name, code, all)
		case !tc.ok && (code != exitFailure || strings.Contains(out, "all checks passed") ||
			!strings.Contains(errOut, "could not connect") && !strings.Contains(errOut, "1 destination(s) not reachable")):
			t.Errorf("%s: code %d, want 1 naming what could not connect\n%s", tc.name, code, all)
		}
		// A template route is a warning saying how to have it checked,
		// never a silent pass.
		if tc.ok && strings.Contains(tc.route, "{event_type}") &&
			(!strings.Contains(out, "is a template") || !strings.Contains(out, "List those types under events") || !strings.Contains(out, "with 1 warning(s)")) {
			t.Errorf("%s: no warning for the template route:\n%s", tc.name, all)
		}
		if !tc.ok && !strings.Contains(all, "config check: ") {
			t.Errorf("%s: no progress line:\n%s", tc.name, all)
		}
		for _, pw := range []string{wrongPw, "Nats-Right-Pw-1", "Kafka-Right-Pw-2"} {
			if strings.Contains(all, pw) {
				t.Errorf("%s: the password %s is printed:\n%s", tc.name, pw, all)
			}
		}
	}
}

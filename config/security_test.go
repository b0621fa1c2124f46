package config

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nkeys"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kfake"
	yaml "go.yaml.in/yaml/v3"

	"github.com/txbox/txbox/internal/testenv"
	"github.com/txbox/txbox/sender"
	"github.com/txbox/txbox/sender/sendertest"
	"github.com/txbox/txbox/sender/webhook"
)

// testPKI is a CA made for one test, with a server certificate for
// 127.0.0.1/localhost and a client certificate, as PEM files.
type testPKI struct {
	dir                                                  string
	caFile, serverCert, serverKey, clientCert, clientKey string
}

func newTestPKI(t *testing.T) testPKI {
	t.Helper()
	dir := t.TempDir()
	p := testPKI{dir: dir, caFile: filepath.Join(dir, "ca.pem"), serverCert: filepath.Join(dir, "server.pem"), serverKey: filepath.Join(dir, "server-key.pem"),
		clientCert: filepath.Join(dir, "client.pem"), clientKey: filepath.Join(dir, "client-key.pem")}
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	ca := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "txbox test CA"}, NotBefore: time.Now().Add(-time.Hour),
		NotAfter: time.Now().Add(24 * time.Hour), IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	writePEM(t, p.caFile, "CERTIFICATE", caDER)
	leaf := func(serial int64, cn string, usage x509.ExtKeyUsage, certFile, keyFile string) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: cn}, NotBefore: time.Now().Add(-time.Hour),
			NotAfter: time.Now().Add(24 * time.Hour), KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
			DNSNames: []string{"localhost"}, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		writePEM(t, certFile, "CERTIFICATE", der)
		kb, err := x509.MarshalPKCS8PrivateKey(key)
		if err != nil {
			t.Fatal(err)
		}
		writePEM(t, keyFile, "PRIVATE KEY", kb)
	}
	leaf(2, "localhost", x509.ExtKeyUsageServerAuth, p.serverCert, p.serverKey)
	leaf(3, "txbox-client", x509.ExtKeyUsageClientAuth, p.clientCert, p.clientKey)
	return p
}

func writePEM(t *testing.T, path, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

// freePort returns a TCP port that was free a moment ago.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// startServer runs a server binary for the test and waits until port
// accepts connections; the process is killed when the test ends.
func startServer(t *testing.T, port int, bin string, args ...string) {
	t.Helper()
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("%s is needed for this test: %v", bin, err)
	}
	var out strings.Builder
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})
	addr := "127.0.0.1:" + strconv.Itoa(port)
	testenv.WaitFor(t, 30*time.Second, bin+" listening on "+addr, func() bool {
		select {
		case <-exited:
			t.Fatalf("%s exited:\n%s", bin, out.String())
		default:
		}
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
}

// openOne loads yml and opens its senders with environment environ,
// bounded by timeout.
func openOne(t *testing.T, yml string, environ map[string]string, timeout time.Duration) (map[string]sender.Sender, error) {
	t.Helper()
	c, err := Load(Source{YAML: []byte(yml)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	ss, err := c.OpenSenders(ctx, func(k string) string { return environ[k] }, slog.New(slog.DiscardHandler))
	if err == nil {
		t.Cleanup(func() {
			for _, s := range ss {
				_ = s.Close(context.Background())
			}
		})
	}
	return ss, err
}

func sendOK(t *testing.T, s sender.Sender, route sender.Route) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := s.Send(ctx, sendertest.NewMessages(3, route)); err != nil {
		t.Fatalf("send: %v", err)
	}
}

// TestNATSTLSAndAuth runs a nats-server of its own with mutual TLS and
// two users (a password and an NKey), and a second one with a token:
// senders configured from YAML connect, provision a stream and publish;
// without the CA, without the client certificate or with a wrong password
// they do not.
func TestNATSTLSAndAuth(t *testing.T) {
	t.Parallel()
	pki := newTestPKI(t)
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	seed, _ := kp.Seed()
	pub, _ := kp.PublicKey()
	seedFile := filepath.Join(pki.dir, "user.nk")
	if err := os.WriteFile(seedFile, seed, 0o600); err != nil {
		t.Fatal(err)
	}
	pwFile := filepath.Join(pki.dir, "nats-pw")
	if err := os.WriteFile(pwFile, []byte("alice-Secret-1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	port := freePort(t)
	conf := filepath.Join(pki.dir, "nats.conf")
	if err := os.WriteFile(conf, fmt.Appendf(nil, `
listen: 127.0.0.1:%d
jetstream { store_dir: %q }
tls { cert_file: %q, key_file: %q, ca_file: %q, verify: true, timeout: 5 }
authorization { users = [ { user: alice, password: "alice-Secret-1" }, { nkey: %s } ] }
`, port, filepath.Join(pki.dir, "js"), pki.serverCert, pki.serverKey, pki.caFile, pub), 0o600); err != nil {
		t.Fatal(err)
	}
	startServer(t, port, "/usr/sbin/nats-server", "-c", conf)

	url := fmt.Sprintf("nats://127.0.0.1:%d", port)
	yml := func(auth, tlsBlock string) string {
		return fmt.Sprintf(`
senders:
  n: { type: nats, url: %q, timeout: 5s, provision: true, provision-stream: TLSTEST, provision-subjects: ["tls.>"], %s, tls: %s }
`, url, auth, tlsBlock)
	}
	mtls := fmt.Sprintf(`{ ca-file: %q, cert-file: %q, key-file: %q }`, pki.caFile, pki.clientCert, pki.clientKey)
	for _, tc := range []struct {
		name, auth string
		env        map[string]string
	}{
		{"password-file", fmt.Sprintf("user: alice, password-file: %q", pwFile), nil},
		{"password-env", "user: alice, password-env: NATS_PW", map[string]string{"NATS_PW": "alice-Secret-1"}},
		{"nkey", fmt.Sprintf("nkey-seed-file: %q", seedFile), nil},
	} {
		ss, err := openOne(t, yml(tc.auth, mtls), tc.env, 30*time.Second)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		sendOK(t, ss["n"], sender.Route{Subject: "tls." + tc.name})
	}
	for _, tc := range []struct {
		name, auth, tls string
		env             map[string]string
	}{
		{"no CA", "user: alice, password-env: NATS_PW", fmt.Sprintf(`{ cert-file: %q, key-file: %q }`, pki.clientCert, pki.clientKey), map[string]string{"NATS_PW": "alice-Secret-1"}},
		{"no client certificate", "user: alice, password-env: NATS_PW", fmt.Sprintf(`{ ca-file: %q }`, pki.caFile), map[string]string{"NATS_PW": "alice-Secret-1"}},
		{"wrong password", "user: alice, password-env: NATS_PW", mtls, map[string]string{"NATS_PW": "wrong-Secret-2"}},
	} {
		if _, err := openOne(t, yml(tc.auth, tc.tls), tc.env, 4*time.Second); err == nil {
			t.Errorf("%s: the sender connected and provisioned", tc.name)
		} else if strings.Contains(err.Error(), "alice-Secret-1") || strings.Contains(err.Error(), "wrong-Secret-2") {
			t.Errorf("%s: the password is in the error: %v", tc.name, err)
		}
	}

	// Token auth, on a plain server of its own.
	tport := freePort(t)
	startServer(t, tport, "/usr/sbin/nats-server", "-a", "127.0.0.1", "-p", strconv.Itoa(tport), "-js", "-sd", filepath.Join(pki.dir, "js2"), "--auth", "tok-Secret-3")
	tyml := func(env string) string {
		return fmt.Sprintf(`
senders:
  n: { type: nats, url: "nats://127.0.0.1:%d", timeout: 5s, token-env: %s, provision: true, provision-stream: TOKTEST, provision-subjects: ["tok.>"] }
`, tport, env)
	}
	ss, err := openOne(t, tyml("TOK"), map[string]string{"TOK": "tok-Secret-3"}, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	sendOK(t, ss["n"], sender.Route{Subject: "tok.x"})
	if _, err := openOne(t, tyml("TOK"), map[string]string{"TOK": "bad-token"}, 4*time.Second); err == nil {
		t.Error("a wrong token connected")
	}
}

// TestRedisTLSAndACL runs a redis-server of its own with a TLS port
// (client certificates required) and an ACL user: the sender from YAML
// writes to a stream over TLS as that user.
func TestRedisTLSAndACL(t *testing.T) {
	t.Parallel()
	pki := newTestPKI(t)
	port := freePort(t)
	conf := filepath.Join(pki.dir, "redis.conf")
	if err := os.WriteFile(conf, fmt.Appendf(nil, `port 0
tls-port %d
bind 127.0.0.1
tls-cert-file %s
tls-key-file %s
tls-ca-cert-file %s
tls-auth-clients yes
save ""
appendonly no
dir %s
user default off
user relay on >relay-Secret-4 ~txbox.* +@all
`, port, pki.serverCert, pki.serverKey, pki.caFile, pki.dir), 0o600); err != nil {
		t.Fatal(err)
	}
	startServer(t, port, "/usr/bin/redis-server", conf)
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	pwFile := filepath.Join(pki.dir, "redis-pw")
	if err := os.WriteFile(pwFile, []byte("relay-Secret-4"), 0o600); err != nil {
		t.Fatal(err)
	}
	yml := func(user, tlsBlock string) string {
		return fmt.Sprintf(`
senders:
  r: { type: redis, addr: %q, username: %s, password-file: %q, timeout: 3s, tls: %s }
`, addr, user, pwFile, tlsBlock)
	}
	mtls := fmt.Sprintf(`{ ca-file: %q, cert-file: %q, key-file: %q }`, pki.caFile, pki.clientCert, pki.clientKey)
	ss, err := openOne(t, yml("relay", mtls), nil, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	sendOK(t, ss["r"], sender.Route{Stream: "txbox.tls"})

	// Read back over TLS, as the same user.
	c, _ := Load(Source{YAML: []byte(yml("relay", mtls))})
	tc, err := c.Senders["r"].Redis.TLS.build("tls", nil)
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: addr, Username: "relay", Password: "relay-Secret-4", TLSConfig: tc})
	defer rdb.Close()
	if n, err := rdb.XLen(context.Background(), "txbox.tls").Result(); err != nil || n != 3 {
		t.Fatalf("XLEN txbox.tls = %d, %v; want 3", n, err)
	}

	for name, y := range map[string]string{
		"user without access": yml("nobody", mtls),
		"no client cert":      yml("relay", fmt.Sprintf(`{ ca-file: %q }`, pki.caFile)),
		"no CA":               yml("relay", fmt.Sprintf(`{ cert-file: %q, key-file: %q }`, pki.clientCert, pki.clientKey)),
	} {
		ss, err := openOne(t, y, nil, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		err = ss["r"].Send(ctx, sendertest.NewMessages(1, sender.Route{Stream: "txbox.tls"}))
		cancel()
		if err == nil {
			t.Errorf("%s: the send succeeded", name)
		} else if strings.Contains(err.Error(), "relay-Secret-4") {
			t.Errorf("%s: the password is in the error: %v", name, err)
		}
	}
}

// TestKafkaSASL: a kfake cluster with SASL on and one user per mechanism;
// senders from YAML authenticate with PLAIN, SCRAM-SHA-256 and
// SCRAM-SHA-512 and produce; a wrong password does not.
func TestKafkaSASL(t *testing.T) {
	t.Parallel()
	cl, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "sasl-topic"), kfake.EnableSASL(),
		kfake.Superuser("PLAIN", "plain-user", "plain-Secret-5"),
		kfake.Superuser("SCRAM-SHA-256", "s256-user", "s256-Secret-6"),
		kfake.Superuser("SCRAM-SHA-512", "s512-user", "s512-Secret-7"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	brokers := strings.Join(cl.ListenAddrs(), ",")
	yml := func(mech, user string) string {
		return fmt.Sprintf(`
senders:
  k: { type: kafka, brokers: %q, timeout: 5s, sasl: { mechanism: %s, username: %s, password-env: KPW } }
`, brokers, mech, user)
	}
	for _, tc := range []struct{ mech, user, pw string }{
		{"plain", "plain-user", "plain-Secret-5"},
		{"scram-sha-256", "s256-user", "s256-Secret-6"},
		{"scram-sha-512", "s512-user", "s512-Secret-7"},
	} {
		ss, err := openOne(t, yml(tc.mech, tc.user), map[string]string{"KPW": tc.pw}, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		sendOK(t, ss["k"], sender.Route{Topic: "sasl-topic"})

		ss, err = openOne(t, yml(tc.mech, tc.user), map[string]string{"KPW": "wrong-" + tc.pw}, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		err = ss["k"].Send(ctx, sendertest.NewMessages(1, sender.Route{Topic: "sasl-topic"}))
		cancel()
		if err == nil {
			t.Errorf("%s with a wrong password: produced", tc.mech)
		} else if strings.Contains(err.Error(), tc.pw) {
			t.Errorf("%s: the password is in the error: %v", tc.mech, err)
		}
	}
}

// TestSecurityKeysRejected: each mistake in the security keys is a
// config error naming its key path.
func TestSecurityKeysRejected(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ yml, path, msg string }{
		{`senders: { k: { type: kafka, brokers: [a:1], sasl: { mechanism: plain, username: u, password: hunter2 } } }`, "senders.k.sasl.password", "use password-env or password-file"},
		{`senders: { n: { type: nats, token: abc } }`, "senders.n.token", "use token-env or token-file"},
		{`senders: { r: { type: redis, password: abc } }`, "senders.r.password", "use password-env or password-file"},
		{`senders: { w: { type: webhook, hmac-secret: abc } }`, "senders.w.hmac-secret", "use hmac-secret-env or hmac-secret-file"},
		{`senders: { k: { type: kafka, brokers: [a:1], sasl: { mechanism: gssapi, username: u, password-env: P } } }`, "senders.k.sasl.mechanism", "must be plain, scram-sha-256 or scram-sha-512"},
		{`senders: { k: { type: kafka, brokers: [a:1], sasl: { mechanism: plain, username: u } } }`, "senders.k.sasl.password-env", "required"},
		{`senders: { k: { type: kafka, brokers: [a:1], sasl: { mechanism: plain, username: u, password-env: P, password-file: /f } } }`, "senders.k.sasl.password-env", "not both"},
		{`senders: { k: { type: kafka, brokers: [a:1], tls: { cert-file: /c } } }`, "senders.k.tls.cert-file", "set both or neither"},
		{`senders: { r: { type: rabbitmq, url: "amqp://h/", tls: { ca-file: /ca } } }`, "senders.r.tls", "needs an amqps:// url"},
		{`senders: { r: { type: rabbitmq, url: "amqps://u:p@h/", password-env: P } }`, "senders.r.password-env", "carries a password already"},
		{`senders: { n: { type: nats, token-env: T, nkey-seed-file: /s } }`, "senders.n.nkey-seed-file", "one way to authenticate"},
		{`senders: { n: { type: nats, user: u } }`, "senders.n.user", "go together"},
		{`senders: { n: { type: nats, tls: { enabled: false, ca-file: /ca } } }`, "senders.n.tls.enabled", "would do nothing"},
		{`senders: { n: { type: nats, password-env: "not a name" , user: u} }`, "senders.n.password-env", "not an environment variable name"},
	} {
		_, err := Load(Source{YAML: []byte(tc.yml)})
		if err == nil {
			t.Errorf("%s: accepted", tc.yml)
			continue
		}
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.path+": ") || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("%s:\n got %v\nwant %s: …%s…", tc.yml, err, tc.path, tc.msg)
		}
		if strings.Contains(err.Error(), "hunter2") {
			t.Errorf("the literal secret is quoted in the error: %v", err)
		}
	}
}

// TestSecurityFilesChecked: CheckSenders finds an unreadable CA file, a
// CA file without a certificate, an empty password file and an unset
// variable, each under its key, without connecting.
func TestSecurityFilesChecked(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	junk, empty := filepath.Join(dir, "junk.pem"), filepath.Join(dir, "empty")
	_ = os.WriteFile(junk, []byte("not a certificate"), 0o600)
	_ = os.WriteFile(empty, nil, 0o600)
	c, err := Load(Source{YAML: fmt.Appendf(nil, `
senders:
  a: { type: nats, tls: { ca-file: %q } }
  b: { type: redis, tls: { ca-file: %q } }
  c: { type: kafka, brokers: [h:1], sasl: { mechanism: plain, username: u, password-file: %q } }
  d: { type: rabbitmq, url: "amqps://app@h/", password-env: RMQ_PW }
defaults: { sender: a }
`, filepath.Join(dir, "missing.pem"), junk, empty)})
	if err != nil {
		t.Fatal(err)
	}
	err = c.CheckSenders(func(string) string { return "" }, nil)
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{"senders.a.tls.ca-file: cannot read", "senders.b.tls.ca-file: " + junk + " holds no PEM certificate",
		"senders.c.sasl.password-file: " + empty + " is empty", "senders.d.password-env: environment variable RMQ_PW is empty"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("missing %q in:\n%v", want, err)
		}
	}
}

// TestInsecureSkipVerifyWarns: the relay logs a warning naming the key.
func TestInsecureSkipVerifyWarns(t *testing.T) {
	t.Parallel()
	c, err := Load(Source{YAML: []byte(`senders: { w: { type: webhook, url: "https://h/", tls: { insecure-skip-verify: true } } }`)})
	if err != nil {
		t.Fatal(err)
	}
	var buf testenv.LogBuffer
	if err := c.CheckSenders(nil, slog.New(slog.NewTextHandler(&buf, nil))); err != nil {
		t.Fatal(err)
	}
	if s := buf.String(); !strings.Contains(s, "level=WARN") || !strings.Contains(s, "senders.w.tls.insecure-skip-verify") {
		t.Fatalf("no warning naming the key:\n%s", s)
	}
	cfg, err := c.senderConfig("w", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if tc := cfg.(webhook.Config).TLS; tc == nil || !tc.InsecureSkipVerify {
		t.Fatalf("webhook TLS = %+v, want InsecureSkipVerify", tc)
	}
}

// TestSecretKeysCanary extends the secrets canary to the secrets that
// come from *-env and *-file keys: none appears in any rendering of the
// configuration, Secrets returns each (so Scrub cleans driver errors),
// and a RabbitMQ password from password-env reaches the broker.
func TestSecretKeysCanary(t *testing.T) {
	t.Parallel()
	testenv.RequireTCP(t, "RabbitMQ", "127.0.0.1:5672")
	dir := t.TempDir()
	file := func(name, v string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(v+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	canaries := map[string]string{
		"NATS_PW": "Canary-natspw-1", "NATS_TOKEN": "Canary-natstok-2", "KAFKA_PW": "Canary-kafkapw-3", "RMQ_PW": "guest",
		"HOOK": "Canary-hmac-4",
	}
	redisFile, hookFile := file("redis", redisFileSecret), file("hook", "Canary-hmacfile-6")
	yml := fmt.Sprintf(`
senders:
  n1: { type: nats, user: app, password-env: NATS_PW }
  n2: { type: nats, token-env: NATS_TOKEN }
  k: { type: kafka, brokers: [127.0.0.1:1], sasl: { mechanism: scram-sha-512, username: app, password-env: KAFKA_PW } }
  r: { type: rabbitmq, url: "amqp://guest@127.0.0.1:5672/", password-env: RMQ_PW, provision: true, provision-exchanges: [txbox.canary] }
  rd: { type: redis, username: app, password-file: %q }
  w1: { type: webhook, url: "http://h/", hmac-secret-env: HOOK }
  w2: { type: webhook, url: "http://h/", hmac-secret-file: %q }
defaults: { sender: r }
`, redisFile, hookFile)
	c, err := Load(Source{YAML: []byte(yml)})
	if err != nil {
		t.Fatal(err)
	}
	getenv := func(k string) string { return canaries[k] }
	var buf strings.Builder
	fmt.Fprintf(&buf, "%v %+v %#v", c, *c, c.Senders)
	y, _ := yaml.Marshal(c)
	j, _ := json.Marshal(c)
	buf.Write(y)
	buf.Write(j)
	all := []string{redisFileSecret, "Canary-hmacfile-6"}
	for k, v := range canaries {
		if k != "RMQ_PW" {
			all = append(all, v)
		}
	}
	secrets := c.Secrets(getenv)
	for _, v := range all {
		if strings.Contains(buf.String(), v) {
			t.Errorf("%s is printed", v)
		}
		if !slices.Contains(secrets, v) {
			t.Errorf("Secrets lacks %s", v)
		}
		if s := Scrub(fmt.Errorf("driver said %s", v), secrets).Error(); strings.Contains(s, v) {
			t.Errorf("Scrub left %s in %q", v, s)
		}
	}
	// The password from the environment reaches RabbitMQ: provisioning
	// the exchange needs a logged-in connection.
	ss, err := c.OpenSenders(context.Background(), getenv, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range ss {
		_ = s.Close(context.Background())
	}
	canaries["RMQ_PW"] = "Canary-wrong-7"
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := c.OpenSenders(ctx, getenv, slog.New(slog.DiscardHandler)); err == nil {
		t.Error("a wrong RabbitMQ password provisioned")
	} else if strings.Contains(err.Error(), "Canary-wrong-7") {
		t.Errorf("the password is in the error: %v", err)
	}
}

const redisFileSecret = "Canary-redispw-5"

// TestRabbitMQAMQPS: the local RabbitMQ has no TLS listener, so the test
// puts a TLS-terminating proxy (its own CA, client certificates required)
// in front of it; an amqps:// sender with the tls block from YAML
// provisions an exchange through it, one without the CA does not.
func TestRabbitMQAMQPS(t *testing.T) {
	t.Parallel()
	testenv.RequireTCP(t, "RabbitMQ", "127.0.0.1:5672")
	pki := newTestPKI(t)
	cert, err := tls.LoadX509KeyPair(pki.serverCert, pki.serverKey)
	if err != nil {
		t.Fatal(err)
	}
	caPEM, _ := os.ReadFile(pki.caFile)
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}, ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				up, err := net.Dial("tcp", "127.0.0.1:5672")
				if err != nil {
					return
				}
				defer up.Close()
				go func() { _, _ = io.Copy(up, c); up.Close() }()
				_, _ = io.Copy(c, up)
			}()
		}
	}()
	yml := func(tlsBlock string) string {
		return fmt.Sprintf(`
senders:
  r: { type: rabbitmq, url: "amqps://guest@%s/", password-env: RMQ_PW, timeout: 5s, provision: true, provision-exchanges: [txbox.amqps], tls: %s }
`, ln.Addr(), tlsBlock)
	}
	env := map[string]string{"RMQ_PW": "guest"}
	// Provisioning declares the exchange: a logged-in AMQP connection
	// through the TLS proxy.
	if _, err := openOne(t, yml(fmt.Sprintf(`{ ca-file: %q, cert-file: %q, key-file: %q, server-name: localhost }`, pki.caFile, pki.clientCert, pki.clientKey)), env, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	if _, err := openOne(t, yml(fmt.Sprintf(`{ cert-file: %q, key-file: %q }`, pki.clientCert, pki.clientKey)), env, 10*time.Second); err == nil {
		t.Error("connected without the CA")
	}
}

// TestNATSCreds: decentralized auth. The test makes an operator, an
// account with JetStream and a user (JWTs signed with NKeys), runs a
// nats-server of its own that trusts the operator, and a sender whose
// creds-file holds the user's JWT and seed provisions a stream and
// publishes; a user JWT signed by another account does not connect.
func TestNATSCreds(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	mustKP := func(f func() (nkeys.KeyPair, error)) nkeys.KeyPair {
		kp, err := f()
		if err != nil {
			t.Fatal(err)
		}
		return kp
	}
	opKP, accKP, userKP, sysKP := mustKP(nkeys.CreateOperator), mustKP(nkeys.CreateAccount), mustKP(nkeys.CreateUser), mustKP(nkeys.CreateAccount)
	opPub, _ := opKP.PublicKey()
	accPub, _ := accKP.PublicKey()
	userPub, _ := userKP.PublicKey()
	sysPub, _ := sysKP.PublicKey()
	opc := jwt.NewOperatorClaims(opPub)
	opc.Name = "txbox-test"
	// JetStream needs a system account.
	opc.SystemAccount = sysPub
	sc := jwt.NewAccountClaims(sysPub)
	sc.Name = "SYS"
	sysJWT, err := sc.Encode(opKP)
	if err != nil {
		t.Fatal(err)
	}
	opJWT, err := opc.Encode(opKP)
	if err != nil {
		t.Fatal(err)
	}
	ac := jwt.NewAccountClaims(accPub)
	ac.Name = "APP"
	ac.Limits.JetStreamLimits = jwt.JetStreamLimits{MemoryStorage: -1, DiskStorage: -1, Streams: -1, Consumer: -1}
	accJWT, err := ac.Encode(opKP)
	if err != nil {
		t.Fatal(err)
	}
	creds := func(signer nkeys.KeyPair, name string) string {
		uc := jwt.NewUserClaims(userPub)
		uc.Name = "relay"
		ujwt, err := uc.Encode(signer)
		if err != nil {
			t.Fatal(err)
		}
		seed, _ := userKP.Seed()
		b, err := jwt.FormatUserConfig(ujwt, seed)
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := creds(accKP, "good.creds")
	bad := creds(mustKP(nkeys.CreateAccount), "bad.creds")
	port := freePort(t)
	conf := filepath.Join(dir, "nats.conf")
	if err := os.WriteFile(conf, fmt.Appendf(nil, `
listen: 127.0.0.1:%d
jetstream { store_dir: %q }
operator: %q
resolver: MEMORY
system_account: %s
resolver_preload: { %s: %q, %s: %q }
`, port, filepath.Join(dir, "js"), opJWT, sysPub, accPub, accJWT, sysPub, sysJWT), 0o600); err != nil {
		t.Fatal(err)
	}
	startServer(t, port, "/usr/sbin/nats-server", "-c", conf)
	yml := func(credsFile string) string {
		return fmt.Sprintf(`
senders:
  n: { type: nats, url: "nats://127.0.0.1:%d", timeout: 5s, creds-file: %q, provision: true, provision-stream: CREDS, provision-subjects: ["creds.>"] }
`, port, credsFile)
	}
	ss, err := openOne(t, yml(good), nil, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	sendOK(t, ss["n"], sender.Route{Subject: "creds.x"})
	if _, err := openOne(t, yml(bad), nil, 4*time.Second); err == nil {
		t.Error("a user of an account the server does not know connected")
	}
}

// TestSecurityKeysOverridable: the nested tls and sasl keys take
// environment and --set overrides like every other key, and print with
// their source.
func TestSecurityKeysOverridable(t *testing.T) {
	t.Parallel()
	c, err := Load(Source{Name: "txbox.yaml", YAML: []byte("senders:\n  k: { type: kafka, brokers: [h:1] }\n"),
		Env: []string{"TXBOX_SENDERS_K_TLS_CA_FILE=/etc/ca.pem"},
		Set: []string{"senders.k.sasl.mechanism=scram-sha-256", "senders.k.sasl.username=u", "senders.k.sasl.password-env=KPW", "senders.x.tls.server-name=h"}})
	if err == nil || !strings.Contains(err.Error(), "senders.x.type") {
		t.Fatalf("a --set for a sender the file lacks must ask for its type: %v", err)
	}
	c, err = Load(Source{Name: "txbox.yaml", YAML: []byte("senders:\n  k: { type: kafka, brokers: [h:1] }\n"),
		Env: []string{"TXBOX_SENDERS_K_TLS_CA_FILE=/etc/ca.pem"},
		Set: []string{"senders.k.sasl.mechanism=scram-sha-256", "senders.k.sasl.username=u", "senders.k.sasl.password-env=KPW"}})
	if err != nil {
		t.Fatal(err)
	}
	k := c.Senders["k"].Kafka
	if k.TLS == nil || k.TLS.CAFile != "/etc/ca.pem" || k.SASL == nil || k.SASL.Mechanism != "scram-sha-256" || k.SASL.PasswordEnv != "KPW" {
		t.Fatalf("tls %+v sasl %+v", k.TLS, k.SASL)
	}
	got := map[string]string{}
	for _, s := range c.Settings() {
		got[s.Path] = s.Value + " | " + s.Source
	}
	for p, want := range map[string]string{
		"senders.k.tls.ca-file":       "/etc/ca.pem | environment variable TXBOX_SENDERS_K_TLS_CA_FILE",
		"senders.k.sasl.password-env": "KPW | flag --set senders.k.sasl.password-env",
		"senders.k.tls.server-name":   `"" | default`,
		"senders.k.brokers":           "[h:1] | file txbox.yaml:2",
	} {
		if got[p] != want {
			t.Errorf("%s = %q, want %q", p, got[p], want)
		}
	}
}

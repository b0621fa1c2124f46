package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/txbox/txbox/internal/storeharness"
	"github.com/txbox/txbox/internal/testenv"
)

// servingAddr finds the address the relay logged for the listener
// serving path.
func servingAddr(log, path string) string {
	re := regexp.MustCompile(`msg=serving addr=(\S+) paths="?\[([^\]]*)\]`)
	for _, m := range re.FindAllStringSubmatch(log, -1) {
		if strings.Contains(" "+m[2]+" ", " "+path+" ") {
			return m[1]
		}
	}
	return ""
}

func httpGet(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestRelayCommandServesMetricsAndHealth runs `txbox relay` on PostgreSQL
// with metrics and health on listeners of their own, delivers one event,
// and reads it back from /metrics; /readyz reports ready, then 503 when
// the database's schema is dropped.
func TestRelayCommandServesMetricsAndHealth(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer srv.Close()
	admin := storeharness.PostgresAdmin(t)
	schema := testenv.PostgresSchema(t, admin)
	cfgPath := t.TempDir() + "/txbox.yaml"
	yml := fmt.Sprintf(`
database: { dialect: postgres, dsn: %q, schema: %s }
senders: { hooks: { type: webhook, url: "%s/in" } }
defaults: { polling: { min-delay: 5ms, max-delay: 50ms } }
relay: { discover-interval: 20ms, shutdown-timeout: 10s }
metrics: { listen: "127.0.0.1:0", stats-interval: 1s }
health: { listen: "localhost:0" }
`, testenv.PostgresURL, schema, srv.URL)
	if err := os.WriteFile(cfgPath, []byte(yml), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stderr := &testenv.LogBuffer{}
	done := make(chan int, 1)
	go func() {
		e := &env{stdin: strings.NewReader(""), stdout: io.Discard, stderr: stderr, getenv: func(string) string { return "" }}
		done <- run(ctx, e, []string{"relay", "--config", cfgPath, "--migrate"})
	}()
	var metricsAddr, healthAddr string
	testenv.WaitFor(t, 30*time.Second, "both listeners logged", func() bool {
		metricsAddr, healthAddr = servingAddr(stderr.String(), "/metrics"), servingAddr(stderr.String(), "/readyz")
		return metricsAddr != "" && healthAddr != ""
	})
	if metricsAddr == healthAddr {
		t.Fatalf("one listener for two addresses: %s", stderr.String())
	}
	if code, _, errOut := runInProcess(t, nil, "publish", "--config", cfgPath, "--type", "user.signed-up", "--payload", `{}`); code != exitOK {
		t.Fatalf("publish: %s", errOut)
	}
	testenv.WaitFor(t, 30*time.Second, "the sent message in /metrics", func() bool {
		code, body := httpGet(t, "http://"+metricsAddr+"/metrics")
		return code == http.StatusOK && strings.Contains(body, `txbox_relay_messages_total{event_type="user.signed-up",result="sent",route=""} 1`)
	})
	_, body := httpGet(t, "http://"+metricsAddr+"/metrics")
	for _, want := range []string{"txbox_outbox_stats_queries_total", "go_goroutines", "txbox_relay_send_duration_seconds_bucket"} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	code, body := httpGet(t, "http://"+healthAddr+"/readyz")
	var rep struct{ Status string }
	if code != http.StatusOK || json.Unmarshal([]byte(body), &rep) != nil || rep.Status != "ok" {
		t.Errorf("/readyz = %d %s", code, body)
	}
	if code, _ := httpGet(t, "http://"+healthAddr+"/metrics"); code != http.StatusNotFound {
		t.Errorf("/metrics on the health listener = %d, want 404", code)
	}
	if code, _ := httpGet(t, "http://"+metricsAddr+"/readyz"); code != http.StatusNotFound {
		t.Errorf("/readyz on the metrics listener = %d, want 404", code)
	}
	if _, err := admin.Exec(`DROP SCHEMA "` + schema + `" CASCADE`); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 30*time.Second, "readyz 503 without the schema", func() bool {
		code, _ := httpGet(t, "http://"+healthAddr+"/readyz")
		return code == http.StatusServiceUnavailable
	})
	cancel()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("relay did not stop within 30s")
	}
	if code, _ := httpGet(t, "http://"+healthAddr+"/livez"); code != 0 {
		t.Errorf("health listener still answering after the relay exited: %d", code)
	}
}

// TestRelayCommandListenerTaken: a taken metrics port fails the start
// with exit 1 before the relay runs.
func TestRelayCommandListenerTaken(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.NotFoundHandler())
	defer srv.Close()
	dir := t.TempDir()
	if code, _, errOut := runInProcess(t, nil, "migrate", "--dialect", "sqlite", "--dsn", dir+"/x.db"); code != exitOK {
		t.Fatalf("migrate: %s", errOut)
	}
	code, _, errOut := runInProcess(t, nil, "relay", "--dialect", "sqlite", "--dsn", dir+"/x.db",
		"--set", "senders.h.type=webhook", "--set", "senders.h.url="+srv.URL, "--set", "metrics.listen="+strings.TrimPrefix(srv.URL, "http://"))
	if code != exitFailure || !strings.Contains(errOut, "listen:") || !strings.Contains(errOut, "address already in use") {
		t.Errorf("code %d, stderr %q", code, errOut)
	}
	code, _, errOut = runInProcess(t, nil, "relay", "--dialect", "sqlite", "--dsn", dir+"/x.db",
		"--set", "senders.h.type=webhook", "--set", "senders.h.url="+srv.URL, "--set", "health.listen=nohost")
	if code != exitUsage || !strings.Contains(errOut, "health.listen: must be host:port") {
		t.Errorf("bad health.listen: code %d, stderr %q", code, errOut)
	}
}

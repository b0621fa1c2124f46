package main

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/txbox/txbox"
)

// TestRelayCommandSQLiteWebhook runs `txbox relay` in process on SQLite with
// a webhook sender, publishes with `txbox publish`, waits for the POST,
// then cancels the command's context as SIGTERM would and expects exit 0
// and, as it ran with --cpuprofile, a profile written on the way out.
func TestRelayCommandSQLiteWebhook(t *testing.T) {
	t.Parallel()
	got := make(chan *http.Request, 4)
	bodies := make(chan string, 4)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		bodies <- string(b)
		got <- r
	}))
	defer srv.Close()
	dir := t.TempDir()
	cfgPath := dir + "/txbox.yaml"
	yml := fmt.Sprintf(`
database: { dsn: %s/relay.db }
senders: { hooks: { type: webhook, url: "%s/in" } }
defaults: { polling: { min-delay: 5ms, max-delay: 50ms } }
relay: { discover-interval: 20ms, shutdown-timeout: 10s }
`, dir, srv.URL)
	if err := os.WriteFile(cfgPath, []byte(yml), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, _, errOut := runInProcess(t, nil, "migrate", "--config", cfgPath); code != exitOK {
		t.Fatalf("migrate: %s", errOut)
	}
	stderr, done, stop := startRelay(t, "--config", cfgPath, "--cpuprofile", dir+"/cpu.pprof")
	code, out, errOut := runInProcess(t, nil, "publish", "--config", cfgPath, "--type", "user.signed-up", "--payload", `{"u":1}`)
	if code != exitOK {
		t.Fatalf("publish: %s", errOut)
	}
	select {
	case r := <-got:
		if body := <-bodies; body != `{"u":1}` || r.Header.Get(txbox.HeaderEventType) != "user.signed-up" || !strings.Contains(out, r.Header.Get(txbox.HeaderEventID)) {
			t.Errorf("delivered %q with headers %v; publish printed %s", body, r.Header, out)
		}
	case code := <-done:
		t.Fatalf("relay exited with %d before delivering: %s", code, stderr.String())
	case <-time.After(30 * time.Second):
		t.Fatalf("nothing delivered within 30s")
	}
	// What SIGTERM does through signal.NotifyContext.
	if code := stop(); code != exitOK {
		t.Fatalf("relay exited %d after the stop signal", code)
	}
	if fi, err := os.Stat(dir + "/cpu.pprof"); err != nil || fi.Size() == 0 {
		t.Fatalf("--cpuprofile: no profile written on shutdown (%v)", err)
	}
}

// TestRelayCommandDatabaseDown: an unreachable database fails the start
// with exit 1 and a message naming the dialect, not the password.
func TestRelayCommandDatabaseDown(t *testing.T) {
	t.Parallel()
	const canary = "Canary-PW-88w"
	start := time.Now()
	code, _, errOut := runInProcess(t, nil, "relay", "--dialect", "postgres",
		"--dsn", "postgres://u:"+canary+"@127.0.0.1:1/x?connect_timeout=2", "--set", "senders.m.type=nats")
	if code != exitFailure || !strings.Contains(errOut, "database postgres:") {
		t.Fatalf("code %d, stderr %q", code, errOut)
	}
	if strings.Contains(errOut, canary) {
		t.Fatalf("password in the error: %q", errOut)
	}
	if el := time.Since(start); el > 20*time.Second {
		t.Errorf("took %s to give up", el)
	}
}

package main

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txbox/txbox/internal/storeharness"
	"github.com/txbox/txbox/internal/testenv"
	"github.com/txbox/txbox/outbox"
	"github.com/txbox/txbox/store/postgres"
)

// The bar of the dead-letter admin's memory (docs/operations.md, "Dead
// letters"): the relay's peak RSS stays under it whatever the dead letters
// weigh.
const (
	dlqMemoryPeakLimit = 150 << 20
	// dlqMemoryWatchdog kills a relay whose RSS passes it, so that a
	// regression fails the test instead of exhausting the machine.
	dlqMemoryWatchdog = 3 << 30
	dlqMemoryClients  = 4
	dlqMemoryPayload  = 1 << 20
)

// TestDeadLetterAdminMemory runs a real `txbox relay` process (built
// without the race detector, so its memory is what production sees) on
// PostgreSQL with N dead letters of 1 MiB each (200; 2,000 with
// TXBOX_CHAOS=1 or `make dlq-memory`) and drives its admin API with 4
// concurrent clients: every listing page, counts, a preview, dry runs of
// retry, resolve and delete of "all", then resolve, retry and delete of
// "all" for real. The relay's peak RSS (VmHWM) must stay under 150 MiB and
// every row is accounted for: each client's dry run matches N, the
// clients' changes add up to N exactly (no row acted on twice, none
// skipped), and the tables hold what they should after each step.
func TestDeadLetterAdminMemory(t *testing.T) {
	t.Parallel()
	testenv.RequireTCP(t, "PostgreSQL", testenv.PostgresAddr)
	n := 200
	if os.Getenv("TXBOX_CHAOS") != "" {
		n = 2000
	}
	if v := os.Getenv("TXBOX_DLQ_MEMORY_ROWS"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 1 {
			t.Fatalf("TXBOX_DLQ_MEMORY_ROWS=%q: want a positive count", v)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()

	bin := buildTxbox(t, ctx)
	db, schema, pool, d := memoryTestDatabase(t, ctx)
	// 1 MiB each: md5 text repeated, which TOAST compresses (the table
	// stays small) but which is 1 MiB on the wire to whoever selects it.
	seed := func() {
		t.Helper()
		for done := 0; done < n; done += 100 {
			if _, err := db.ExecContext(ctx, fmt.Sprintf(`
			INSERT INTO %s.txbox_dead_letter (id, event_type, event_key, payload, headers, attempts, last_error, created_at, failed_at)
			SELECT gen_random_uuid(), 'bulky', 'k' || (i %% 7), convert_to(repeat(md5(i::text), %d), 'UTF8'),
			       '{"content-type":"text/plain"}', 5, 'receiver said 422', now() - interval '1 hour', now() - i * interval '1 millisecond'
			FROM generate_series($1::int, $2::int) AS i`, schema, dlqMemoryPayload/32), done, min(done+100, n)-1); err != nil {
				t.Fatal(err)
			}
		}
	}
	seedStart := time.Now()
	seed()
	t.Logf("seeded %d dead letters of %d bytes in %s", n, dlqMemoryPayload, time.Since(seedStart).Round(time.Millisecond))

	// The webhook counts what the relay sends of the dead letters' type.
	// It sends nothing of it until the real retry: the type has no poller
	// (discovery looks at start, when none are in the outbox, and then not
	// for a day), and only a retry puts its rows back in the outbox. The
	// retry's NOTIFY then wakes the relay, which sends every retried
	// event at once, one at a time (batch-size 1, so its own memory stays
	// out of the books). The look at start must come before the first
	// retry, or it finds them: on a loaded machine it came late. So one
	// witness event waits in the outbox; the look at start finds it and
	// sends it, and only then does the test retry anything.
	var hooked atomic.Int64
	witnessed := make(chan struct{})
	var witnessOnce sync.Once
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("txbox-event-type") == "witness" {
			witnessOnce.Do(func() { close(witnessed) })
			return
		}
		hooked.Add(1)
	}))
	defer hook.Close()
	pub, err := outbox.NewPublisher(d, outbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		_, err := pub.PublishJSON(ctx, tx, "witness", "w", map[string]bool{"witness": true})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	const readTok, adminTok = "dlq-memory-read-token-0123456789", "dlq-memory-admin-token-0123456789"
	m := startMemoryRelay(t, ctx, bin, fmt.Sprintf(`
database: { dialect: postgres, dsn: %q, schema: %s }
senders:
  hook: { type: webhook, url: %q }
relay: { discover-interval: 24h, discover-max-interval: 24h, heartbeat-interval: 1s }
defaults: { batch-size: 1, in-flight: 1 }
`, testenv.PostgresURL, schema, hook.URL), readTok, adminTok)
	defer m.stop()
	select {
	case <-witnessed:
	case <-time.After(2 * time.Minute):
		t.Fatalf("the relay's look at start did not deliver the witness event in 2m; its log:\n%s", m.log.String())
	}
	addr, pid := m.addr, m.pid

	api := &dlqClient{ctx: ctx, base: "http://" + addr}
	testenv.WaitFor(t, 30*time.Second, "the admin API", func() bool {
		var c struct{ Count int }
		return api.try("GET", "/api/v1/dead-letters/count", readTok, "", &c) == nil && c.Count == n
	})
	t.Logf("relay idle: VmRSS %s", mib(procStatus(t, pid, "VmRSS")))
	peaks := []string{}
	step := func(name string, each func(c int) error) {
		t.Helper()
		peaks = append(peaks, name+" "+mib(m.step(t, name, each)))
	}
	countWhere := func(table, where string) int {
		t.Helper()
		var k int
		if err := db.QueryRowContext(ctx, fmt.Sprintf(`SELECT count(*) FROM %s.%s WHERE %s`, schema, table, where)).Scan(&k); err != nil {
			t.Fatal(err)
		}
		return k
	}
	// bulk runs action on "all" from every client at once and returns the
	// sum of what they changed; each must have matched want (-1: any).
	bulk := func(action string, dryRun bool, want int) int {
		t.Helper()
		var changed atomic.Int64
		step(fmt.Sprintf("%s all (dry run %v)", action, dryRun), func(int) error {
			var res struct{ Matched, Changed int }
			body := fmt.Sprintf(`{"all":true,"dry_run":%v}`, dryRun)
			if err := api.try("POST", "/api/v1/dead-letters/"+action, adminTok, body, &res); err != nil {
				return err
			}
			if want >= 0 && res.Matched != want {
				return fmt.Errorf("%s matched %d, want %d", action, res.Matched, want)
			}
			changed.Add(int64(res.Changed))
			return nil
		})
		return int(changed.Load())
	}

	step("list pages and count", func(int) error {
		seen := map[string]bool{}
		cursor := ""
		for {
			var page struct {
				Items []struct {
					ID      string
					Payload struct{ Size int }
				}
				NextCursor string `json:"next_cursor"`
			}
			if err := api.try("GET", "/api/v1/dead-letters?limit=500&cursor="+url.QueryEscape(cursor), readTok, "", &page); err != nil {
				return err
			}
			for _, it := range page.Items {
				if seen[it.ID] || it.Payload.Size != dlqMemoryPayload {
					return fmt.Errorf("listing: %s twice or of %d bytes", it.ID, it.Payload.Size)
				}
				seen[it.ID] = true
			}
			if cursor = page.NextCursor; cursor == "" {
				break
			}
		}
		var c struct{ Count int }
		if err := api.try("GET", "/api/v1/dead-letters/count?type=bulky&status=unresolved", readTok, "", &c); err != nil {
			return err
		}
		if len(seen) != n || c.Count != n {
			return fmt.Errorf("listed %d and counted %d of %d", len(seen), c.Count, n)
		}
		// A preview: one row's payload, cut to the preview size.
		for id := range seen {
			var dl struct {
				Payload struct {
					Size    int
					Preview string
				}
			}
			if err := api.try("GET", "/api/v1/dead-letters/"+id, readTok, "", &dl); err != nil {
				return err
			}
			if dl.Payload.Size != dlqMemoryPayload || len(dl.Payload.Preview) != 1024 {
				return fmt.Errorf("preview of %s: %d bytes of %d", id, len(dl.Payload.Preview), dl.Payload.Size)
			}
			break
		}
		return nil
	})
	for _, a := range []string{"retry", "resolve", "delete"} {
		if got := bulk(a, true, n); got != dlqMemoryClients*n {
			t.Fatalf("%s dry runs would change %d, want %d (%d per client)", a, got, dlqMemoryClients*n, n)
		}
	}
	if k := countWhere("txbox_dead_letter", "status = 'UNRESOLVED'"); k != n {
		t.Fatalf("the dry runs changed something: %d unresolved of %d", k, n)
	}
	if got := bulk("resolve", false, n); got != n {
		t.Fatalf("resolve all: the clients changed %d in all, want %d", got, n)
	}
	if k := countWhere("txbox_dead_letter", "status = 'RESOLVED'"); k != n {
		t.Fatalf("after resolve all: %d resolved, want %d", k, n)
	}
	if got := bulk("retry", false, -1); got != n {
		t.Fatalf("retry all: the clients moved %d in all, want %d", got, n)
	}
	// The moved rows are in the outbox, or already sent: the relay may
	// be sending them by now.
	if dl := countWhere("txbox_dead_letter", "true"); dl != 0 {
		t.Fatalf("after retry all: %d dead letters, want 0", dl)
	}
	// The retry woke the relay (discovery would not look for a day): it
	// sends every retried event, and the outbox empties.
	testenv.WaitFor(t, 2*time.Minute, "the relay sending the retried events", func() bool {
		return hooked.Load() >= int64(n) && countWhere("txbox_outbox", "event_type = 'bulky'") == 0
	})
	// Dead letters again, for the delete.
	seed()
	if got := bulk("delete", true, n); got != dlqMemoryClients*n {
		t.Fatalf("delete dry runs would delete %d, want %d", got, dlqMemoryClients*n)
	}
	if got := bulk("delete", false, -1); got != n {
		t.Fatalf("delete all: the clients deleted %d in all, want %d", got, n)
	}
	if dl, ob := countWhere("txbox_dead_letter", "true"), countWhere("txbox_outbox", "true"); dl != 0 || ob != 0 {
		t.Fatalf("after delete all: %d dead letters and %d outbox rows, want none", dl, ob)
	}
	peak := procStatus(t, pid, "VmHWM")
	t.Logf("%d dead letters of %s, %d clients: relay peak RSS (VmHWM) %s; per step: %s", n, mib(dlqMemoryPayload), dlqMemoryClients, mib(peak), strings.Join(peaks, ", "))
	if peak >= dlqMemoryPeakLimit {
		t.Fatalf("relay peak RSS %s, want < %s", mib(peak), mib(dlqMemoryPeakLimit))
	}
}

// memoryTestDatabase is a migrated schema of the test's own on
// PostgreSQL: an admin connection, the schema's name, a pool and the
// driver on it (closed when t ends).
func memoryTestDatabase(t *testing.T, ctx context.Context) (*sql.DB, string, *pgxpool.Pool, *postgres.Driver) {
	t.Helper()
	db := storeharness.PostgresAdmin(t)
	schema := testenv.PostgresSchema(t, db)
	pool, err := pgxpool.New(ctx, testenv.PostgresURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	d, err := postgres.New(pool, postgres.Config{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	return db, schema, pool, d
}

// memoryRelay is a `txbox relay` process whose RSS is watched: past
// dlqMemoryWatchdog it is killed, so that a regression fails the test
// instead of exhausting the machine.
type memoryRelay struct {
	cmd    *exec.Cmd
	pid    int
	addr   string // the admin API's
	log    *testenv.LogBuffer
	watch  *rssWatch
	exited chan struct{}
}

// startMemoryRelay runs bin relay on yml, with the admin API on a free
// loopback port and the two tokens, and waits for the API's address.
// Defer stop.
func startMemoryRelay(t *testing.T, ctx context.Context, bin, yml, readTok, adminTok string) *memoryRelay {
	t.Helper()
	cfgPath := filepath.Join(t.TempDir(), "txbox.yaml")
	yml += `admin: { enabled: true, listen: "127.0.0.1:0", read-token-env: TXBOX_TEST_READ_TOKEN, admin-token-env: TXBOX_TEST_ADMIN_TOKEN }` + "\n"
	if err := os.WriteFile(cfgPath, []byte(yml), 0o600); err != nil {
		t.Fatal(err)
	}
	m := &memoryRelay{cmd: exec.CommandContext(ctx, bin, "relay", "--config", cfgPath), log: &testenv.LogBuffer{}, exited: make(chan struct{})}
	m.cmd.Env = append(os.Environ(), "TXBOX_TEST_READ_TOKEN="+readTok, "TXBOX_TEST_ADMIN_TOKEN="+adminTok)
	m.cmd.Stdout, m.cmd.Stderr = io.Discard, m.log
	if err := m.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = m.cmd.Wait(); close(m.exited) }()
	m.pid = m.cmd.Process.Pid
	m.watch = watchRSS(m.pid, dlqMemoryWatchdog, func() { _ = m.cmd.Process.Kill() })
	m.addr = adminAddress(t, m.log)
	return m
}

// stop ends the relay with SIGTERM (SIGKILL after 30s) and its watch.
func (m *memoryRelay) stop() {
	m.watch.stop()
	_ = m.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-m.exited:
	case <-time.After(30 * time.Second):
		_ = m.cmd.Process.Kill()
		<-m.exited
	}
}

// step runs each from dlqMemoryClients clients at once, fails t on an
// error or a relay the watch killed, and returns the relay's peak RSS
// (VmHWM) after it.
func (m *memoryRelay) step(t *testing.T, name string, each func(c int) error) int64 {
	t.Helper()
	errs := make([]error, dlqMemoryClients)
	var wg sync.WaitGroup
	for c := range dlqMemoryClients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[c] = each(c)
		}()
	}
	wg.Wait()
	if over := m.watch.over(); over != 0 {
		t.Fatalf("%s: the relay's RSS passed %s (%s): killed\nrelay log: %.2000s", name, mib(dlqMemoryWatchdog), mib(over), m.log.String())
	}
	for _, err := range errs {
		if err != nil {
			t.Fatalf("%s: %v\nrelay log: %.2000s", name, err, m.log.String())
		}
	}
	peak := procStatus(t, m.pid, "VmHWM")
	t.Logf("after %s: relay VmHWM %s", name, mib(peak))
	return peak
}

// buildTxbox builds the txbox command without the race detector (which
// would multiply its memory) into a temporary directory.
func buildTxbox(t *testing.T, ctx context.Context) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "txbox")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, ".")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// adminAddress waits for the admin server's address in a relay's log.
func adminAddress(t *testing.T, relayErr *testenv.LogBuffer) string {
	t.Helper()
	var addr string
	testenv.WaitFor(t, 30*time.Second, "the admin server's address in the log", func() bool {
		for _, line := range strings.Split(relayErr.String(), "\n") {
			if strings.Contains(line, "admin server listening") {
				for _, f := range strings.Fields(line) {
					if v, ok := strings.CutPrefix(f, "addr="); ok {
						addr = v
						return true
					}
				}
			}
		}
		return false
	})
	return addr
}

// dlqClient calls the admin API.
type dlqClient struct {
	ctx  context.Context
	base string
}

// try sends a request and decodes a 200 answer into v.
func (c *dlqClient) try(method, path, token, body string, v any) error {
	req, err := http.NewRequestWithContext(c.ctx, method, c.base+path, strings.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		return err
	}
	if res.StatusCode != http.StatusOK {
		return fmt.Errorf("%s %s: %d %.500s", method, path, res.StatusCode, b)
	}
	return json.Unmarshal(b, v)
}

// rssWatch samples a process's RSS and kills it past a limit.
type rssWatch struct {
	done    chan struct{}
	stopped sync.WaitGroup
	passed  atomic.Int64
}

func watchRSS(pid int, limit int64, kill func()) *rssWatch {
	w := &rssWatch{done: make(chan struct{})}
	w.stopped.Add(1)
	go func() {
		defer w.stopped.Done()
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-w.done:
				return
			case <-tick.C:
			}
			if rss, err := readProcStatus(pid, "VmRSS"); err == nil && rss > limit {
				w.passed.Store(rss)
				kill()
				return
			}
		}
	}()
	return w
}

// over is the RSS that made the watch kill the process, 0 if none did.
func (w *rssWatch) over() int64 { return w.passed.Load() }

func (w *rssWatch) stop() {
	close(w.done)
	w.stopped.Wait()
}

// procStatus reads a field of /proc/PID/status in bytes or fails t.
func procStatus(t *testing.T, pid int, field string) int64 {
	t.Helper()
	v, err := readProcStatus(pid, field)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func readProcStatus(pid int, field string) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), field+":"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10, err
		}
	}
	return 0, fmt.Errorf("no %s in /proc/%d/status", field, pid)
}

func mib(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

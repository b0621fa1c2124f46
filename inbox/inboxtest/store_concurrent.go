package inboxtest

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/inbox"
	"github.com/txbox/txbox/internal/testenv"
)

// Concurrent duplicates: this many goroutines here, helperGoroutines in a
// second process, all delivering the same ids at the same moment.
const (
	concurrentIDs     = 25
	localGoroutines   = 16
	helperGoroutines  = 8
	helperEnv         = "TXBOX_INBOXTEST_HELPER"
	helperNSEnv       = "TXBOX_INBOXTEST_NS"
	helperConsumerEnv = "TXBOX_INBOXTEST_CONSUMER"
	helperIDsEnv      = "TXBOX_INBOXTEST_IDS"
	readyLine         = "inboxtest-store-ready"
	resultPrefix      = "inboxtest-store-result "
)

// deliverAll has g goroutines each deliver every id (in a rotated order, so
// they collide on different ids) once start is closed. It returns the
// number of Processed results; any error fails t.
func deliverAll(t testing.TB, in *inbox.Inbox, h inbox.Handler, all []txbox.ID, g int, start <-chan struct{}) (processed, duplicate int64) {
	var wg sync.WaitGroup
	var p, d atomic.Int64
	for w := 0; w < g; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			for i := range all {
				id := all[(i+w)%len(all)]
				r, err := in.Handle(context.Background(), inbox.Message{ID: id}, h)
				if err != nil {
					t.Errorf("Handle(%s): %v", id, err)
					return
				}
				switch r {
				case inbox.Processed:
					p.Add(1)
				case inbox.Duplicate:
					d.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	return p.Load(), d.Load()
}

// helperProc is the second OS process of testConcurrent: the test binary
// re-executed to run TestInboxHelperProcess, which prints readyLine, waits
// for "go" on its stdin and prints its results after resultPrefix.
type helperProc struct {
	cmd    *exec.Cmd
	stdin  io.Writer
	stderr *strings.Builder
	lines  chan string
}

// startHelper starts the helper process on e's namespace for consumer and
// ids all.
func startHelper(t *testing.T, e *inboxEnv, consumer string, all []txbox.ID) *helperProc {
	t.Helper()
	strIDs := make([]string, len(all))
	for i, id := range all {
		strIDs[i] = id.String()
	}
	p := testenv.StartTestProcess(t, "TestInboxHelperProcess", helperEnv+"=1", HarnessEnv+"="+e.h.Name,
		helperNSEnv+"="+e.ns, helperConsumerEnv+"="+consumer, helperIDsEnv+"="+strings.Join(strIDs, ","))
	lines := make(chan string, 16)
	go func() {
		sc := bufio.NewScanner(p.Stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	return &helperProc{cmd: p.Cmd, stdin: p.Stdin, stderr: p.Stderr, lines: lines}
}

// waitLine returns the rest of the helper's first output line that starts
// with prefix, failing t if the helper ends or 60s pass first.
func (hp *helperProc) waitLine(t *testing.T, prefix string) string {
	t.Helper()
	deadline := time.After(60 * time.Second)
	for {
		select {
		case l, ok := <-hp.lines:
			if !ok {
				_ = hp.cmd.Wait()
				t.Fatalf("helper process ended before %q; stderr:\n%s", prefix, hp.stderr.String())
			}
			if strings.HasPrefix(l, prefix) {
				return strings.TrimPrefix(l, prefix)
			}
		case <-deadline:
			_ = hp.cmd.Process.Kill()
			t.Fatalf("helper process: no %q within 60s; stderr:\n%s", prefix, hp.stderr.String())
		}
	}
}

func testConcurrent(t *testing.T, e *inboxEnv) {
	const consumer = "concurrent"
	all := newIDs(concurrentIDs)
	in := e.newInbox(t, inbox.Config{Consumer: consumer})
	hp := startHelper(t, e, consumer, all)
	hp.waitLine(t, readyLine)

	start := make(chan struct{})
	type res struct{ p, d int64 }
	local := make(chan res, 1)
	go func() {
		p, d := deliverAll(t, in, e.handler(consumer), all, localGoroutines, start)
		local <- res{p, d}
	}()
	close(start)
	if _, err := io.WriteString(hp.stdin, "go\n"); err != nil {
		t.Fatalf("release helper: %v", err)
	}
	lr := <-local
	var cp, cd int64
	if _, err := fmt.Sscanf(hp.waitLine(t, resultPrefix), "%d %d", &cp, &cd); err != nil {
		t.Fatalf("helper result: %v", err)
	}
	if err := hp.cmd.Wait(); err != nil {
		t.Fatalf("helper process: %v; stderr:\n%s", err, hp.stderr.String())
	}
	t.Logf("this process: %d processed, %d duplicate; helper process: %d processed, %d duplicate", lr.p, lr.d, cp, cd)

	e.expectOnceEach(t, consumer, all, lr.p+cp)
	total := int64(len(all) * (localGoroutines + helperGoroutines))
	if got := lr.p + lr.d + cp + cd; got != total {
		t.Errorf("results = %d, want %d", got, total)
	}
}

// HelperProcess is the child side of the concurrent-duplicates test: it
// picks the harness named by HarnessEnv. It returns at once unless the
// parent started this process.
func HelperProcess(t *testing.T, harnesses ...Harness) {
	if os.Getenv(helperEnv) != "1" {
		return
	}
	i := slices.IndexFunc(harnesses, func(h Harness) bool { return h.Name == os.Getenv(HarnessEnv) })
	if i < 0 {
		t.Fatalf("helper: no harness named %q", os.Getenv(HarnessEnv))
	}
	h := harnesses[i]
	ns, consumer := os.Getenv(helperNSEnv), os.Getenv(helperConsumerEnv)
	var all []txbox.ID
	for _, s := range strings.Split(os.Getenv(helperIDsEnv), ",") {
		id, err := txbox.ParseID(s)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, id)
	}
	e := &inboxEnv{h: h, ns: ns, st: h.Open(t, ns)}
	in := e.newInbox(t, inbox.Config{Consumer: consumer})
	fmt.Println(readyLine)
	if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
		t.Fatalf("helper: read go: %v", err)
	}
	start := make(chan struct{})
	close(start)
	p, d := deliverAll(t, in, e.handler(consumer), all, helperGoroutines, start)
	fmt.Println(resultPrefix + strconv.FormatInt(p, 10) + " " + strconv.FormatInt(d, 10))
}

// testConcurrentBatches has workers deliver overlapping batches (windows
// over one id list, in opposite directions) at once: every id has exactly
// one effect, and no worker fails (no lock-order deadlock).
func testConcurrentBatches(t *testing.T, e *inboxEnv) {
	const consumer = "batches"
	const n, window, workers = 40, 10, 6
	all := newIDs(n)
	in := e.newInbox(t, inbox.Config{Consumer: consumer})
	h := func(ctx context.Context, tx any, ms []inbox.Message) error {
		for _, m := range ms {
			if err := e.h.InsertEffect(ctx, tx, e.ns, consumer, m.ID); err != nil {
				return err
			}
		}
		return nil
	}
	start := make(chan struct{})
	var wg sync.WaitGroup
	var processed atomic.Int64
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			for i := 0; i+window <= n; i += window / 2 {
				batch := make([]inbox.Message, 0, window)
				for j := 0; j < window; j++ {
					k := i + j
					if w%2 == 1 {
						k = n - 1 - k
					}
					batch = append(batch, inbox.Message{ID: all[k]})
				}
				results, err := in.HandleBatch(context.Background(), batch, h)
				if err != nil {
					t.Errorf("worker %d: HandleBatch: %v", w, err)
					return
				}
				for _, r := range results {
					if r == inbox.Processed {
						processed.Add(1)
					}
				}
			}
		}()
	}
	close(start)
	wg.Wait()
	e.expectOnceEach(t, consumer, all, processed.Load())
}

// Command loadgen is the traffic generator of the orders example: it
// creates, updates and cancels orders through the producer's HTTP API at
// a steady rate, with a share of requests that fail inside their
// transaction on purpose (their orders and events roll back together), and
// prints its progress every second. See examples/orders/README.md.
//
//	go run ./examples/orders/loadgen -rate 200 -duration 20s -fail 0.1
//
// It exits 1 when a request failed for a reason other than the requested
// business failure (a 5xx, a refused connection), 2 on bad flags.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

type counters struct {
	created, updated, cancelled, failedOnPurpose, unexpected atomic.Int64
}

type generator struct {
	base     string
	failRate float64
	client   *http.Client
	counts   counters

	mu   sync.Mutex
	open []int64 // orders that can still be updated or cancelled
}

func main() {
	base := flag.String("producer", "http://127.0.0.1:8081", "the producer's base URL")
	rate := flag.Float64("rate", 100, "requests per second")
	duration := flag.Duration("duration", 20*time.Second, "how long to send")
	failRate := flag.Float64("fail", 0.1, "share of requests that fail on purpose, 0 to 1")
	workers := flag.Int("workers", 8, "requests in flight at most")
	flag.Parse()
	if *rate <= 0 || *duration <= 0 || *failRate < 0 || *failRate > 1 || *workers < 1 {
		fmt.Fprintln(os.Stderr, "loadgen: -rate and -duration must be positive, -fail within 0..1, -workers at least 1")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	g := &generator{base: *base, failRate: *failRate, client: &http.Client{Timeout: 10 * time.Second}}
	g.run(ctx, *rate, *duration, *workers)
	c := &g.counts
	summary := map[string]int64{
		"created": c.created.Load(), "updated": c.updated.Load(), "cancelled": c.cancelled.Load(),
		"failed_on_purpose": c.failedOnPurpose.Load(), "unexpected": c.unexpected.Load(),
	}
	_ = json.NewEncoder(os.Stdout).Encode(summary)
	if c.unexpected.Load() > 0 {
		os.Exit(1)
	}
}

func (g *generator) run(ctx context.Context, rate float64, duration time.Duration, workers int) {
	ctx, cancel := context.WithTimeout(ctx, duration)
	defer cancel()
	tick := time.NewTicker(time.Duration(float64(time.Second) / rate))
	defer tick.Stop()
	progress := time.NewTicker(time.Second)
	defer progress.Stop()
	slots := make(chan struct{}, workers)
	var wg sync.WaitGroup
	start := time.Now()
	for {
		select {
		case <-ctx.Done():
			wg.Wait()
			g.report(start)
			fmt.Fprintln(os.Stderr)
			return
		case <-progress.C:
			g.report(start)
		case <-tick.C:
			select {
			case slots <- struct{}{}:
			default:
				continue // the producer is slower than the rate: skip, do not queue
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer func() { <-slots }()
				g.one(ctx)
			}()
		}
	}
}

// report rewrites one progress line on stderr.
func (g *generator) report(start time.Time) {
	c := &g.counts
	fmt.Fprintf(os.Stderr, "\r%5.1fs  created %d  updated %d  cancelled %d  failed on purpose %d  unexpected %d ",
		time.Since(start).Seconds(), c.created.Load(), c.updated.Load(), c.cancelled.Load(),
		c.failedOnPurpose.Load(), c.unexpected.Load())
}

// one sends one request of the mix: half single creates, a tenth batch
// creates of five, the rest updates and cancels of open orders.
func (g *generator) one(ctx context.Context) {
	fail := rand.Float64() < g.failRate
	id, ok := g.pickOpen()
	switch p := rand.IntN(10); {
	case p < 5 || !ok:
		g.create(ctx, fail)
	case p < 6:
		reqs := make([]map[string]any, 5)
		for i := range reqs {
			reqs[i] = newOrder(fail && i == 4) // one failing order rolls back the whole batch
		}
		var out []struct{ ID int64 }
		if g.call(ctx, http.MethodPost, "/orders/batch", reqs, &out, fail) {
			g.counts.created.Add(int64(len(out)))
			g.addOpen(out...)
		}
	case p < 9:
		body := map[string]any{"total_cents": rand.IntN(100_000), "fail": fail}
		if g.call(ctx, http.MethodPut, fmt.Sprintf("/orders/%d", id), body, nil, fail) {
			g.counts.updated.Add(1)
		}
		g.addOpen(struct{ ID int64 }{id}) // still open, changed or not
	default:
		if g.call(ctx, http.MethodPost, fmt.Sprintf("/orders/%d/cancel", id), nil, nil, false) {
			g.counts.cancelled.Add(1)
		}
	}
}

func (g *generator) create(ctx context.Context, fail bool) {
	var out struct{ ID int64 }
	if g.call(ctx, http.MethodPost, "/orders", newOrder(fail), &out, fail) {
		g.counts.created.Add(1)
		g.addOpen(out)
	}
}

func newOrder(fail bool) map[string]any {
	return map[string]any{"customer": fmt.Sprintf("c-%d", rand.IntN(50)), "total_cents": rand.IntN(100_000), "fail": fail}
}

// pickOpen takes an open order out of the pool, so that two requests never
// change the same order at once (a cancel racing an update would be a 404).
func (g *generator) pickOpen() (int64, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.open) == 0 {
		return 0, false
	}
	i := rand.IntN(len(g.open))
	id := g.open[i]
	g.open[i] = g.open[len(g.open)-1]
	g.open = g.open[:len(g.open)-1]
	return id, true
}

func (g *generator) addOpen(orders ...struct{ ID int64 }) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, o := range orders {
		g.open = append(g.open, o.ID)
	}
}

// call sends one request and reports whether it succeeded. A 422 that was
// asked for counts as failed on purpose; anything else that is not a 2xx
// is unexpected.
func (g *generator) call(ctx context.Context, method, path string, body, out any, wantFail bool) bool {
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(context.WithoutCancel(ctx), method, g.base+path, rd)
	if err != nil {
		g.counts.unexpected.Add(1)
		return false
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := g.client.Do(req)
	if err != nil {
		g.counts.unexpected.Add(1)
		fmt.Fprintf(os.Stderr, "\n%s %s: %v\n", method, path, err)
		return false
	}
	defer resp.Body.Close()
	switch {
	case wantFail && resp.StatusCode == http.StatusUnprocessableEntity:
		g.counts.failedOnPurpose.Add(1)
		return false
	case resp.StatusCode/100 == 2:
		if out != nil {
			if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
				g.counts.unexpected.Add(1)
				return false
			}
		}
		return true
	default:
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		g.counts.unexpected.Add(1)
		fmt.Fprintf(os.Stderr, "\n%s %s: %d %s\n", method, path, resp.StatusCode, msg)
		return false
	}
}

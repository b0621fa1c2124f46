package webhook_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/txbox/txbox/sender"
	"github.com/txbox/txbox/sender/sendertest"
	"github.com/txbox/txbox/sender/webhook"
)

const benchBatch = 1000

// BenchmarkPost1k compares the sender's Send of a 1000-message batch with a
// bare net/http loop doing the same work (16 workers on a keep-alive
// client, POST with the same headers, drain the response), against the
// same local server. The two alternate batch by batch so noise from the
// shared machine hits both alike; "sender/raw" is their throughput ratio.
// Figures: docs/benchmarks/senders-nats-webhook.md.
func BenchmarkPost1k(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusNoContent)
	}))
	defer srv.Close()
	route := sender.Route{URL: srv.URL + "/hook"}

	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = webhook.DefaultMaxConcurrency
	client := &http.Client{Transport: tr}
	defer tr.CloseIdleConnections()
	raw := func(msgs []*sender.Message) {
		work := make(chan *sender.Message)
		var wg sync.WaitGroup
		for range webhook.DefaultMaxConcurrency {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for m := range work {
					req, err := http.NewRequest(http.MethodPost, m.Route.URL, bytes.NewReader(m.Payload))
					if err != nil {
						b.Error(err)
						continue
					}
					for k, v := range m.Headers {
						req.Header.Set(k, v)
					}
					req.Header.Set("Content-Type", webhook.DefaultContentType)
					req.Header.Set(webhook.HeaderIdempotencyKey, m.ID.String())
					req.Header.Set(sender.HeaderKey, m.Key)
					resp, err := client.Do(req)
					if err != nil {
						b.Error(err)
						continue
					}
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode/100 != 2 {
						b.Errorf("status %d", resp.StatusCode)
					}
				}
			}()
		}
		for _, m := range msgs {
			work <- m
		}
		close(work)
		wg.Wait()
	}

	s, err := webhook.New(webhook.Config{})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close(context.Background())

	msgs := sendertest.NewMessages(benchBatch, route)
	var rawTime, senderTime time.Duration
	runRaw := func() {
		start := time.Now()
		raw(msgs)
		rawTime += time.Since(start)
	}
	runSender := func() {
		start := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		err := s.Send(ctx, msgs)
		cancel()
		senderTime += time.Since(start)
		if err != nil {
			b.Fatal(err)
		}
	}
	// Warm up both (connections, the server's goroutines) before timing.
	runRaw()
	runSender()
	rawTime, senderTime = 0, 0
	i := 0
	for b.Loop() {
		if i%2 == 0 {
			runRaw()
			runSender()
		} else {
			runSender()
			runRaw()
		}
		i++
	}
	n := float64(b.N * benchBatch)
	b.ReportMetric(n/rawTime.Seconds(), "raw-msgs/s")
	b.ReportMetric(n/senderTime.Seconds(), "sender-msgs/s")
	b.ReportMetric(rawTime.Seconds()/senderTime.Seconds(), "sender/raw")
}

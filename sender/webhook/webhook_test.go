package webhook_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/sender"
	"github.com/txbox/txbox/sender/sendertest"
	"github.com/txbox/txbox/sender/webhook"
)

func newSender(t *testing.T, cfg webhook.Config) *webhook.Sender {
	t.Helper()
	s, err := webhook.New(cfg)
	if err != nil {
		t.Fatalf("webhook.New: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := s.Close(ctx); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}

func send(t *testing.T, s sender.Sender, msgs []*sender.Message) []error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return sender.Results(s.Send(ctx, msgs), len(msgs))
}

func TestStatusClassification(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var code int
		if _, err := io.ReadAll(r.Body); err != nil {
			return
		}
		if _, err := fmt.Sscan(strings.TrimPrefix(r.URL.Path, "/"), &code); err != nil {
			http.Error(w, "bad path", http.StatusBadRequest)
			return
		}
		if code >= 300 && code < 400 {
			w.Header().Set("Location", "/200")
		}
		w.WriteHeader(code)
	}))
	t.Cleanup(srv.Close)
	s := newSender(t, webhook.Config{})
	cases := []struct {
		code  int
		acked bool
		class txbox.ErrorClass
	}{
		{200, true, 0}, {201, true, 0}, {202, true, 0}, {204, true, 0},
		{301, false, txbox.ClassRejected}, {302, false, txbox.ClassRejected}, {307, false, txbox.ClassRejected},
		{400, false, txbox.ClassRejected}, {401, false, txbox.ClassRejected}, {404, false, txbox.ClassRejected},
		{409, false, txbox.ClassRejected}, {410, false, txbox.ClassRejected}, {422, false, txbox.ClassRejected},
		{413, false, txbox.ClassPermanent},
		{408, false, txbox.ClassTransient}, {429, false, txbox.ClassTransient},
		{500, false, txbox.ClassTransient}, {502, false, txbox.ClassTransient}, {503, false, txbox.ClassTransient},
		{504, false, txbox.ClassTransient},
	}
	msgs := sendertest.NewMessages(len(cases), sender.Route{})
	for i, c := range cases {
		msgs[i].Route.URL = srv.URL + "/" + strconv.Itoa(c.code) + "?token=s3cr3t-canary"
	}
	errs := send(t, s, msgs)
	for i, c := range cases {
		err := errs[i]
		if c.acked {
			if err != nil {
				t.Errorf("%d: %v, want acked", c.code, err)
			}
			continue
		}
		var se *webhook.StatusError
		if !errors.As(err, &se) || se.StatusCode != c.code {
			t.Errorf("%d: %v, want a *StatusError with that code", c.code, err)
			continue
		}
		if got := txbox.Classify(err); got != c.class {
			t.Errorf("%d classified %v, want %v", c.code, got, c.class)
		}
		if strings.Contains(err.Error(), "s3cr3t-canary") {
			t.Errorf("%d: error leaks the query string: %v", c.code, err)
		}
	}
}

func TestNetworkErrorIsTransientAndHidesQuery(t *testing.T) {
	t.Parallel()
	s := newSender(t, webhook.Config{})
	msgs := sendertest.NewMessages(2, sender.Route{URL: "http://user:pw-canary@" + sendertest.ClosedAddr(t) + "/h?token=s3cr3t-canary"})
	for i, err := range send(t, s, msgs) {
		if txbox.Classify(err) != txbox.ClassTransient {
			t.Fatalf("message %d: %v, want transient", i, err)
		}
		if strings.Contains(err.Error(), "canary") {
			t.Fatalf("error leaks credentials: %v", err)
		}
	}
}

func TestBadMessagesArePermanent(t *testing.T) {
	t.Parallel()
	r := newReceiver(t)
	s := newSender(t, webhook.Config{})
	good := "http://" + r.srv.Listener.Addr().String() + r.path
	msgs := sendertest.NewMessages(8, sender.Route{URL: good})
	msgs[1].Route.URL = ""
	msgs[2].Route.URL = "ftp://example.com/x"
	msgs[3].Route.URL = "/relative"
	msgs[4].Headers["bad name"] = "x"
	msgs[5].Headers["x-ok"] = "line\r\nInjected: yes"
	msgs[6].Headers["Idempotency-Key"] = "mine"
	errs := send(t, s, msgs)
	for i := 1; i <= 6; i++ {
		var me *webhook.MessageError
		if !errors.As(errs[i], &me) || txbox.Classify(errs[i]) != txbox.ClassPermanent {
			t.Errorf("message %d: %v, want a permanent *MessageError", i, errs[i])
		}
	}
	for _, i := range []int{0, 7} {
		if errs[i] != nil {
			t.Errorf("message %d failed with its neighbours: %v", i, errs[i])
		}
	}
	if n := len(r.deliveries()); n != 2 {
		t.Errorf("receiver got %d requests, want 2", n)
	}
}

func TestRequestShape(t *testing.T) {
	t.Parallel()
	type seen struct {
		header http.Header
		body   []byte
	}
	got := make(chan seen, 4)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- seen{r.Header.Clone(), b}
	}))
	t.Cleanup(srv.Close)
	s := newSender(t, webhook.Config{
		Secret:  "whsec",
		Headers: map[string]string{"Authorization": "Bearer tok"},
	})
	msgs := sendertest.NewMessages(2, sender.Route{URL: srv.URL})
	msgs[0].Headers["Content-Type"] = "application/json"
	msgs[0].Headers["authorization"] = "Bearer forged-by-event-data"
	msgs[1].Key = ""
	for i, err := range send(t, s, msgs) {
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
	}
	byID := map[string]seen{}
	for range msgs {
		r := <-got
		byID[r.header.Get(webhook.HeaderIdempotencyKey)] = r
	}
	r0, r1 := byID[msgs[0].ID.String()], byID[msgs[1].ID.String()]
	if r0.header == nil || r1.header == nil {
		t.Fatalf("Idempotency-Key is not the event id: %v", byID)
	}
	if ct := r0.header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("content type from the message header = %q", ct)
	}
	if ct := r1.header.Get("Content-Type"); ct != webhook.DefaultContentType {
		t.Errorf("default content type = %q", ct)
	}
	if a := r0.header.Get("Authorization"); a != "Bearer tok" {
		t.Errorf("Authorization = %q", a)
	}
	if k := r0.header.Get(sender.HeaderKey); k != msgs[0].Key {
		t.Errorf("key header = %q, want %q", k, msgs[0].Key)
	}
	if _, ok := r1.header[http.CanonicalHeaderKey(sender.HeaderKey)]; ok {
		t.Errorf("key header sent for an event without a key")
	}
	for _, r := range []seen{r0, r1} {
		if err := webhook.Verify("whsec", r.header.Get(webhook.DefaultSignatureHeader), r.body, time.Minute); err != nil {
			t.Errorf("signature does not verify: %v", err)
		}
	}
}

func TestConfigErrors(t *testing.T) {
	t.Parallel()
	for field, cfg := range map[string]webhook.Config{
		"timeout":                 {Timeout: -1},
		"max-concurrency":         {MaxConcurrency: -1},
		"content-type":            {ContentType: "a\nb"},
		"signature-header":        {SignatureHeader: "bad header"},
		"headers":                 {Headers: map[string]string{"bad:name": "x"}},
		"headers.X-Token":         {Headers: map[string]string{"X-Token": "line\nbreak"}},
		"headers.Content-Length":  {Headers: map[string]string{"Content-Length": "1"}},
		"headers.Txbox-Signature": {Headers: map[string]string{"Txbox-Signature": "forged"}},
		"headers.idempotency-key": {Headers: map[string]string{"idempotency-key": "x"}},
		"headers.Content-Type":    {Headers: map[string]string{"Content-Type": "text/plain"}},
	} {
		_, err := webhook.New(cfg)
		var ce *webhook.ConfigError
		if !errors.As(err, &ce) || ce.Field != field {
			t.Errorf("New(%v) = %v, want a ConfigError for %s", field, err, field)
		}
		if err != nil && strings.Contains(err.Error(), "line\nbreak") {
			t.Errorf("config error leaks a header value: %v", err)
		}
	}
}

// TestConcurrencyIsBounded shows a batch runs exactly MaxConcurrency
// requests at once: the server holds requests until that many are in
// flight (so fewer would hang, failing the test) and records the peak (so
// more would show).
func TestConcurrencyIsBounded(t *testing.T) {
	t.Parallel()
	const limit = 4
	var inflight, peak atomic.Int64
	gate := make(chan struct{})
	var once sync.Once
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := inflight.Add(1)
		defer inflight.Add(-1)
		for {
			p := peak.Load()
			if n <= p || peak.CompareAndSwap(p, n) {
				break
			}
		}
		if n >= limit {
			once.Do(func() { close(gate) })
		}
		select {
		case <-gate:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(srv.Close)
	s := newSender(t, webhook.Config{MaxConcurrency: limit})
	msgs := sendertest.NewMessages(40, sender.Route{URL: srv.URL})
	for i, err := range send(t, s, msgs) {
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
	}
	if p := peak.Load(); p != limit {
		t.Fatalf("peak concurrency %d, want exactly %d", p, limit)
	}
}

func TestTimeoutIsTransient(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(release) })
	s := newSender(t, webhook.Config{Timeout: 100 * time.Millisecond})
	start := time.Now()
	errs := send(t, s, sendertest.NewMessages(3, sender.Route{URL: srv.URL}))
	for i, err := range errs {
		if !errors.Is(err, context.DeadlineExceeded) || txbox.Classify(err) != txbox.ClassTransient {
			t.Fatalf("message %d: %v, want a transient deadline error", i, err)
		}
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("Send took %v with a 100ms request timeout", took)
	}
}

func TestRetryAfterAndNilMessage(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/seconds":
			w.Header().Set("Retry-After", "7")
			w.WriteHeader(http.StatusTooManyRequests)
		case "/date":
			w.Header().Set("Retry-After", time.Now().Add(time.Hour).UTC().Format(http.TimeFormat))
			w.WriteHeader(http.StatusServiceUnavailable)
		case "/garbage":
			w.Header().Set("Retry-After", "soon")
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	t.Cleanup(srv.Close)
	s := newSender(t, webhook.Config{})
	msgs := sendertest.NewMessages(4, sender.Route{})
	msgs[0].Route.URL = srv.URL + "/seconds"
	msgs[1].Route.URL = srv.URL + "/date"
	msgs[2].Route.URL = srv.URL + "/garbage"
	msgs[3] = nil
	errs := send(t, s, msgs)
	retry := func(err error) time.Duration {
		var se *webhook.StatusError
		if !errors.As(err, &se) {
			t.Fatalf("%v is not a *StatusError", err)
		}
		return se.RetryAfter
	}
	if d := retry(errs[0]); d != 7*time.Second {
		t.Errorf("Retry-After: 7 gave %v", d)
	}
	if d := retry(errs[1]); d < 58*time.Minute || d > time.Hour {
		t.Errorf("Retry-After in an hour gave %v", d)
	}
	if d := retry(errs[2]); d != 0 {
		t.Errorf("Retry-After: soon gave %v", d)
	}
	var me *webhook.MessageError
	if !errors.As(errs[3], &me) || txbox.Classify(errs[3]) != txbox.ClassPermanent {
		t.Errorf("nil message: %v, want a permanent *MessageError", errs[3])
	}
}

func TestTLS(t *testing.T) {
	t.Parallel()
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	t.Cleanup(srv.Close)
	msgs := sendertest.NewMessages(2, sender.Route{URL: srv.URL + "/hook"})

	// The test server's certificate is trusted by its own client only.
	trusted := newSender(t, webhook.Config{HTTPClient: srv.Client()})
	for i, err := range send(t, trusted, msgs) {
		if err != nil {
			t.Fatalf("message %d over TLS: %v", i, err)
		}
	}
	// An untrusted certificate is the destination's problem, not the
	// message's: transient, so no attempt is burned while it is fixed.
	strict := newSender(t, webhook.Config{})
	for i, err := range send(t, strict, msgs) {
		if err == nil || txbox.Classify(err) != txbox.ClassTransient {
			t.Fatalf("message %d to an untrusted certificate: %v, want transient", i, err)
		}
	}
}

// TestKeepAlive checks connections are reused across requests and
// batches: a pool smaller than MaxConcurrency (net/http keeps 2 idle
// connections per host by default) would open new ones all the time.
func TestKeepAlive(t *testing.T) {
	t.Parallel()
	// Requests in progress at once never exceed MaxConcurrency, and 500
	// requests reuse a few connections. The total may exceed MaxConcurrency by a
	// little: net/http's transport drops a connection instead of
	// reusing it when its writer goroutine has not reported the request
	// written within 50 ms of the response (maxWriteWaitBeforeConnReuse),
	// which happens under -race on a loaded machine.
	var mu sync.Mutex
	var opened, active, maxActive int
	prev := map[net.Conn]http.ConnState{}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
	}))
	srv.Config.ConnState = func(c net.Conn, s http.ConnState) {
		mu.Lock()
		defer mu.Unlock()
		switch s {
		case http.StateNew:
			opened++
		case http.StateActive:
			active++
			maxActive = max(maxActive, active)
		case http.StateIdle, http.StateClosed, http.StateHijacked:
			if prev[c] == http.StateActive {
				active--
			}
		}
		prev[c] = s
	}
	srv.Start()
	t.Cleanup(srv.Close)
	const limit = 8
	s := newSender(t, webhook.Config{MaxConcurrency: limit})
	for batch := 0; batch < 5; batch++ {
		for i, err := range send(t, s, sendertest.NewMessages(100, sender.Route{URL: srv.URL})) {
			if err != nil {
				t.Fatalf("batch %d message %d: %v", batch, i, err)
			}
		}
	}
	mu.Lock()
	defer mu.Unlock()
	t.Logf("opened %d", opened)
	if maxActive > limit {
		t.Fatalf("%d requests were in progress at once, want at most MaxConcurrency = %d", maxActive, limit)
	}
	if opened > 2*limit {
		t.Fatalf("500 requests opened %d connections: keep-alive is not reusing them (want at most %d)", opened, 2*limit)
	}
}

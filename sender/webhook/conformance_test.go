package webhook_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/txbox/txbox/internal/testenv"
	"github.com/txbox/txbox/sender"
	"github.com/txbox/txbox/sender/sendertest"
	"github.com/txbox/txbox/sender/webhook"
)

// receiver is a real HTTP server that records what it acknowledged and
// refuses (422) the event ids it was told to.
type receiver struct {
	srv    *httptest.Server
	path   string
	mu     sync.Mutex
	got    []sendertest.Delivery
	reject map[string]bool
}

func newReceiver(t *testing.T) *receiver {
	r := &receiver{path: "/hooks/" + testenv.UniqueName("h"), reject: map[string]bool{}}
	r.srv = httptest.NewServer(http.HandlerFunc(r.serve))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *receiver) serve(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(req.Body)
	if err != nil {
		return // the client went away; nothing was acknowledged
	}
	if req.Method != http.MethodPost || req.URL.Path != r.path {
		http.Error(w, "wrong method or path", http.StatusNotFound)
		return
	}
	id := req.Header.Get(webhook.HeaderIdempotencyKey)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.reject[id] {
		http.Error(w, "refused", http.StatusUnprocessableEntity)
		return
	}
	h := make(map[string]string, len(req.Header))
	for k, vs := range req.Header {
		h[strings.ToLower(k)] = strings.Join(vs, ",")
	}
	r.got = append(r.got, sendertest.Delivery{
		ID: id, Payload: body, Headers: h, Key: req.Header.Get(sender.HeaderKey),
	})
	w.WriteHeader(http.StatusNoContent)
}

func (r *receiver) deliveries() []sendertest.Delivery {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]sendertest.Delivery(nil), r.got...)
}

func TestConformance(t *testing.T) {
	t.Parallel()
	sendertest.Exercise(t, sendertest.Harness{
		Features: sendertest.Features{SupportsPerMessageReject: true, SupportsKey: true},
		NewDestination: func(t *testing.T) *sendertest.Destination {
			r := newReceiver(t)
			return &sendertest.Destination{
				Addr: r.srv.Listener.Addr().String(),
				Connect: func(t *testing.T, addr string) (sender.Sender, sender.Route) {
					s, err := webhook.New(webhook.Config{})
					if err != nil {
						t.Fatalf("webhook.New: %v", err)
					}
					return s, sender.Route{URL: "http://" + addr + r.path}
				},
				Received: func(*testing.T) []sendertest.Delivery { return r.deliveries() },
				Poison: func(_ *testing.T, m *sender.Message) {
					r.mu.Lock()
					r.reject[m.ID.String()] = true
					r.mu.Unlock()
				},
			}
		},
	})
}

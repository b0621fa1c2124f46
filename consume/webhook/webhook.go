package webhook

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/consume"
	"github.com/txbox/txbox/consume/internal/route"
	"github.com/txbox/txbox/inbox"
	"github.com/txbox/txbox/sender"
	"github.com/txbox/txbox/sender/webhook"
)

// Config configures a Handler.
type Config struct {
	// Inbox deduplicates and runs Handler. Exactly one of Inbox and
	// Tenants is required.
	Inbox *inbox.Inbox
	// Tenants, in place of Inbox, routes each message to its tenant's
	// inbox by its txbox-tenant header (docs/multi-tenant.md,
	// "Consumers"); a message of a tenant without an inbox is an invalid
	// message (consume.InvalidMessageError wrapping
	// inbox.ErrUnknownTenant), answered 400 with ProblemTenant.
	Tenants *inbox.Tenants
	// Handler processes each new event. Required.
	Handler inbox.Handler
	// Secret, when not empty, requires every request to carry a valid
	// signature made with it (see sender/webhook.Verify). It is never
	// logged. Defaults to no verification.
	Secret string
	// SignatureHeader names the signature header. Defaults to
	// webhook.DefaultSignatureHeader ("Txbox-Signature").
	SignatureHeader string
	// Tolerance is how far a signature's timestamp may be from this
	// server's clock. Defaults to webhook.DefaultTolerance (5m).
	Tolerance time.Duration
	// MaxBodyBytes bounds a request body. Defaults to
	// txbox.DefaultMaxPayloadSize (1 MiB), the publish-side limit.
	MaxBodyBytes int64
	// Logger receives handler failures. Payloads and the secret are never
	// logged. Defaults to slog.Default().
	Logger *slog.Logger
}

// Handler is the http.Handler. It is safe for concurrent use.
type Handler struct {
	cfg    Config
	target route.Target
	logger *slog.Logger
}

var _ http.Handler = (*Handler)(nil)

// New returns a Handler. Missing or invalid fields are an error naming
// them.
func New(cfg Config) (*Handler, error) {
	if cfg.Handler == nil {
		return nil, &consume.ConfigError{Component: "consume/webhook", Field: "Handler", Reason: "is required"}
	}
	target, err := route.New("consume/webhook", cfg.Inbox, cfg.Tenants)
	if err != nil {
		return nil, err
	}
	if cfg.Tolerance < 0 || cfg.MaxBodyBytes < 0 {
		return nil, &consume.ConfigError{Component: "consume/webhook", Field: "Tolerance, MaxBodyBytes", Reason: "must not be negative"}
	}
	if cfg.SignatureHeader == "" {
		cfg.SignatureHeader = webhook.DefaultSignatureHeader
	}
	if cfg.Tolerance == 0 {
		cfg.Tolerance = webhook.DefaultTolerance
	}
	if cfg.MaxBodyBytes == 0 {
		cfg.MaxBodyBytes = txbox.DefaultMaxPayloadSize
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.Default()
	}
	return &Handler{cfg: cfg, target: target, logger: logger.With("consumer", target.Name())}, nil
}

// Problem is the RFC 9457 problem-details body of an error response.
type Problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail,omitempty"`
}

// Problem types, relative URIs naming each failure.
const (
	ProblemMethod    = "/problems/method-not-allowed"
	ProblemTooLarge  = "/problems/body-too-large"
	ProblemSignature = "/problems/bad-signature"
	ProblemEventID   = "/problems/bad-event-id"
	// ProblemTenant: Config.Tenants has no inbox for the request's
	// txbox-tenant header (or it has none and there is no Default).
	// Answered 400.
	ProblemTenant   = "/problems/unknown-tenant"
	ProblemHandler  = "/problems/handler-failed"
	ProblemRejected = "/problems/event-rejected"
	// ProblemUnavailable: the consumer cannot process anything right now
	// (its inbox store is down, or the handler said its own dependencies
	// are, with txbox.Transient). Answered 503.
	ProblemUnavailable = "/problems/unavailable"
)

// Response is the JSON body of a 200 response.
type Response struct {
	// Result is "processed", "duplicate" or, in non-transactional mode,
	// "lost" (the handler failed after the id was recorded; see
	// inbox.Lost).
	Result  string   `json:"result"`
	EventID txbox.ID `json:"event_id"`
}

// ServeHTTP handles one delivery.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		writeProblem(w, Problem{Type: ProblemMethod, Title: "method not allowed", Status: http.StatusMethodNotAllowed, Detail: "deliveries are POST requests"})
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, h.cfg.MaxBodyBytes))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			writeProblem(w, Problem{Type: ProblemTooLarge, Title: "body too large", Status: http.StatusRequestEntityTooLarge, Detail: fmt.Sprintf("the limit is %d bytes", h.cfg.MaxBodyBytes)})
			return
		}
		writeProblem(w, Problem{Type: "about:blank", Title: "unreadable body", Status: http.StatusBadRequest})
		return
	}
	if h.cfg.Secret != "" {
		if err := webhook.Verify(h.cfg.Secret, r.Header.Get(h.cfg.SignatureHeader), body, h.cfg.Tolerance); err != nil {
			// The Verify errors name what is wrong, never the secret or the
			// expected signature.
			writeProblem(w, Problem{Type: ProblemSignature, Title: "bad signature", Status: http.StatusUnauthorized, Detail: err.Error()})
			return
		}
	}
	headers := make(map[string]string, len(r.Header))
	for k, vs := range r.Header {
		if len(vs) > 0 && !strings.EqualFold(k, h.cfg.SignatureHeader) {
			k = strings.ToLower(k)
			headers[k] = vs[0]
			if strings.HasPrefix(k, consume.PrefixHTTP) {
				// The HTTP binding percent-encodes attribute values.
				if v, err := url.PathUnescape(vs[0]); err == nil {
					headers[k] = v
				}
			}
		}
	}
	var msg inbox.Message
	if consume.IsStructured(r.Header.Get("Content-Type")) {
		msg, err = consume.ParseStructured(body)
		for k, v := range headers {
			if _, ok := msg.Headers[k]; !ok && err == nil {
				msg.Headers[k] = v
			}
		}
	} else {
		get := func(name string) string { return headers[name] }
		msg, err = consume.NewMessageFromHeaders(get, consume.PrefixHTTP, r.Header.Get(webhook.HeaderIdempotencyKey), r.Header.Get(sender.HeaderKey), body, headers)
	}
	if err != nil {
		writeProblem(w, Problem{Type: ProblemEventID, Title: "bad event id", Status: http.StatusBadRequest, Detail: err.Error()})
		return
	}
	msg.Delivery = inbox.Delivery{Broker: "webhook"}
	in, err := h.target.Inbox(msg)
	if err != nil {
		h.logger.ErrorContext(r.Context(), "webhook delivery refused: unknown tenant", "event_id", msg.ID, "error", err)
		writeProblem(w, Problem{Type: ProblemTenant, Title: "unknown tenant", Status: http.StatusBadRequest, Detail: err.Error()})
		return
	}
	res, err := in.Handle(r.Context(), msg, h.cfg.Handler)
	if err != nil && !res.Acknowledge() {
		h.fail(w, r, msg.ID, err)
		return
	}
	// inbox.Lost (non-transactional mode) is answered 200 "lost": the id
	// is recorded, so a retry would be a duplicate; the inbox logged it.
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_ = json.NewEncoder(w).Encode(Response{Result: res.String(), EventID: msg.ID})
}

// fail answers a delivery that was not processed. The status says whose
// failure it was, so that the sender and the relay can tell an outage
// from a poison event (docs/concepts.md):
//
//   - 503: this consumer cannot process anything now (the inbox store
//     failed, or the handler returned a txbox.Transient error, such as its
//     database being down);
//   - 422: the handler marked the event as one it can never process
//     (txbox.Permanent): a rejection, never read as an outage;
//   - 500: the handler failed this event otherwise. The sender retries;
//     the relay counts an attempt when the destination accepts other
//     events meanwhile, so a poison event ends in the dead-letter table.
//
// The error text stays in the log: it may carry details the sender has no
// business seeing.
func (h *Handler) fail(w http.ResponseWriter, r *http.Request, id txbox.ID, err error) {
	var se *inbox.StoreError
	var he *inbox.HandlerError
	isHandler := errors.As(err, &he)
	switch {
	case errors.As(err, &se):
		h.logger.ErrorContext(r.Context(), "webhook delivery failed: inbox store unavailable", "event_id", id, "error", err)
		writeProblem(w, Problem{Type: ProblemUnavailable, Title: "consumer unavailable", Status: http.StatusServiceUnavailable, Detail: "the inbox store failed; retry later"})
	case isHandler && txbox.Classify(he.Err) == txbox.ClassPermanent:
		h.logger.ErrorContext(r.Context(), "webhook delivery rejected by the handler", "event_id", id, "error", err)
		writeProblem(w, Problem{Type: ProblemRejected, Title: "event rejected", Status: http.StatusUnprocessableEntity, Detail: "the handler cannot process this event"})
	case isHandler && txbox.Classify(he.Err) == txbox.ClassTransient:
		h.logger.ErrorContext(r.Context(), "webhook delivery failed: handler unavailable", "event_id", id, "error", err)
		writeProblem(w, Problem{Type: ProblemUnavailable, Title: "consumer unavailable", Status: http.StatusServiceUnavailable, Detail: "the handler's dependencies are unavailable; retry later"})
	default:
		h.logger.ErrorContext(r.Context(), "webhook delivery failed", "event_id", id, "error", err)
		writeProblem(w, Problem{Type: ProblemHandler, Title: "handler failed", Status: http.StatusInternalServerError, Detail: "the event was not processed; retry later"})
	}
}

func writeProblem(w http.ResponseWriter, p Problem) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(p.Status)
	_ = json.NewEncoder(w).Encode(p)
}

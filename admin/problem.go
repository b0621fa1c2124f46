package admin

import (
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/store"
)

// Problem is an RFC 9457 problem details object, the body of every error
// response (Content-Type application/problem+json).
type Problem struct {
	// Type is a URI reference naming the kind of problem; "about:blank"
	// when the status code says it all.
	Type string `json:"type"`
	// Title is the status code's phrase.
	Title string `json:"title"`
	// Status repeats the HTTP status code.
	Status int `json:"status"`
	// Detail explains this occurrence.
	Detail string `json:"detail,omitempty"`
	// Instance is the request path.
	Instance string `json:"instance,omitempty"`
	// Errors lists the bad parameters of a 400, one per parameter.
	Errors []ParamError `json:"errors,omitempty"`
}

// ParamError is one bad query or body parameter.
type ParamError struct {
	// Param names the parameter as the client spelled it.
	Param string `json:"param"`
	// Detail says what is wrong with it.
	Detail string `json:"detail"`
}

// paramErrors collects bad parameters; its Error is for tests and logs.
type paramErrors []ParamError

func (p paramErrors) Error() string {
	if len(p) == 0 {
		return "no error"
	}
	return p[0].Param + ": " + p[0].Detail
}

func (p *paramErrors) add(param, detail string) {
	*p = append(*p, ParamError{Param: param, Detail: detail})
}

func (p paramErrors) err() error {
	if len(p) == 0 {
		return nil
	}
	return p
}

// writeProblem writes a problem response.
func writeProblem(w http.ResponseWriter, r *http.Request, status int, detail string, params []ParamError) {
	p := Problem{Type: "about:blank", Title: http.StatusText(status), Status: status, Detail: detail, Errors: params}
	if r != nil {
		p.Instance = r.URL.Path
	}
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(p)
}

// writeError maps an error of a handler to a problem: bad parameters and
// invalid store parameters are 400, an unknown dead letter 404, a body
// too large 413, a cancelled request 499-like 503; anything else is a 500
// whose detail does not echo the error (it is logged instead).
func (h *Handler) writeError(w http.ResponseWriter, r *http.Request, err error) {
	var pe paramErrors
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &pe):
		writeProblem(w, r, http.StatusBadRequest, "invalid parameters", pe)
	case errors.As(err, &tooLarge):
		writeProblem(w, r, http.StatusRequestEntityTooLarge, "request body larger than the limit", nil)
	case errors.Is(err, store.ErrInvalidParams):
		writeProblem(w, r, http.StatusBadRequest, "invalid parameters", nil)
	case errors.Is(err, txbox.ErrNotFound):
		writeProblem(w, r, http.StatusNotFound, "no such dead letter", nil)
	case r.Context().Err() != nil:
		writeProblem(w, r, http.StatusServiceUnavailable, "request cancelled", nil)
	default:
		h.log.Error("admin request failed", slog.String("method", r.Method), slog.String("path", r.URL.Path), slog.Any("error", err))
		writeProblem(w, r, http.StatusInternalServerError, "the request failed; the relay's log has the reason", nil)
	}
}

// writeJSON writes v as JSON. encoding/json escapes <, > and & in strings,
// so a payload preview cannot become markup even if a client inserted it
// as HTML.
func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

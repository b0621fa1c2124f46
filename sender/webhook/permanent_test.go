package webhook_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/sender"
	"github.com/txbox/txbox/sender/sendertest"
	"github.com/txbox/txbox/sender/webhook"
)

// TestPermanentStatus: a 4xx listed in Config.PermanentStatus fails the
// message Permanent (dead-lettered at once), an unlisted 4xx stays
// Rejected (retried, as by default), and 5xx/408/429 stay Transient.
func TestPermanentStatus(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		code, _ := strconv.Atoi(strings.TrimPrefix(r.URL.Path, "/"))
		w.WriteHeader(code)
	}))
	t.Cleanup(srv.Close)
	s := newSender(t, webhook.Config{PermanentStatus: []int{422, 409}})
	cases := []struct {
		code  int
		class txbox.ErrorClass
	}{
		{422, txbox.ClassPermanent}, {409, txbox.ClassPermanent}, {400, txbox.ClassRejected}, {404, txbox.ClassRejected},
		{413, txbox.ClassPermanent}, {408, txbox.ClassTransient}, {429, txbox.ClassTransient}, {500, txbox.ClassTransient},
	}
	msgs := sendertest.NewMessages(len(cases), sender.Route{})
	for i, c := range cases {
		msgs[i].Route.URL = srv.URL + "/" + strconv.Itoa(c.code)
	}
	for i, err := range send(t, s, msgs) {
		var se *webhook.StatusError
		if !errors.As(err, &se) || se.StatusCode != cases[i].code {
			t.Errorf("%d: %v, want a *StatusError with that code", cases[i].code, err)
			continue
		}
		if got := txbox.Classify(err); got != cases[i].class {
			t.Errorf("%d classified %v, want %v", cases[i].code, got, cases[i].class)
		}
	}
}

// TestPermanentStatusInvalid: a code that is not a 4xx, or 408/429, is a
// *ConfigError naming permanent-status.
func TestPermanentStatusInvalid(t *testing.T) {
	t.Parallel()
	for _, code := range []int{200, 302, 408, 429, 500, 503, 0, 4220} {
		_, err := webhook.New(webhook.Config{PermanentStatus: []int{422, code}})
		var ce *webhook.ConfigError
		if !errors.As(err, &ce) || ce.Field != "permanent-status" || !strings.Contains(err.Error(), strconv.Itoa(code)) {
			t.Errorf("PermanentStatus %d: %v, want a ConfigError on permanent-status naming the code", code, err)
		}
	}
}

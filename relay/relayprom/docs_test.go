package relayprom_test

import (
	"encoding/json"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	yaml "go.yaml.in/yaml/v3"

	"github.com/txbox/txbox/inbox/inboxprom"
	"github.com/txbox/txbox/relay/relayprom"
)

// exported returns the names of every metric relayprom and inboxprom
// describe.
func exported(t *testing.T) map[string]bool {
	t.Helper()
	ch := make(chan *prometheus.Desc, 100)
	relayprom.New(relayprom.Options{Stats: fixedStats{}}).Describe(ch)
	inboxprom.New().Describe(ch)
	close(ch)
	re := regexp.MustCompile(`fqName: "([^"]+)"`)
	names := map[string]bool{}
	for d := range ch {
		m := re.FindStringSubmatch(d.String())
		if m == nil {
			t.Fatalf("no name in %s", d)
		}
		names[m[1]] = true
	}
	return names
}

// referenced returns the txbox_ metric names in s, without the suffixes
// of a histogram's series.
func referenced(s string) []string {
	var out []string
	for _, n := range regexp.MustCompile(`txbox_[a-z_]+`).FindAllString(s, -1) {
		for _, suf := range []string{"_bucket", "_count", "_sum"} {
			if strings.HasSuffix(n, "_seconds"+suf) {
				n = strings.TrimSuffix(n, suf)
			}
		}
		if !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	return out
}

// TestDocsMatchTheMetrics: docs/metrics.md documents every metric and
// names no other; the alert rules and the dashboard query only metrics
// that exist, and parse.
func TestDocsMatchTheMetrics(t *testing.T) {
	t.Parallel()
	names := exported(t)
	doc, err := os.ReadFile("../../docs/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	for n := range names {
		if !strings.Contains(string(doc), "`"+n+"`") {
			t.Errorf("docs/metrics.md does not document %s", n)
		}
	}
	for _, n := range referenced(string(doc)) {
		if !names[n] {
			t.Errorf("docs/metrics.md names %s, which is not exported", n)
		}
	}

	raw, err := os.ReadFile("../../docs/monitoring/alerts.yml")
	if err != nil {
		t.Fatal(err)
	}
	var rules struct {
		Groups []struct {
			Rules []struct {
				Alert, Expr, For string
				Annotations      map[string]string
			}
		}
	}
	if err := yaml.Unmarshal(raw, &rules); err != nil {
		t.Fatalf("alerts.yml: %v", err)
	}
	var alerts []string
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			alerts = append(alerts, r.Alert)
			if r.Expr == "" || r.Annotations["summary"] == "" {
				t.Errorf("alert %s lacks an expression or a summary", r.Alert)
			}
			for _, n := range referenced(r.Expr) {
				if !names[n] {
					t.Errorf("alert %s queries %s, which is not exported", r.Alert, n)
				}
			}
		}
	}
	if want := []string{"TxboxLagHigh", "TxboxDeadLettersRising", "TxboxCircuitOpen", "TxboxSlotRetainsWAL", "TxboxSlotAtRisk", "TxboxNoStream"}; !slices.Equal(alerts, want) {
		t.Errorf("alerts %v, want %v", alerts, want)
	}

	raw, err = os.ReadFile("../../docs/monitoring/grafana-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatalf("dashboard: %v", err)
	}
	queried := map[string]bool{}
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			if strings.Count(tg.Expr, "(") != strings.Count(tg.Expr, ")") || strings.Count(tg.Expr, "{") != strings.Count(tg.Expr, "}") {
				t.Errorf("panel %q: unbalanced expression %s", p.Title, tg.Expr)
			}
			for _, n := range referenced(tg.Expr) {
				queried[n] = true
				if !names[n] {
					t.Errorf("panel %q queries %s, which is not exported", p.Title, n)
				}
			}
		}
	}
	for _, n := range []string{"txbox_relay_messages_total", "txbox_outbox_oldest_due_age_seconds", "txbox_outbox_backlog",
		"txbox_relay_send_duration_seconds", "txbox_relay_poll_delay_seconds", "txbox_relay_circuit_state"} {
		if !queried[n] {
			t.Errorf("the dashboard does not chart %s", n)
		}
	}
}

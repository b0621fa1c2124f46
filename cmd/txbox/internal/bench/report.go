package bench

import (
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"
)

// Report is the whole result of one invocation, written as results.json.
type Report struct {
	Started   time.Time  `json:"started"`
	Finished  time.Time  `json:"finished"`
	Quick     bool       `json:"quick"`
	Args      []string   `json:"args"`
	Machine   Machine    `json:"machine"`
	Scenarios []Scenario `json:"scenarios"`
}

// Scenario is one scenario's measurements.
type Scenario struct {
	Name        string            `json:"name"`
	Title       string            `json:"title"`
	Measures    string            `json:"measures"`
	Conditions  map[string]string `json:"conditions,omitempty"`
	Runs        []Measurement     `json:"runs,omitempty"`
	Ratios      []Ratio           `json:"ratios,omitempty"`
	Latencies   []Latency         `json:"latencies,omitempty"`
	Notes       []string          `json:"notes,omitempty"`
	Error       string            `json:"error,omitempty"`
	Unavailable string            `json:"unavailable,omitempty"`
	Seconds     float64           `json:"seconds"`
}

// Measurement is one measured run of one variant (a drain, a publish series, an
// idle window).
type Measurement struct {
	Variant string  `json:"variant"`
	Round   int     `json:"round"`
	Events  int     `json:"events"`
	Seconds float64 `json:"seconds"`
	// Rate is events per second (or operations per second).
	Rate float64 `json:"rate"`
	// CPUSeconds is the user + system time of the child processes that
	// did the work (rusage), when they were children.
	CPUSeconds float64 `json:"cpu_seconds,omitempty"`
	// CPUPerEventMicros is CPUSeconds / Events in µs.
	CPUPerEventMicros float64 `json:"cpu_per_event_us,omitempty"`
	// Extra holds scenario-specific figures (transactions, heap, ...).
	Extra map[string]float64 `json:"extra,omitempty"`
}

// Ratio compares a variant to its baseline, per round; Median is the
// figure to read.
type Ratio struct {
	Name     string    `json:"name"`
	Variant  string    `json:"variant"`
	Baseline string    `json:"baseline"`
	Values   []float64 `json:"values"`
	Median   float64   `json:"median"`
	// Higher says whether a higher ratio is better (rates) or worse
	// (times, costs).
	Higher bool   `json:"higher_is_better"`
	Target string `json:"target,omitempty"`
	// Met is whether Median meets Target, when there is a target.
	Met *bool `json:"met,omitempty"`
}

// Latency is one latency distribution in milliseconds.
type Latency struct {
	Name    string  `json:"name"`
	Samples int     `json:"samples"`
	P50     float64 `json:"p50_ms"`
	P95     float64 `json:"p95_ms"`
	P99     float64 `json:"p99_ms"`
	Max     float64 `json:"max_ms"`
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// addRatio appends the ratio variant/baseline of the given per-round
// values; pairs where either side is not a positive finite number are
// dropped (and noted) so that no NaN or Inf reaches the report.
func (s *Scenario) addRatio(name, variant, baseline string, num, den []float64, higher bool, target string, meets func(float64) bool) {
	var vals []float64
	for i := range min(len(num), len(den)) {
		if ok(num[i]) && ok(den[i]) {
			vals = append(vals, num[i]/den[i])
		}
	}
	if len(vals) == 0 {
		s.Notes = append(s.Notes, fmt.Sprintf("ratio %s: no valid pair measured", name))
		return
	}
	r := Ratio{Name: name, Variant: variant, Baseline: baseline, Values: vals, Median: median(vals), Higher: higher, Target: target}
	if meets != nil {
		m := meets(r.Median)
		r.Met = &m
	}
	s.Ratios = append(s.Ratios, r)
}

func ok(x float64) bool { return x > 0 && !math.IsNaN(x) && !math.IsInf(x, 0) }

// rates returns the Rate of each run of variant, in round order.
func (s *Scenario) rates(variant string) []float64 {
	var out []float64
	for _, r := range s.Runs {
		if r.Variant == variant {
			out = append(out, r.Rate)
		}
	}
	return out
}

func (s *Scenario) variants() []string {
	var out []string
	for _, r := range s.Runs {
		if !slices.Contains(out, r.Variant) {
			out = append(out, r.Variant)
		}
	}
	return out
}

// clean replaces every non-finite number by 0 so the JSON encodes; a
// NaN is a bug in a scenario, and the note says where.
func (rep *Report) clean() {
	fix := func(where string, x *float64, s *Scenario) {
		if math.IsNaN(*x) || math.IsInf(*x, 0) {
			s.Notes = append(s.Notes, "non-finite value dropped: "+where)
			*x = 0
		}
	}
	for i := range rep.Scenarios {
		s := &rep.Scenarios[i]
		for j := range s.Runs {
			r := &s.Runs[j]
			fix(r.Variant+" rate", &r.Rate, s)
			fix(r.Variant+" seconds", &r.Seconds, s)
			fix(r.Variant+" cpu", &r.CPUSeconds, s)
			fix(r.Variant+" cpu/event", &r.CPUPerEventMicros, s)
			for k, v := range r.Extra {
				fix(r.Variant+" "+k, &v, s)
				r.Extra[k] = v
			}
		}
		for j := range s.Latencies {
			l := &s.Latencies[j]
			for _, x := range []*float64{&l.P50, &l.P95, &l.P99, &l.Max} {
				fix(l.Name+" latency", x, s)
			}
		}
		s.Seconds = math.Round(s.Seconds*10) / 10
	}
}

// write writes results.json, results.md and the SVG charts into dir and
// returns the paths written.
func (rep *Report) write(dir string) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	rep.clean()
	var paths []string
	js, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return nil, err
	}
	p := filepath.Join(dir, "results.json")
	if err := os.WriteFile(p, append(js, '\n'), 0o644); err != nil {
		return nil, err
	}
	paths = append(paths, p)
	charts := rep.charts()
	for _, c := range charts {
		p := filepath.Join(dir, c.file)
		if err := os.WriteFile(p, []byte(c.svg), 0o644); err != nil {
			return nil, err
		}
		paths = append(paths, p)
	}
	p = filepath.Join(dir, "results.md")
	if err := os.WriteFile(p, []byte(rep.markdown(charts)), 0o644); err != nil {
		return nil, err
	}
	return append(paths, p), nil
}

func (rep *Report) markdown(charts []chart) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# txbox bench results\n\n")
	fmt.Fprintf(&b, "Run %s → %s (%s)", rep.Started.Format(time.RFC3339), rep.Finished.Format(time.RFC3339),
		rep.Finished.Sub(rep.Started).Round(time.Second))
	if rep.Quick {
		b.WriteString(", **--quick**: tiny sizes, the figures mean nothing")
	}
	fmt.Fprintf(&b, ".\n\n`txbox bench %s`\n\n", strings.Join(rep.Args, " "))
	rep.Machine.markdown(&b)

	b.WriteString("\n## Ratios\n\nEach ratio is the median of per-round pairs measured in this run.\n\n")
	b.WriteString("| scenario | ratio | median | rounds | target |\n|---|---|---|---|---|\n")
	for _, s := range rep.Scenarios {
		for _, r := range s.Ratios {
			vals := make([]string, len(r.Values))
			for i, v := range r.Values {
				vals[i] = fmt.Sprintf("%.3g", v)
			}
			target := r.Target
			if r.Met != nil {
				target += map[bool]string{true: " — met", false: " — **not met**"}[*r.Met]
			}
			fmt.Fprintf(&b, "| %s | %s | **%.3g** | %s | %s |\n", s.Name, r.Name, r.Median, strings.Join(vals, ", "), target)
		}
	}
	for _, s := range rep.Scenarios {
		fmt.Fprintf(&b, "\n## %s — %s\n\n%s\n\n", s.Name, s.Title, s.Measures)
		if s.Unavailable != "" {
			fmt.Fprintf(&b, "**Not available:** %s\n\n", s.Unavailable)
		}
		if s.Error != "" {
			fmt.Fprintf(&b, "**Failed:** %s\n\n", s.Error)
		}
		if len(s.Conditions) > 0 {
			b.WriteString("Conditions:\n\n")
			for _, k := range slices.Sorted(maps.Keys(s.Conditions)) {
				fmt.Fprintf(&b, "- %s: %s\n", k, s.Conditions[k])
			}
			b.WriteString("\n")
		}
		if len(s.Runs) > 0 {
			unit := rateUnit(s.Name)
			if s.Name == ScenarioIdle {
				unit += "; the events column counts the statements"
			}
			fmt.Fprintf(&b, "Rate: %s.\n\n", unit)
			b.WriteString("| variant | round | events | seconds | rate | CPU µs/event | other |\n|---|---|---|---|---|---|---|\n")
			for _, r := range s.Runs {
				cpu := "—"
				if r.CPUPerEventMicros > 0 {
					cpu = fmt.Sprintf("%.2f", r.CPUPerEventMicros)
				}
				var extra []string
				for _, k := range slices.Sorted(maps.Keys(r.Extra)) {
					extra = append(extra, fmt.Sprintf("%s %.4g", k, r.Extra[k]))
				}
				fmt.Fprintf(&b, "| %s | %d | %d | %.2f | %.0f | %s | %s |\n", r.Variant, r.Round, r.Events, r.Seconds, r.Rate, cpu, strings.Join(extra, ", "))
			}
			b.WriteString("\n")
		}
		if len(s.Latencies) > 0 {
			b.WriteString("| latency | samples | p50 ms | p95 ms | p99 ms | max ms |\n|---|---|---|---|---|---|\n")
			for _, l := range s.Latencies {
				fmt.Fprintf(&b, "| %s | %d | %.2f | %.2f | %.2f | %.2f |\n", l.Name, l.Samples, l.P50, l.P95, l.P99, l.Max)
			}
			b.WriteString("\n")
		}
		for _, c := range charts {
			if c.scenario == s.Name {
				fmt.Fprintf(&b, "![%s](%s)\n\n", c.title, c.file)
			}
		}
		for _, n := range s.Notes {
			fmt.Fprintf(&b, "- %s\n", n)
		}
		fmt.Fprintf(&b, "\n(%.0f s)\n", s.Seconds)
	}
	return b.String()
}

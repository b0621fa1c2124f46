package bench

import (
	"encoding/json"
	"encoding/xml"
	"errors"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestRatiosNeverNaN: a pair with a zero, NaN or infinite side is
// dropped from a ratio (and said so), and a scenario without any valid
// pair gets a note instead of a NaN ratio.
func TestRatiosNeverNaN(t *testing.T) {
	var s Scenario
	s.addRatio("r", "a", "b", []float64{2, 0, math.NaN(), 3}, []float64{1, 1, 1, math.Inf(1)}, true, "≥ 1", func(x float64) bool { return x >= 1 })
	if len(s.Ratios) != 1 || len(s.Ratios[0].Values) != 1 || s.Ratios[0].Median != 2 || s.Ratios[0].Met == nil || !*s.Ratios[0].Met {
		t.Fatalf("ratio %+v", s.Ratios)
	}
	s.addRatio("none", "a", "b", []float64{0}, []float64{1}, true, "", nil)
	if len(s.Ratios) != 1 || !strings.Contains(strings.Join(s.Notes, " "), "ratio none: no valid pair") {
		t.Fatalf("ratios %+v notes %q", s.Ratios, s.Notes)
	}
}

// TestWriteReport writes a report holding a NaN and checks that the JSON
// encodes without it, the Markdown names every scenario, and every SVG
// is well-formed XML.
func TestWriteReport(t *testing.T) {
	rep := &Report{Started: time.Now(), Finished: time.Now(), Args: []string{"--quick"}, Machine: Machine{CPU: "test", Cores: 2}}
	s := Scenario{Name: "drain", Title: "t", Measures: "m <&> \"quoted\""}
	s.Runs = []Measurement{{Variant: "naive <loop>", Round: 1, Events: 10, Seconds: 1, Rate: 10},
		{Variant: "relay", Round: 1, Events: 10, Seconds: 2, Rate: math.NaN(), Extra: map[string]float64{"x": math.Inf(1)}}}
	s.addRatio("relay / naive", "relay", "naive <loop>", []float64{5}, []float64{10}, true, "≥ 1.0×", func(x float64) bool { return x >= 1 })
	p := Scenario{Name: "pickup", Latencies: []Latency{percentiles("a & b", []float64{1, 2, 3}), percentiles("empty", nil)}}
	rep.Scenarios = []Scenario{s, p}
	dir := t.TempDir()
	paths, err := rep.write(dir)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(dir, "results.json"))
	if err != nil {
		t.Fatal(err)
	}
	var back Report
	if err := json.Unmarshal(raw, &back); err != nil {
		t.Fatal(err)
	}
	if back.Scenarios[0].Runs[1].Rate != 0 || !strings.Contains(strings.Join(back.Scenarios[0].Notes, " "), "non-finite value dropped") {
		t.Errorf("NaN not cleaned: %+v", back.Scenarios[0])
	}
	md, _ := os.ReadFile(filepath.Join(dir, "results.md"))
	for _, want := range []string{"## drain", "## pickup", "**0.5**", "**not met**", "drain-throughput.svg", "pickup-latency.svg"} {
		if !strings.Contains(string(md), want) {
			t.Errorf("results.md lacks %q:\n%s", want, md)
		}
	}
	svgs := 0
	for _, p := range paths {
		if !strings.HasSuffix(p, ".svg") {
			continue
		}
		svgs++
		b, _ := os.ReadFile(p)
		dec := xml.NewDecoder(strings.NewReader(string(b)))
		for {
			_, err := dec.Token()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("%s: %v\n%s", p, err, b)
			}
		}
		if strings.Contains(string(b), "NaN") {
			t.Errorf("%s contains NaN", p)
		}
	}
	if svgs != 2 {
		t.Errorf("%d SVG files, want 2: %v", svgs, paths)
	}
}

// TestQuickKeepsExplicitSizes: --quick shrinks only what the command
// line did not set.
func TestQuickKeepsExplicitSizes(t *testing.T) {
	o, err := Parse([]string{"--quick", "--backlog", "5000"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if o.Backlog != 5000 || o.Rounds != 1 || o.IdleWindow > 10*time.Second {
		t.Errorf("quick options: %+v", o)
	}
	o, err = Parse([]string{"--scenario", "all", "--senders", "all"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if len(o.Scenarios) != len(AllScenarios) || len(o.Senders) != len(AllSenders) || o.Backlog != 200_000 {
		t.Errorf("all: %+v", o)
	}
	o, _ = Parse([]string{"--scenario", "watermill,drain,drain"}, io.Discard)
	if strings.Join(o.Scenarios, ",") != "drain,watermill" {
		t.Errorf("scenarios run in the documented order without repeats: %v", o.Scenarios)
	}
}

// TestRender writes the Markdown and charts of a results.json again, and
// refuses a file that is not one with a usage error.
func TestRender(t *testing.T) {
	rep := &Report{Scenarios: []Scenario{{Name: "drain", Runs: []Measurement{{Variant: "a", Rate: 5}}}}}
	src := t.TempDir()
	if _, err := rep.write(src); err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	var stdout strings.Builder
	o := &Options{Render: filepath.Join(src, "results.json"), OutDir: out}
	if err := Run(t.Context(), o, &stdout, io.Discard, false, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(out, "drain-throughput.svg")); err != nil || !strings.Contains(stdout.String(), "results.md") {
		t.Errorf("render wrote %q: %v", stdout.String(), err)
	}
	bad := filepath.Join(src, "results.md")
	var ue *UsageError
	if err := Run(t.Context(), &Options{Render: bad, OutDir: out}, io.Discard, io.Discard, false, ""); !errors.As(err, &ue) {
		t.Errorf("render of a Markdown file: %v, want a usage error", err)
	}
}

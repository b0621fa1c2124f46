package bench

import (
	"fmt"
	"html"
	"math"
	"strings"
)

// chart is one hand-written SVG file (no script, no external resources).
type chart struct {
	scenario, file, title, svg string
}

// charts draws, for each scenario, the median rate of each variant as
// horizontal bars, and for each scenario with latencies the p50/p95/p99
// of each distribution as grouped bars.
func (rep *Report) charts() []chart {
	var out []chart
	for _, s := range rep.Scenarios {
		var labels []string
		var vals []float64
		for _, v := range s.variants() {
			m := median(s.rates(v))
			if ok(m) {
				labels = append(labels, v)
				vals = append(vals, m)
			}
		}
		if len(vals) > 0 {
			title := s.Name + ": " + rateUnit(s.Name) + " (median of rounds)"
			out = append(out, chart{scenario: s.Name, file: s.Name + "-throughput.svg", title: title,
				svg: barChart(title, labels, vals)})
		}
		if len(s.Latencies) > 0 {
			title := s.Name + ": latency percentiles (ms)"
			out = append(out, chart{scenario: s.Name, file: s.Name + "-latency.svg", title: title,
				svg: latencyChart(title, s.Latencies)})
		}
	}
	return out
}

func rateUnit(scenario string) string {
	switch scenario {
	case ScenarioPublish:
		return "operations/s"
	case ScenarioIdle:
		return "statements the relay sent/hour"
	case ScenarioInbox:
		return "messages/s"
	}
	return "events/s"
}

const (
	svgWidth   = 760
	labelWidth = 230
	barHeight  = 22
	barGap     = 8
	svgTop     = 40
)

func svgHeader(b *strings.Builder, h int, title string) {
	fmt.Fprintf(b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n",
		svgWidth, h, svgWidth, h)
	fmt.Fprintf(b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(b, `<text x="10" y="22" font-size="14" font-weight="bold">%s</text>`+"\n", html.EscapeString(title))
}

var palette = []string{"#4C78A8", "#F58518", "#54A24B", "#E45756", "#72B7B2", "#B279A2", "#FF9DA6", "#9D755D"}

// barChart draws one horizontal bar per label, scaled to the largest
// value, with the value printed after the bar.
func barChart(title string, labels []string, vals []float64) string {
	var b strings.Builder
	h := svgTop + len(vals)*(barHeight+barGap) + 20
	svgHeader(&b, h, title)
	top := maxOf(vals)
	plot := float64(svgWidth - labelWidth - 110)
	for i, v := range vals {
		y := svgTop + i*(barHeight+barGap)
		w := 0.0
		if top > 0 {
			w = v / top * plot
		}
		fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="end">%s</text>`+"\n", labelWidth-8, y+barHeight-6, html.EscapeString(labels[i]))
		fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%.1f" height="%d" fill="%s"/>`+"\n", labelWidth, y, w, barHeight, palette[i%len(palette)])
		fmt.Fprintf(&b, `<text x="%.1f" y="%d">%s</text>`+"\n", float64(labelWidth)+w+6, y+barHeight-6, human(v))
	}
	b.WriteString("</svg>\n")
	return b.String()
}

// latencyChart draws p50, p95 and p99 of each distribution as a group of
// three bars on a shared linear scale, the distribution's name above
// its group.
func latencyChart(title string, ls []Latency) string {
	var b strings.Builder
	const left, title2 = 60, 18
	group := title2 + 3*(barHeight+2) + 12
	h := svgTop + len(ls)*group + 10
	svgHeader(&b, h, title)
	var all []float64
	for _, l := range ls {
		all = append(all, l.P50, l.P95, l.P99)
	}
	top := maxOf(all)
	plot := float64(svgWidth - left - 130)
	names := []string{"p50", "p95", "p99"}
	for i, l := range ls {
		y0 := svgTop + i*group
		fmt.Fprintf(&b, `<text x="10" y="%d" font-weight="bold">%s (%d samples)</text>`+"\n", y0+13, html.EscapeString(l.Name), l.Samples)
		for j, v := range []float64{l.P50, l.P95, l.P99} {
			y := y0 + title2 + j*(barHeight+2)
			w := 0.0
			if top > 0 {
				w = v / top * plot
			}
			fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="end">%s</text>`+"\n", left-8, y+barHeight-6, names[j])
			fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%.1f" height="%d" fill="%s"/>`+"\n", left, y, w, barHeight, palette[j])
			fmt.Fprintf(&b, `<text x="%.1f" y="%d">%s ms</text>`+"\n", float64(left)+w+6, y+barHeight-6, ms(v))
		}
	}
	b.WriteString("</svg>\n")
	return b.String()
}

// ms prints a latency in milliseconds with sensible precision.
func ms(v float64) string {
	switch {
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	case v >= 10:
		return fmt.Sprintf("%.1f", v)
	}
	return fmt.Sprintf("%.2f", v)
}

func maxOf(xs []float64) float64 {
	m := 0.0
	for _, x := range xs {
		if ok(x) {
			m = math.Max(m, x)
		}
	}
	return m
}

// human prints a rate with a k/M suffix.
func human(v float64) string {
	switch {
	case v >= 1e6:
		return fmt.Sprintf("%.2fM", v/1e6)
	case v >= 1e4:
		return fmt.Sprintf("%.1fk", v/1e3)
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	}
	return trimFloat(v)
}

func trimFloat(v float64) string { return fmt.Sprintf("%.3g", v) }

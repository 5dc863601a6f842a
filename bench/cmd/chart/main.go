// Command chart draws the filter p99 latency of a load generator report
// (bench/cmd/loadgen -json) against the candidate node count, as an SVG
// line chart: one line per mode (NodeNames, full Nodes), the issue's
// targets as red crosses; both axes logarithmic by default. Run it from
// bench/:
//
//	go run ./cmd/loadgen -json /tmp/loadgen.json > /dev/null
//	go run ./cmd/chart -in /tmp/loadgen.json -out /tmp/filter-p99.svg
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"html"
	"math"
	"os"
	"sort"
	"strings"
)

// report is the part of the load generator's JSON the chart reads.
type report struct {
	Machine struct {
		NumCPU   int    `json:"numCPU"`
		CPUModel string `json:"cpuModel"`
	} `json:"machine"`
	Config struct {
		Duration    string `json:"duration"`
		Concurrency int    `json:"concurrency"`
		PolicySet   string `json:"policySet"`
	} `json:"config"`
	Load struct {
		Constraints int `json:"constraints"`
	} `json:"load"`
	Scenarios []struct {
		Verb  string  `json:"verb"`
		Mode  string  `json:"mode"`
		Nodes int     `json:"nodes"`
		P50Ms float64 `json:"p50Ms"`
		P99Ms float64 `json:"p99Ms"`
	} `json:"scenarios"`
}

type point struct{ x, y float64 }

type series struct {
	name   string
	color  string
	points []point
}

// targets of the issue: filter p99 at 500 and 5000 nodes (names only).
var targets = []point{{500, 2}, {5000, 15}}

func main() {
	in := flag.String("in", "loadgen.json", "load generator report (JSON, loadgen -json)")
	out := flag.String("out", "filter-p99.svg", "SVG file to write")
	verb := flag.String("verb", "filter", "verb to plot")
	logY := flag.Bool("log-y", true, "logarithmic latency axis (-log-y=false for a linear one)")
	flag.Parse()
	if err := run(*in, *out, *verb, *logY); err != nil {
		fmt.Fprintln(os.Stderr, "chart:", err)
		os.Exit(1)
	}
}

func run(in, out, verb string, logY bool) error {
	b, err := os.ReadFile(in)
	if err != nil {
		return err
	}
	var r report
	if err := json.Unmarshal(b, &r); err != nil {
		return fmt.Errorf("%s: %w", in, err)
	}
	modes := map[string]*series{
		"names": {name: verb + " p99, NodeNames (nodeCacheCapable)", color: "#1f77b4"},
		"nodes": {name: verb + " p99, full Nodes", color: "#ff7f0e"},
	}
	for _, s := range r.Scenarios {
		if s.Verb != verb || s.Nodes <= 0 {
			continue
		}
		if m := modes[s.Mode]; m != nil {
			m.points = append(m.points, point{float64(s.Nodes), s.P99Ms})
		}
	}
	var ss []series
	for _, k := range []string{"names", "nodes"} {
		m := modes[k]
		if len(m.points) == 0 {
			continue
		}
		sort.Slice(m.points, func(i, j int) bool { return m.points[i].x < m.points[j].x })
		ss = append(ss, *m)
	}
	if len(ss) == 0 {
		return errors.New("no " + verb + " scenario in the report")
	}
	sub := []string{
		fmt.Sprintf("%d CPUs (%s); policy set %q, %d constraints", r.Machine.NumCPU, r.Machine.CPUModel, r.Config.PolicySet, r.Load.Constraints),
		fmt.Sprintf("%s per point, concurrency %d; measured by the client, HTTP on loopback included", r.Config.Duration, r.Config.Concurrency),
	}
	svg := draw(verb+" p99 latency against candidate nodes", sub, ss, targets, logY)
	return os.WriteFile(out, []byte(svg), 0o644)
}

const (
	width, height                          = 760, 474
	marginL, marginR, marginT, marginB     = 70, 30, 76, 92
	plotW, plotH                           = width - marginL - marginR, height - marginT - marginB
	fontFamily                             = "DejaVu Sans, Helvetica, Arial, sans-serif"
	axisColor, gridColor, targetColor, ink = "#333", "#ddd", "#d62728", "#222"
)

// draw renders the chart: log-scale x (nodes), linear or log y (ms).
func draw(title string, subtitle []string, ss []series, tg []point, logY bool) string {
	xmin, xmax := math.Inf(1), math.Inf(-1)
	ymax := 0.0
	ymin := math.Inf(1)
	for _, s := range ss {
		for _, p := range s.points {
			xmin, xmax = math.Min(xmin, p.x), math.Max(xmax, p.x)
			ymax, ymin = math.Max(ymax, p.y), math.Min(ymin, p.y)
		}
	}
	for _, p := range tg {
		xmin, xmax = math.Min(xmin, p.x), math.Max(xmax, p.x)
		ymax, ymin = math.Max(ymax, p.y), math.Min(ymin, p.y)
	}
	// A little room on both sides of the outermost points.
	lx0 := math.Log10(xmin) - 0.12
	lx1 := math.Log10(xmax) + 0.12
	xpos := func(x float64) float64 { return marginL + (math.Log10(x)-lx0)/(lx1-lx0)*plotW }

	var yticks []float64
	var ypos func(float64) float64
	if logY {
		ly0 := math.Floor(math.Log10(math.Max(ymin, 1e-3)))
		ly1 := math.Ceil(math.Log10(ymax))
		if ly1 == ly0 {
			ly1++
		}
		ypos = func(y float64) float64 {
			return marginT + plotH - (math.Log10(math.Max(y, 1e-3))-ly0)/(ly1-ly0)*plotH
		}
		for e := ly0; e <= ly1; e++ {
			for _, m := range []float64{1, 2, 5} {
				if v := m * math.Pow(10, e); math.Log10(v) <= ly1+1e-9 {
					yticks = append(yticks, v)
				}
			}
		}
	} else {
		step := niceStep(ymax * 1.1 / 5)
		top := math.Ceil(ymax*1.1/step) * step
		ypos = func(y float64) float64 { return marginT + plotH - y/top*plotH }
		for v := 0.0; v <= top+step/2; v += step {
			yticks = append(yticks, v)
		}
	}

	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="%s">`+"\n", width, height, width, height, fontFamily)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", width, height)
	fmt.Fprintf(&b, `<text x="%d" y="24" font-size="17" font-weight="bold" fill="%s">%s</text>`+"\n", marginL, ink, esc(title))
	for i, line := range subtitle {
		fmt.Fprintf(&b, `<text x="%d" y="%d" font-size="11" fill="#555">%s</text>`+"\n", marginL, 42+14*i, esc(line))
	}

	// Grid and y ticks.
	for _, v := range yticks {
		y := ypos(v)
		fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="%s"/>`+"\n", marginL, y, marginL+plotW, y, gridColor)
		fmt.Fprintf(&b, `<text x="%d" y="%.1f" font-size="11" text-anchor="end" fill="%s">%s</text>`+"\n", marginL-6, y+4, ink, fmtNum(v))
	}
	// X ticks: 1, 2, 5 per decade.
	for e := math.Floor(lx0); e <= math.Ceil(lx1); e++ {
		for _, m := range []float64{1, 2, 5} {
			v := m * math.Pow(10, e)
			if lv := math.Log10(v); lv < lx0 || lv > lx1 {
				continue
			}
			x := xpos(v)
			fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="%s"/>`+"\n", x, marginT, x, marginT+plotH, gridColor)
			fmt.Fprintf(&b, `<text x="%.1f" y="%d" font-size="11" text-anchor="middle" fill="%s">%s</text>`+"\n", x, marginT+plotH+16, ink, fmtNum(v))
		}
	}
	// Axes.
	fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="1.2"/>`+"\n", marginL, marginT+plotH, marginL+plotW, marginT+plotH, axisColor)
	fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="1.2"/>`+"\n", marginL, marginT, marginL, marginT+plotH, axisColor)
	fmt.Fprintf(&b, `<text x="%d" y="%d" font-size="12" text-anchor="middle" fill="%s">candidate nodes per request (log scale)</text>`+"\n", marginL+plotW/2, marginT+plotH+36, ink)
	ylabel := "p99 latency (ms)"
	if logY {
		ylabel += ", log scale"
	}
	fmt.Fprintf(&b, `<text x="18" y="%d" font-size="12" text-anchor="middle" fill="%s" transform="rotate(-90 18 %d)">%s</text>`+"\n", marginT+plotH/2, ink, marginT+plotH/2, esc(ylabel))

	// Series.
	for _, s := range ss {
		var pts []string
		for _, p := range s.points {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", xpos(p.x), ypos(p.y)))
		}
		fmt.Fprintf(&b, `<polyline points="%s" fill="none" stroke="%s" stroke-width="2"/>`+"\n", strings.Join(pts, " "), s.color)
		for _, p := range s.points {
			x, y := xpos(p.x), ypos(p.y)
			fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="4" fill="%s"><title>%s: %g nodes, %s ms</title></circle>`+"\n", x, y, s.color, esc(s.name), p.x, fmtNum(p.y))
			fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" font-size="11" fill="%s">%s ms</text>`+"\n", x+7, y-7, s.color, fmtNum(p.y))
		}
	}
	// Targets.
	for _, p := range tg {
		x, y := xpos(p.x), ypos(p.y)
		fmt.Fprintf(&b, `<path d="M%.1f %.1f l10 10 m0 -10 l-10 10" stroke="%s" stroke-width="2"><title>target: p99 &lt; %g ms at %g nodes</title></path>`+"\n", x-5, y-5, targetColor, p.y, p.x)
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" font-size="11" text-anchor="end" fill="%s">target &lt; %s ms</text>`+"\n", x-8, y-8, targetColor, fmtNum(p.y))
	}
	// Legend.
	ly := marginT + plotH + 58
	lx := marginL
	for _, s := range ss {
		fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="2"/><circle cx="%d" cy="%d" r="4" fill="%s"/>`+"\n", lx, ly, lx+24, ly, s.color, lx+12, ly, s.color)
		fmt.Fprintf(&b, `<text x="%d" y="%d" font-size="12" fill="%s">%s</text>`+"\n", lx+30, ly+4, ink, esc(s.name))
		lx += 40 + 7*len(s.name)
	}
	fmt.Fprintf(&b, `<path d="M%d %d l10 10 m0 -10 l-10 10" stroke="%s" stroke-width="2"/>`+"\n", lx+7, ly-5, targetColor)
	fmt.Fprintf(&b, `<text x="%d" y="%d" font-size="12" fill="%s">target (issue)</text>`+"\n", lx+24, ly+4, ink)
	b.WriteString("</svg>\n")
	return b.String()
}

// niceStep rounds a raw tick step up to 1, 2 or 5 times a power of ten.
func niceStep(raw float64) float64 {
	if raw <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= raw {
			return m * p
		}
	}
	return 10 * p
}

func fmtNum(v float64) string {
	switch {
	case v == 0:
		return "0"
	case math.Abs(v) >= 100:
		return fmt.Sprintf("%.0f", v)
	case math.Abs(v) >= 10:
		return strings.TrimSuffix(strings.TrimRight(fmt.Sprintf("%.1f", v), "0"), ".")
	default:
		return strings.TrimSuffix(strings.TrimRight(fmt.Sprintf("%.2f", v), "0"), ".")
	}
}

func esc(s string) string { return html.EscapeString(s) }

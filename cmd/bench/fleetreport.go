package main

import (
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// markdown renders the fleet replay's table and notes.
func (r *fleetResults) markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "# Fleet replay\n\n`%s`, started %s, %.0f s in all; load average %s at the start, %s at the end.\n\n",
		r.Command, r.Started, r.Seconds, r.LoadAvg[0], r.LoadAvg[1])
	fmt.Fprintf(&b, "%d requests of the Mooncake trace (%.2f requests/s of its own time) against %d engines of %s, at %gx. "+
		"Ideal hit rate (an unbounded cache shared by the fleet): %.3f. ", r.Requests, r.TraceRate, r.Engines, r.Model, r.Speedup, r.Ideal)
	if len(r.CapacityRuns) > 0 {
		fmt.Fprintf(&b, "Capacity: %.2f requests/s (%.2fx the trace's rate), the larger of the two cache-aware systems' completion rates "+
			"with the trace at %gx its rate (the middle 80%% of the completions; least loaded's for comparison):", r.Capacity, r.Capacity/r.TraceRate, fleetOverload)
		for _, c := range r.CapacityRuns {
			fmt.Fprintf(&b, " %s %.2f (hit rate %.3f);", c.System, c.Metrics.Saturated, c.Metrics.HitRate)
		}
		b.WriteString("\n\n")
	} else {
		fmt.Fprintf(&b, "Capacity: %.2f requests/s (given).\n\n", r.Capacity)
	}
	b.WriteString("Times in seconds of the engines' time (wall time × their speedup). Fairness over the longest backlogged window of at least " +
		"30 s (– when none): each tenant's service (prefill tokens computed on requests started in the window) against its weighted " +
		"max-min fair share of the window's service given what it asked (its weight's part, or all it asked when that is less): " +
		"Jain's index of service over share, and the largest deviation. Publish to engine: the median from publication to the engine's receipt.\n\n")
	b.WriteString("| load | system | TTFT p50 | TTFT p90 | TTFT p99 | E2E p50 | E2E p99 | output tok/s | hit rate | of ideal | Jain | max dev | window s | publish to engine | completed | other CPU |\n")
	b.WriteString("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, run := range r.Runs {
		m := run.Metrics
		if run.Error != "" {
			fmt.Fprintf(&b, "| %.0f%% | %s | error: %s |||||||||||||||\n", 100*run.Load, run.System, run.Error)
			continue
		}
		jain, dev, window := "–", "–", "–"
		if f := m.Fair; f != nil {
			jain, dev, window = fmt.Sprintf("%.3f", f.Jain), fmt.Sprintf("%.1f%%", 100*f.MaxDev), fmt.Sprintf("%.0f–%.0f", f.From, f.To)
		}
		ofIdeal := "–" // a trace with no reuse has no ideal to be a part of
		if m.Ideal > 0 {
			ofIdeal = fmt.Sprintf("%.2f", m.HitRate/m.Ideal)
		}
		fmt.Fprintf(&b, "| %.0f%% | %s | %.2f | %.2f | %.2f | %.2f | %.2f | %.0f | %.3f | %s | %s | %s | %s | %.2f | %d/%d | %.0f%% |\n",
			100*run.Load, run.System, m.TTFTp50, m.TTFTp90, m.TTFTp99, m.E2Ep50, m.E2Ep99, m.OutputTPS, m.HitRate, ofIdeal,
			jain, dev, window, m.HopP50, m.Completed, m.Requests, 100*run.Other)
	}
	b.WriteString("\n")
	for _, run := range r.Runs {
		if run.Duplicates+run.Rejected+run.RouterRetries > 0 {
			fmt.Fprintf(&b, "**%s at %.0f%% is not comparable**: %d requests ran twice, %d were rejected, and the router placed %d dispatches again.\n\n",
				run.System, 100*run.Load, run.Duplicates, run.Rejected, run.RouterRetries)
		}
	}
	for _, run := range r.Runs {
		if f := run.Metrics.Fair; f != nil && run.Load > 1 {
			fmt.Fprintf(&b, "%s at %.0f%%, tenants (demand / service / max-min fair share, millions of prefill tokens; with a request waiting "+
				"throughout: %v, their split against their weights off by up to %.1f%%):", run.System, 100*run.Load, f.Backlogged, 100*f.BackloggedDev)
			for _, t := range f.Tenants {
				fmt.Fprintf(&b, " %s %.1f/%.1f/%.1f (TTFT p99 %.0f s);", t.Key, t.Demand/1e6, t.Service/1e6, t.Fair/1e6, run.Metrics.TTFTp99Tenant[t.Key])
			}
			b.WriteString("\n\n")
		}
	}
	return b.String()
}

// fleetChart is one metric's plot across loads, a line per system.
type fleetChart struct {
	file, title, ylabel string
	log                 bool // a logarithmic y axis
	value               func(fleetMetrics) (float64, bool)
}

var fleetCharts = []fleetChart{
	{"fleet-ttft-p50.png", "Time to first token, p50", "seconds (log)", true, func(m fleetMetrics) (float64, bool) { return m.TTFTp50, true }},
	{"fleet-ttft-p90.png", "Time to first token, p90", "seconds (log)", true, func(m fleetMetrics) (float64, bool) { return m.TTFTp90, true }},
	{"fleet-ttft-p99.png", "Time to first token, p99", "seconds (log)", true, func(m fleetMetrics) (float64, bool) { return m.TTFTp99, true }},
	{"fleet-e2e-p50.png", "End-to-end latency, p50", "seconds (log)", true, func(m fleetMetrics) (float64, bool) { return m.E2Ep50, true }},
	{"fleet-e2e-p99.png", "End-to-end latency, p99", "seconds (log)", true, func(m fleetMetrics) (float64, bool) { return m.E2Ep99, true }},
	{"fleet-output-tps.png", "Output tokens per second", "tokens/s", false, func(m fleetMetrics) (float64, bool) { return m.OutputTPS, true }},
	{"fleet-hit-rate.png", "Prefix cache hit rate / the trace's ideal", "share of the ideal", false, func(m fleetMetrics) (float64, bool) { return m.HitRate / m.Ideal, m.Ideal > 0 }},
	{"fleet-jain.png", "Tenants' service against their max-min fair share, backlogged window (Jain)", "Jain's index", false, func(m fleetMetrics) (float64, bool) {
		if m.Fair == nil {
			return 0, false
		}
		return m.Fair.Jain, true
	}},
}

var fleetColors = []color.Color{
	color.RGBA{R: 120, G: 120, B: 120, A: 255},
	color.RGBA{R: 30, G: 90, B: 200, A: 255},
	color.RGBA{R: 20, G: 150, B: 60, A: 255},
	color.RGBA{R: 200, G: 40, B: 30, A: 255},
	color.RGBA{R: 230, G: 130, B: 20, A: 255},
	color.RGBA{R: 150, G: 60, B: 170, A: 255},
	color.RGBA{R: 60, G: 170, B: 190, A: 255},
}

// charts renders one PNG per metric into dir and returns the files written.
func (r *fleetResults) charts(dir string) ([]string, error) {
	var files []string
	for _, ch := range fleetCharts {
		p := plot.New()
		if ch.log {
			p.Y.Scale = plot.LogScale{}
			p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
		}
		p.Title.Text = ch.title
		p.X.Label.Text = "load (share of the fleet's capacity)"
		p.Y.Label.Text = ch.ylabel
		p.Add(plotter.NewGrid())
		top, bottom := 0.0, math.Inf(1)
		for i, sys := range fleetSystems {
			var pts plotter.XYs
			for _, run := range r.Runs {
				if run.Key != sys.key || run.Error != "" {
					continue
				}
				if v, ok := ch.value(run.Metrics); ok && (!ch.log || v > 0) {
					pts = append(pts, plotter.XY{X: run.Load, Y: v})
					top, bottom = max(top, v), min(bottom, v)
				}
			}
			if len(pts) == 0 {
				continue
			}
			l, sc, err := plotter.NewLinePoints(pts)
			if err != nil {
				return files, err
			}
			l.Color, sc.Color = fleetColors[i%len(fleetColors)], fleetColors[i%len(fleetColors)]
			l.Width = vg.Points(1.2)
			if sys.router == "" && sys.key != "fair" {
				l.Dashes = []vg.Length{vg.Points(3), vg.Points(2)}
			}
			p.Add(l, sc)
			p.Legend.Add(sys.name, l, sc)
		}
		// Room above the lines for the legend.
		if ch.log {
			p.Y.Min, p.Y.Max = bottom/1.5, top*6
		} else {
			p.Y.Min, p.Y.Max = 0, top*1.6
		}
		p.Legend.Top = true
		p.Legend.Left = true
		p.Legend.TextStyle.Font.Size = vg.Points(8)
		path := filepath.Join(dir, ch.file)
		if err := savePNG(p, path); err != nil {
			return files, err
		}
		files = append(files, path)
	}
	return files, nil
}

// savePNG writes p as a 6.5 x 4.2 inch PNG at 72 dpi (about 40 KB: small
// enough to commit).
func savePNG(p *plot.Plot, path string) error {
	c := vgimg.NewWith(vgimg.UseWH(6.5*vg.Inch, 4.2*vg.Inch), vgimg.UseDPI(72))
	p.Draw(draw.New(c))
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: c}).WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

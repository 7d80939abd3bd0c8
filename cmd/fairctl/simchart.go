package main

import (
	"image/color"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"

	"fairdispatch/sim"
)

// simChart draws the cumulative service (cost dispatched) per class over
// time: wide pale lines for the proposed policy, thin dashed ones for the
// current one.
func simChart(path string, rep *simReport) error {
	p := plot.New()
	p.Title.Text = "Cumulative service per class: proposed (wide) vs current (dashed)"
	p.X.Label.Text = "seconds since the first arrival"
	p.Y.Label.Text = "cost dispatched (uncached tokens)"
	p.Add(plotter.NewGrid())
	palette := []color.Color{
		color.RGBA{R: 200, G: 60, B: 30, A: 255}, color.RGBA{R: 30, G: 90, B: 200, A: 255},
		color.RGBA{R: 40, G: 150, B: 60, A: 255}, color.RGBA{R: 150, G: 60, B: 170, A: 255},
		color.RGBA{R: 220, G: 150, B: 0, A: 255}, color.RGBA{R: 90, G: 90, B: 90, A: 255},
	}
	colors := map[string]color.Color{} // by class, in the proposed policy's order
	for _, c := range rep.Proposed.Classes {
		colors[c.Name] = palette[len(colors)%len(palette)]
	}
	// The proposal wide and pale underneath, the current policy thin and
	// dashed on top: where the two coincide, both stay visible.
	for _, run := range []struct {
		r      *sim.Run
		label  string
		width  vg.Length
		alpha  uint8
		dashes []vg.Length
	}{{rep.runs[1], "proposed", vg.Points(4), 110, nil}, {rep.runs[0], "current", vg.Points(1.5), 255, []vg.Length{vg.Points(4), vg.Points(3)}}} {
		if run.r == nil {
			continue
		}
		for _, s := range sim.Cumulative(run.r) {
			c, ok := colors[s.Class]
			if !ok {
				c = palette[len(colors)%len(palette)]
				colors[s.Class] = c
			}
			pts := make(plotter.XYs, len(s.T))
			for j := range s.T {
				pts[j] = plotter.XY{X: s.T[j], Y: s.Cost[j]}
			}
			l, err := plotter.NewLine(pts)
			if err != nil {
				return err
			}
			l.StepStyle = plotter.PostStep
			r, g, b, _ := c.RGBA()
			l.Color = color.NRGBA{R: uint8(r >> 8), G: uint8(g >> 8), B: uint8(b >> 8), A: run.alpha}
			l.Width = run.width
			l.Dashes = run.dashes
			p.Add(l)
			p.Legend.Add(run.label+" "+s.Class, l)
		}
	}
	p.Legend.Top = true
	p.Legend.Left = true
	p.Legend.XOffs = vg.Points(8)
	p.Legend.YOffs = -vg.Points(8)
	return p.Save(8*vg.Inch, 5*vg.Inch, path)
}

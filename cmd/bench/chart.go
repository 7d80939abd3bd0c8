package main

import (
	"fmt"
	"image/color"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// burstChart draws cumulative completions per class over time: solid lines
// for fairdispatch, dashed for the direct work queue.
func burstChart(path string, fair, direct burstResult) error {
	p := plot.New()
	p.Title.Text = fmt.Sprintf("Seed burst: %d premium + %d regular, one worker, 4 sequences", burstPerClass, burstPerClass)
	p.X.Label.Text = "seconds since the first publication"
	p.Y.Label.Text = "completions (cumulative)"
	p.Add(plotter.NewGrid())
	colors := map[string]color.Color{
		"premium": color.RGBA{R: 200, G: 60, B: 30, A: 255},
		"regular": color.RGBA{R: 30, G: 90, B: 200, A: 255},
	}
	for _, run := range []struct {
		r      burstResult
		dashes []vg.Length
	}{{fair, nil}, {direct, []vg.Length{vg.Points(4), vg.Points(3)}}} {
		for _, class := range []string{"premium", "regular"} {
			ts := run.r.Finished[class]
			if len(ts) == 0 {
				continue
			}
			pts := make(plotter.XYs, 0, len(ts)+1)
			pts = append(pts, plotter.XY{X: 0, Y: 0})
			for i, t := range ts {
				pts = append(pts, plotter.XY{X: t, Y: float64(i + 1)})
			}
			l, err := plotter.NewLine(pts)
			if err != nil {
				return err
			}
			l.StepStyle = plotter.PostStep
			l.Color = colors[class]
			l.Width = vg.Points(1.5)
			l.Dashes = run.dashes
			p.Add(l)
			p.Legend.Add(run.r.System+" "+class, l)
		}
	}
	p.Legend.Top = true
	p.Legend.Left = true
	p.Legend.XOffs = vg.Points(8)
	p.Legend.YOffs = -vg.Points(8)
	return p.Save(8*vg.Inch, 5*vg.Inch, path)
}

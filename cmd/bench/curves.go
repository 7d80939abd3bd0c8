package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"image/color"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"

	"fairdispatch/wire"
	"fairdispatch/workerkit"
)

// The scale curves of issue 13, goal 1: fairdispatch's throughput and the
// dispatcher's CPU per request against worker ranks, queued requests,
// classes and backlogged fairness keys. Each point runs a fresh dispatcher
// behind a fleet: one process answering for many worker ids.

// curveGrowthGoal is the most the dispatcher's CPU per request may grow from
// a curve's smallest point to its largest.
const curveGrowthGoal = 1.5

// curvePoint is one point of a curve.
type curvePoint struct {
	X        int     `json:"x"`
	Requests int     `json:"requests"`
	Seconds  float64 `json:"seconds"`
	Rate     float64 `json:"requests_per_s"`
	// DispatcherUs is the dispatcher process's CPU per request, in µs.
	DispatcherUs float64 `json:"dispatcher_cpu_us_per_request"`
	ForeignCPU   float64 `json:"foreign_cpu_share"`
	// ReportsPerRequest counts the fleet's load reports per request during
	// the run: each costs the dispatcher a parse and an apply.
	ReportsPerRequest float64 `json:"load_reports_per_request"`
	// Profile is a 3-second CPU profile of the dispatcher from the start of
	// the run, in the output directory.
	Profile string `json:"cpu_profile,omitempty"`
	Error   string `json:"error,omitempty"`
}

// curve is one scale curve.
type curve struct {
	Name   string       `json:"name"` // ranks, queued, classes, keys
	XLabel string       `json:"x_label"`
	Points []curvePoint `json:"points"`
	// Growth is DispatcherUs at the largest point over the smallest.
	Growth float64 `json:"cpu_per_request_growth"`
	Met    bool    `json:"goal_met"` // Growth <= 1.5
	Chart  string  `json:"chart,omitempty"`
}

// curveNames are the curves, in the order they run.
var curveNames = []string{"ranks", "queued", "classes", "keys"}

// curvePoints returns the x values of a curve: the small ones in --quick.
func (b *bench) curvePoints(name string) []int {
	q := b.opt.quick
	switch name {
	case "ranks":
		if q {
			return []int{16, 256}
		}
		return []int{16, 256, 4096}
	case "queued":
		switch {
		case q:
			return []int{1000, 10000}
		case b.opt.million:
			return []int{1000, 100000, 1000000}
		}
		return []int{1000, 100000}
	case "classes":
		return []int{2, 64}
	case "keys":
		if q {
			return []int{1, 1000}
		}
		return []int{1, 10000}
	}
	return nil
}

// curves runs the selected curves.
func (b *bench) curves(want func(string) bool) []curve {
	var out []curve
	for _, name := range curveNames {
		if !want("curves-"+name) && !(b.opt.curves && b.opt.only == "") {
			continue
		}
		c := curve{Name: name, XLabel: map[string]string{"ranks": "worker ranks", "queued": "queued requests",
			"classes": "classes", "keys": "backlogged fairness keys"}[name]}
		for _, x := range b.curvePoints(name) {
			b.logf("curve %s: %d", name, x)
			p := b.curvePoint(name, x)
			if p.Error != "" {
				b.logf("curve %s %d: %s", name, x, p.Error)
			} else {
				b.logf("curve %s %d: %.0f requests/s, dispatcher %.1f µs per request, other processes %.0f%%",
					name, x, p.Rate, p.DispatcherUs, 100*p.ForeignCPU)
			}
			c.Points = append(c.Points, p)
		}
		if n := len(c.Points); n > 1 && c.Points[0].DispatcherUs > 0 && c.Points[n-1].Error == "" {
			c.Growth = c.Points[n-1].DispatcherUs / c.Points[0].DispatcherUs
			c.Met = c.Growth <= curveGrowthGoal
		}
		file := "bench-curve-" + name + ".png"
		if err := curveChart(filepath.Join(b.opt.out, file), c); err != nil {
			b.logf("chart: %v", err)
		} else {
			c.Chart = file
		}
		out = append(out, c)
	}
	return out
}

// classPolicy is a policy of k classes c0..c<k-1>, none ever gated by load
// (threshold 10^12) unless the fleet reports more.
func classPolicy(k int) string {
	var sb strings.Builder
	sb.WriteString("default_policy_family: c0\nuncached_isl_buckets:\n  - min_tokens: 0\n    bucket: all\npolicy_classes:\n")
	for i := range k {
		fmt.Fprintf(&sb, "  - {name: c%d, policy_family: c%d, cache_bucket: all, quantum: %d, prefill_busy_threshold: 1000000000000}\n",
			i, i, 128<<(i%4))
	}
	return sb.String()
}

// curvePoint measures one point: a dispatcher with the curve's policy and a
// fleet of worker ids. The ranks curve streams requests through (warm-up,
// then the run); the others time the dispatch of a backlog: n requests held
// behind a fleet reporting itself busy, then let go.
func (b *bench) curvePoint(name string, x int) (p curvePoint) {
	p.X = x
	fail := func(what string, err error) curvePoint {
		p.Error = fmt.Sprintf("%s: %v", what, err)
		return p
	}
	ranks, classes, keys, queued := 64, 4, 1, 0
	switch name {
	case "ranks":
		ranks = x
	case "queued":
		queued = x
	case "classes":
		classes = x
	case "keys":
		keys = x
	}
	n := b.opt.requests / 4
	if b.opt.quick {
		n = 10000
	}
	if queued > 0 {
		n = queued
	}
	if keys > 1 {
		n = max(n, 2*keys) // every key backlogged
	}
	if err := b.resetStreams(); err != nil {
		return fail("reset streams", err)
	}
	s, err := b.startDispatcher("curve", classPolicy(classes), "--pprof", "--max-held", strconv.Itoa(max(100000, n)),
		"--max-in-worker", strconv.Itoa(max(400000, 2*n)))
	if err != nil {
		return fail("start dispatcher", err)
	}
	defer s.stop()
	f, err := b.startFleet(ranks, name != "ranks")
	if err != nil {
		return fail("fleet", err)
	}
	defer f.stop()
	if _, err := s.waitQueues(60*time.Second, "all workers live", func(q queues) bool { return len(q.Workers) == ranks }); err != nil {
		return fail("workers", err)
	}
	subjects := make([]string, classes)
	for i := range subjects {
		subjects[i] = b.opt.names.Req("c" + strconv.Itoa(i))
	}
	b.pub.keys = keys
	defer func() { b.pub.keys = 0 }()
	if name == "ranks" { // a stream: requests pass straight through
		if _, err := b.one(min(n/5, 5000), 0, subjects, 512, b.opt.body); err != nil {
			return fail("warm-up", err)
		}
		prof := b.profile(s, &p, name)
		r0 := f.reports.Load()
		c0 := sampleCPU(b.server.pid(), s.middlePid())
		t, err := b.one(n, 0, subjects, 512, b.opt.body)
		c1 := sampleCPU(b.server.pid(), s.middlePid())
		p.ReportsPerRequest = float64(f.reports.Load()-r0) / float64(n)
		<-prof
		if err != nil {
			return fail("run", err)
		}
		st := t.stats()
		d := c1.sub(c0)
		p.Requests, p.Seconds, p.Rate = n, st.Seconds, st.Rate
		p.DispatcherUs = d.middle.Seconds() * 1e6 / float64(n)
		p.ForeignCPU = d.foreign()
		return p
	}
	// Queued, classes, keys: hold n requests behind a busy fleet, then let it
	// go and time the dispatch of all of them, from a backlog. A small n is
	// repeated up to 10,000 dispatches, above the resolution of the CPU clock.
	var cpu, wall time.Duration
	var foreign float64
	rounds := max(1, 10000/n)
	var reports int64
	total := 0 // requests dispatched from the backlog, over the rounds
	for round := range rounds {
		f.setBusy(true)
		t := newTracker(n)
		ctx, cancel := context.WithTimeout(context.Background(), runTimeout(n))
		defer cancel()
		if err := b.pub.run(ctx, t, subjects, 512, b.opt.body, 0); err != nil {
			return fail("publish", err)
		}
		// The fleet's busy reports and the requests travel on different
		// connections, so the dispatcher may see a few requests before it
		// sees the fleet busy again, and dispatch them: they are left out
		// of the round's count.
		if _, err := s.waitQueues(time.Until(deadlineOf(ctx)), "all requests held", func(q queues) bool {
			return q.Held+int(t.count.Load()) >= n
		}); err != nil {
			return fail("hold", err)
		}
		early := int(t.count.Load())
		var prof chan struct{}
		if round == 0 {
			prof = b.profile(s, &p, name)
		}
		r0 := f.reports.Load()
		c0 := sampleCPU(b.server.pid(), s.middlePid())
		start := time.Now()
		f.setBusy(false)
		err := t.wait(time.Until(deadlineOf(ctx)))
		wall += time.Since(start)
		if prof != nil {
			<-prof
		}
		if err != nil {
			return fail("drain", err)
		}
		reports += f.reports.Load() - r0
		total += n - early
		d := sampleCPU(b.server.pid(), s.middlePid()).sub(c0)
		cpu += d.middle
		foreign += d.foreign() / float64(rounds)
	}
	p.Requests, p.Seconds = total, wall.Seconds()
	p.Rate = float64(total) / p.Seconds
	p.DispatcherUs = cpu.Seconds() * 1e6 / float64(total)
	p.ForeignCPU = foreign
	p.ReportsPerRequest = float64(reports) / float64(total)
	return p
}

// profile fetches a 3-second CPU profile of the dispatcher in the
// background, into cpu-curve-<name>-<x>.pprof; the channel closes when done.
// In --quick it does nothing.
func (b *bench) profile(s *system, p *curvePoint, name string) chan struct{} {
	if b.opt.quick { // quick stays quick: no profiles
		done := make(chan struct{})
		close(done)
		return done
	}
	file := fmt.Sprintf("cpu-curve-%s-%d.pprof", name, p.X)
	return b.dispatcherProfile(s, file, 3, func(saved bool) {
		if saved {
			p.Profile = file
		}
	})
}

// dispatcherProfile fetches a CPU profile of s's dispatcher over seconds in
// the background, into file in the output directory, then calls after with
// whether it was saved; the channel closes when done.
func (b *bench) dispatcherProfile(s *system, file string, seconds int, after func(saved bool)) chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		err := fetch("http://"+s.admin+"/debug/pprof/profile?seconds="+strconv.Itoa(seconds), filepath.Join(b.opt.out, file))
		if err != nil {
			b.logf("profile %s: %v", file, err)
		}
		after(err == nil)
	}()
	return done
}

// fleet is many workers of one rank each, simulated on a few connections: a
// queue subscription to <prefix>.work.* answers every dispatch (accept at
// once, then +ACK), and a loop publishes each id's load report after it
// received dispatches (every 5 ms at most) and every TTL/3.
type fleet struct {
	conns    []*nats.Conn
	ids      []string
	instance string
	busy     atomic.Bool  // reports a prefill load above every threshold
	reports  atomic.Int64 // load reports published
	mu       sync.Mutex
	seen     map[string]uint64
	dirty    map[string]struct{}
	quit     chan struct{}
	done     chan struct{}
	b        *bench
}

const fleetTTL = 3 * time.Second

func (b *bench) startFleet(n int, busy bool) (*fleet, error) {
	conns, err := b.connect("bench-fleet", 2)
	if err != nil {
		return nil, err
	}
	var inst [8]byte
	_, _ = rand.Read(inst[:])
	f := &fleet{conns: conns, instance: hex.EncodeToString(inst[:]), seen: map[string]uint64{},
		dirty: map[string]struct{}{}, quit: make(chan struct{}), done: make(chan struct{}), b: b}
	f.busy.Store(busy)
	for i := range n {
		f.ids = append(f.ids, workerID(i))
	}
	prefix := b.opt.names.Work("")
	for _, nc := range conns {
		sub, err := nc.QueueSubscribe(b.opt.names.Work("*"), "fleet", func(m *nats.Msg) {
			id := strings.TrimPrefix(m.Subject, prefix)
			b.acceptDispatch(nc, m, "fleet")
			seq, _ := strconv.ParseUint(m.Header.Get(wire.HeaderSeq), 10, 64)
			f.mu.Lock()
			if seq > f.seen[id] {
				f.seen[id] = seq
			}
			f.dirty[id] = struct{}{}
			f.mu.Unlock()
		})
		if err == nil {
			err = sub.SetPendingLimits(-1, -1)
		}
		if err != nil {
			closeAll(conns)
			return nil, err
		}
	}
	for _, id := range f.ids {
		if err := f.report(id); err != nil {
			closeAll(conns)
			return nil, err
		}
	}
	go f.loop()
	return f, flushAll(conns)
}

// report publishes id's load report.
func (f *fleet) report(id string) error {
	f.mu.Lock()
	seen := f.seen[id]
	f.mu.Unlock()
	var load uint64
	if f.busy.Load() {
		load = 2_000_000_000_000
	}
	rep := workerkit.Report{WorkerID: id, DPSize: 1, TTLMs: fleetTTL.Milliseconds(), Instance: f.instance, SeenSeq: seen,
		Ranks: []workerkit.RankReport{{DPRank: 0, ActivePrefillTokens: load}}}
	data, err := json.Marshal(rep)
	if err != nil {
		return err
	}
	f.reports.Add(1)
	return f.conns[0].Publish(f.b.opt.names.Load(id), data)
}

// setBusy changes the load the fleet reports, and reports it at once.
func (f *fleet) setBusy(busy bool) {
	f.busy.Store(busy)
	for _, id := range f.ids {
		if err := f.report(id); err != nil {
			f.b.logf("fleet report: %v", err)
		}
	}
}

func (f *fleet) loop() {
	defer close(f.done)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	all := time.Now()
	var ids []string
	for {
		select {
		case <-f.quit:
			return
		case <-tick.C:
		}
		ids = ids[:0]
		if time.Since(all) >= fleetTTL/3 {
			all = time.Now()
			ids = append(ids, f.ids...)
			f.mu.Lock()
			clear(f.dirty)
			f.mu.Unlock()
		} else {
			f.mu.Lock()
			for id := range f.dirty {
				ids = append(ids, id)
			}
			clear(f.dirty)
			f.mu.Unlock()
		}
		for _, id := range ids {
			if err := f.report(id); err != nil {
				f.b.logf("fleet report: %v", err)
				break
			}
		}
	}
}

func (f *fleet) stop() {
	close(f.quit)
	<-f.done
	closeAll(f.conns)
}

// curveChart draws a curve: throughput (left) and the dispatcher's CPU per
// request (scaled onto the same axis as a share of its smallest point) against x, log scale.
func curveChart(path string, c curve) error {
	p := plot.New()
	p.Title.Text = fmt.Sprintf("fairdispatch against %s (CPU per request grew %.2fx; goal <= %.1fx)", c.XLabel, c.Growth, curveGrowthGoal)
	p.X.Label.Text = c.XLabel + " (log scale)"
	p.Y.Label.Text = "relative to the smallest point"
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	p.Add(plotter.NewGrid())
	var rate, cpu plotter.XYs
	for _, pt := range c.Points {
		if pt.Error != "" || len(c.Points) == 0 || c.Points[0].Rate == 0 || c.Points[0].DispatcherUs == 0 {
			continue
		}
		rate = append(rate, plotter.XY{X: float64(pt.X), Y: pt.Rate / c.Points[0].Rate})
		cpu = append(cpu, plotter.XY{X: float64(pt.X), Y: pt.DispatcherUs / c.Points[0].DispatcherUs})
	}
	for _, l := range []struct {
		name string
		pts  plotter.XYs
		col  color.Color
	}{
		{"throughput", rate, color.RGBA{R: 30, G: 90, B: 200, A: 255}},
		{"dispatcher CPU per request", cpu, color.RGBA{R: 200, G: 60, B: 30, A: 255}},
	} {
		if len(l.pts) == 0 {
			continue
		}
		line, points, err := plotter.NewLinePoints(l.pts)
		if err != nil {
			return err
		}
		line.Color, points.Color = l.col, l.col
		line.Width = vg.Points(1.5)
		p.Add(line, points)
		p.Legend.Add(l.name, line)
	}
	goal, err := plotter.NewLine(plotter.XYs{{X: float64(c.Points[0].X), Y: curveGrowthGoal},
		{X: float64(c.Points[len(c.Points)-1].X), Y: curveGrowthGoal}})
	if err != nil {
		return err
	}
	goal.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
	p.Add(goal)
	p.Legend.Add("goal for CPU per request", goal)
	p.Legend.Left = true
	p.Y.Min = 0
	return p.Save(8*vg.Inch, 5*vg.Inch, path)
}

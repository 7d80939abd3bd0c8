package main

import (
	"fmt"
	"strings"
)

// results is everything one bench run measured; bench.json holds it.
type results struct {
	Command       string        `json:"command"`
	Started       string        `json:"started"`
	Seconds       float64       `json:"run_seconds"`
	CPUs          int           `json:"cpus"`
	GoVersion     string        `json:"go_version"`
	Requests      int           `json:"requests"`
	Workers       int           `json:"workers"`
	DirectWorkers int           `json:"direct_workers"`
	BodyBytes     int           `json:"body_bytes"`
	Window        int           `json:"publish_window"`
	Cluster       int           `json:"nats_cluster,omitempty"` // servers, and stream replicas; 0: one server
	Systems       []sysResult   `json:"systems"`
	Memory        *memResult    `json:"fairdispatch_memory,omitempty"`
	Bursts        []burstResult `json:"bursts"`
	ChartFile     string        `json:"chart,omitempty"`
	Curves        []curve       `json:"curves,omitempty"`
	Idle          []idlePoint   `json:"idle_capacity,omitempty"`
	Stale         int64         `json:"stale_acceptances"`
}

func ratio(x, base float64) string {
	if base == 0 || x == 0 {
		return "–"
	}
	return fmt.Sprintf("%.2f", x/base)
}

func f0(x float64) string { return fmt.Sprintf("%.0f", x) }
func f1(x float64) string { return fmt.Sprintf("%.1f", x) }
func f2(x float64) string { return fmt.Sprintf("%.2f", x) }

// markdown renders the results as the tables of bench.md.
func (r *results) markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "Run: `%s`, %s, %d CPUs, %s; %.0f s in all.\n", r.Command, r.Started, r.CPUs, r.GoVersion, r.Seconds)
	fmt.Fprintf(&b, "%d requests per throughput run (%d-byte bodies, Dispatch-ISL-Tokens 512, published async with a window of %d); "+
		"latency runs publish half as many at half of the system's own throughput. %d workers behind the bare pipe and fairdispatch, %d on the direct work queue.\n\n",
		r.Requests, r.BodyBytes, r.Window, r.Workers, r.DirectWorkers)
	if r.Cluster > 0 {
		fmt.Fprintf(&b, "On a cluster of %d NATS servers in one process (the server column is all of their CPU), every stream R%d, every client on n0, "+
			"where the request stream's and its consumers' leaders were placed.\n\n", r.Cluster, r.Cluster)
	}

	var bare *sysResult
	for i := range r.Systems {
		if r.Systems[i].System == sysBare {
			bare = &r.Systems[i]
		}
	}
	base := func(f func(*sysResult) float64) float64 {
		if bare == nil || bare.Error != "" {
			return 0
		}
		return f(bare)
	}
	rate := func(s *sysResult) float64 { return s.Throughput.Rate }
	cpu := func(s *sysResult) float64 { return s.CPU.Total }

	b.WriteString("| system | requests/s | × bare | CPU s per 100k: total | × bare | server | forwarder / dispatcher | bench process | p50 ms | p99 ms | p99.9 ms | latency run at req/s | longest gap ms (throughput / latency run) | other processes' CPU |\n")
	b.WriteString("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for i := range r.Systems {
		s := &r.Systems[i]
		mid := f2(s.CPU.Middle)
		if s.System == sysDirect {
			mid = "–"
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s / %s | %.0f%% |\n",
			s.System, f0(s.Throughput.Rate), ratio(rate(s), base(rate)),
			f2(s.CPU.Total), ratio(cpu(s), base(cpu)), f2(s.CPU.Server), mid, f2(s.CPU.Bench),
			f1(s.Latency.P50Ms), f1(s.Latency.P99Ms), f1(s.Latency.P999Ms), f0(s.Latency.Rate),
			f0(s.Throughput.MaxGapMs), f0(s.Latency.MaxGapMs), 100*s.ForeignCPU)
	}
	for _, s := range r.Systems {
		if s.Error != "" {
			fmt.Fprintf(&b, "\n**%s failed:** %s\n", s.System, s.Error)
		}
		if d := s.Throughput.Duplicates + s.Latency.Duplicates; d > 0 {
			fmt.Fprintf(&b, "\n%s: %d requests were accepted twice.\n", s.System, d)
		}
	}
	b.WriteString("\n")
	for _, s := range r.Systems {
		if strings.HasPrefix(s.System, sysFair) && s.Error == "" {
			fmt.Fprintf(&b, "%s: the workers published %.2f messages per request (answer, +ACK, and %.0f load reports/s in all).\n",
				s.System, s.WorkerMsgsPerRequest, s.LoadReportsPerSecond)
			if t := s.Latency.Tail; t != nil {
				fmt.Fprintf(&b, "\nWhere fairdispatch's latency tail went (latency run; the %d requests at or above p99, split by `Dispatch-Queued-Ms`, "+
					"the dispatcher's milliseconds from publication to its send): median %.0f ms before the send and %.1f ms after it "+
					"(every request: %.0f and %.1f); %.0f%% of the tail's time was before the send, the slowest %.0f ms. "+
					"Before the send is JetStream's delivery to the dispatcher and its queue; after is the handshake's trip and the worker's turn.\n",
					t.Requests, t.BeforeSendMs, t.AfterSendMs, t.AllBeforeMs, t.AllAfterMs, 100*t.BeforeShare, t.SlowestBefore)
			}
		}
	}
	if m := r.Memory; m != nil {
		if m.Error != "" {
			fmt.Fprintf(&b, "\n**memory test failed:** %s\n", m.Error)
		} else {
			fmt.Fprintf(&b, "\nfairdispatch holding %d queued requests of %d-byte bodies, per held request beyond the body: "+
				"**%.0f bytes of live heap** (heap in use after a collection: %.1f MiB idle, %.1f MiB held); "+
				"VmRSS %.0f bytes (%.1f MiB idle, %.1f MiB held) and heap in use %.0f bytes before that collection; filled in %.1f s.\n",
				m.Held, m.BodyBytes, m.LivePerReq, m.LiveIdle/(1<<20), m.LiveHeld/(1<<20),
				m.PerRequest, float64(m.RSSIdle)/(1<<20), float64(m.RSSHeld)/(1<<20), m.HeapPerReq, m.FillSeconds)
			if m.StopSeconds > 0 {
				fmt.Fprintf(&b, "It then took %.1f s to stop on SIGTERM (the bench kills it at 15 s).\n", m.StopSeconds)
			}
		}
	}
	if len(r.Bursts) > 0 {
		fmt.Fprintf(&b, "\nSeed burst (%d premium + %d regular alternating, %d tokens, one worker running %d sequences; DRR quanta 512:128 ideally give premium %d of the first %d):\n\n",
			burstPerClass, burstPerClass, burstISL, burstSeqs, burstPerClass*4/5, burstPerClass)
		fmt.Fprintf(&b, "| system | premium of the first %d completions | completed | last completion s |\n|---|---:|---:|---:|\n", burstPerClass)
		for _, x := range r.Bursts {
			fmt.Fprintf(&b, "| %s | %d (%.0f%%) | %d | %.2f |\n", x.System, x.PremiumOfFirst,
				100*float64(x.PremiumOfFirst)/burstPerClass, x.Completed, x.Seconds)
			if x.Error != "" {
				fmt.Fprintf(&b, "\n**%s burst failed:** %s\n", x.System, x.Error)
			}
		}
	}
	if r.ChartFile != "" {
		fmt.Fprintf(&b, "\nChart of the bursts' completions over time: %s\n", r.ChartFile)
	}
	if len(r.Idle) > 0 {
		fmt.Fprintf(&b, "\nIdle capacity against service time (fairdispatch, configs/policy-classes.yaml, one mock engine of %d sequences, a backlog of one class; goal: under 5%% at 50 ms):\n\n", burstSeqs)
		b.WriteString("| service ms | requests | seconds | idle share of the sequences' time |\n|---:|---:|---:|---:|\n")
		for _, p := range r.Idle {
			if p.Error != "" {
				fmt.Fprintf(&b, "| %.0f | failed: %s | | |\n", p.ServiceMs, p.Error)
				continue
			}
			fmt.Fprintf(&b, "| %.0f | %d | %.2f | %.1f%% |\n", p.ServiceMs, p.Requests, p.Seconds, 100*p.Idle)
		}
	}
	for _, c := range r.Curves {
		fmt.Fprintf(&b, "\nCurve against %s (fairdispatch behind one fleet process answering for every worker id; goal: the dispatcher's CPU per request grows at most %.1fx):\n\n", c.XLabel, curveGrowthGoal)
		fmt.Fprintf(&b, "| %s | requests | requests/s | dispatcher CPU µs per request | load reports per request | other processes' CPU |\n|---:|---:|---:|---:|---:|---:|\n", c.XLabel)
		for _, p := range c.Points {
			if p.Error != "" {
				fmt.Fprintf(&b, "| %d | failed: %s | | | | |\n", p.X, p.Error)
				continue
			}
			fmt.Fprintf(&b, "| %d | %d | %s | %s | %s | %.0f%% |\n", p.X, p.Requests, f0(p.Rate), f1(p.DispatcherUs), f2(p.ReportsPerRequest), 100*p.ForeignCPU)
		}
		met := "not met"
		if c.Met {
			met = "met"
		}
		fmt.Fprintf(&b, "\nCPU per request grew %.2fx from the smallest point to the largest: %s. Chart: %s\n", c.Growth, met, c.Chart)
	}
	if r.Stale > 0 {
		fmt.Fprintf(&b, "\n%d acceptances belonged to no current run (stale deliveries).\n", r.Stale)
	}
	return b.String()
}

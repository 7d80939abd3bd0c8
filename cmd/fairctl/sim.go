package main

import (
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"fairdispatch/configs"
	"fairdispatch/sim"
)

func init() {
	commands["sim"] = command{
		summary: "dry-run a policy on recorded or generated traffic (docs/operations.md, Recording traffic and fairctl sim)",
		run:     runSim,
	}
}

// simFlags are fairctl sim's flags.
type simFlags struct {
	policy, baseline, trace, chart string
	traceStream                    bool
	seed                           uint64
	first                          int
	// fleet
	workers, ranks int
	rate           float64
	decode         time.Duration
	maxBatched     uint64
	// generated workload
	generate, mix   string
	genRate         float64
	duration, burst time.Duration
	keys            int
	zipf            float64
	isl, islMax     uint64
}

// simReport is fairctl sim's result, printed as a table or as JSON.
type simReport struct {
	Source   string `json:"source"` // the trace file, or "generated"
	Arrivals int    `json:"arrivals"`
	// Redelivered are arrivals of a request still waiting, left out
	// (sim.Trace.Redelivered); omitted when none.
	Redelivered int         `json:"redelivered,omitempty"`
	Fleet       sim.Fleet   `json:"fleet"`
	Recorded    *sim.Stats  `json:"recorded,omitempty"` // what the trace recorded
	Current     *sim.Stats  `json:"current,omitempty"`  // simulated under the current (baseline) policy
	Proposed    sim.Stats   `json:"proposed"`           // simulated under --policy
	runs        [2]*sim.Run // current, proposed: for the chart
}

func runSim(ctx context.Context, g *globals, args []string) error {
	var f simFlags
	fs := g.flagSet("fairctl sim")
	fs.StringVar(&f.policy, "policy", "", "the proposed policy file (required)")
	fs.StringVar(&f.trace, "trace", "", "a trace file recorded with the dispatcher's --record (docs/protocol.md, Trace records)")
	fs.BoolVar(&f.traceStream, "trace-stream", false, "read the trace from the stream <Q>_TRACE (the dispatcher's --record-stream) instead of a file")
	fs.StringVar(&f.baseline, "baseline", "", "the current policy file to compare with (default: the trace header's policy)")
	fs.StringVar(&f.chart, "chart", "", "write a PNG chart of cumulative service per class over time to this file")
	fs.Uint64Var(&f.seed, "seed", 1, "seed of the generated workload and of the scheduler's tie-breaking")
	fs.IntVar(&f.first, "first", 0, "count each class among the first N completions (0: half the arrivals)")
	fs.IntVar(&f.workers, "workers", 0, "model this many alike workers (0: derive the fleet from the trace)")
	fs.IntVar(&f.ranks, "ranks", 1, "with --workers: data-parallel ranks per worker")
	fs.Float64Var(&f.rate, "service-rate", 20000, "with --workers, or for a worker the trace cannot time: prefill throughput of one rank, uncached tokens per second")
	fs.DurationVar(&f.decode, "decode", 0, "time each request decodes after its prefill")
	fs.Uint64Var(&f.maxBatched, "max-batched-tokens", 0, "max_num_batched_tokens the modelled workers report (needed by *_frac thresholds)")
	fs.StringVar(&f.generate, "generate", "", "generate the workload instead of reading a trace: poisson or bursty")
	fs.StringVar(&f.mix, "mix", "", "with --generate: class tokens and their parts, e.g. premium:1,regular:3 (default: every class of --policy, alike)")
	fs.Float64Var(&f.genRate, "rate", 100, "with --generate: requests per second")
	fs.DurationVar(&f.duration, "duration", 10*time.Second, "with --generate: how long arrivals come")
	fs.DurationVar(&f.burst, "burst-period", time.Second, "with --generate bursty: the requests of each period arrive at once")
	fs.IntVar(&f.keys, "keys", 0, "with --generate: fairness keys per class (0: none)")
	fs.Float64Var(&f.zipf, "zipf", 1, "with --generate: Zipf exponent of the keys' popularity (0: uniform)")
	fs.Uint64Var(&f.isl, "isl", 512, "with --generate: input tokens per request")
	fs.Uint64Var(&f.islMax, "isl-max", 0, "with --generate: if above --isl, input tokens are uniform in [--isl, --isl-max]")
	if err := g.parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageError("unexpected arguments %q", fs.Args())
	}
	var tr *sim.Trace
	if f.policy == "" {
		return usageError("--policy is required")
	}
	if f.traceStream {
		if f.trace != "" {
			return usageError("give one of --trace and --trace-stream")
		}
		var err error
		if tr, err = readTraceStream(ctx, g); err != nil {
			return err
		}
		f.trace = g.names.TraceStream()
	}
	rep, err := simulate(&f, tr)
	if err != nil {
		return err
	}
	if f.chart != "" {
		if err := simChart(f.chart, rep); err != nil {
			return fmt.Errorf("--chart: %w", err)
		}
	}
	if g.json {
		enc := json.NewEncoder(g.stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	printSim(g.stdout, rep)
	return nil
}

// simulate runs the dry-run f describes.
// tr is the trace already read (--trace-stream), or nil to read f.trace.
func simulate(f *simFlags, tr *sim.Trace) (*simReport, error) {
	if f.policy == "" {
		return nil, usageError("--policy is required")
	}
	if (f.trace == "") == (f.generate == "") {
		return nil, usageError("give exactly one of --trace and --generate")
	}
	proposed, err := configs.Load(f.policy)
	if err != nil {
		return nil, fmt.Errorf("--policy: %w", err)
	}
	var current *configs.Policy
	if f.baseline != "" {
		if current, err = configs.Load(f.baseline); err != nil {
			return nil, fmt.Errorf("--baseline: %w", err)
		}
	}
	rep := &simReport{}
	var arrivals []sim.Arrival
	var recorded *configs.Policy // the policy the trace ran under, to measure it with
	if f.trace != "" {
		if tr == nil {
			if tr, err = readTrace(f.trace); err != nil {
				return nil, err
			}
		}
		if tr.Policy != "" {
			if recorded, err = configs.Parse(f.trace+" (header policy)", []byte(tr.Policy)); err != nil {
				return nil, err
			}
		}
		if current == nil {
			current = recorded
		}
		if recorded == nil {
			recorded = current // a trace of a flag-built policy: --baseline stands for it
		}
		arrivals, rep.Source, rep.Redelivered = tr.Arrivals, f.trace, tr.Redelivered
	} else {
		w := sim.Workload{Kind: f.generate, Rate: f.genRate, Duration: f.duration, BurstPeriod: f.burst, ISL: f.isl, ISLMax: f.islMax,
			Keys: f.keys, Zipf: f.zipf, Seed: f.seed, Start: 1_700_000_000e9}
		if w.Mix, err = parseMix(f.mix, proposed); err != nil {
			return nil, err
		}
		if arrivals, err = sim.Generate(w); err != nil {
			return nil, usageError("%v", err)
		}
		rep.Source = "generated " + f.generate
	}
	rep.Arrivals = len(arrivals)
	if f.workers > 0 && f.ranks < 1 {
		return nil, usageError("--ranks %d: want >= 1", f.ranks)
	}
	if !(f.rate > 0) {
		return nil, usageError("--service-rate %v: want > 0", f.rate)
	}
	if f.first < 0 {
		return nil, usageError("--first %d: want >= 0 (0: half the arrivals)", f.first)
	}
	switch {
	case f.workers > 0:
		start := int64(0)
		if len(arrivals) > 0 {
			start = arrivals[0].T
		}
		rep.Fleet = sim.Uniform(f.workers, f.ranks, f.rate, f.decode, f.maxBatched, start)
	case tr != nil:
		if rep.Fleet, err = sim.FromTrace(tr, f.rate, f.decode, f.maxBatched); err != nil {
			return nil, err
		}
	default:
		return nil, usageError("--generate needs --workers")
	}
	first := f.first
	if first == 0 {
		first = len(arrivals) / 2
	}
	one := func(pol *configs.Policy) (*sim.Run, sim.Stats, error) {
		run, err := sim.Simulate(sim.Config{Policy: pol, Fleet: rep.Fleet, Seed: f.seed}, arrivals)
		if err != nil {
			return nil, sim.Stats{}, err
		}
		return run, sim.Analyze(run, pol, first), nil
	}
	var st sim.Stats
	if rep.runs[1], st, err = one(proposed); err != nil {
		return nil, err
	}
	rep.Proposed = st
	if current != nil {
		if rep.runs[0], st, err = one(current); err != nil {
			return nil, err
		}
		rep.Current = &st
		if tr != nil {
			rec := sim.Analyze(tr.Recorded(), recorded, 0)
			rep.Recorded = &rec
		}
	}
	return rep, nil
}

// readTrace reads the trace file at path, gunzipped if its name ends in .gz.
func readTrace(path string) (*sim.Trace, error) {
	file, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer file.Close()
	var r io.Reader = file
	if strings.HasSuffix(path, ".gz") {
		zr, err := gzip.NewReader(file)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		defer zr.Close()
		r = zr
	}
	tr, err := sim.ReadTrace(r)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return tr, nil
}

// parseMix parses --mix; empty: every class of pol by the token that selects
// it (its family, or its name for an explicit class), alike.
func parseMix(s string, pol *configs.Policy) ([]sim.Mix, error) {
	var mix []sim.Mix
	if s == "" {
		for _, c := range pol.Classes {
			tok := c.Family
			if tok == "" {
				tok = c.Name
			}
			if !slices.ContainsFunc(mix, func(m sim.Mix) bool { return m.Token == tok }) {
				mix = append(mix, sim.Mix{Token: tok, Weight: 1})
			}
		}
		return mix, nil
	}
	for _, part := range strings.Split(s, ",") {
		tok, w, ok := strings.Cut(part, ":")
		wt, err := strconv.ParseFloat(w, 64)
		if !ok || err != nil || !(wt > 0) || tok == "" {
			return nil, usageError("--mix %q: want token:part,... with parts > 0", s)
		}
		if !pol.Known(tok) {
			// The dispatcher would send it to the default family: most
			// likely a typo, which would make the whole simulation wrong.
			return nil, usageError("--mix %q: %q names no class or family of the policy (%s); the default family's is %q",
				s, tok, strings.Join(knownTokens(pol), ", "), pol.DefaultFamily)
		}
		mix = append(mix, sim.Mix{Token: tok, Weight: wt})
	}
	return mix, nil
}

// knownTokens returns the subject tokens pol resolves by name: its
// families and its explicit classes, sorted.
func knownTokens(pol *configs.Policy) []string {
	var out []string
	for _, c := range pol.Classes {
		tok := c.Family
		if tok == "" {
			tok = c.Name
		}
		if !slices.Contains(out, tok) {
			out = append(out, tok)
		}
	}
	slices.Sort(out)
	return out
}

// maxKeyRows is how many keys of a class the table shows, the busiest first.
const maxKeyRows = 10

// printSim prints rep as a table: per class (and key), side by side the
// recorded run, the simulated current policy and the simulated proposed one.
func printSim(w io.Writer, rep *simReport) {
	fmt.Fprintf(w, "%s: %d arrivals", rep.Source, rep.Arrivals)
	if rep.Redelivered > 0 {
		fmt.Fprintf(w, " (and %d taken in again after a restart while waiting, counted once)", rep.Redelivered)
	}
	fmt.Fprint(w, "; fleet:")
	for _, ws := range rep.Fleet {
		fmt.Fprintf(w, " %s (%d rank(s), %.0f tokens/s per rank)", ws.ID, ws.Ranks, ws.Rate)
	}
	fmt.Fprintln(w)
	type col struct {
		name string
		st   *sim.Stats
	}
	cols := []col{}
	if rep.Recorded != nil {
		cols = append(cols, col{"recorded", rep.Recorded})
	}
	if rep.Current != nil {
		cols = append(cols, col{"current", rep.Current})
	}
	cols = append(cols, col{"proposed", &rep.Proposed})
	var names []string
	for _, c := range cols {
		for _, cs := range c.st.Classes {
			if !slices.Contains(names, cs.Name) {
				names = append(names, cs.Name)
			}
		}
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	head := "class\tkey\t"
	for _, c := range cols {
		head += fmt.Sprintf("%s weight\tshare\tp50 ms\tp99 ms\t", c.name)
		if c.st.FirstN > 0 {
			head += fmt.Sprintf("first %d\t", c.st.FirstN)
		}
	}
	fmt.Fprintln(tw, head)
	row := func(class, key string) {
		line := class + "\t" + key + "\t"
		for _, c := range cols {
			cs := c.st.Class(class)
			switch {
			case cs == nil:
				line += "-\t-\t-\t-\t"
			case key == "":
				line += fmt.Sprintf("%.3f\t%.3f\t%.1f\t%.1f\t", cs.Weight, cs.Share, cs.WaitP50Ms, cs.WaitP99Ms)
			default:
				i := slices.IndexFunc(cs.Keys, func(k sim.KeyStats) bool { return k.Key == key })
				if i < 0 {
					line += "-\t-\t-\t-\t"
				} else {
					k := cs.Keys[i]
					line += fmt.Sprintf("-\t%.3f\t%.1f\t%.1f\t", k.Share, k.WaitP50Ms, k.WaitP99Ms)
				}
			}
			if c.st.FirstN > 0 {
				if cs != nil && key == "" {
					line += strconv.Itoa(cs.FirstN) + "\t"
				} else {
					line += "-\t"
				}
			}
		}
		fmt.Fprintln(tw, line)
	}
	var more []string
	for _, n := range names {
		row(n, "")
		if cs := rep.Proposed.Class(n); cs != nil && !(len(cs.Keys) == 1 && cs.Keys[0].Key == "_") {
			keys := slices.Clone(cs.Keys)
			slices.SortStableFunc(keys, func(a, b sim.KeyStats) int { return b.Arrived - a.Arrived })
			for _, k := range keys[:min(len(keys), maxKeyRows)] {
				row(n, k.Key)
			}
			if len(keys) > maxKeyRows {
				more = append(more, fmt.Sprintf("%s: %d more keys", n, len(keys)-maxKeyRows))
			}
		}
	}
	_ = tw.Flush()
	if len(more) > 0 {
		fmt.Fprintf(w, "(the %d busiest keys of a class are shown; %s: --json lists every one)\n", maxKeyRows, strings.Join(more, ", "))
	}
	jain := "Jain's index over classes (share/weight):"
	for _, c := range cols {
		jain += fmt.Sprintf(" %s %.3f", c.name, c.st.Jain)
	}
	fmt.Fprintln(w, jain)
	for _, n := range names {
		if cs := rep.Proposed.Class(n); cs == nil || len(cs.Keys) < 2 {
			continue
		}
		line := fmt.Sprintf("Jain's index over the keys of %s:", n)
		for _, c := range cols {
			if cs := c.st.Class(n); cs != nil {
				line += fmt.Sprintf(" %s %.3f", c.name, cs.KeyJain)
			}
		}
		fmt.Fprintln(w, line)
	}
	switch {
	case rep.Current != nil:
	case strings.HasPrefix(rep.Source, "generated"):
		fmt.Fprintln(w, "no current policy to compare with (give --baseline FILE)")
	default:
		fmt.Fprintln(w, "no current policy to compare with: the trace's dispatcher ran the policy built from its flags (give --baseline FILE)")
	}
	if !rep.Proposed.Contended {
		fmt.Fprintln(w, "no two classes were ever backlogged at once: every class got what it asked; shares are not meaningful")
	}
}

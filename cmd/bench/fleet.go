package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"fairdispatch/bus"
	"fairdispatch/loadgen"
	"fairdispatch/mockworker"
	"fairdispatch/mockworker/batching"
)

// The fleet replay (issue 27, docs/bench.md, What it buys a fleet): the
// Mooncake trace against a fleet of batched mock engines (mockworker/
// batching, Llama-3.3-70B on 2x H100 as NIM serves it, time compressed),
// behind each of the systems below in turn, at three loads.

// fleetSystem is one system of the fleet replay.
type fleetSystem struct {
	key, name string
	router    string // a baseline router's policy; "" for fairdispatch
	kvIndex   bool   // fairdispatch: --kv-index
	keys      bool   // requests carry their tenant as Dispatch-Fairness-Key
}

// outcomeWait is loadgen's OutcomeWait behind sys: a baseline router
// publishes no outcomes, so there is none to wait for.
func outcomeWait(sys fleetSystem) time.Duration {
	if sys.router != "" {
		return -1
	}
	return 0
}

var fleetSystems = []fleetSystem{
	{key: "rr", name: "round robin", router: policyRR, keys: true},
	{key: "ll", name: "least loaded", router: policyLL, keys: true},
	{key: "kv", name: "cache-aware, no queue", router: policyKV, keys: true},
	{key: "fair", name: "fairdispatch", kvIndex: true, keys: true},
	{key: "fair-nokv", name: "fairdispatch, no KV index", keys: true},
	{key: "fair-nokeys", name: "fairdispatch, no tenants", kvIndex: true},
	{key: "fair-nokv-nokeys", name: "fairdispatch, no KV index, no tenants"},
}

// fleetTenants are the tenants of the replay: each conversation (the
// requests sharing their first block) belongs to one, a heavy one with 40%
// of the conversations down to a light one with 10%, all of weight 1.
var fleetTenants = []loadgen.TraceTenant{{Key: "t1", Share: 4}, {Key: "t2", Share: 3}, {Key: "t3", Share: 2}, {Key: "t4", Share: 1}}

// fleetClass is the one class of the replay (the trace has none).
const fleetClass = "chat"

// fleetPolicy is fairdispatch's policy for the replay: one class, its
// tenants as fairness keys of weight 1, queueing in the dispatcher once
// every engine has busy tokens of prefill to do (--fleet-busy-tokens).
func fleetPolicy(busy int) string {
	return fmt.Sprintf(`default_policy_family: chat
uncached_isl_buckets:
  - min_tokens: 0
    bucket: all
policy_classes:
  - name: chat
    policy_family: chat
    cache_bucket: all
    queue_policy: fcfs
    quantum: 8192
    prefill_busy_threshold: %d
    default_key_weight: 1
`, busy)
}

// fleetOptions are the fleet replay's flags.
type fleetOptions struct {
	trace    string
	engines  int
	speedup  float64
	loads    []float64
	systems  []fleetSystem
	requests int
	capacity float64 // requests per trace second; 0 measures it
	timeout  time.Duration
	fairArgs string // more dispatcher flags, for experiments
	busy     int    // fairdispatch's prefill_busy_threshold
	dump     bool   // write every run's completions to --out
}

func (o *fleetOptions) flags(fs *flag.FlagSet, loads, systems *string) {
	fs.StringVar(&o.trace, "fleet-trace", "", "the trace (default: shared/traces/mooncake-synthetic.jsonl.gz beside the repository, loadgen.FindTrace)")
	fs.IntVar(&o.engines, "fleet-engines", 8, "mock engines in the fleet")
	fs.Float64Var(&o.speedup, "fleet-speedup", 70, "time compression of the engines (and of the trace at its own rate)")
	fs.StringVar(loads, "fleet-loads", "0.5,0.8,1.1", "loads, as fractions of the fleet's measured capacity")
	fs.StringVar(systems, "fleet-systems", "all", "systems: all, or a comma-separated subset of rr,ll,kv,fair,fair-nokv,fair-nokeys,fair-nokv-nokeys")
	fs.IntVar(&o.requests, "fleet-requests", 0, "replay only the first N requests of the trace (0: all)")
	fs.Float64Var(&o.capacity, "fleet-capacity", 0, "the fleet's capacity in trace requests per second (0: measure it)")
	fs.DurationVar(&o.timeout, "fleet-timeout", 5*time.Minute, "bound of one replay")
	fs.IntVar(&o.busy, "fleet-busy-tokens", 16384, "fairdispatch's prefill_busy_threshold: it queues once every engine has this many prefill tokens to do")
	fs.BoolVar(&o.dump, "fleet-dump", false, "also write each replay's completions (loadgen.Completion, JSON lines) to --out as completions-<system>-<load>.jsonl, for analysis")
	fs.StringVar(&o.fairArgs, "fleet-fair-args", "", "more flags for fairdispatch's dispatcher, space-separated (experiments: the table is then not the documented one)")
}

func (o *fleetOptions) parse(loads, systems string) error {
	o.loads = nil
	for _, s := range strings.Split(loads, ",") {
		v, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
		if err != nil || !(v > 0) {
			return fmt.Errorf("--fleet-loads %q: want positive fractions", loads)
		}
		o.loads = append(o.loads, v)
	}
	o.systems = nil
	asked := map[string]bool{}
	if systems != "all" {
		for _, k := range strings.Split(systems, ",") {
			asked[strings.TrimSpace(k)] = true
		}
	}
	var keys []string
	for _, s := range fleetSystems {
		keys = append(keys, s.key)
		if systems == "all" || asked[s.key] {
			o.systems = append(o.systems, s)
			delete(asked, s.key)
		}
	}
	for k := range asked {
		return fmt.Errorf("--fleet-systems %q: no system %q (want all, or some of %s)", systems, k, strings.Join(keys, ","))
	}
	switch {
	case len(o.systems) == 0:
		return fmt.Errorf("--fleet-systems %q: none known", systems)
	case o.engines < 1 || o.engines > maxRouterWorkers:
		return fmt.Errorf("--fleet-engines %d: want 1 to %d", o.engines, maxRouterWorkers)
	case !(o.speedup > 0):
		return fmt.Errorf("--fleet-speedup: want > 0")
	}
	return nil
}

// fleetRun is one system's replay at one load.
type fleetRun struct {
	System string  `json:"system"`
	Key    string  `json:"key"`
	Load   float64 `json:"load"`
	// Speedup is the trace's time compression in this run: the engines'
	// (fleetResults.Speedup) times the rate over the trace's own.
	Speedup float64      `json:"trace_speedup"`
	Seconds float64      `json:"seconds"`
	Metrics fleetMetrics `json:"metrics"`
	// Other is the share of the machine's CPU other processes used.
	Other float64 `json:"other_processes_cpu"`
	// Steps counts the engines' steps.
	Steps uint64 `json:"engine_steps"`
	// Duplicates counts second completions of a request (it ran twice),
	// Rejected the requests rejected, and RouterRetries the dispatches a
	// baseline router placed again (refused, or unanswered in its
	// handshake timeout): each is 0 in a run whose figures compare.
	Duplicates    int    `json:"duplicates"`
	Rejected      int    `json:"rejected"`
	RouterRetries int    `json:"router_retries"`
	Error         string `json:"error,omitempty"`
}

// fleetResults is the whole fleet replay.
type fleetResults struct {
	Command   string  `json:"command"`
	Started   string  `json:"started"`
	Seconds   float64 `json:"seconds"`
	Model     string  `json:"model"`
	Engines   int     `json:"engines"`
	Speedup   float64 `json:"engine_speedup"`
	Requests  int     `json:"requests"`
	TraceRate float64 `json:"trace_requests_per_s"`
	Ideal     float64 `json:"ideal_hit_rate"`
	// Capacity is the fleet's, in trace requests per second: the larger of
	// the saturated rates of CapacityRuns (unless given).
	Capacity     float64    `json:"capacity_requests_per_s"`
	CapacityRuns []fleetRun `json:"capacity_runs,omitempty"`
	LoadAvg      [2]string  `json:"load_average_start_end"`
	Runs         []fleetRun `json:"runs"`
}

// fleet runs the fleet replay: it measures the capacity (unless given),
// then replays the trace with every system at every load, load by load.
func (b *bench) fleet(args []string) (*fleetResults, error) {
	o := b.opt.fleet
	path := o.trace
	if path == "" {
		var err error
		if path, err = loadgen.FindTrace("mooncake-synthetic.jsonl.gz"); err != nil {
			return nil, err
		}
	}
	recs, err := loadgen.ReadTraceFile(path)
	if err != nil {
		return nil, err
	}
	if o.requests > 0 && o.requests < len(recs) {
		recs = recs[:o.requests]
	}
	model := batching.Llama70BH100
	b.logf("fleet: %d requests of %s, %d engines (%s) at %gx", len(recs), filepath.Base(path), o.engines, model.Name, o.speedup)
	reqs, err := loadgen.PrepareReplay(recs, loadgen.ReplayOptions{BlockSize: model.BlockSize, Tenants: fleetTenants, Class: fleetClass})
	if err != nil {
		return nil, err
	}
	span := time.Duration(recs[len(recs)-1].Timestamp) * time.Millisecond // replayed from the trace's start, 0 ms
	if span <= 0 {
		return nil, fmt.Errorf("the trace's first %d requests all arrive at 0 ms: no rate to replay them at; take more (--fleet-requests)", len(recs))
	}
	res := &fleetResults{
		Command: "go run ./cmd/bench " + strings.Join(args, " "), Started: b.started.UTC().Format(time.RFC3339),
		Model: model.Name, Engines: o.engines, Speedup: o.speedup, Requests: len(reqs),
		TraceRate: float64(len(reqs)) / span.Seconds(), Ideal: loadgen.IdealReuse(reqs, model.BlockSize),
	}
	res.LoadAvg[0] = loadAvg()
	res.Capacity = o.capacity
	if res.Capacity == 0 {
		// Overload the fleet with the trace at twice its own rate behind
		// each of the two cache-aware systems (the queueless router and
		// fairdispatch) and take the larger completion rate: the most this
		// fleet is known to sustain, so that the top load overloads every
		// system. Least loaded's is measured too, to say where the
		// baseline most gateways run saturates.
		for _, sys := range []fleetSystem{fleetSystems[1], fleetSystems[2], fleetSystems[3]} {
			b.logf("fleet: measuring the capacity behind %s, the trace at %gx its rate", sys.name, fleetOverload)
			run := b.fleetReplay(sys, 0, fleetOverload, reqs, res)
			res.CapacityRuns = append(res.CapacityRuns, run)
			if run.Error != "" {
				return res, fmt.Errorf("capacity run: %s", run.Error)
			}
			b.logf("fleet: %s saturates at %.2f requests/s of the trace (its own rate %.2f)", sys.name, run.Metrics.Saturated, res.TraceRate)
			if sys.key != "ll" {
				res.Capacity = max(res.Capacity, run.Metrics.Saturated)
			}
		}
	}
	for _, load := range o.loads {
		for _, sys := range o.systems {
			rate := load * res.Capacity / res.TraceRate
			run := b.fleetReplay(sys, load, rate, reqs, res)
			res.Runs = append(res.Runs, run)
		}
	}
	res.LoadAvg[1] = loadAvg()
	res.Seconds = time.Since(b.started).Seconds()
	return res, nil
}

// fleetOverload is the rate of the capacity runs, in multiples of the
// trace's own: about 1.3 times what the fleet sustains (1.5 to 1.6 times
// the trace's rate in the documented runs). The trace's first part is
// lighter than its last (docs/bench.md, The trace), so the backlog takes a
// few seconds to build; saturatedRate leaves out the first and last tenth
// of the completions, over which it has not yet built or has drained.
const fleetOverload = 2.0

// fleetReplay replays reqs through sys at rate times the trace's own rate
// (the engines at the fleet's speedup), and digests the completions; load 0
// marks a capacity run.
func (b *bench) fleetReplay(sys fleetSystem, load, rate float64, reqs []loadgen.ReplayRequest, res *fleetResults) (run fleetRun) {
	o := b.opt.fleet
	run = fleetRun{System: sys.name, Key: sys.key, Load: load, Speedup: o.speedup * rate}
	replay := &loadgen.Replay{Requests: reqs, Speedup: run.Speedup, SendKeys: sys.keys}
	tag := fmt.Sprintf("%s at %.0f%%", sys.name, 100*load)
	if load == 0 {
		tag = sys.name + " (capacity)"
	}
	fail := func(what string, err error) fleetRun {
		run.Error = fmt.Sprintf("%s: %v", what, err)
		b.logf("fleet %s: %s", tag, run.Error)
		return run
	}
	if err := b.resetFleetStreams(); err != nil {
		return fail("reset streams", err)
	}
	model := batching.Llama70BH100.Scaled(o.speedup)
	engines, stopEngines, err := b.startEngines(model, o.engines)
	if err != nil {
		return fail("engines", err)
	}
	defer stopEngines()
	stopMiddle, err := b.startFleetMiddle(sys, o.engines, model.BlockSize)
	if err != nil {
		return fail("set-up", err)
	}
	middleStopped := false
	defer func() {
		if !middleStopped {
			stopMiddle()
		}
	}()
	conns, err := b.connect("bench-fleet-loadgen", 1)
	if err != nil {
		return fail("connect", err)
	}
	defer closeAll(conns)

	b.logf("fleet %s: replaying %d requests at %.1fx the trace's time", tag, len(reqs), run.Speedup)
	before := sampleCPU(b.server.pid(), 0)
	started := time.Now()
	lastLine := started
	r, err := loadgen.Run(context.Background(), conns[0], loadgen.Config{
		Prefix: b.opt.prefix, Replay: replay,
		Timeout: o.timeout, Window: 1024, ProgressInterval: time.Second,
		OutcomeWait: outcomeWait(sys),
		OnProgress: func(p loadgen.Progress) {
			if time.Since(lastLine) < 5*time.Second {
				return
			}
			lastLine = time.Now()
			done := 0
			for _, n := range p.Completed {
				done += n
			}
			b.logf("fleet %s: %d of %d published, %d completed, %.0f s", tag, p.Published, p.Requests, done, p.Elapsed.Seconds())
		},
	}, zerolog.Nop())
	run.Seconds = time.Since(started).Seconds()
	run.Other = sampleCPU(b.server.pid(), 0).sub(before).foreign()
	if r == nil {
		return fail("loadgen", err)
	}
	run.RouterRetries, middleStopped = stopMiddle(), true
	run.Duplicates, run.Rejected = r.Duplicates, len(r.Rejected)
	if run.Duplicates+run.Rejected+run.RouterRetries > 0 {
		b.logf("fleet %s: %d requests ran twice, %d rejected, %d dispatches placed again by the router", tag, run.Duplicates, run.Rejected, run.RouterRetries)
	}
	var steps uint64
	for _, w := range engines {
		steps += w.EngineStats().Steps
	}
	run.Steps = steps
	if o.dump {
		if err := dumpCompletions(filepath.Join(b.opt.out, fmt.Sprintf("completions-%s-%.0f.jsonl", sys.key, 100*load)), r.Completions); err != nil {
			b.logf("fleet %s: dump: %v", tag, err)
		}
	}
	weights := map[string]float64{}
	for _, tn := range fleetTenants {
		weights[tn.Key] = 1
	}
	// The engines' time, not the trace's: they run at o.speedup whatever
	// the rate the trace is replayed at.
	run.Metrics = computeFleetMetrics(r.Completions, len(reqs), o.speedup, res.Ideal, o.engines, weights)
	if load == 0 {
		run.Metrics.Saturated = saturatedRate(r.Completions, o.speedup)
	}
	if err != nil {
		return fail("loadgen", err)
	}
	m := run.Metrics
	b.logf("fleet %s: %.0f s; TTFT p50 %.2f p99 %.2f s, E2E p99 %.2f s, %.0f output tokens/s, hit rate %.3f of ideal %.3f",
		tag, run.Seconds, m.TTFTp50, m.TTFTp99, m.E2Ep99, m.OutputTPS, m.HitRate, m.Ideal)
	return run
}

// saturatedRate is the completion rate of a saturated replay, in trace
// requests per second: the middle 80% of the completions over the time they
// took (the start fills the engines and the end drains them).
func saturatedRate(cs []loadgen.Completion, speedup float64) float64 {
	if len(cs) < 10 {
		return 0
	}
	var ts []float64
	for _, c := range cs {
		ts = append(ts, float64(c.FinishedAt.UnixNano()))
	}
	lo, hi := quantile(ts, 0.1), quantile(ts, 0.9)
	if hi <= lo {
		return 0
	}
	return 0.8 * float64(len(cs)) / ((hi - lo) / 1e9 * speedup)
}

// resetFleetStreams deletes the request, dead-letter and KV streams and the
// policy bucket, and creates the streams again as the dispatcher would: each
// replay starts from nothing.
func (b *bench) resetFleetStreams() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, s := range []string{b.opt.names.ReqStream(), b.opt.names.DLQStream(), b.opt.names.KVStream()} {
		if err := b.js.DeleteStream(ctx, s); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
			return fmt.Errorf("delete stream %s: %w", s, err)
		}
	}
	if err := b.js.DeleteKeyValue(ctx, b.opt.names.PolicyBucket()); err != nil && !errors.Is(err, jetstream.ErrBucketNotFound) {
		return fmt.Errorf("delete bucket %s: %w", b.opt.names.PolicyBucket(), err)
	}
	return bus.EnsureStreams(ctx, b.js, bus.StreamConfig{Prefix: b.opt.prefix})
}

// startEngines starts n batched mock engines e0..e<n-1>, one connection
// each, and returns them with a function stopping them.
func (b *bench) startEngines(model batching.Model, n int) ([]*mockworker.Worker, func(), error) {
	conns, err := b.connect("bench-fleet-engine", n)
	if err != nil {
		return nil, nil, err
	}
	var ws []*mockworker.Worker
	stop := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		for _, w := range ws {
			_ = w.Stop(ctx)
		}
		closeAll(conns)
	}
	for i := range n {
		w, err := mockworker.New(conns[i], mockworker.Config{ID: "e" + strconv.Itoa(i), Prefix: b.opt.prefix, Model: &model}, zerolog.Nop())
		if err == nil {
			err = w.Start()
		}
		if err != nil {
			stop()
			return nil, nil, err
		}
		ws = append(ws, w)
	}
	return ws, stop, flushAll(conns)
}

// startFleetMiddle starts sys's middle process (a router or the dispatcher)
// and waits until it sees every engine. Its stop function returns the
// dispatches a router placed again (from the line it writes on its way out).
func (b *bench) startFleetMiddle(sys fleetSystem, engines, blockSize int) (func() int, error) {
	if sys.router != "" {
		logPath := filepath.Join(b.tmp, "router-"+sys.router+".log")
		r, _, err := startRole("router", logPath,
			"--nats-url", b.url, "--subject-prefix", b.opt.prefix, "--policy", sys.router,
			"--workers", strconv.Itoa(engines), "--block-size", strconv.Itoa(blockSize))
		if err != nil {
			return nil, err
		}
		return func() int {
			r.stop(10 * time.Second)
			return routerRetries(logPath)
		}, nil
	}
	extra := []string{"--block-size", strconv.Itoa(blockSize), "--max-held", "200000"}
	if sys.kvIndex {
		extra = append(extra, "--kv-index", "--overlap-score-credit", "2")
	}
	extra = append(extra, strings.Fields(b.opt.fleet.fairArgs)...)
	s, err := b.startDispatcher("fleet-"+sys.key, fleetPolicy(b.opt.fleet.busy), extra...)
	if err != nil {
		return nil, err
	}
	if _, err := s.waitQueues(30*time.Second, "every engine live", func(q queues) bool { return len(q.Workers) == engines }); err != nil {
		s.stop()
		return nil, err
	}
	return func() int { s.stop(); return 0 }, nil
}

// routerRetries reads the count of dispatches placed again from a router's
// log (router.go writes it on its way out); 0 without the line.
func routerRetries(logPath string) int {
	data, err := os.ReadFile(logPath)
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		var n int
		if _, err := fmt.Sscanf(line, "router: %d dispatches placed again", &n); err == nil {
			return n
		}
	}
	return 0
}

// loadAvg returns /proc/loadavg's first three fields.
func loadAvg() string {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(data))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}

// dumpCompletions writes cs as JSON lines to path.
func dumpCompletions(path string, cs []loadgen.Completion) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	enc := json.NewEncoder(f)
	for i := range cs {
		if err := enc.Encode(&cs[i]); err != nil {
			f.Close()
			return err
		}
	}
	return f.Close()
}

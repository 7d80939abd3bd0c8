// Command bench measures, in one run on one machine, what the dispatcher's
// hop costs next to the alternatives (issue #4): a bare pipe (the physical
// limit of forwarding a work-queue stream to workers over the docs/protocol.md, Dispatch handshake
// handshake), a direct work queue (workers pulling the stream themselves),
// and fairdispatch (the real dispatcher, built from ./cmd/dispatcher and run
// as a subprocess). It reports throughput, latency at half of each system's
// own peak, CPU per request, the dispatcher's memory per held request, and
// the seed's premium/regular burst; see docs/bench.md.
//
// Run it from the module root: go run ./cmd/bench [--quick] [--json].
//
// The nats-server (the embedded library, JetStream on file storage in a
// temporary directory, one replica) and the bare pipe's forwarder run in
// child processes started from this executable, so that the CPU of each is
// read from /proc apart from this process's (publisher and workers).
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"fairdispatch/naming"
)

// System names, as printed.
const (
	sysBare   = "bare pipe"
	sysDirect = "direct work queue"
	sysFair   = "fairdispatch"
	// sysFairPlain is fairdispatch with workers acknowledging plain, not
	// confirmed (workerkit.Config.PlainAcks): --only fair-plain, never by
	// default (docs/bench.md, Confirmed acknowledgements).
	sysFairPlain = "fairdispatch, plain acks"
	// sysFairHeader is fairdispatch with workers asking for the header
	// dispatch form (workerkit.Config.HeaderForm), as a worker that knows
	// nothing of the compact form gets, and acknowledging plain like the bare
	// pipe's: --only fair-header, never by default (docs/bench.md, Issue 27:
	// the hop).
	sysFairHeader = "fairdispatch, header form, plain acks"
)

type options struct {
	requests      int
	quick, json   bool
	out           string
	workers       int
	directWorkers int
	body          int
	window        int
	hold          int
	burstTPS      float64
	dispatcherBin string
	only          string
	curves        bool // run the scale curves too (issue 13)
	million       bool // the queued curve's 1,000,000 point
	profileHop    bool // a CPU profile of the dispatcher in the throughput run
	profileSecs   int  // its length
	prefix        string
	natsSync      string       // the bench's nats-server's JetStream sync (bus.ParseSync)
	cluster       int          // servers in the bench's NATS cluster, and every stream's replicas; 0: one server, R1
	names         naming.Names // of prefix
	fleetMode     bool         // run the fleet replay (fleet.go) instead
	fleetFrom     string       // redo the fleet replay's table and charts from its fleet.json
	fleet         fleetOptions
}

type bench struct {
	opt           options
	tmp           string
	url           string
	modRoot       string
	dispatcherBin string
	server        *child
	nc            *nats.Conn
	js            jetstream.JetStream
	pub           *publisher
	started       time.Time
}

func (b *bench) logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "bench %5.1fs: "+format+"\n", append([]any{time.Since(b.started).Seconds()}, args...)...)
}

func main() {
	if role := os.Getenv(roleEnv); role != "" {
		os.Exit(runRole(role, os.Args[1:]))
	}
	if err := run(os.Args[1:]); err != nil {
		var u usageError
		var f flagError
		switch {
		case errors.Is(err, flag.ErrHelp):
			os.Exit(0)
		case errors.As(err, &f):
			os.Exit(2)
		case errors.As(err, &u):
			fmt.Fprintf(os.Stderr, "bench: %v\n", err)
			os.Exit(2)
		}
		fmt.Fprintf(os.Stderr, "bench: %v\n", err)
		os.Exit(1)
	}
}

// usageError is a command line the bench cannot run (exit 2).
type usageError struct{ error }

func (u usageError) Unwrap() error { return u.error }

// flagError is an error of the flag package, which printed it already.
type flagError struct{ error }

func (f flagError) Unwrap() error { return f.error }

func parseOptions(args []string) (options, error) {
	var o options
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.IntVar(&o.requests, "requests", 200000, "requests per throughput run (latency runs use half)")
	fs.BoolVar(&o.quick, "quick", false, "small runs (20,000 requests, 20,000 held, the curves' small points): finishes in under a minute")
	fs.BoolVar(&o.json, "json", false, "also write bench.json and print the JSON on stdout")
	fs.StringVar(&o.out, "out", "./bench-out", "directory for bench.md, bench.json and bench-burst.png")
	fs.IntVar(&o.workers, "workers", 64, "workers behind the bare pipe and fairdispatch")
	fs.IntVar(&o.directWorkers, "direct-workers", 8, "workers pulling the direct work queue")
	fs.IntVar(&o.body, "body", 128, "request body size in bytes (at least 12)")
	fs.IntVar(&o.window, "window", 1024, "most publications awaiting their JetStream acknowledgement")
	fs.IntVar(&o.hold, "hold", 100000, "queued 1 KiB requests the dispatcher holds in the memory test (at most 1000000; its --max-held is raised to match)")
	fs.Float64Var(&o.burstTPS, "burst-prefill-tps", 100000, "prefill tokens per second of one sequence in the burst")
	fs.StringVar(&o.dispatcherBin, "dispatcher-bin", "", "a dispatcher binary to use instead of building ./cmd/dispatcher")
	fs.StringVar(&o.only, "only", "", "comma-separated subset: bare,direct,fair,memory,burst,curves-ranks,curves-queued,curves-classes,curves-keys,curves-idle (default all), and fair-plain (fairdispatch with workers acknowledging plain) and fair-header (workers of the header dispatch form, acknowledging plain): only when named")
	fs.BoolVar(&o.curves, "curves", true, "run the scale curves (ranks, queued, classes, keys) and the idle-capacity curve too; --curves=false skips them; with --only, only those named there run")
	fs.BoolVar(&o.profileHop, "profile-hop", false, "save CPU profiles of the dispatcher (cpu-hop.pprof) and of the bench process, its workers and publisher (cpu-hop-bench.pprof), over the first --profile-seconds of fairdispatch's throughput run; profiling costs the hop about 1%")
	fs.IntVar(&o.profileSecs, "profile-seconds", 3, "length of the --profile-hop profiles, 1 to 60 s (the throughput run should last longer: raise --requests)")
	fs.BoolVar(&o.million, "curve-million", false, "add the 1,000,000 point to the queued curve (slow: minutes, and about 2 GB)")
	fs.StringVar(&o.natsSync, "nats-sync", "2m", "how the bench's nats-server syncs JetStream writes: always, or a period (nats-server's default, 2m); the dispatcher's embedded server defaults to always (docs/deployment.md, Durability)")
	fs.IntVar(&o.cluster, "cluster", 0, "run a NATS cluster of this many servers (3 to 5; in one process, named n0, n1...) instead of one server, with every stream replicated on each (R3 for 3; the dispatcher's --stream-replicas); every client connects to n0, where the bench places the leaders of the request stream and its consumers before each system's runs")
	fs.StringVar(&o.prefix, "subject-prefix", naming.DefaultPrefix, "subject prefix of every system (the dispatcher's --subject-prefix); the streams are named after it")
	fs.BoolVar(&o.fleetMode, "fleet", false, "run the fleet replay instead (issue 27): the Mooncake trace against batched mock engines behind every baseline router and fairdispatch, at three loads; the --fleet-* flags tune it")
	fs.StringVar(&o.fleetFrom, "fleet-from", "", "print the table and render the charts of a fleet replay's fleet.json again, into --out; runs nothing")
	var fleetLoads, fleetSystems string
	o.fleet.flags(fs, &fleetLoads, &fleetSystems)
	if err := fs.Parse(args); err != nil {
		return o, flagError{err} // the flag package has said it, with the usage
	}
	if err := o.fleet.parse(fleetLoads, fleetSystems); err != nil {
		return o, err
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	if o.quick {
		if !given["requests"] {
			o.requests = 20000
		}
		if !given["hold"] {
			o.hold = 20000
		}
	}
	var err error
	if o.names, err = naming.New(o.prefix); err != nil {
		return o, fmt.Errorf("--subject-prefix: %w", err)
	}
	switch {
	case o.requests < 1000:
		return o, fmt.Errorf("--requests %d: want at least 1000", o.requests)
	case o.workers < 1 || o.directWorkers < 1:
		return o, fmt.Errorf("--workers and --direct-workers must be at least 1")
	case o.body < bodyHeader:
		return o, fmt.Errorf("--body %d: want at least %d", o.body, bodyHeader)
	case o.window < 1:
		return o, fmt.Errorf("--window %d: want at least 1", o.window)
	case o.hold < 1 || o.hold > 1000000:
		return o, fmt.Errorf("--hold %d: want 1 to 1000000", o.hold)
	case o.cluster != 0 && (o.cluster < 3 || o.cluster > 5):
		return o, fmt.Errorf("--cluster %d: want 3 to 5 (or 0: one server)", o.cluster)
	case !(o.burstTPS > 0):
		return o, fmt.Errorf("--burst-prefill-tps: want > 0")
	case o.profileSecs < 1 || o.profileSecs > 60:
		return o, fmt.Errorf("--profile-seconds %d: want 1 to 60", o.profileSecs)
	}
	if o.only != "" {
		for _, part := range strings.Split(o.only, ",") {
			if !slices.Contains(onlyParts, part) {
				return o, fmt.Errorf("--only %q: no part %q (want some of %s)", o.only, part, strings.Join(onlyParts, ","))
			}
		}
	}
	return o, nil
}

// onlyParts are the names --only takes.
var onlyParts = []string{"bare", "direct", "fair", "fair-plain", "fair-header", "memory", "burst",
	"curves-ranks", "curves-queued", "curves-classes", "curves-keys", "curves-idle"}

func run(args []string) error {
	opt, err := parseOptions(args)
	if err != nil {
		return usageError{err}
	}
	started := time.Now()
	b := &bench{opt: opt, started: started}
	want := func(part string) bool {
		return opt.only == "" || strings.Contains(","+opt.only+",", ","+part+",")
	}

	if opt.fleetFrom != "" {
		return replotFleet(opt.fleetFrom, opt.out)
	}
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil || strings.TrimSpace(string(out)) == "" || strings.TrimSpace(string(out)) == os.DevNull {
		return fmt.Errorf("run from inside the fairdispatch module (go env GOMOD: %v)", err)
	}
	b.modRoot = filepath.Dir(strings.TrimSpace(string(out)))
	if b.tmp, err = os.MkdirTemp("", "fairdispatch-bench-"); err != nil {
		return err
	}
	defer os.RemoveAll(b.tmp)
	if err := os.MkdirAll(opt.out, 0o755); err != nil {
		return err
	}

	b.dispatcherBin = opt.dispatcherBin
	if b.dispatcherBin == "" && (opt.fleetMode || want("fair") || strings.Contains(opt.only, "fair-") || want("memory") || want("burst") || opt.curves && opt.only == "" || strings.Contains(opt.only, "curves-")) {
		b.dispatcherBin = filepath.Join(b.tmp, "dispatcher")
		b.logf("building ./cmd/dispatcher")
		cmd := exec.Command("go", "build", "-o", b.dispatcherBin, "./cmd/dispatcher")
		cmd.Dir, cmd.Stdout, cmd.Stderr = b.modRoot, os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("go build ./cmd/dispatcher: %w", err)
		}
	}

	natsArgs := []string{filepath.Join(b.tmp, "jetstream"), b.opt.natsSync}
	if opt.cluster > 0 {
		natsArgs = append(natsArgs, strconv.Itoa(opt.cluster))
	}
	var urls string
	b.server, urls, err = startRole("nats", filepath.Join(b.tmp, "nats.log"), natsArgs...)
	if err != nil {
		return err
	}
	b.url, _, _ = strings.Cut(urls, ",") // n0 in a cluster
	defer b.server.stop(10 * time.Second)
	if b.nc, b.js, err = connectJS(b.url, nats.Name("bench-control")); err != nil {
		return err
	}
	defer b.nc.Close()
	if b.pub, err = newPublisher(b.url, opt.window); err != nil {
		return err
	}
	defer b.pub.close()
	b.logf("nats-server %s (pid %d), store %s", urls, b.server.pid(), b.tmp)
	if opt.fleetMode {
		return b.runFleet(args)
	}

	res := &results{
		Command: "go run ./cmd/bench " + strings.Join(args, " "), Started: started.UTC().Format(time.RFC3339),
		CPUs: runtime.NumCPU(), GoVersion: runtime.Version(), Requests: opt.requests, Workers: opt.workers, Cluster: opt.cluster,
		DirectWorkers: opt.directWorkers, BodyBytes: opt.body, Window: opt.window,
	}
	if want("bare") {
		res.Systems = append(res.Systems, b.system(sysBare, func() (*system, []*nats.Conn, error) {
			s, err := b.startBare()
			return s, nil, err
		}))
	}
	if want("direct") {
		res.Systems = append(res.Systems, b.system(sysDirect, func() (*system, []*nats.Conn, error) {
			s, err := b.startDirect()
			return s, nil, err
		}))
	}
	if want("fair") {
		res.Systems = append(res.Systems, b.system(sysFair, func() (*system, []*nats.Conn, error) { return b.startFair(workerFleet{}) }))
	}
	if strings.Contains(","+opt.only+",", ",fair-plain,") {
		res.Systems = append(res.Systems, b.system(sysFairPlain, func() (*system, []*nats.Conn, error) { return b.startFair(workerFleet{plainAcks: true}) }))
	}
	if strings.Contains(","+opt.only+",", ",fair-header,") {
		res.Systems = append(res.Systems, b.system(sysFairHeader, func() (*system, []*nats.Conn, error) {
			return b.startFair(workerFleet{headerForm: true, plainAcks: true})
		}))
	}
	if want("memory") {
		m := b.memory()
		res.Memory = &m
	}
	if (opt.curves && opt.only == "") || strings.Contains(","+opt.only+",", ",curves-idle,") {
		res.Idle = b.idleCurve()
	}
	res.Curves = b.curves(func(part string) bool {
		return opt.only != "" && strings.Contains(","+opt.only+",", ","+part+",")
	})
	if want("burst") {
		b.logf("burst: direct work queue")
		direct := b.burstDirect()
		b.logf("burst: fairdispatch")
		fair := b.burstFair(0)
		b.logf("burst: fairdispatch, the worker declaring its capacity (max_active_requests)")
		capped := b.burstFair(burstSeqs)
		res.Bursts = []burstResult{direct, fair, capped}
		chart := filepath.Join(opt.out, "bench-burst.png")
		if err := burstChart(chart, fair, direct); err != nil {
			b.logf("chart: %v", err)
		} else {
			res.ChartFile = "bench-burst.png"
		}
	}
	res.Stale = stale.Load()
	res.Seconds = time.Since(started).Seconds()
	b.keepLogs()

	md := res.markdown()
	fmt.Print(md)
	if err := os.WriteFile(filepath.Join(opt.out, "bench.md"), []byte(md), 0o644); err != nil {
		return err
	}
	if opt.json {
		j, err := json.MarshalIndent(res, "", "  ")
		if err != nil {
			return err
		}
		j = append(j, '\n')
		if err := os.WriteFile(filepath.Join(opt.out, "bench.json"), j, 0o644); err != nil {
			return err
		}
		fmt.Println()
		os.Stdout.Write(j)
	}
	return nil
}

// system sets up one system, measures it and tears it down.
func (b *bench) system(name string, start func() (*system, []*nats.Conn, error)) sysResult {
	b.logf("%s: setting up", name)
	s, conns, err := start()
	if err != nil {
		b.logf("%s: %v", name, err)
		return sysResult{System: name, Error: "setup: " + err.Error()}
	}
	if b.opt.cluster > 0 {
		if err := b.placeLeaders(); err != nil {
			b.logf("%s: %v", name, err)
			s.stop()
			return sysResult{System: name, Error: "setup: " + err.Error()}
		}
	}
	r := b.measure(name, s, conns)
	if strings.HasPrefix(name, sysFair) && r.Throughput.Seconds > 0 {
		// Each request costs a worker one answer and one +ACK; the rest are load reports.
		extra := (r.WorkerMsgsPerRequest - 2) * float64(b.opt.requests)
		r.LoadReportsPerSecond = max(0, extra) / r.Throughput.Seconds
	}
	s.stop()
	return r
}

// keepLogs copies every non-empty child log into the output directory.
func (b *bench) keepLogs() {
	logs, _ := filepath.Glob(filepath.Join(b.tmp, "*.log"))
	for _, l := range logs {
		data, err := os.ReadFile(l)
		if err != nil || len(data) == 0 {
			continue
		}
		dst := filepath.Join(b.opt.out, filepath.Base(l))
		if err := os.WriteFile(dst, data, 0o644); err == nil {
			b.logf("%s wrote %d bytes of log: %s", strings.TrimSuffix(filepath.Base(l), ".log"), len(data), dst)
		}
	}
}

// runFleet runs the fleet replay and writes fleet.md, fleet.json and the
// charts into the output directory.
func (b *bench) runFleet(args []string) error {
	res, err := b.fleet(args)
	if res == nil {
		return err
	}
	b.keepLogs()
	md := res.markdown()
	fmt.Print(md)
	if werr := os.WriteFile(filepath.Join(b.opt.out, "fleet.md"), []byte(md), 0o644); werr != nil {
		return werr
	}
	j, jerr := json.MarshalIndent(res, "", "  ")
	if jerr != nil {
		return jerr
	}
	if werr := os.WriteFile(filepath.Join(b.opt.out, "fleet.json"), append(j, '\n'), 0o644); werr != nil {
		return werr
	}
	files, cerr := res.charts(b.opt.out)
	for _, f := range files {
		b.logf("chart %s", f)
	}
	if err != nil {
		return err
	}
	return cerr
}

// replotFleet prints the table of a saved fleet replay and renders its
// charts into dir.
func replotFleet(path, dir string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var res fleetResults
	if err := json.Unmarshal(data, &res); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	fmt.Print(res.markdown())
	files, err := res.charts(dir)
	for _, f := range files {
		fmt.Fprintln(os.Stderr, "chart", f)
	}
	return err
}

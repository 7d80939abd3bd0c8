// Command loadgen publishes a workload to the dispatcher's request stream and
// follows completions and outcomes until every request completed or was
// rejected, then prints a summary (package loadgen).
//
//	loadgen --class premium:320 --class regular:320 --isl 512
//
// A progress line on stderr is rewritten every 500ms. The exit status is 0 when
// every request ended, 2 when the run timed out or was interrupted, 1 on error.
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"fairdispatch/internal/cli"
	"fairdispatch/loadgen"
	"fairdispatch/workerkit"
)

// classFlags collects repeated --class name:count flags.
type classFlags []loadgen.ClassCount

func (c *classFlags) String() string {
	var s []string
	for _, cc := range *c {
		s = append(s, fmt.Sprintf("%s:%d", cc.Class, cc.Count))
	}
	return strings.Join(s, ",")
}

func (c *classFlags) Set(v string) error {
	cc, err := loadgen.ParseClassCount(v)
	if err != nil {
		return err
	}
	*c = append(*c, cc)
	return nil
}

func main() {
	code, err := run()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
	}
	os.Exit(code)
}

func run() (int, error) {
	var (
		cfg     loadgen.Config
		classes classFlags
		url     = flag.String("nats-url", nats.DefaultURL, "NATS server URL")
		order   = flag.String("order", string(loadgen.OrderAlternating), "publication order: alternating, sequential or random")
		asJSON  = flag.Bool("json", false, "print the summary as JSON on stdout")
		quiet   = flag.Bool("quiet", false, "no progress line")
		level   = flag.String("log-level", "warn", "log level: trace, debug, info, warn, error")
		wait    = flag.Duration("connect-timeout", 2*time.Minute, "how long to wait for the NATS server at start-up, retrying with backoff")
	)
	var conn cli.NATSClient // --nats-creds, --nats-inbox-prefix and the rest
	conn.Flags(flag.CommandLine)
	flag.Var(&classes, "class", "name:count, repeatable (e.g. --class premium:320 --class regular:320)")
	flag.StringVar(&cfg.Prefix, "subject-prefix", loadgen.DefaultPrefix, "subject prefix, the dispatcher's --subject-prefix; the request stream <Q>_REQ is named after it (created if missing)")
	flag.StringVar(&cfg.Prefix, "prefix", loadgen.DefaultPrefix, "alias of --subject-prefix")
	flag.Float64Var(&cfg.Rate, "rate", 0, "requests per second; 0 releases all at once")
	flag.Uint64Var(&cfg.ISL, "isl", 512, "Dispatch-ISL-Tokens of every request")
	flag.Uint64Var(&cfg.Cached, "cached", 0, "Dispatch-Cached-Tokens of every request (0: omitted)")
	flag.IntVar(&cfg.OutputTokens, "output-tokens", 0, "Dispatch-Output-Tokens of every request (0: omitted)")
	flag.Uint64Var(&cfg.Seed, "seed", 0, "seed of --order random (0: time)")
	flag.StringVar(&cfg.Pin, "pin", "", "Dispatch-Worker: pin every request to this worker")
	flag.Float64Var(&cfg.Priority, "priority", 0, "Dispatch-Priority, seconds of FCFS jump (0: omitted)")
	flag.Uint64Var(&cfg.Strict, "strict", 0, "Dispatch-Strict-Priority (0: omitted)")
	flag.Uint64Var(&cfg.DeadlineMs, "deadline-ms", 0, "Dispatch-Deadline-Ms (0: omitted)")
	flag.DurationVar(&cfg.Timeout, "timeout", 5*time.Minute, "overall timeout of the run (0: none)")
	flag.IntVar(&cfg.Window, "window", loadgen.DefaultWindow, "most publications awaiting acknowledgement")
	flag.StringVar(&cfg.RunID, "run-id", "", "prefix of request ids (default random)")
	flag.IntVar(&cfg.Prefixes.N, "prefixes", 0, "a workload of N shared prompt prefixes with Dispatch-Block-Hashes (replaces --isl); 0: none")
	flag.Float64Var(&cfg.Prefixes.Zipf, "zipf", 1.1, "with --prefixes: Zipf exponent of the prefixes' popularity (0: uniform)")
	blockRange := flag.String("prefix-blocks", "2:64", "with --prefixes: MIN:MAX blocks of a prefix")
	flag.IntVar(&cfg.Prefixes.SuffixBlocks, "suffix-blocks", 4, "with --prefixes: blocks of each request's own after its prefix")
	flag.IntVar(&cfg.Prefixes.BlockSize, "block-size", loadgen.DefaultBlockSize, "with --prefixes: tokens per block (the workers' and the dispatcher's --block-size)")
	tenants := flag.String("tenants", "", "fairness keys and their parts of each class's requests, e.g. flood:10,a:1,b:1 (Dispatch-Fairness-Key; empty: none)")
	trace := flag.String("trace", "", "replay this trace in the Mooncake format (JSON lines, gzipped or not) instead of --class: each record one request of class --trace-class at its timestamp over --trace-speedup, with Dispatch-Output-Tokens and block hashes of --block-size (docs/bench.md, What it buys a fleet)")
	traceSpeedup := flag.Float64("trace-speedup", 1, "with --trace: the time compression")
	traceClass := flag.String("trace-class", "chat", "with --trace: the subject token of every request")
	traceTenants := flag.String("trace-tenants", "", "with --trace: tenants and their parts of the conversations, e.g. t1:4,t2:3,t3:2,t4:1, sent as Dispatch-Fairness-Key (empty: none)")
	traceRequests := flag.Int("trace-requests", 0, "with --trace: replay only the first N records (0: all)")
	versioned, err := cli.ParseCommandLine("loadgen")
	if err != nil {
		return 1, err
	}
	if versioned {
		return 0, nil
	}
	if *trace != "" {
		if err := traceConfig(&cfg, *trace, *traceSpeedup, *traceClass, *traceTenants, *traceRequests); err != nil {
			return 1, err
		}
		classes = cfg.Classes
	}
	if len(classes) == 0 {
		return 1, errors.New("at least one --class name:count (or a --trace) is required")
	}
	if cfg.Prefixes.MinBlocks, cfg.Prefixes.MaxBlocks, err = loadgen.ParseBlockRange(*blockRange); err != nil {
		return 1, err
	}
	cfg.Classes = classes
	if *trace == "" {
		cfg.Order = loadgen.Order(*order)
	}
	if *tenants != "" {
		ts, err := loadgen.ParseTenants(*tenants)
		if err != nil {
			return 1, fmt.Errorf("--tenants: %w", err)
		}
		cfg.Tenants = ts
	}
	log, err := cli.NewLogger(os.Stderr, *level, "console")
	if err != nil {
		return 1, err
	}
	if !*quiet {
		cfg.OnProgress = func(p loadgen.Progress) {
			var b strings.Builder
			fmt.Fprintf(&b, "\r%6.1fs published %d/%d completed", p.Elapsed.Seconds(), p.Published, p.Requests)
			for _, cc := range classes {
				fmt.Fprintf(&b, " %s=%d", cc.Class, p.Completed[cc.Class])
			}
			for _, tn := range cfg.Tenants {
				fmt.Fprintf(&b, " %s=%d", tn.Key, p.CompletedByKey[tn.Key])
			}
			fmt.Fprintf(&b, " rejected %d", p.Rejected)
			if p.Refused > 0 {
				fmt.Fprintf(&b, " publish refused %d (retrying)", p.Refused)
			}
			b.WriteString("   ")
			fmt.Fprint(os.Stderr, b.String())
		}
	}

	opts, err := conn.Options()
	if err != nil {
		return 1, err
	}
	ctx, stop := cli.StopContext()
	defer stop()
	nc, err := workerkit.ConnectWithin(ctx, *url, *wait, append(opts, nats.Name("loadgen"))...)
	if err != nil {
		return 1, err
	}
	defer nc.Close()
	ctx, closed := workerkit.UntilClosed(ctx, nc)

	res, err := loadgen.Run(ctx, nc, cfg, log)
	err = errors.Join(closed(), err)
	if !*quiet {
		fmt.Fprintln(os.Stderr)
	}
	if res == nil {
		return 1, err
	}
	sum := res.Summarize(classes[0].Count)
	if *asJSON {
		b, jerr := json.MarshalIndent(sum, "", "  ")
		if jerr != nil {
			return 1, fmt.Errorf("encode summary: %w", jerr)
		}
		fmt.Println(string(b))
	} else {
		fmt.Print(sum.String())
		if len(cfg.Tenants) > 0 {
			by, n := res.KeyShareBacklogged()
			fmt.Printf("the first %d completions, while every fairness key had requests left, by key:", n)
			for _, tn := range cfg.Tenants {
				fmt.Printf(" %s %d (%.1f%%)", tn.Key, by[tn.Key], 100*float64(by[tn.Key])/float64(max(n, 1)))
			}
			fmt.Println()
		}
	}
	if err != nil {
		// A connection closed for good is a failure to run (1), not a
		// run that ended incomplete (2), though its requests did not end.
		if errors.Is(err, loadgen.ErrIncomplete) && !errors.Is(err, workerkit.ErrClosed) {
			return 2, err
		}
		return 1, err
	}
	return 0, nil
}

// traceConfig makes cfg a replay of the trace at path (loadgen.Replay), the
// block hashes of cfg.Prefixes.BlockSize tokens (--block-size).
func traceConfig(cfg *loadgen.Config, path string, speedup float64, class, tenants string, n int) error {
	recs, err := loadgen.ReadTraceFile(path)
	if err != nil {
		return err
	}
	if n > 0 && n < len(recs) {
		recs = recs[:n]
	}
	var ts []loadgen.TraceTenant
	if tenants != "" {
		parsed, err := loadgen.ParseTenants(tenants)
		if err != nil {
			return fmt.Errorf("--trace-tenants: %w", err)
		}
		for _, t := range parsed {
			ts = append(ts, loadgen.TraceTenant{Key: t.Key, Share: float64(t.Weight)})
		}
	}
	reqs, err := loadgen.PrepareReplay(recs, loadgen.ReplayOptions{BlockSize: cfg.Prefixes.BlockSize, Tenants: ts, Class: class})
	if err != nil {
		return err
	}
	cfg.Replay = &loadgen.Replay{Requests: reqs, Speedup: speedup, SendKeys: len(ts) > 0}
	cfg.Classes = []loadgen.ClassCount{{Class: class, Count: len(reqs)}}
	cfg.ISL = 0
	return nil
}

// Command mockworker runs a simulated inference engine (package mockworker)
// that speaks the worker side of the fairdispatch wire contract.
//
//	mockworker --id w1 --max-num-seqs 4 --prefill-tokens-per-sec 20000
//
// On SIGINT or SIGTERM it stops taking work, lets the requests inside it finish
// for --stop-grace, hands back the rest and exits.
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"fairdispatch/internal/cli"
	"fairdispatch/mockworker"
	"fairdispatch/mockworker/batching"
	"fairdispatch/workerkit"
)

func main() { cli.Exit("mockworker", run()) }

func run() error {
	var (
		cfg      mockworker.Config
		url      = flag.String("nats-url", nats.DefaultURL, "NATS server URL")
		decodeMs = flag.Float64("decode-ms-per-token", 5, "decode time per output token after the first, in ms")
		taints   = flag.String("taints", "", "comma-separated worker taints")
		grace    = flag.Duration("stop-grace", 10*time.Second, "on shutdown, how long requests inside may finish before being handed back")
		level    = flag.String("log-level", "info", "log level: trace, debug, info, warn, error")
		connWait = flag.Duration("connect-timeout", 2*time.Minute, "how long to wait for the NATS server at start-up, retrying with backoff")
		probe    = flag.Bool("health-probe", false, "do not run a worker: exit 0 if worker --id publishes a load report within --ttl, else 1 (a container healthcheck without a shell)")
	)
	var conn cli.NATSClient // --nats-creds, --nats-inbox-prefix and the rest
	conn.Flags(flag.CommandLine)
	flag.StringVar(&cfg.ID, "id", "", "worker id (required): [A-Za-z0-9_-]+")
	flag.StringVar(&cfg.Prefix, "subject-prefix", workerkit.DefaultPrefix, "subject prefix, the dispatcher's --subject-prefix")
	flag.StringVar(&cfg.Prefix, "prefix", workerkit.DefaultPrefix, "alias of --subject-prefix")
	flag.IntVar(&cfg.MaxNumSeqs, "max-num-seqs", mockworker.DefaultMaxNumSeqs, "concurrent sequences per rank")
	flag.Uint64Var(&cfg.MaxNumBatchedTokens, "max-num-batched-tokens", mockworker.DefaultMaxNumBatchedTokens, "reported max_num_batched_tokens")
	flag.Float64Var(&cfg.PrefillTokensPerSec, "prefill-tokens-per-sec", mockworker.DefaultPrefillTokensPerSec, "prefill speed of one sequence, tokens/s")
	flag.IntVar(&cfg.OutputTokens, "output-tokens", mockworker.DefaultOutputTokens, "output tokens of a request without Dispatch-Output-Tokens")
	flag.IntVar(&cfg.DPStart, "dp-start", 0, "first data-parallel rank")
	flag.IntVar(&cfg.DPSize, "dp-size", 1, "number of data-parallel ranks")
	flag.Uint64Var(&cfg.TotalKVBlocks, "total-kv-blocks", 0, "reported total_kv_blocks per rank (0: decode latch off)")
	flag.DurationVar(&cfg.TTL, "ttl", workerkit.DefaultTTL, "load report TTL (100ms to 600s)")
	flag.DurationVar(&cfg.AckWait, "ack-wait", workerkit.DefaultAckWait, "fallback ack wait for dispatches without Dispatch-Ack-Wait-Ms (older dispatchers); +WPI every third of it")
	flag.Uint64Var(&cfg.MaxActiveRequests, "max-active-requests", 0, "reported max_active_requests per rank, running plus waiting (0: no capacity)")
	flag.IntVar(&cfg.KVCapacity, "kv-capacity", 0, "simulate a prefix cache of N device blocks per rank (LRU), fed by Dispatch-Block-Hashes, and publish its KV cache events; 0: none")
	flag.IntVar(&cfg.KVHostCapacity, "kv-host-capacity", 0, "with --kv-capacity: a host tier of N blocks per rank receiving the blocks evicted from the device; 0: none")
	flag.IntVar(&cfg.BlockSize, "block-size", mockworker.DefaultBlockSize, "KV block size in tokens (the producers' and the dispatcher's --block-size)")
	flag.Float64Var(&cfg.CostFactor, "cost-factor", 1, "completion records report prefill_tokens = uncached tokens x this factor (0 < f <= 1000): a deliberate estimate error")
	flag.BoolVar(&cfg.NoCompletions, "no-completions", false, "publish no completion records: the dispatcher's cost estimates stand uncorrected")
	keyFactors := flag.String("key-cost-factors", "", "per fairness key cost factors overriding --cost-factor, e.g. tenant-a=10,_=1 (_: requests without a key)")
	flag.BoolVar(&cfg.Preempt, "preempt", false, "declare preemption support: hand back a request the dispatcher preempts before its first response chunk (docs/protocol.md, Preemption)")
	flag.BoolVar(&cfg.PlainAcks, "plain-acks", false, "acknowledge with plain publishes, not confirmed ones: for a NATS user that may not subscribe to its inbox; an acknowledgement lost around a server restart lets the request run again (docs/protocol.md, After accepting)")
	flag.BoolVar(&cfg.HeaderForm, "header-form", false, "ask for dispatches in the header form, not the compact form (docs/protocol.md, Compact dispatch form)")
	flag.IntVar(&cfg.RefuseWhenFull, "refuse-when-full", 0, "refuse (busy) a request that would make a rank's waiting queue longer than N; 0 never refuses")
	model := flag.String("model", "", "simulate a continuously batched engine with this model's published timings instead (mockworker/batching): llama70b-h100 (Llama-3.3-70B FP8 on 2x H100 as NIM 1.8.0 serves it); replaces --max-num-seqs, --prefill-tokens-per-sec, --decode-ms-per-token and --kv-capacity, and sets --block-size to the model's (64)")
	speedup := flag.Float64("model-speedup", 1, "with --model: divide every duration by this (a trace replayed this much faster)")
	if versioned, err := cli.ParseCommandLine("mockworker"); versioned || err != nil {
		return err
	}
	if *decodeMs < 0 {
		return fmt.Errorf("--decode-ms-per-token %v: want >= 0", *decodeMs)
	}
	cfg.DecodePerToken = time.Duration(*decodeMs * float64(time.Millisecond))
	switch *model {
	case "":
	case "llama70b-h100":
		m := batching.Llama70BH100.Scaled(*speedup)
		cfg.Model = &m
		cfg.BlockSize, cfg.KVCapacity = 0, 0
	default:
		return fmt.Errorf("--model %q: want llama70b-h100", *model)
	}
	if cfg.DecodePerToken == 0 {
		cfg.DecodePerToken = time.Nanosecond // 0 means default in mockworker.Config
	}
	opts, err := conn.Options()
	if err != nil {
		return err
	}
	if *probe {
		return probeReports(*url, opts, cfg.Prefix, cfg.ID, cfg.TTL)
	}
	if *taints != "" {
		cfg.Taints = strings.Split(*taints, ",")
	}
	if *keyFactors != "" {
		cfg.KeyCostFactors = map[string]float64{}
		for _, kv := range strings.Split(*keyFactors, ",") {
			k, v, ok := strings.Cut(kv, "=")
			f, err := strconv.ParseFloat(v, 64)
			if !ok || k == "" || err != nil {
				return fmt.Errorf("--key-cost-factors %q: want key=factor,...", *keyFactors)
			}
			cfg.KeyCostFactors[k] = f
		}
	}
	log, err := cli.NewLogger(os.Stderr, *level, "json")
	if err != nil {
		return err
	}

	ctx, stop := cli.StopContext()
	defer stop()
	nc, err := workerkit.ConnectWithin(ctx, *url, *connWait, append(opts, nats.Name("mockworker "+cfg.ID))...)
	if err != nil {
		return err
	}
	defer nc.Close()
	ctx, closed := workerkit.UntilClosed(ctx, nc)
	log.Info().Str("worker_id", cfg.ID).Str("nats_url", *url).Msg("mockworker starting")
	err = mockworker.Run(ctx, nc, cfg, *grace, log)
	return errors.Join(closed(), err)
}

// probeReports is --health-probe: a worker is healthy while it reports its load,
// which it does at least every TTL/3; the probe waits one TTL for a report.
func probeReports(url string, opts []nats.Option, prefix, id string, ttl time.Duration) error {
	nc, err := nats.Connect(url, append(opts, nats.Name("mockworker health probe"), nats.Timeout(ttl))...)
	if err != nil {
		return fmt.Errorf("health probe: connect %s: %w", url, err)
	}
	defer nc.Close()
	subject := prefix + ".load." + id
	sub, err := nc.SubscribeSync(subject)
	if err != nil {
		return fmt.Errorf("health probe: %w", err)
	}
	if _, err := sub.NextMsg(ttl); err != nil {
		return fmt.Errorf("health probe: no load report on %s within %v: %w", subject, ttl, err)
	}
	return nil
}

// Command engineworker runs a fairdispatch worker in front of one vLLM or
// SGLang server (package engineworker; docs/deployment.md, In front of vLLM).
//
//	engineworker --engine vllm --engine-url http://127.0.0.1:8000 --id gpu-0 \
//	  --max-num-seqs 256 --kv-endpoint tcp://127.0.0.1:5557 --kv-replay-endpoint tcp://127.0.0.1:5558
//
// Every flag can also be set by the environment variable ENGINEWORKER_<FLAG>
// (upper case, - as _), e.g. ENGINEWORKER_ENGINE_URL; a flag on the command
// line wins.
package main

import (
	"errors"
	"flag"
	"os"
	"time"

	"github.com/nats-io/nats.go"

	"fairdispatch/engineworker"
	"fairdispatch/internal/cli"
	"fairdispatch/workerkit"
)

func main() { cli.Exit("engineworker", run()) }

func run() error {
	var cfg engineworker.Config
	url := flag.String("nats-url", nats.DefaultURL, "NATS server URL")
	var conn cli.NATSClient // --nats-creds, --nats-inbox-prefix and the rest
	conn.Flags(flag.CommandLine)
	flag.BoolVar(&cfg.Worker.PlainAcks, "plain-acks", false, "acknowledge with plain publishes, not confirmed ones: for a NATS user that may not subscribe to its inbox; an acknowledgement lost around a server restart lets the request run again (docs/protocol.md, After accepting)")
	level := flag.String("log-level", "info", "log level: trace, debug, info, warn, error")
	connWait := flag.Duration("connect-timeout", 2*time.Minute, "how long to wait for the NATS server at start-up")
	flag.StringVar(&cfg.Engine, "engine", "vllm", "the engine: vllm or sglang")
	flag.StringVar(&cfg.EngineURL, "engine-url", "http://127.0.0.1:8000", "the engine's HTTP base URL")
	flag.StringVar(&cfg.MetricsURL, "metrics-url", "", "the engine's Prometheus metrics (default <engine-url>/metrics)")
	flag.StringVar(&cfg.Worker.ID, "id", "", "worker id (required): [A-Za-z0-9_-]+")
	flag.StringVar(&cfg.Worker.Prefix, "subject-prefix", workerkit.DefaultPrefix, "subject prefix, the dispatcher's --subject-prefix")
	flag.IntVar(&cfg.Worker.DPStart, "dp-start", 0, "first data-parallel rank the engine serves through this worker")
	flag.IntVar(&cfg.Worker.DPSize, "dp-size", 1, "number of data-parallel ranks")
	flag.Uint64Var(&cfg.MaxNumSeqs, "max-num-seqs", 0, "the engine's --max-num-seqs (SGLang: --max-running-requests): each rank's capacity; required for vLLM, read from /get_server_info for SGLang when 0")
	flag.Uint64Var(&cfg.Worker.MaxNumBatchedTokens, "max-num-batched-tokens", 0, "the engine's --max-num-batched-tokens (SGLang: --chunked-prefill-size, read from /get_server_info when 0); 0 unknown")
	flag.Uint64Var(&cfg.Worker.TotalKVBlocks, "total-kv-blocks", 0, "KV blocks per rank; 0: vllm:cache_config_info's num_gpu_blocks, SGLang's max_total_num_tokens / --block-size")
	flag.DurationVar(&cfg.Worker.TTL, "ttl", workerkit.DefaultTTL, "load report TTL (100ms to 600s)")
	flag.IntVar(&cfg.BlockSize, "block-size", 16, "our block size in tokens: the producers' and the dispatcher's --block-size")
	flag.StringVar(&cfg.KVEndpoint, "kv-endpoint", "", "the engine's ZMQ KV event endpoint for rank 0 (its kv-events-config endpoint, * read as 127.0.0.1); rank r at port + r; empty: no KV events")
	flag.StringVar(&cfg.ReplayEndpoint, "kv-replay-endpoint", "", "the engine's replay endpoint for rank 0 (replay_endpoint); empty: a gap resets the rank")
	flag.StringVar(&cfg.KVTopic, "kv-topic", "", "the engine's KV event topic")
	flag.IntVar(&cfg.KVGroup, "kv-group", 0, "the KV cache group whose events count (hybrid models)")
	flag.DurationVar(&cfg.ScrapeInterval, "scrape-interval", 250*time.Millisecond, "how often the engine's metrics are read")
	flag.DurationVar(&cfg.HealthInterval, "health-interval", 0, "how often /health is checked (0: 500ms for vLLM, 2s for SGLang)")
	flag.DurationVar(&cfg.HealthTimeout, "health-timeout", 0, "a /health check slower than this fails (0: 1s for vLLM, 5s for SGLang, whose /health takes a second at the soonest)")
	flag.IntVar(&cfg.HealthFailures, "health-failures", 2, "failed checks in a row that make the engine unhealthy")
	flag.DurationVar(&cfg.StopGrace, "stop-grace", 8*time.Second, "on SIGTERM, how long running requests may finish before they are handed back (or end failed)")
	if versioned, err := cli.ParseCommandLine("engineworker"); versioned || err != nil {
		return err
	}
	if err := cli.FromEnv(flag.CommandLine, "ENGINEWORKER", os.LookupEnv, map[string]bool{"version": true}); err != nil {
		return err
	}
	log, err := cli.NewLogger(os.Stderr, *level, "json")
	if err != nil {
		return err
	}
	opts, err := conn.Options()
	if err != nil {
		return err
	}
	ctx, stop := cli.StopContext()
	defer stop()
	nc, err := workerkit.ConnectWithin(ctx, *url, *connWait, append(opts, nats.Name("engineworker "+cfg.Worker.ID))...)
	if err != nil {
		return err
	}
	defer nc.Close()
	ctx, closed := workerkit.UntilClosed(ctx, nc)
	w, err := engineworker.New(nc, cfg, log)
	if err != nil {
		return err
	}
	log.Info().Str("worker_id", cfg.Worker.ID).Str("engine", cfg.Engine).Str("engine_url", cfg.EngineURL).Msg("engineworker starting")
	err = w.Run(ctx)
	return errors.Join(closed(), err)
}

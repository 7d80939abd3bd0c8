// Command fakeengine runs the test double of a vLLM or SGLang server
// (package internal/fakeengine) for docker-compose and manual runs. It is
// not an engine: it fakes one, for testing fairdispatch's engine worker.
//
//	fakeengine --addr 127.0.0.1:8000 --kv-endpoint tcp://127.0.0.1:5557 --kv-replay-endpoint tcp://127.0.0.1:5558
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"time"

	"fairdispatch/internal/cli"
	"fairdispatch/internal/fakeengine"
)

func main() { cli.Exit("fakeengine", run()) }

func run() error {
	cfg := fakeengine.DefaultConfig()
	addr := flag.String("addr", "127.0.0.1:8000", "HTTP listen address")
	decodeMs := flag.Float64("decode-ms-per-token", float64(cfg.DecodePerToken)/float64(time.Millisecond), "time of one output token, ms")
	probe := flag.String("health-probe", "", "do not serve: GET this URL and exit 0 on 200 (a healthcheck without a shell)")
	flag.StringVar(&cfg.Kind, "kind", cfg.Kind, "the engine it fakes: vllm or sglang")
	flag.StringVar(&cfg.Model, "model", cfg.Model, "served model name")
	flag.IntVar(&cfg.BlockSize, "block-size", cfg.BlockSize, "KV block size in tokens")
	flag.IntVar(&cfg.NumGPUBlocks, "num-gpu-blocks", cfg.NumGPUBlocks, "prefix cache capacity in blocks")
	flag.IntVar(&cfg.MaxNumSeqs, "max-num-seqs", cfg.MaxNumSeqs, "running requests at most")
	flag.Float64Var(&cfg.PrefillTokensPerSec, "prefill-tokens-per-sec", cfg.PrefillTokensPerSec, "prefill speed")
	flag.IntVar(&cfg.DPRank, "dp-rank", cfg.DPRank, "the data-parallel rank it is")
	flag.StringVar(&cfg.KVEndpoint, "kv-endpoint", "", "ZMQ PUB endpoint for KV events (tcp://host:port); empty: none")
	flag.StringVar(&cfg.ReplayEndpoint, "kv-replay-endpoint", "", "ZMQ ROUTER endpoint for replays")
	flag.StringVar(&cfg.Topic, "kv-topic", "", "KV event topic")
	flag.StringVar(&cfg.Layout, "kv-event-format", cfg.Layout, fmt.Sprintf("the msgpack layout of the batches, one of %v", fakeengine.Layouts))
	flag.BoolVar(&cfg.ByteHashes, "byte-block-hashes", false, "block hashes as sha256 bytes, not their low 64 bits as ints (VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=0; vLLM's default is 1)")
	flag.BoolVar(&cfg.PromptTokensDetails, "enable-prompt-tokens-details", true, "report cached tokens in usage")
	flag.Parse()
	if *probe != "" {
		return cli.Probe(*probe)
	}
	cfg.DecodePerToken = time.Duration(*decodeMs * float64(time.Millisecond))
	ctx, stop := cli.StopContext()
	defer stop()
	e, err := fakeengine.New(ctx, cfg)
	if err != nil {
		return err
	}
	defer e.Close()
	srv := &http.Server{Addr: *addr, Handler: e.Handler(), ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	if err := srv.ListenAndServe(); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

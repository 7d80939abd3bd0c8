// Command gateway serves the OpenAI HTTP API (POST /v1/chat/completions, POST
// /v1/completions, GET /v1/models) in front of one or more fairdispatch
// pools: each request is published to its pool's request stream with the
// tenant of its API key as the fairness key, and the worker's response is
// relayed to the client as it streams (package gateway).
//
// Every flag has an environment variable GATEWAY_<FLAG>; see docs/config.md,
// Gateway.
package main

import (
	"fmt"
	"io"
	"os"

	"fairdispatch/gateway"
	"fairdispatch/internal/buildinfo"
	"fairdispatch/internal/cli"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	s, err := parseSettings(args, os.LookupEnv, stderr)
	if err != nil {
		return cli.ParseExit("gateway", err, stderr)
	}
	switch {
	case s.version:
		fmt.Fprintln(stdout, "gateway", buildinfo.Read())
		return 0
	case s.healthProbe != "":
		return cli.ProbeExit(s.healthProbe, stderr)
	case s.checkConfig != "":
		cfg, err := gateway.LoadConfig(s.checkConfig)
		if err != nil {
			fmt.Fprintln(stderr, err)
			return 1
		}
		if _, err := gateway.LoadTokenizers(cfg); err != nil {
			fmt.Fprintln(stderr, err)
			return 1
		}
		for _, m := range cfg.Models {
			counts := "estimated input tokens"
			if m.Tokenizer != "" {
				counts = fmt.Sprintf("exact input tokens and block hashes (tokenizer %s, block size %d)", m.Tokenizer, m.BlockSize)
			}
			fmt.Fprintf(stdout, "model %s: prefix %s, engine model %s, max_tokens %d, %s\n", m.Name, m.Prefix, m.EngineModel, m.MaxTokens, counts)
		}
		for _, t := range cfg.Tenants {
			fmt.Fprintf(stdout, "tenant %s: %d keys, classes %v (default %s), priority %v, deadline_ms %d, max_concurrent %d\n",
				t.Name, len(t.APIKeySHA256), t.Classes, t.DefaultClass, t.Priority, t.DeadlineMs, t.MaxConcurrent)
		}
		return 0
	}
	log, err := s.log.Logger(stderr)
	if err != nil {
		fmt.Fprintln(stderr, "gateway:", err)
		return 2
	}
	cfg, err := gateway.LoadConfig(s.config)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	ctx, stop := cli.StopContext()
	defer stop()
	if err := serve(ctx, s, cfg, log); err != nil {
		log.Error().Err(err).Msg("gateway stopped")
		return 1
	}
	return 0
}

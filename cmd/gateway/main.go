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
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/rs/zerolog"

	"fairdispatch/gateway"
	"fairdispatch/internal/buildinfo"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	s, err := parseSettings(args, os.LookupEnv, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		var pe parseError
		if !errors.As(err, &pe) {
			fmt.Fprintln(stderr, "gateway:", err)
		}
		return 2
	}
	switch {
	case s.version:
		fmt.Fprintln(stdout, "gateway", buildinfo.Read())
		return 0
	case s.healthProbe != "":
		return probe(s.healthProbe, stderr)
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
	log, err := newLogger(s, stderr)
	if err != nil {
		fmt.Fprintln(stderr, "gateway:", err)
		return 2
	}
	cfg, err := gateway.LoadConfig(s.config)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := serve(ctx, s, cfg, log); err != nil {
		log.Error().Err(err).Msg("gateway stopped")
		return 1
	}
	return 0
}

func newLogger(s *settings, w io.Writer) (zerolog.Logger, error) {
	lvl, err := zerolog.ParseLevel(s.logLevel)
	if err != nil || s.logLevel == "" {
		return zerolog.Logger{}, fmt.Errorf("--log-level %q: want debug, info, warn or error", s.logLevel)
	}
	zerolog.DurationFieldFormat = zerolog.DurationFormatString
	out := w
	if s.logFormat == "console" {
		out = zerolog.ConsoleWriter{Out: w, TimeFormat: time.TimeOnly, NoColor: true}
	}
	return zerolog.New(out).Level(lvl).With().Timestamp().Logger(), nil
}

// probe is --health-probe: GET url, 0 on HTTP 200, else 1.
func probe(url string, stderr io.Writer) int {
	c := &http.Client{Timeout: 3 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		fmt.Fprintln(stderr, "health probe:", err)
		return 1
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	if resp.StatusCode != http.StatusOK {
		fmt.Fprintf(stderr, "health probe: %s: %s %s\n", url, resp.Status, body)
		return 1
	}
	return 0
}

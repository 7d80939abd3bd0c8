package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/rs/zerolog"

	"fairdispatch/caller"
	"fairdispatch/gateway"
	"fairdispatch/workerkit"
)

// serve runs the gateway until ctx ends, then stops taking connections and
// waits (up to 10 s) for the open ones; those still open are closed, which
// cancels their requests.
func serve(ctx context.Context, s *settings, cfg *gateway.Config, log zerolog.Logger) error {
	opts, err := s.conn.Options()
	if err != nil {
		return err
	}
	opts = append(opts, nats.Name("fairdispatch-gateway"))
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	nc, err := workerkit.Connect(cctx, s.natsURL, opts...)
	cancel()
	if err != nil {
		return err
	}
	defer nc.Close()
	ctx, closed := workerkit.UntilClosed(ctx, nc)

	callers := map[string]*caller.Caller{}
	var prefixes []string
	for _, m := range cfg.Models {
		if callers[m.Prefix] != nil {
			continue
		}
		c, err := caller.New(nc, caller.Config{Prefix: m.Prefix, ResponsePrefix: s.responsePrefix,
			BrokenAfter: s.brokenAfter, PublishTimeout: s.publishTimeout})
		if err != nil {
			return err
		}
		callers[m.Prefix] = c
		prefixes = append(prefixes, m.Prefix)
	}
	health, err := gateway.NewHealth(nc, prefixes)
	if err != nil {
		return err
	}
	go health.Run(ctx, s.healthInterval)

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	srv, err := gateway.New(gateway.Options{
		Config: cfg, Callers: callers,
		Limits:       gateway.Limits{MaxDepth: s.maxDepth, MaxMessages: s.maxMessages},
		MaxBodyBytes: s.maxBody, RequestTimeout: s.requestTimeout, WriteTimeout: s.writeTimeout, AttachWait: s.attachWait,
		Health: health.Check, Registerer: reg, Log: log,
	})
	if err != nil {
		return err
	}
	api := gateway.NewHTTPServer(srv, gateway.HTTPLimits{ReadHeaderTimeout: s.readHeaderTimeout, ReadTimeout: s.readTimeout,
		IdleTimeout: s.idleTimeout, MaxHeaderBytes: s.maxHeaderBytes})
	ln, err := net.Listen("tcp", s.listen)
	if err != nil {
		return fmt.Errorf("--listen: %w", err)
	}
	ln = gateway.LimitListener(ln, s.maxConns)
	errc := make(chan error, 2)
	go func() { errc <- api.Serve(ln) }()

	var admin *http.Server
	if s.adminAddr != "" {
		mux := http.NewServeMux()
		mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
		mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
			writeJSON(w, 200, map[string]string{"status": "ok"})
		})
		mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
			if err := health.Ready(); err != nil {
				writeJSON(w, 503, map[string]string{"status": "not ready", "reason": err.Error()})
				return
			}
			writeJSON(w, 200, map[string]string{"status": "ready"})
		})
		admin = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
		aln, err := net.Listen("tcp", s.adminAddr)
		if err != nil {
			_ = api.Close()
			return fmt.Errorf("--admin-addr: %w", err)
		}
		go func() { errc <- admin.Serve(aln) }()
		log.Info().Str("admin", aln.Addr().String()).Msg("admin listening")
	}
	log.Info().Str("api", ln.Addr().String()).Str("nats", s.natsURL).Int("models", len(cfg.Models)).Int("tenants", len(cfg.Tenants)).Msg("gateway running")

	var runErr error
	select {
	case <-ctx.Done():
	case runErr = <-errc:
	}
	if err := closed(); err != nil {
		runErr = err
	}
	sctx, cancelStop := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancelStop()
	if err := api.Shutdown(sctx); err != nil {
		_ = api.Close()
	}
	if admin != nil {
		_ = admin.Shutdown(sctx)
	}
	_ = nc.Drain()
	log.Info().Msg("gateway stopped")
	if errors.Is(runErr, http.ErrServerClosed) {
		return nil
	}
	return runErr
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

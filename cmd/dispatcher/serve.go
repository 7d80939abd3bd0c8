package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/rs/zerolog"

	"fairdispatch/admin"
	"fairdispatch/bus"
	"fairdispatch/configs"
	"fairdispatch/dispatcher"
	"fairdispatch/filters"
	"fairdispatch/ingest"
	"fairdispatch/leader"
	"fairdispatch/metrics"
	"fairdispatch/scheduler"
)

// serve runs the dispatcher until ctx ends.
func serve(ctx context.Context, s *settings, log zerolog.Logger, stdout io.Writer) error {
	pol, err := loadPolicy(s)
	if err != nil {
		return err
	}
	url := s.natsURL
	if url == "" {
		srv, err := embeddedServer(s, log)
		if err != nil {
			return err
		}
		defer func() {
			srv.Shutdown()
			srv.WaitForShutdown()
		}()
		url = srv.ClientURL()
	}

	var act atomic.Pointer[dispatcher.Actor]
	nc, err := bus.Connect(ctx, bus.Options{
		URL: url, Name: "fairdispatch-dispatcher",
		CredsFile: s.creds, NKeyFile: s.nkey, User: s.user, Password: s.password,
		TLSCA: s.tlsCA, TLSCert: s.tlsCert, TLSKey: s.tlsKey,
		OnDisconnect: func() {
			if a := act.Load(); a != nil {
				a.Connected(false)
			}
		},
		OnReconnect: func() {
			if a := act.Load(); a != nil {
				a.Connected(true)
			}
		},
	}, log)
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return fmt.Errorf("jetstream: %w", err)
	}
	storage := jetstream.FileStorage
	if s.storage == "memory" {
		storage = jetstream.MemoryStorage
	}
	if err := bus.EnsureStreams(ctx, js, bus.StreamConfig{Prefix: s.prefix, Replicas: s.replicas, Storage: storage, DuplicateWindow: s.dupWindow}); err != nil {
		return err
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	names := make([]string, len(pol.Classes))
	for i, c := range pol.Classes {
		names[i] = c.Name
	}
	m := metrics.New(reg, names)

	sched := scheduler.New(scheduler.Config{
		Policy: pol,
		Thresholds: filters.Thresholds{
			DecodeBlocks: s.decodeBlocks.v, PrefillTokens: s.prefillTokens.v, PrefillFrac: s.prefillTokensFrac.v,
		},
		Scoring: filters.Scoring{BlockSize: s.blockSize, OverlapCredit: s.overlapCredit, PrefillScale: s.prefillScale,
			DecodeRequestWeight: s.decW, Temperature: s.temperature},
		Grace:           int64(s.grace),
		Rand:            rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 0x9e3779b97f4a7c15)),
		MaxWorkers:      s.maxWorkers,
		MaxKeysPerClass: s.maxKeysPerClass,
	}, time.Now().UnixNano())

	hs, err := bus.NewHandshaker(nc, s.prefix, s.dispatchTimeout, func(r bus.Result) { act.Load().HandshakeResult(r) }, log)
	if err != nil {
		return err
	}
	defer hs.Close() // idempotent; closed before the drain below on a clean exit
	dl, err := bus.NewDeadLetterer(js, s.prefix, log)
	if err != nil {
		return err
	}
	inFlight := s.inFlight
	if inFlight == 0 {
		inFlight = 4 * s.maxHeld
	}
	a := dispatcher.New(dispatcher.Config{Stream: bus.ReqStream, Prefix: s.prefix, AckWait: s.ackWait, DispatchTimeout: s.dispatchTimeout}, dispatcher.Deps{
		Scheduler: sched, Handshaker: hs, DeadLetters: dl,
		Keeper:  ingest.NewKeeper(s.ackWait, log),
		Outcome: func(subj string, o bus.OutcomeMsg) error { return bus.PublishOutcome(nc, subj, o) },
		Metrics: m, Log: log,
	})
	act.Store(a)
	if !nc.IsConnected() {
		a.Connected(false)
	}

	ctl := &control{a: a, nc: nc}
	ctl.streamsOK.Store(true) // ensured just above
	go ctl.watchStreams(ctx, js, hs, m, log)
	adm := admin.New(admin.Config{Addr: s.httpAddr, Token: s.adminToken, Gatherer: reg, Pprof: s.pprof}, ctl, log)
	if err := adm.Start(); err != nil {
		return fmt.Errorf("admin http: %w", err)
	}
	sub, err := bus.SubscribeLoad(nc, s.prefix, a.LoadReport)
	if err != nil {
		return err
	}
	defer sub.Unsubscribe()

	// Roles: with leader election (the default) this process pulls and
	// dispatches only while it holds the lease; a standby keeps its registry
	// warm from load reports. Shutdown order (docs/design.md, Delivery guarantees, SIGTERM): stop pulling and
	// wait for the pull to end, so that messages handed back are not pulled
	// straight in again; then the actor hands back what it holds and waits for
	// dispatches in flight; then the lease is released for a standby.
	pull := &puller{js: js, a: a, log: log, fatal: make(chan error, 1), cfg: ingest.Config{
		Stream: bus.ReqStream, Durable: "dispatcher", AckWait: s.ackWait, MaxHeld: s.maxHeld, InFlight: inFlight, Batch: 256,
	}}
	runCtx, cancelRun := context.WithCancel(ctx)
	defer cancelRun()
	actorCtx, stopActor := context.WithCancel(context.Background())
	defer stopActor()
	electCtx, stopElect := context.WithCancel(context.Background())
	defer stopElect()
	electDone := make(chan struct{})
	if s.election {
		el, err := leader.New(ctx, js, leader.Config{ID: s.instanceID, TTL: s.leaseTTL, Replicas: s.replicas, Storage: storage}, log)
		if err != nil {
			return err
		}
		go func() { defer close(electDone); el.Run(electCtx, pull.lead) }()
	} else {
		close(electDone)
		pull.lead(true)
	}
	var fatal error
	go func() {
		select {
		case <-runCtx.Done():
		case fatal = <-pull.fatal:
			log.Error().Err(fatal).Msg("cannot pull requests as leader; exiting so that another dispatcher leads")
		}
		pull.close()
		stopActor()
	}()
	log.Info().Str("nats", url).Str("http", adm.Addr()).Int("classes", len(pol.Classes)).
		Dur("startup_grace", s.grace).Bool("leader_election", s.election).Str("instance", s.instanceID).Msg("dispatcher running")

	if s.demo {
		go func() {
			defer cancelRun()
			if err := runDemo(runCtx, nc, s, stdout, log); err != nil {
				log.Error().Err(err).Msg("demo failed")
			}
		}()
	}
	a.Run(actorCtx)
	stopElect()
	<-electDone
	closeCtx, cancelClose := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancelClose()
	_ = dl.Close(closeCtx)
	_ = adm.Shutdown(closeCtx)
	hs.Close()
	if err := nc.Drain(); err != nil {
		log.Warn().Err(err).Msg("nats drain")
	}
	log.Info().Msg("dispatcher stopped")
	return fatal
}

func loadPolicy(s *settings) (*configs.Policy, error) {
	if s.policy != "" {
		return configs.Load(s.policy)
	}
	return configs.Default(s.queuePolicy, s.queueThreshold.v)
}

func embeddedServer(s *settings, log zerolog.Logger) (*server.Server, error) {
	host, port, err := net.SplitHostPort(s.natsListen)
	if err != nil {
		return nil, fmt.Errorf("--nats-listen %q: %w", s.natsListen, err)
	}
	p, err := strconv.Atoi(port)
	if err != nil {
		return nil, fmt.Errorf("--nats-listen %q: bad port", s.natsListen)
	}
	srv, err := server.NewServer(&server.Options{
		ServerName: "fairdispatch-embedded", Host: host, Port: p,
		JetStream: true, StoreDir: s.dataDir, NoLog: true, NoSigs: true,
	})
	if err != nil {
		return nil, fmt.Errorf("embedded nats-server: %w", err)
	}
	srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		srv.Shutdown()
		return nil, fmt.Errorf("embedded nats-server on %s did not start (is the port taken?)", s.natsListen)
	}
	log.Info().Str("component", "nats").Str("url", srv.ClientURL()).Str("data_dir", s.dataDir).Msg("embedded nats-server with JetStream started")
	return srv, nil
}

// control adapts the actor to the admin API.
type control struct {
	a         *dispatcher.Actor
	nc        *nats.Conn
	streamsOK atomic.Bool
}

func (c *control) Thresholds() filters.Thresholds { return c.a.Thresholds() }
func (c *control) SetThresholds(ctx context.Context, t filters.Thresholds) error {
	return c.a.SetThresholds(ctx, t)
}
func (c *control) Queues() any { return c.a.View() }

// Ready is docs/config.md, Admin HTTP API's readiness: connected, streams present, grace over.
func (c *control) Ready() error {
	switch {
	case !c.nc.IsConnected():
		return fmt.Errorf("not connected to NATS")
	case !c.streamsOK.Load():
		return fmt.Errorf("stream %s or %s missing", bus.ReqStream, bus.DLQStream)
	case c.a.InGrace():
		return fmt.Errorf("start-up grace running")
	case !c.a.Leader():
		return fmt.Errorf("standby: another dispatcher holds the leader lease")
	}
	return nil
}

// watchStreams checks every few seconds that both streams exist, and copies
// the handshaker's count of late answers into the metrics.
func (c *control) watchStreams(ctx context.Context, js jetstream.JetStream, hs *bus.Handshaker, m *metrics.Metrics, log zerolog.Logger) {
	t := time.NewTicker(3 * time.Second)
	defer t.Stop()
	var late uint64
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for n := hs.Late(); late < n; late++ {
			m.Handshake(metrics.OutcomeLate)
		}
		if !c.nc.IsConnected() {
			continue
		}
		ok := true
		for _, name := range []string{bus.ReqStream, bus.DLQStream} {
			cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			_, err := js.Stream(cctx, name)
			cancel()
			if errors.Is(err, jetstream.ErrStreamNotFound) {
				ok = false
				log.Error().Str("stream", name).Msg("stream missing: not ready")
			}
		}
		c.streamsOK.Store(ok)
	}
}

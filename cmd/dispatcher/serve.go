package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
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
	"fairdispatch/configs/livepolicy"
	"fairdispatch/dispatcher"
	"fairdispatch/filters"
	"fairdispatch/ingest"
	"fairdispatch/internal/buildinfo"
	"fairdispatch/kvindex"
	"fairdispatch/leader"
	"fairdispatch/metrics"
	"fairdispatch/naming"
	"fairdispatch/scheduler"
	"fairdispatch/wire"
)

// serve runs the dispatcher with policy pol until ctx ends.
func serve(ctx context.Context, s *settings, pol *configs.Policy, log zerolog.Logger, stdout io.Writer) error {
	url := s.natsURL
	if url == "" {
		// One process per data directory (docs/decisions.md, Operations): two embedded
		// servers on one store would each lead and contradict each other.
		lock, err := lockDataDir(s.dataDir, time.Now())
		if err != nil {
			return err
		}
		defer lock.Release()
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

	names, err := naming.New(s.prefix) // validated with the flags
	if err != nil {
		return err
	}
	var act atomic.Pointer[dispatcher.Actor]
	nc, err := bus.Connect(ctx, bus.Options{
		URL: url, Name: "fairdispatch-dispatcher",
		CredsFile: s.creds, NKeyFile: s.nkey, User: s.user, Password: s.password, InboxPrefix: s.inboxPrefix,
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
	if err := bus.EnsureStreams(ctx, js, bus.StreamConfig{Prefix: s.prefix, Replicas: s.replicas, Storage: storage, DuplicateWindow: s.dupWindow, KVMaxAge: s.kvMaxAge}); err != nil {
		return err
	}

	// The live policy (docs/design.md, Live policy): the bucket's current
	// revision runs when it is valid; the key is seeded from --policy-config
	// when it has none.
	store, err := livepolicy.Open(ctx, js, names.PolicyBucket(), livepolicy.BucketConfig{Replicas: s.replicas, Storage: storage})
	if err != nil {
		return err
	}
	var seed []byte
	if s.policy != "" {
		if seed, err = os.ReadFile(s.policy); err != nil {
			return fmt.Errorf("--policy-config: %w", err)
		}
	}
	if s.demo && seed != nil {
		// A demo shows its own policy file: make it the bucket's revision, or
		// a demo run on a data directory that an earlier run left would show
		// that run's policy.
		if err := demoPolicy(ctx, store, s.policy, seed); err != nil {
			return err
		}
	}
	pol, cur, refused, err := livepolicy.Start(ctx, store, seed, pol, log)
	if err != nil {
		return err
	}
	polRev, polSource := cur.Revision, "bucket"
	switch {
	case refused != nil || cur.Revision == 0:
		polRev, polSource = 0, "file"
		if s.policy == "" {
			polSource = "flags"
		}
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	classNames := make([]string, len(pol.Classes))
	for i, c := range pol.Classes {
		classNames[i] = c.Name
	}
	m := metrics.New(reg, classNames)
	bv, brev, bgo := buildinfo.Read().Label()
	metrics.RegisterBuildInfo(reg, bv, brev, bgo)

	var kv *kvindex.Index
	var kvMetrics *metrics.KV
	if s.kvIndex {
		w, err := kvindex.ParseWeights(s.kvWeights) // validated with the other flags
		if err != nil {
			return err
		}
		if kv, err = kvindex.New(kvindex.Config{Weights: w, MaxBlocks: s.kvMaxBlocks}); err != nil {
			return err
		}
		kvMetrics = metrics.NewKV(reg, dispatcher.KVTiers)
	}
	sched := scheduler.New(scheduler.Config{
		KV:     kv,
		Policy: pol,
		Thresholds: filters.Thresholds{
			DecodeBlocks: s.decodeBlocks.v, PrefillTokens: s.prefillTokens.v, PrefillFrac: s.prefillTokensFrac.v,
		},
		Scoring: filters.Scoring{BlockSize: s.blockSize, OverlapCredit: s.overlapCredit, PrefillScale: s.prefillScale,
			DecodeRequestWeight: s.decW, Temperature: s.temperature},
		Grace:            int64(s.grace),
		Rand:             rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 0x9e3779b97f4a7c15)),
		MaxWorkers:       s.maxWorkers,
		NoWorkersTimeout: int64(s.noWorkersTimeout),
		MaxKeysPerClass:  s.maxKeysPerClass,
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
	gate := &ingest.Gate{} // closed by the actor while no worker is live
	var running []byte     // the bucket's policy YAML, when it runs
	if polRev > 0 {
		running = cur.YAML
	}
	rec, err := startRecorder(ctx, s, nc, js, names, reg, log, running)
	if err != nil {
		return err
	}
	defer func() { _ = rec.Close() }() // after the actor has stopped
	a := dispatcher.New(dispatcher.Config{Stream: names.ReqStream(), Prefix: s.prefix, AckWait: s.ackWait, DispatchTimeout: s.dispatchTimeout,
		PolicyRevision: polRev, PolicySource: polSource}, dispatcher.Deps{
		Scheduler: sched, Handshaker: hs, DeadLetters: dl,
		Keeper: ingest.NewKeeper(s.ackWait, log), Gate: gate,
		Outcome: func(subj string, o wire.Outcome) error { return bus.PublishOutcome(nc, subj, o) },
		Metrics: m, Trace: tracer(rec), Log: log,
		KV:        kv,
		KVResync:  func(w string, rank int32) error { return bus.RequestKVResync(nc, names.KVSync(w), rank) },
		KVMetrics: kvMetrics,
	})
	act.Store(a)
	if !nc.IsConnected() {
		a.Connected(false)
	}

	if refused != nil {
		log.Error().Str("component", "policy").Str("bucket", store.Bucket()).Uint64("revision", cur.Revision).Str("error", refused.Error()).
			Str("running", polSource).Msg("policy revision refused: the last good policy stays")
		a.RefusePolicy(cur.Revision, cur.Created, refused)
	}
	follower := &livepolicy.Follower{Store: store, Applier: a, Log: log, Running: cur.Revision}
	go follower.Run(ctx)

	ctl := &control{a: a, nc: nc, names: names}
	ctl.streamsOK.Store(true) // ensured just above
	go ctl.watchStreams(ctx, js, hs, dl, m, log)
	adm := admin.New(admin.Config{Addr: s.httpAddr, Token: s.adminToken, Gatherer: reg, Pprof: s.pprof}, ctl, log)
	if err := adm.Start(); err != nil {
		return fmt.Errorf("admin http: %w", err)
	}
	sub, err := bus.SubscribeLoad(nc, s.prefix, a.LoadReport)
	if err != nil {
		return err
	}
	defer sub.Unsubscribe()
	doneSub, err := bus.SubscribeDone(nc, s.prefix, a.CompletionRecord)
	if err != nil {
		return err
	}
	defer doneSub.Unsubscribe()
	if kv != nil {
		// Read <Q>_KV from its first message: this rebuilds the index after
		// a restart (docs/protocol.md, Resynchronisation).
		stopKV, err := bus.ConsumeKV(ctx, js, names.KVStream(), names.KVAll(), func(m bus.KVMessage) { a.KVEvent(m.Token, m.Data, m.Published) })
		if err != nil {
			return err
		}
		defer stopKV()
	}

	// Roles: with leader election (the default) this process pulls and
	// dispatches only while it holds the lease; a standby keeps its registry
	// warm from load reports. Shutdown order (docs/design.md, Delivery guarantees, SIGTERM): stop pulling and
	// wait for the pull to end, so that messages handed back are not pulled
	// straight in again; then the actor hands back what it holds and waits for
	// dispatches in flight; then the lease is released for a standby.
	handBacks, err := ingest.NewHandBacks(nc)
	if err != nil {
		return err
	}
	pull := &puller{js: js, a: a, log: log, fatal: make(chan error, 1), cfg: ingest.Config{
		Stream: names.ReqStream(), Durable: names.Durable(), AckWait: s.ackWait, MaxHeld: s.maxHeld, InFlight: inFlight, Batch: 256, Gate: gate,
		HandBacks: handBacks,
	}}
	runCtx, cancelRun := context.WithCancel(ctx)
	defer cancelRun()
	actorCtx, stopActor := context.WithCancel(context.Background())
	defer stopActor()
	electCtx, stopElect := context.WithCancel(context.Background())
	defer stopElect()
	electDone := make(chan struct{})
	if s.election {
		el, err := leader.New(ctx, js, leader.Config{Bucket: names.LeaderBucket(), ID: s.instanceID, TTL: s.leaseTTL, Replicas: s.replicas, Storage: storage}, log)
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
		Dur("startup_grace", s.grace).Bool("leader_election", s.election).Str("instance", s.instanceID).
		Str("prefix", names.Prefix()).Str("stream", names.ReqStream()).Str("lease_bucket", names.LeaderBucket()).
		Str("policy_bucket", store.Bucket()).Uint64("policy_revision", polRev).Msg("dispatcher running")

	if s.demo {
		go func() {
			defer cancelRun()
			demo := runDemo
			if s.demoScenario == "keys" {
				demo = func(ctx context.Context, nc *nats.Conn, s *settings, out io.Writer, log zerolog.Logger) error {
					return runKeysDemo(ctx, nc, s, pol, out, log)
				}
			}
			if err := demo(runCtx, nc, s, stdout, log); err != nil {
				log.Error().Err(err).Msg("demo failed")
			}
		}()
	}
	a.Run(actorCtx)
	if err := rec.Close(); err != nil {
		log.Warn().Err(err).Msg("trace file not closed cleanly")
	}
	stopElect()
	<-electDone
	closeCtx, cancelClose := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancelClose()
	_ = dl.Close(closeCtx)
	_ = adm.Shutdown(closeCtx)
	hs.Close()
	// Before the connection (and an embedded server) goes: every hand-back
	// confirmed by the server (docs/decisions.md, Operations: hand-back is confirmed), and
	// what is still buffered (outcomes) flushed.
	if n, err := handBacks.Wait(closeCtx); err != nil {
		log.Warn().Err(err).Uint64("unconfirmed", n).Msg("hand-back not confirmed by the server; those requests wait out the ack wait")
	}
	if err := nc.FlushWithContext(closeCtx); err != nil {
		log.Warn().Err(err).Msg("nats flush")
	}
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
	// nats-server reports a taken port only in its own log (off here) and then
	// never becomes ready: try the address first, so that a taken port fails at
	// once with the address named, as the admin port does.
	if p > 0 {
		l, err := net.Listen("tcp", s.natsListen)
		if err != nil {
			return nil, fmt.Errorf("embedded nats-server: --nats-listen %s: %w", s.natsListen, err)
		}
		_ = l.Close()
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
	names     naming.Names
	streamsOK atomic.Bool
}

func (c *control) Thresholds() filters.Thresholds { return c.a.Thresholds() }
func (c *control) SetThresholds(ctx context.Context, t filters.Thresholds) error {
	return c.a.SetThresholds(ctx, t)
}
func (c *control) Queues() any { return c.a.View() }

// Ready is docs/config.md, Admin HTTP API's readiness: connected, streams present, grace over,
// leading, and some worker live (docs/design.md, Fleet outage).
func (c *control) Ready() error {
	switch {
	case !c.nc.IsConnected():
		return fmt.Errorf("not connected to NATS")
	case !c.streamsOK.Load():
		return fmt.Errorf("stream %s or %s missing", c.names.ReqStream(), c.names.DLQStream())
	case c.a.InGrace():
		return fmt.Errorf("start-up grace running")
	case !c.a.Leader():
		return fmt.Errorf("standby: another dispatcher holds the leader lease")
	case c.a.NoLiveWorkers():
		return fmt.Errorf("no live workers")
	}
	return nil
}

// watchStreams checks every few seconds that both streams exist, and copies
// the handshaker's count of late answers and the dead letterer's count of
// retries into the metrics.
func (c *control) watchStreams(ctx context.Context, js jetstream.JetStream, hs *bus.Handshaker, dl *bus.DeadLetterer, m *metrics.Metrics, log zerolog.Logger) {
	t := time.NewTicker(3 * time.Second)
	defer t.Stop()
	var late, retries uint64
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for n := hs.Late(); late < n; late++ {
			m.Handshake(metrics.OutcomeLate)
		}
		for n := dl.Retries(); retries < n; retries++ {
			m.DeadLetterRetried()
		}
		if !c.nc.IsConnected() {
			continue
		}
		ok := true
		for _, name := range []string{c.names.ReqStream(), c.names.DLQStream()} {
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

// demoPolicy puts the demo's policy file into the bucket as a new revision
// when the bucket holds another one.
func demoPolicy(ctx context.Context, store *livepolicy.Store, name string, yaml []byte) error {
	cur, err := store.Get(ctx)
	if err == nil && !cur.Deleted && string(cur.YAML) == string(yaml) {
		return nil
	}
	if err != nil && !errors.Is(err, livepolicy.ErrNoPolicy) {
		return fmt.Errorf("--demo: %w", err)
	}
	if _, _, err := store.Put(ctx, name, yaml); err != nil {
		return fmt.Errorf("--demo: %w", err)
	}
	return nil
}

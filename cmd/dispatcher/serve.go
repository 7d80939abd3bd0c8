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
	"fairdispatch/recorder"
	"fairdispatch/scheduler"
	"fairdispatch/wire"
)

// serve runs the dispatcher with policy pol until ctx ends. It reads as the
// start-up sequence: NATS (the embedded server or the URL), the connection and
// the streams, the live policy, the scheduler, the actor and its adapters,
// the admin API and the subscriptions; then it runs the actor under its role
// (leader or standby) until ctx ends, and shuts down in the order that keeps
// every request (docs/design.md, Delivery guarantees, SIGTERM).
func serve(ctx context.Context, s *settings, pol *configs.Policy, log zerolog.Logger, stdout io.Writer) error {
	p := &process{s: s, pol: pol, log: log, stdout: stdout}
	defer p.cleanup()
	for _, step := range []func(context.Context) error{
		p.startNATS,
		p.connect,
		p.startPolicy,
		p.buildScheduler,
		p.buildActor,
		p.startAdapters,
	} {
		if err := step(ctx); err != nil {
			return err
		}
	}
	return p.run(ctx)
}

// process is one dispatcher's resources, built by serve's steps in order.
type process struct {
	s       *settings
	pol     *configs.Policy
	log     zerolog.Logger
	stdout  io.Writer
	closers []func() // run in reverse by cleanup

	url     string
	srv     *server.Server // the embedded nats-server; nil with --nats-url
	names   naming.Names
	act     atomic.Pointer[dispatcher.Actor]
	nc      *nats.Conn
	closed  chan error // the connection closed for good (bus.Options.OnClosed)
	js      jetstream.JetStream
	storage jetstream.StorageType

	store   *livepolicy.Store
	cur     livepolicy.Revision
	refused error
	polRev  uint64
	polSrc  string

	reg   *prometheus.Registry
	m     *metrics.Metrics
	storM *metrics.Storage
	kv    *kvindex.Index
	kvM   *metrics.KV
	sched *scheduler.Scheduler

	hs        *bus.Handshaker
	dl        *bus.DeadLetterer
	rec       *recorder.Recorder
	gate      *ingest.Gate
	a         *dispatcher.Actor
	adm       *admin.Server
	handBacks *ingest.HandBacks

	stopFollow context.CancelFunc // ends the policy follower (shutdown)
}

// onCleanup registers f to run at cleanup, after everything registered later.
func (p *process) onCleanup(f func()) { p.closers = append(p.closers, f) }

func (p *process) cleanup() {
	for i := len(p.closers) - 1; i >= 0; i-- {
		p.closers[i]()
	}
}

// startNATS starts the embedded nats-server when no --nats-url is given, on
// a data directory locked for this process.
func (p *process) startNATS(context.Context) error {
	p.url = p.s.natsURL
	if p.url != "" {
		return nil
	}
	// One process per data directory (docs/decisions.md, Operations): two embedded
	// servers on one store would each lead and contradict each other.
	lock, err := lockDataDir(p.s.dataDir, time.Now())
	if err != nil {
		return err
	}
	p.onCleanup(lock.Release)
	srv, err := embeddedServer(p.s, p.log)
	if err != nil {
		return err
	}
	p.onCleanup(func() {
		srv.Shutdown()
		srv.WaitForShutdown()
	})
	p.url, p.srv = srv.ClientURL(), srv
	return nil
}

// connect connects to NATS (the actor learns of disconnections once it
// exists) and creates or updates the streams.
func (p *process) connect(ctx context.Context) error {
	s := p.s
	var err error
	if p.names, err = naming.New(s.prefix); err != nil { // validated with the flags
		return err
	}
	p.closed = make(chan error, 1)
	p.nc, err = bus.Connect(ctx, bus.Options{
		URL: p.url, Name: "fairdispatch-dispatcher",
		CredsFile: s.auth.Creds, NKeyFile: s.auth.NKey, User: s.auth.User, Password: s.auth.Password, InboxPrefix: s.inboxPrefix,
		TLSCA: s.auth.TLSCA, TLSCert: s.auth.TLSCert, TLSKey: s.auth.TLSKey,
		OnDisconnect: func() {
			if a := p.act.Load(); a != nil {
				a.Connected(false)
			}
		},
		OnReconnect: func() {
			if a := p.act.Load(); a != nil {
				a.Connected(true)
			}
		},
		OnClosed: func(err error) {
			select {
			case p.closed <- err:
			default:
			}
		},
	}, p.log)
	if err != nil {
		return err
	}
	p.onCleanup(p.nc.Close)
	if p.js, err = jetstream.New(p.nc); err != nil {
		return fmt.Errorf("jetstream: %w", err)
	}
	p.storage = jetstream.FileStorage
	if s.storage == "memory" {
		p.storage = jetstream.MemoryStorage
	}
	return bus.EnsureStreams(ctx, p.js, bus.StreamConfig{Prefix: s.prefix, Replicas: s.replicas, Storage: p.storage,
		DuplicateWindow: s.dupWindow, KVMaxAge: s.kvMaxAge, Log: p.log})
}

// startPolicy opens the policy bucket (docs/design.md, Live policy): the
// bucket's current revision runs when it is valid; the key is seeded from
// --policy-config when it has none.
func (p *process) startPolicy(ctx context.Context) error {
	s := p.s
	var err error
	p.store, err = livepolicy.Open(ctx, p.js, p.names.PolicyBucket(), livepolicy.BucketConfig{Replicas: s.replicas, Storage: p.storage})
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
		if err := demoPolicy(ctx, p.store, s.policy, seed); err != nil {
			return err
		}
	}
	st, err := livepolicy.Start(ctx, p.store, seed, p.pol, p.log)
	if err != nil {
		return err
	}
	p.pol, p.cur, p.refused = st.Policy, st.Current, st.Refused
	p.polRev, p.polSrc = st.Running, "bucket"
	if st.Running == 0 {
		p.polSrc = "file"
		if s.policy == "" {
			p.polSrc = "flags"
		}
	}
	return nil
}

// buildScheduler builds the metrics, the KV index (--kv-index) and the
// scheduler.
func (p *process) buildScheduler(context.Context) error {
	s := p.s
	p.reg = prometheus.NewRegistry()
	p.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	names := make([]string, len(p.pol.Classes))
	for i, c := range p.pol.Classes {
		names[i] = c.Name
	}
	p.m = metrics.New(p.reg, names)
	p.storM = metrics.NewStorage(p.reg, []string{p.names.ReqStream(), p.names.DLQStream(), p.names.KVStream()}, p.srv != nil)
	bv, brev, bgo := buildinfo.Read().Label()
	metrics.RegisterBuildInfo(p.reg, bv, brev, bgo)
	if s.kvIndex {
		w, err := kvindex.ParseWeights(s.kvWeights) // validated with the other flags
		if err != nil {
			return err
		}
		if p.kv, err = kvindex.New(kvindex.Config{Weights: w, MaxBlocks: s.kvMaxBlocks}); err != nil {
			return err
		}
		p.kvM = metrics.NewKV(p.reg, dispatcher.KVTiers)
	}
	p.sched = scheduler.New(scheduler.Config{
		KV:     p.kv,
		Policy: p.pol,
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
	return nil
}

// buildActor builds the handshaker, the dead letterer, the recorder and the
// queue actor around the scheduler.
func (p *process) buildActor(ctx context.Context) error {
	s, nc, names := p.s, p.nc, p.names
	var err error
	if p.hs, err = bus.NewHandshaker(nc, s.prefix, s.dispatchTimeout, func(r bus.Result) { p.act.Load().HandshakeResult(r) }, p.log); err != nil {
		return err
	}
	p.onCleanup(p.hs.Close) // idempotent; closed before the drain on a clean exit
	if p.dl, err = bus.NewDeadLetterer(p.js, s.prefix, p.log); err != nil {
		return err
	}
	p.gate = &ingest.Gate{} // closed by the actor while no worker is live
	var running []byte      // the bucket's policy YAML, when it runs
	if p.polRev > 0 {
		running = p.cur.YAML
	}
	if p.rec, err = startRecorder(ctx, s, nc, p.js, names, p.reg, p.log, running); err != nil {
		return err
	}
	p.onCleanup(func() { _ = p.rec.Close() }) // after the actor has stopped
	p.a = dispatcher.New(dispatcher.Config{Stream: names.ReqStream(), Prefix: s.prefix, AckWait: s.ackWait, DispatchTimeout: s.dispatchTimeout,
		PolicyRevision: p.polRev, PolicySource: p.polSrc}, dispatcher.Deps{
		Scheduler: p.sched, Handshaker: p.hs, DeadLetters: p.dl,
		Keeper: ingest.NewKeeper(s.ackWait, p.log), Gate: p.gate,
		Outcome: func(subj string, o wire.Outcome) error { return bus.PublishOutcome(nc, subj, o) },
		Metrics: p.m, Trace: tracer(p.rec), Log: p.log,
		KV:           p.kv,
		KVResync:     func(w string, rank int32) error { return bus.RequestKVResync(nc, names.KVSync(w), rank) },
		KVMetrics:    p.kvM,
		CancelWorker: func(w string, c wire.Cancel) error { return bus.PublishCancel(nc, names, w, c) },
	})
	p.act.Store(p.a)
	if !nc.IsConnected() {
		p.a.Connected(false)
	}
	return nil
}

// startAdapters starts what feeds the actor and what reads it: the policy
// follower, the stream watch, the admin API, the load report, completion
// record and cancellation subscriptions, and the KV event replay (--kv-index).
func (p *process) startAdapters(ctx context.Context) error {
	s, a, log := p.s, p.a, p.log
	if p.refused != nil {
		msg := "policy revision refused: the last good revision of the bucket runs"
		switch p.polSrc {
		case "file":
			msg = "policy revision refused, and the bucket's history keeps no valid one: --policy-config runs"
		case "flags":
			msg = "policy revision refused, and the bucket's history keeps no valid one: the flags' default class runs"
		}
		log.Error().Str("component", "policy").Str("bucket", p.store.Bucket()).Uint64("revision", p.cur.Revision).Str("error", p.refused.Error()).
			Str("running", p.polSrc).Uint64("running_revision", p.polRev).Msg(msg)
		a.RefusePolicy(p.cur.Revision, p.cur.Created, p.refused)
	}
	follower := &livepolicy.Follower{Store: p.store, Applier: a, Log: log, Running: p.cur.Revision, RunningCreated: p.cur.Created}
	fctx, stopFollow := context.WithCancel(ctx)
	p.stopFollow = stopFollow // before the connection drains: its watch ending then is no fault
	go follower.Run(fctx)

	ctl := &control{a: a, nc: p.nc, names: p.names, storage: p.storM, srv: p.srv, replicas: s.replicas}
	ctl.streamsOK.Store(true) // ensured by connect
	go ctl.watchStreams(ctx, p.js, p.hs, p.dl, p.m, log)
	p.adm = admin.New(admin.Config{Addr: s.httpAddr, Token: s.adminToken, Gatherer: p.reg, Pprof: s.pprof}, ctl, log)
	if err := p.adm.Start(); err != nil {
		return fmt.Errorf("admin http: %w", err)
	}
	sub, err := bus.SubscribeLoad(p.nc, s.prefix, a.LoadReport)
	if err != nil {
		return err
	}
	p.onCleanup(func() { _ = sub.Unsubscribe() })
	doneSub, err := bus.SubscribeDone(p.nc, s.prefix, a.CompletionRecord)
	if err != nil {
		return err
	}
	p.onCleanup(func() { _ = doneSub.Unsubscribe() })
	// Every dispatcher, leader or standby, hears cancellations: a standby
	// remembers them for when it leads (docs/protocol.md, Cancellation).
	cancelSub, err := bus.SubscribeCancel(p.nc, s.prefix, a.CancelRequest)
	if err != nil {
		return err
	}
	p.onCleanup(func() { _ = cancelSub.Unsubscribe() })
	if p.kv != nil {
		// Read <Q>_KV from its first message: this rebuilds the index after
		// a restart (docs/protocol.md, Resynchronisation).
		stopKV, err := bus.ConsumeKV(ctx, p.js, p.names.KVStream(), p.names.KVAll(), func(m bus.KVMessage) { a.KVEvent(m.Token, m.Data, m.Published) })
		if err != nil {
			return err
		}
		p.onCleanup(stopKV)
	}
	p.handBacks, err = ingest.NewHandBacks(p.nc)
	return err
}

// run runs the actor until ctx ends, pulling and dispatching only while this
// process leads (with leader election, the default; a standby keeps its
// registry warm from load reports), then shuts down. Shutdown order
// (docs/design.md, Delivery guarantees, SIGTERM): stop pulling and wait for
// the pull to end, so that messages handed back are not pulled straight in
// again; then the actor hands back what it holds and waits for dispatches in
// flight; then the lease is released for a standby; then every hand-back is
// confirmed and the connection drained.
func (p *process) run(ctx context.Context) error {
	s, a, log := p.s, p.a, p.log
	pull := &puller{js: p.js, a: a, log: log, fatal: make(chan error, 1), cfg: ingest.Config{
		Stream: p.names.ReqStream(), Durable: p.names.Durable(), AckWait: s.ackWait, MaxHeld: s.maxHeld, InFlight: p.inFlight(),
		Batch: 256, Gate: p.gate, HandBacks: p.handBacks,
	}}
	runCtx, cancelRun := context.WithCancel(ctx)
	defer cancelRun()
	actorCtx, stopActor := context.WithCancel(context.Background())
	defer stopActor()
	electCtx, stopElect := context.WithCancel(context.Background())
	defer stopElect()
	electDone := make(chan struct{})
	if s.election {
		el, err := leader.New(ctx, p.js, leader.Config{Bucket: p.names.LeaderBucket(), ID: s.instanceID, TTL: s.leaseTTL, Replicas: s.replicas,
			RenewalFailed: func(error) { p.m.LeaseRenewalFailed() }, MayHaveLed: p.mayHaveLed}, log)
		if err != nil {
			return err
		}
		pull.valid = el.Valid
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
		case err := <-p.closed:
			// nats.go does not reconnect after some server errors: a
			// dispatcher without a connection would only look alive.
			fatal = errors.Join(errors.New("nats connection closed for good"), err)
			log.Error().Err(fatal).Msg("exiting so that a supervisor restarts the dispatcher")
		}
		pull.close()
		stopActor()
	}()
	log.Info().Str("nats", p.url).Str("http", p.adm.Addr()).Int("classes", len(p.pol.Classes)).
		Dur("startup_grace", s.grace).Bool("leader_election", s.election).Str("instance", s.instanceID).
		Str("prefix", p.names.Prefix()).Str("stream", p.names.ReqStream()).Str("lease_bucket", p.names.LeaderBucket()).
		Str("policy_bucket", p.store.Bucket()).Uint64("policy_revision", p.polRev).Msg("dispatcher running")
	if s.demo {
		go func() {
			defer cancelRun()
			if err := p.demo(runCtx); err != nil {
				log.Error().Err(err).Msg("demo failed")
			}
		}()
	}
	a.Run(actorCtx)
	p.shutdown(stopElect, electDone)
	return fatal
}

// mayHaveLed tells the elector whether a dispatcher may have led with a
// lease bucket older than the one created at created (leader.Config.MayHaveLed):
// the durable consumer on the request stream, which the first leader creates,
// is older than the bucket (a memory bucket created again after its server
// restarted). Any error but "not found" counts as yes.
func (p *process) mayHaveLed(ctx context.Context, created time.Time) bool {
	c, err := p.js.Consumer(ctx, p.names.ReqStream(), p.names.Durable())
	if errors.Is(err, jetstream.ErrConsumerNotFound) {
		return false
	}
	return err != nil || c.CachedInfo().Created.Before(created)
}

// inFlight is --max-in-worker, by default four times --max-held.
func (p *process) inFlight() int { return p.s.inFlightRoom() }

// inFlightRoom is --max-in-worker, or its default of 4 x --max-held.
func (s *settings) inFlightRoom() int {
	if s.inFlight == 0 {
		return 4 * s.maxHeld
	}
	return s.inFlight
}

// demo runs the demo of --demo-scenario.
func (p *process) demo(ctx context.Context) error {
	switch p.s.demoScenario {
	case "keys":
		return runKeysDemo(ctx, p.nc, p.s, p.pol, p.stdout, p.log)
	case "gateway":
		return runGatewayDemo(ctx, p.nc, p.s, p.stdout, p.log)
	}
	return runDemo(ctx, p.nc, p.s, p.stdout, p.log)
}

// shutdown runs after the actor has stopped: the trace closed, the lease
// released, the dead letters, admin API and handshakes ended, and, before the
// connection (and an embedded server) goes, every hand-back confirmed by the
// server (docs/decisions.md, Operations: hand-back is confirmed) and what is
// still buffered (outcomes) flushed.
func (p *process) shutdown(stopElect context.CancelFunc, electDone <-chan struct{}) {
	log := p.log
	p.stopFollow()
	if err := p.rec.Close(); err != nil {
		log.Warn().Err(err).Msg("trace file not closed cleanly")
	}
	stopElect()
	<-electDone
	closeCtx, cancelClose := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancelClose()
	_ = p.dl.Close(closeCtx)
	_ = p.adm.Shutdown(closeCtx)
	p.hs.Close()
	if n, err := p.handBacks.Wait(closeCtx); err != nil {
		log.Warn().Err(err).Uint64("unconfirmed", n).Msg("hand-back not confirmed by the server; those requests wait out the ack wait")
	}
	if err := p.nc.FlushWithContext(closeCtx); err != nil {
		log.Warn().Err(err).Msg("nats flush")
	}
	if err := p.nc.Drain(); err != nil {
		log.Warn().Err(err).Msg("nats drain")
	}
	log.Info().Msg("dispatcher stopped")
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
	sync, err := bus.ParseSync(s.natsSync) // validated with the flags
	if err != nil {
		return nil, err
	}
	opts := &server.Options{
		ServerName: "fairdispatch-embedded", Host: host, Port: p,
		JetStream: true, StoreDir: s.dataDir, NoLog: true, NoSigs: true,
		JetStreamMaxStore: s.natsMaxStore, // 0: the server's default
	}
	sync.Apply(opts)
	srv, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("embedded nats-server: %w", err)
	}
	srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		srv.Shutdown()
		return nil, fmt.Errorf("embedded nats-server on %s did not start (is the port taken?)", s.natsListen)
	}
	log.Info().Str("component", "nats").Str("url", srv.ClientURL()).Str("data_dir", s.dataDir).Str("sync", sync.String()).
		Int64("max_file_store", srv.JetStreamConfig().MaxStore).Msg("embedded nats-server with JetStream started; it stops with the dispatcher")
	return srv, nil
}

package dispatcher

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"fairdispatch/bus"
	"fairdispatch/filters"
	"fairdispatch/ingest"
	"fairdispatch/kvindex"
	"fairdispatch/metrics"
	"fairdispatch/request"
	"fairdispatch/scheduler"
	"fairdispatch/wire"
	"fairdispatch/workers"
)

// Handshaker sends a dispatched request to a worker (bus.Handshaker). Send
// must not keep hdr, nor its value slices, nor body once it returns: the
// actor reuses them for the next dispatch. A nil hdr is the compact form: body
// is the frame.
type Handshaker interface {
	Send(worker string, hdr nats.Header, body []byte, token uint64) error
}

// DeadLetterer stores rejected requests (bus.DeadLetterer).
type DeadLetterer interface {
	Publish(dl bus.DeadLetter, done func(error)) error
}

// Releaser is told when held deliveries leave the dispatcher (ingest.Consumer).
type Releaser interface {
	Release(n int)
	Stop()
}

// PullGate stops and resumes pulling (ingest.Gate): closed while no worker is live.
type PullGate interface {
	Set(closed bool)
}

// Config configures an Actor.
type Config struct {
	Stream          string        // the request stream, for default request ids
	Prefix          string        // the subject prefix: no outcome may be published below it
	AckWait         time.Duration // the consumer's ack wait
	DispatchTimeout time.Duration // how long a worker may take to answer; bounds shutdown
	Tick            time.Duration // safety-net re-check and deadline resolution; default 25ms
	Now             func() time.Time
	// PolicyRevision is the policy bucket's revision the scheduler starts
	// with (0: not from the bucket); PolicySource is "bucket", "file" or
	// "flags" (wire.PolicyView).
	PolicyRevision uint64
	PolicySource   string
}

// Deps are the adapters the actor drives.
type Deps struct {
	Scheduler   *scheduler.Scheduler
	Handshaker  Handshaker
	DeadLetters DeadLetterer
	Consumer    Releaser // the first consumer; SetConsumer replaces it when the role changes
	Keeper      *ingest.Keeper
	Gate        PullGate // closed during a fleet outage; nil: none
	Outcome     func(subject string, o wire.Outcome) error
	Metrics     *metrics.Metrics
	Trace       Tracer // the traffic trace; nil: none
	Log         zerolog.Logger
	// KV is the KV cache index the scheduler scores with (the one in its
	// Config); the actor applies the workers' events to it. nil: none.
	KV *kvindex.Index
	// KVResync asks a worker to resynchronise a rank (bus.RequestKVResync);
	// nil: never asked.
	KVResync func(worker string, rank int32) error
	// KVMetrics counts the index's events and records its size; nil: none.
	KVMetrics *metrics.KV
	// CancelWorker forwards a cancellation to the worker running the
	// request, on <prefix>.cancel.<worker> (bus.PublishCancel); nil: never.
	CancelWorker func(worker string, c wire.Cancel) error
}

// held is a request the dispatcher holds: queued, or sent and not yet answered.
// (Fields ordered by size: 188 bytes, allocated as 192; one per held request,
// docs/bench.md, Memory per held request.)
type held struct {
	msg      ingest.Msg
	rel      Releaser // the consumer the message came from
	snap     *request.Snapshot
	redo     *redelivery // a delivery of it that came during its handshake
	replyTo  string
	worker   string
	seq      uint64
	rev      uint64           // the policy revision it was dispatched under
	err      *scheduler.Error // why, while dead
	rank     int32
	attempt  uint32 // the JetStream delivery count (docs/protocol.md, Outcomes: attempt)
	inFlight bool
	dead     bool       // being dead-lettered
	cancel   bool       // cancelled while in a handshake (cancel.go)
	form     letterForm // the form of the dead letter being stored
}

// redelivery is a delivery of a request whose dispatch is being answered,
// kept apart until the answer: merged into the held request after a
// refusal, admitted anew after an acceptance (the worker may have handed it
// back at once, and this delivery is the one JetStream now waits on).
type redelivery struct {
	dl  ingest.Delivery
	rel Releaser
}

type dlqDone struct {
	seq uint64
	err error
}

type thresholdReq struct {
	t    filters.Thresholds
	done chan struct{}
}

// Actor is the queue actor. Create it with New, feed it through its methods
// (each safe for concurrent use, and none blocks a NATS callback: see
// mailbox.go), and run it with Run.
type Actor struct {
	cfg Config
	d   Deps
	log zerolog.Logger
	// loggedLead is the role last logged and given to the metrics (the
	// actor's goroutine only).
	loggedLead bool

	results     *mailbox[bus.Result]
	loads       *reportBox
	dlq         *mailbox[dlqDone]
	done        *mailbox[doneRecord]
	kv          *mailbox[kvEvent] // parsed KV cache events (kv.go)
	cancels     *mailbox[string]  // ids of cancellations (cancel.go)
	thresholds  chan thresholdReq
	policies    chan policyReq
	conn        chan struct{} // a connection change; the state is in connState
	role        chan struct{} // a role or term change; the state is in leading and term
	handBackReq chan chan int

	cur         *term // the term deliveries are admitted from
	held        map[uint64]*held
	byID        map[string]uint64 // held requests' stream sequences by request id
	cancelled   *memo[struct{}]   // ids cancelled lately (cancel.go)
	running     *memo[runRef]     // where requests were dispatched lately (cancel.go)
	lettered    *memo[struct{}]   // stream sequences dead-lettered and acknowledged lately (deadletter.go)
	inFlight    int
	connected   bool
	sendPaused  bool // a send failed for the connection's fault: wait for the next tick or connection event
	stopping    bool
	tickDecs    []scheduler.Decision
	preempts    []scheduler.Preemption // scratch of preempt (preempt.go)
	hdr         nats.Header            // the dispatch headers, reused from one dispatch to the next
	hdrVals     []string               // the backing array of hdr's values, reused likewise
	frame       []byte                 // the compact dispatch frame, reused likewise (up to maxKeptFrame)
	parked      []*held                // malformed requests that arrived during the start-up grace
	workerLoads []metrics.WorkerLoad
	conflictLog map[string]time.Time // worker id -> last warning of two live instances
	ackWaitMs   string               // the Dispatch-Ack-Wait-Ms header's value
	polRev      uint64               // the policy revision running (0: not from the bucket)
	out         bool                 // a fleet outage is running (docs/design.md, Fleet outage)
	outSince    int64                // since when, Unix ns

	ops  opsLog   // rate-limited operator warnings (opslog.go)
	rate rateMemo // the previous View's dispatch counts, for DispatchRate (view.go)

	kvDrops dropLimiter    // rate-limited warnings of dropped KV events
	kvStale []kvindex.Rank // scratch
	kvAsked time.Time      // when stale ranks were last asked to resynchronise

	stats  []wire.ClassStats  // scratch for publishView
	served map[string]*served // per class name, for the view (view.go)

	view      atomic.Pointer[wire.QueueView]
	polView   atomic.Pointer[wire.PolicyView]
	polMu     sync.Mutex // serialises writers of polView
	th        atomic.Pointer[filters.Thresholds]
	connState atomic.Bool
	grace     atomic.Bool
	fleetOut  atomic.Bool // the last value of out
	leading   atomic.Bool // this process may pull and dispatch (it holds the lease)
	term      atomic.Pointer[term]
	termMu    sync.Mutex // serialises SetConsumer
}

// idle is the consumer of an actor that has not pulled yet.
type idle struct{}

func (idle) Release(int) {}
func (idle) Stop()       {}

// noGate is the PullGate of an actor given none.
type noGate struct{}

func (noGate) Set(bool) {}

// New returns an actor; it does nothing until Run.
func New(cfg Config, d Deps) *Actor {
	if cfg.Tick <= 0 {
		cfg.Tick = 25 * time.Millisecond
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	a := &Actor{
		cfg: cfg, d: d, log: d.Log.With().Str("component", "actor").Logger(),
		results:     newMailbox[bus.Result](),
		loads:       newReportBox(),
		dlq:         newMailbox[dlqDone](),
		done:        newMailbox[doneRecord](),
		kv:          newMailbox[kvEvent](),
		cancels:     newMailbox[string](),
		byID:        make(map[string]uint64),
		cancelled:   newMemo[struct{}](maxCancelled, int64(cancelMemoAge)),
		running:     newMemo[runRef](maxRunning, int64(cancelMemoAge)),
		lettered:    newMemo[struct{}](maxLettered, int64(max(cancelMemoAge, 3*cfg.AckWait))), // a redelivery comes an ack wait later
		thresholds:  make(chan thresholdReq),
		policies:    make(chan policyReq),
		polRev:      cfg.PolicyRevision,
		conn:        make(chan struct{}, 1),
		role:        make(chan struct{}, 1),
		handBackReq: make(chan chan int),
		held:        make(map[uint64]*held),
		hdr:         make(nats.Header, 16),
		connected:   true,
		conflictLog: make(map[string]time.Time),
		served:      make(map[string]*served),
		ackWaitMs:   strconv.FormatInt(cfg.AckWait.Milliseconds(), 10),
	}
	t := d.Scheduler.Thresholds()
	a.th.Store(&t)
	src := cfg.PolicySource
	if src == "" {
		src = "file"
	}
	a.polView.Store(&wire.PolicyView{Revision: cfg.PolicyRevision, Source: src, Classes: classNamesOf(d.Scheduler.Policy())})
	if cfg.PolicyRevision > 0 {
		d.Metrics.PolicyApplied(cfg.PolicyRevision)
	}
	if d.Consumer == nil {
		d.Consumer = idle{}
	}
	if a.d.Gate == nil {
		a.d.Gate = noGate{}
	}
	if a.d.Trace == nil {
		a.d.Trace = noTracer{}
	}
	a.cur = newTerm(d.Consumer)
	a.term.Store(a.cur)
	a.connState.Store(true)
	a.grace.Store(true)
	d.Metrics.SetConnected(true)
	a.publishView(cfg.Now())
	return a
}

// HandshakeResult delivers a worker's answer (the bus.Handshaker callback).
// It never blocks and never drops a result.
func (a *Actor) HandshakeResult(r bus.Result) { a.results.put(r) }

// LoadReport parses a raw load report on the caller's goroutine (the
// bus.SubscribeLoad callback), so that a large or hostile report costs the
// queue actor nothing, and delivers it if it is valid; a report that is not is
// dropped and counted. It never blocks: a report not yet applied when a newer
// one of the same worker arrives is superseded (coalesced, counted apart:
// a report is the worker's whole state, so nothing is lost).
func (a *Actor) LoadReport(token string, data []byte) {
	rep, err := workers.ParseReport(token, data)
	if err != nil {
		a.d.Metrics.LoadDropped(string(workers.Reason(err)))
		a.droppedReport(token, string(workers.Reason(err)), err)
		return
	}
	switch shed := a.loads.put(rep); shed {
	case "":
	case superseded:
		a.d.Metrics.LoadCoalesced() // the latest report is the worker's whole state
	default:
		a.d.Metrics.LoadDropped(shed)
	}
}

// Connected tells the actor the NATS connection came back (true) or was lost.
// It never blocks, so NATS callbacks may call it; the latest state wins.
func (a *Actor) Connected(up bool) {
	a.connState.Store(up)
	select {
	case a.conn <- struct{}{}:
	default:
	}
}

// SetLeader tells the actor whether it may pull and dispatch. When it stops
// leading it stops dispatching at once (checked before every dispatch); the
// caller then stops the consumer and calls HandBack. It never blocks.
func (a *Actor) SetLeader(lead bool) {
	a.leading.Store(lead)
	a.signalRole()
}

func (a *Actor) signalRole() {
	select {
	case a.role <- struct{}{}:
	default:
	}
}

// Leader reports the role last given to SetLeader.
func (a *Actor) Leader() bool { return a.leading.Load() }

// HandBack has the actor hand every queued message back for immediate
// redelivery (it lost the lead), and every delivery pulled and not yet
// admitted (stop the consumer first), and returns how many it handed back.
// Dispatches in flight stay in flight; a refusal then hands the request back too.
func (a *Actor) HandBack(ctx context.Context) (int, error) {
	reply := make(chan int, 1)
	select {
	case a.handBackReq <- reply:
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	select {
	case n := <-reply:
		return n, nil
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

// IsConnected reports the last connection state given to Connected.
func (a *Actor) IsConnected() bool { return a.connState.Load() }

// InGrace reports whether the start-up grace is still running.
func (a *Actor) InGrace() bool { return a.grace.Load() }

// NoLiveWorkers reports whether a fleet outage is running: the grace is over
// and no worker is live (docs/design.md, Fleet outage).
func (a *Actor) NoLiveWorkers() bool { return a.fleetOut.Load() }

// Thresholds returns the busy thresholds in force.
func (a *Actor) Thresholds() filters.Thresholds { return *a.th.Load() }

// SetThresholds has the actor apply new busy thresholds and returns once it has.
func (a *Actor) SetThresholds(ctx context.Context, t filters.Thresholds) error {
	req := thresholdReq{t, make(chan struct{})}
	return ask(ctx, a.thresholds, req, req.done)
}

// answerAll handles every handshake result waiting in the mailbox.
func (a *Actor) answerAll() {
	for _, r := range a.results.take() {
		a.answer(r)
	}
}

// deadLetteredAll handles every dead-letter completion waiting in the mailbox.
func (a *Actor) deadLetteredAll() {
	for _, d := range a.dlq.take() {
		a.deadLettered(d)
	}
}

// ask hands req to the actor's loop on ch and returns once the loop closed
// done, or when ctx ends first.
func ask[T any](ctx context.Context, ch chan<- T, req T, done <-chan struct{}) error {
	select {
	case ch <- req:
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Run runs the actor until ctx ends, then shuts down (docs/design.md, Delivery guarantees, SIGTERM): the
// consumer stops, every queued message is handed back for immediate
// redelivery, and Run returns once every dispatch in flight is answered and
// every dead letter stored, or the dispatch timeout and 3 s more have passed.
func (a *Actor) Run(ctx context.Context) {
	tick := time.NewTicker(a.cfg.Tick)
	defer tick.Stop()
	lastView := time.Time{}
	for {
		a.syncTerm()
		// While disconnected, deliveries wait in the channel: an arrival could
		// otherwise be dispatched straight away (docs/protocol.md, Dispatch handshake).
		var deliveries chan []ingest.Delivery
		if a.connected && a.leading.Load() {
			deliveries = a.cur.ch
		}
		select {
		case <-ctx.Done():
			drain, cancel := context.WithTimeout(context.Background(), a.cfg.DispatchTimeout+3*time.Second)
			a.shutdown(drain)
			cancel()
			return
		case batch := <-deliveries:
			a.admitBatch(batch)
		case <-a.results.wake:
			a.answerAll()
		case <-a.loads.wake:
			for _, rep := range a.loads.take() {
				a.report(rep)
			}
		case <-a.dlq.wake:
			a.deadLetteredAll()
		case <-a.done.wake:
			for _, d := range a.done.take() {
				a.settle(d)
			}
		case <-a.cancels.wake:
			for _, id := range a.cancels.take() {
				a.cancel(id)
			}
		case <-a.kv.wake:
			evs := a.kv.take()
			for i := range evs {
				a.applyKV(&evs[i])
			}
		case req := <-a.thresholds:
			a.d.Scheduler.SetThresholds(req.t)
			t := req.t
			a.th.Store(&t)
			close(req.done)
		case req := <-a.policies:
			a.applyPolicy(req)
			close(req.done)
		case <-a.conn:
			a.sendPaused = false
			a.connection(a.connState.Load())
		case <-a.role:
			// A new term (SetConsumer) signals too: log only a change of role.
			if lead := a.leading.Load(); lead != a.loggedLead {
				a.loggedLead = lead
				a.d.Metrics.SetLeader(lead)
				a.log.Info().Bool("leader", lead).Msg("role changed")
			}
		case reply := <-a.handBackReq:
			a.syncTerm()
			reply <- a.handBackQueued() + a.retire(a.cur)
		case <-tick.C:
			now := a.cfg.Now()
			a.tick(now)
			a.kvTick(now)
			a.cancelled.expire(now.UnixNano())
			a.running.expire(now.UnixNano())
			a.lettered.expire(now.UnixNano())
			if now.Sub(lastView) >= time.Second {
				a.d.Scheduler.RecheckAll() // the safety net of docs/design.md, When queues are re-checked
				a.publishView(now)
				lastView = now
			}
		}
		a.drain()
	}
}

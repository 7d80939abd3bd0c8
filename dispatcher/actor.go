package dispatcher

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"fairdispatch/bus"
	"fairdispatch/filters"
	"fairdispatch/ingest"
	"fairdispatch/metrics"
	"fairdispatch/request"
	"fairdispatch/scheduler"
	"fairdispatch/workers"
)

// Handshaker sends a dispatched request to a worker (bus.Handshaker). Send
// must not keep hdr once it returns: the actor reuses it for the next dispatch.
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

// Config configures an Actor.
type Config struct {
	Stream          string        // the request stream, for default request ids
	Prefix          string        // the subject prefix: no outcome may be published below it
	AckWait         time.Duration // the consumer's ack wait
	DispatchTimeout time.Duration // how long a worker may take to answer; bounds shutdown
	Tick            time.Duration // safety-net re-check and deadline resolution; default 25ms
	Now             func() time.Time
}

// Deps are the adapters the actor drives.
type Deps struct {
	Scheduler   *scheduler.Scheduler
	Handshaker  Handshaker
	DeadLetters DeadLetterer
	Consumer    Releaser // the first consumer; SetConsumer replaces it when the role changes
	Keeper      *ingest.Keeper
	Outcome     func(subject string, o bus.OutcomeMsg) error
	Metrics     *metrics.Metrics
	Log         zerolog.Logger
}

// held is a request the dispatcher holds: queued, or sent and not yet answered.
type held struct {
	msg      jetstream.Msg
	rel      Releaser // the consumer the message came from
	snap     *request.Snapshot
	token    string // subject token
	replyTo  string
	inFlight bool
	worker   string
	rank     int32
	seq      uint64
	dead     bool             // being dead-lettered
	bodiless bool             // the dead letter is being stored without its body
	err      *scheduler.Error // why, while dead
}

type loadMsg struct {
	rep workers.Report
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
// (each safe for concurrent use), and run it with Run.
type Actor struct {
	cfg Config
	d   Deps
	log zerolog.Logger

	deliveries  chan []ingest.Delivery
	results     chan bus.Result
	loads       chan loadMsg
	dlq         chan dlqDone
	thresholds  chan thresholdReq
	conn        chan struct{} // a connection change; the state is in connState
	role        chan struct{} // a role change; the state is in leading
	handBackReq chan chan int

	held        map[uint64]*held
	inFlight    int
	connected   bool
	stopping    bool
	tickDecs    []scheduler.Decision
	hdr         nats.Header // the dispatch headers, reused from one dispatch to the next
	parked      []*held     // malformed requests that arrived during the start-up grace
	workerLoads []metrics.WorkerLoad

	view      atomic.Pointer[View]
	th        atomic.Pointer[filters.Thresholds]
	connState atomic.Bool
	grace     atomic.Bool
	leading   atomic.Bool // this process may pull and dispatch (it holds the lease)
	cons      atomic.Pointer[Releaser]
}

// SetConsumer sets the consumer that deliveries come from from now on (each
// leadership term pulls with a consumer of its own).
func (a *Actor) SetConsumer(r Releaser) { a.cons.Store(&r) }

func (a *Actor) consumer() Releaser { return *a.cons.Load() }

// idle is the consumer of an actor that has not pulled yet.
type idle struct{}

func (idle) Release(int) {}
func (idle) Stop()       {}

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
		deliveries:  make(chan []ingest.Delivery, 64),
		results:     make(chan bus.Result, 4096),
		loads:       make(chan loadMsg, 4096),
		dlq:         make(chan dlqDone, 4096),
		thresholds:  make(chan thresholdReq),
		conn:        make(chan struct{}, 1),
		role:        make(chan struct{}, 1),
		handBackReq: make(chan chan int),
		held:        make(map[uint64]*held),
		hdr:         make(nats.Header, 16),
		connected:   true,
	}
	t := d.Scheduler.Thresholds()
	a.th.Store(&t)
	if d.Consumer == nil {
		d.Consumer = idle{}
	}
	a.SetConsumer(d.Consumer)
	a.connState.Store(true)
	a.grace.Store(true)
	d.Metrics.SetConnected(true)
	a.publishView(cfg.Now())
	return a
}

// Deliveries is where ingest sends decoded request messages.
func (a *Actor) Deliveries() chan<- []ingest.Delivery { return a.deliveries }

// HandshakeResult delivers a worker's answer (the bus.Handshaker callback).
func (a *Actor) HandshakeResult(r bus.Result) { a.results <- r }

// LoadReport parses a raw load report on the caller's goroutine (the
// bus.SubscribeLoad callback), so that a large or hostile report costs the
// queue actor nothing, and delivers it if it is valid; a report that is not is
// dropped and counted.
func (a *Actor) LoadReport(token string, data []byte) {
	rep, err := workers.ParseReport(token, data)
	if err != nil {
		a.d.Metrics.LoadDropped(string(workers.Reason(err)))
		a.log.Debug().Err(err).Str("worker_id", token).Msg("load report dropped")
		return
	}
	a.loads <- loadMsg{rep}
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
	select {
	case a.role <- struct{}{}:
	default:
	}
}

// Leader reports the role last given to SetLeader.
func (a *Actor) Leader() bool { return a.leading.Load() }

// HandBack has the actor hand every queued message back for immediate
// redelivery (it lost the lead) and returns how many it handed back.
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

// Thresholds returns the busy thresholds in force.
func (a *Actor) Thresholds() filters.Thresholds { return *a.th.Load() }

// SetThresholds has the actor apply new busy thresholds and returns once it has.
func (a *Actor) SetThresholds(ctx context.Context, t filters.Thresholds) error {
	req := thresholdReq{t, make(chan struct{})}
	select {
	case a.thresholds <- req:
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case <-req.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Run runs the actor until ctx ends, then shuts down (SPEC 9, SIGTERM): the
// consumer stops, every queued message is handed back for immediate
// redelivery, and Run returns once every dispatch in flight is answered and
// every dead letter stored, or the dispatch timeout and 3 s more have passed.
func (a *Actor) Run(ctx context.Context) {
	tick := time.NewTicker(a.cfg.Tick)
	defer tick.Stop()
	lastView := time.Time{}
	for {
		// While disconnected, deliveries wait in the channel: an arrival could
		// otherwise be dispatched straight away (SPEC 1.2).
		deliveries := a.deliveries
		if !a.connected || !a.leading.Load() {
			deliveries = nil
		}
		select {
		case <-ctx.Done():
			drain, cancel := context.WithTimeout(context.Background(), a.cfg.DispatchTimeout+3*time.Second)
			a.shutdown(drain)
			cancel()
			return
		case batch := <-deliveries:
			now := a.cfg.Now()
			for i := range batch {
				a.admit(now, &batch[i])
			}
		case r := <-a.results:
			a.answer(r)
		case l := <-a.loads:
			a.report(l)
		case d := <-a.dlq:
			a.deadLettered(d)
		case req := <-a.thresholds:
			a.d.Scheduler.SetThresholds(req.t)
			t := req.t
			a.th.Store(&t)
			close(req.done)
		case <-a.conn:
			a.connection(a.connState.Load())
		case <-a.role:
			a.d.Metrics.SetLeader(a.leading.Load())
			a.log.Info().Bool("leader", a.leading.Load()).Msg("role changed")
		case reply := <-a.handBackReq:
			reply <- a.handBackQueued()
		case <-tick.C:
			now := a.cfg.Now()
			a.tick(now)
			if now.Sub(lastView) >= time.Second {
				a.d.Scheduler.RecheckAll() // the safety net of SPEC 6.5
				a.publishView(now)
				lastView = now
			}
		}
		a.drain()
	}
}

// drain dispatches while anything queued is dispatchable.
func (a *Actor) drain() {
	if !a.connected || !a.active() {
		return
	}
	now := a.cfg.Now()
	ns := now.UnixNano()
	for a.leading.Load() {
		d := a.d.Scheduler.Next(ns)
		if d.Kind == scheduler.None {
			return
		}
		a.decide(now, a.held[d.Req.Ref], d)
	}
}

// admit takes in one delivery.
func (a *Actor) admit(now time.Time, dl *ingest.Delivery) {
	if h := a.held[dl.StreamSeq]; h != nil {
		// A redelivery of a request we hold: keep one copy, with the new handle.
		h.msg = dl.Msg
		a.d.Keeper.Replace(dl.StreamSeq, dl.Msg)
		a.consumer().Release(1)
		a.d.Metrics.Redelivered()
		return
	}
	if !a.active() {
		_ = dl.Msg.Nak()
		a.consumer().Release(1)
		return
	}
	id := dl.Headers.MsgID
	if id == "" {
		id = a.cfg.Stream + ":" + strconv.FormatUint(dl.StreamSeq, 10)
	}
	h := &held{msg: dl.Msg, rel: a.consumer(), token: dl.Token, replyTo: dl.Headers.ReplyTo}
	a.held[dl.StreamSeq] = h
	if msg := a.malformed(dl); msg != "" {
		if dl.Err == nil {
			h.replyTo = "" // the reply subject itself is what is refused
		}
		h.snap = &request.Snapshot{ID: id, Ref: dl.StreamSeq, Class: -1, Arrival: dl.Published.UnixNano(), Index: -1, DeadlineIndex: -1}
		h.err = &scheduler.Error{Code: request.BadRequest, Message: msg}
		if a.d.Scheduler.InGrace(now.UnixNano()) {
			a.d.Keeper.Hold(dl.StreamSeq, dl.Msg, now)
			a.parked = append(a.parked, h) // nothing is failed during the grace (SPEC 9)
			return
		}
		a.reject(h, h.err)
		return
	}
	hd := &dl.Headers
	arr := scheduler.Arrival{
		ID: id, Ref: dl.StreamSeq, Token: dl.Token, ISL: hd.ISL, Cached: hd.Cached, Overlap: hd.Overlap,
		Strict: hd.Strict, Jump: hd.Jump, Pin: hd.Pin, Allowed: hd.Allowed, Required: hd.Required,
		Preferred: hd.Preferred, Published: dl.Published.UnixNano(), DeadlineMs: hd.DeadlineMs, HasDeadline: hd.HasDeadline,
	}
	d := a.d.Scheduler.Arrive(now.UnixNano(), &arr)
	h.snap = d.Req
	if d.Kind == scheduler.Queued {
		a.d.Keeper.Hold(dl.StreamSeq, dl.Msg, now) // only what waits needs keeping alive
	}
	a.decide(now, h, d)
}

// malformed returns why a delivery is a bad_request, or "": a malformed header
// (SPEC 1.1), or a Dispatch-Reply-To aimed at a $-subject or at the dispatch
// protocol's own subjects, where an outcome could pose as a load report, a
// request or a JetStream API call.
func (a *Actor) malformed(dl *ingest.Delivery) string {
	if dl.Err != nil {
		return dl.Err.Error()
	}
	if r := dl.Headers.ReplyTo; r != "" && (r[0] == '$' || strings.HasPrefix(r, a.cfg.Prefix+".")) {
		return fmt.Sprintf("header Dispatch-Reply-To: %q may not start with \"$\" or %q", r, a.cfg.Prefix+".")
	}
	return ""
}

// decide carries out a scheduler decision about held request h.
func (a *Actor) decide(now time.Time, h *held, d scheduler.Decision) {
	switch d.Kind {
	case scheduler.Dispatch:
		a.send(now, h, d)
	case scheduler.Reject:
		a.reject(h, d.Err)
	}
}

// dispatch headers the actor sets; any producer-sent variant of them is removed.
var ownHeaders = []string{"Dispatch-Request-Id", "Dispatch-Class", "Dispatch-DP-Rank", "Dispatch-Seq",
	"Dispatch-Cost", "Dispatch-Queued-Ms", "Dispatch-Ack"}

func (a *Actor) send(now time.Time, h *held, d scheduler.Decision) {
	r := h.snap
	src := h.msg.Headers()
	hdr := a.hdr // reused: Send encodes it before returning
	clear(hdr)
	for k, v := range src {
		if !isOwnHeader(k) {
			hdr[k] = v
		}
	}
	// One backing array for the seven values: one allocation, not seven.
	v := make([]string, len(ownHeaders))
	v[0], v[1], v[2] = r.ID, a.className(r.Class), strconv.Itoa(int(d.Rank))
	v[3], v[4] = strconv.FormatUint(d.Seq, 10), strconv.FormatUint(r.Cost, 10)
	v[5], v[6] = strconv.FormatInt(queuedMs(now, r), 10), h.msg.Reply()
	for i, k := range ownHeaders {
		hdr[k] = v[i : i+1 : i+1]
	}
	h.inFlight, h.worker, h.rank, h.seq = true, d.Worker, d.Rank, d.Seq
	a.inFlight++
	a.d.Keeper.Drop(r.Ref)
	if err := a.d.Handshaker.Send(d.Worker, hdr, h.msg.Data(), r.Ref); err != nil {
		a.log.Warn().Err(err).Str("request_id", r.ID).Str("worker_id", d.Worker).Msg("dispatch send failed")
		a.answer(bus.Result{Token: r.Ref, Worker: d.Worker, Outcome: bus.Refused})
	}
}

func isOwnHeader(k string) bool {
	if len(k) < 9 || !strings.EqualFold(k[:9], "Dispatch-") {
		return false
	}
	for _, o := range ownHeaders {
		if strings.EqualFold(k, o) {
			return true
		}
	}
	return false
}

// answer handles a worker's answer to a dispatch.
func (a *Actor) answer(res bus.Result) {
	h := a.held[res.Token]
	if h == nil || !h.inFlight {
		return
	}
	h.inFlight = false
	a.inFlight--
	now := a.cfg.Now()
	a.d.Metrics.Handshake(res.Outcome.String())
	if res.Outcome == bus.Accepted {
		r := h.snap
		delete(a.held, res.Token)
		h.rel.Release(1)
		a.d.Metrics.Dispatched(r.Class)
		a.d.Metrics.QueueWait(r.Class, float64(max(0, now.UnixNano()-r.Arrival))/1e9)
		if h.replyTo != "" {
			rank, q := int(h.rank), queuedMs(now, r)
			a.outcome(h.replyTo, bus.OutcomeMsg{RequestID: r.ID, Status: bus.StatusDispatched,
				PolicyClass: a.className(r.Class), WorkerID: h.worker, DPRank: &rank, QueuedMs: &q})
		}
		return
	}
	if res.Outcome == bus.Timeout {
		a.log.Debug().Str("request_id", h.snap.ID).Str("worker_id", h.worker).Msg("dispatch timed out; the request keeps its place")
	}
	if !a.active() {
		a.handBack(res.Token, h)
		return
	}
	a.d.Scheduler.Return(now.UnixNano(), h.snap, h.worker, h.seq)
	// The ack wait last restarted up to half an ack wait plus the dispatch
	// timeout ago: restart it now, so the Keeper's clock is the server's.
	if err := h.msg.InProgress(); err == nil {
		a.d.Metrics.ProgressAck()
	}
	a.d.Keeper.Hold(res.Token, h.msg, now)
}

// handBack NAKs a held message for immediate redelivery and forgets it.
func (a *Actor) handBack(seq uint64, h *held) {
	_ = h.msg.Nak()
	a.d.Keeper.Drop(seq)
	delete(a.held, seq)
	h.rel.Release(1)
}

// reject dead-letters h; its message is acknowledged once the DLQ copy is stored.
func (a *Actor) reject(h *held, e *scheduler.Error) {
	r := h.snap
	h.dead, h.err = true, e
	a.d.Metrics.Rejected(r.Class, e.Code)
	a.d.Keeper.Drop(r.Ref) // a dead letter is not kept alive: its publish is acknowledged in ms
	if err := a.publishDead(h, h.msg.Headers(), h.msg.Data()); err != nil {
		a.log.Error().Err(err).Str("request_id", r.ID).Msg("dead letter refused; handing the message back")
		a.handBack(r.Ref, h)
	}
}

// publishDead publishes h's dead letter with these headers and body; its
// acknowledgement comes back to the actor as a dlqDone.
func (a *Actor) publishDead(h *held, hdr nats.Header, body []byte) error {
	r, seq := h.snap, h.snap.Ref
	class := h.token // the subject token when no class could be resolved
	if r.Class >= 0 {
		class = a.className(r.Class)
	}
	return a.d.DeadLetters.Publish(bus.DeadLetter{
		Class: class, RequestID: r.ID, Code: string(h.err.Code), Message: h.err.Message, Header: hdr, Body: body,
	}, func(err error) { a.dlq <- dlqDone{seq, err} })
}

func (a *Actor) deadLettered(d dlqDone) {
	h := a.held[d.seq]
	if h == nil {
		return
	}
	if d.err != nil {
		a.deadLetterFailed(h, d.err)
		return
	}
	a.d.Metrics.DeadLetter(h.snap.Class)
	if err := h.msg.Ack(); err != nil {
		a.log.Warn().Err(err).Str("request_id", h.snap.ID).Msg("ack after dead letter")
	}
	delete(a.held, d.seq)
	h.rel.Release(1)
	if h.replyTo != "" {
		r, e := h.snap, h.err
		o := bus.OutcomeMsg{RequestID: r.ID, Status: bus.StatusRejected, Error: string(e.Code), Message: e.Message}
		if r.Class >= 0 {
			o.PolicyClass = a.className(r.Class)
		}
		if e.Code == request.QueueFull {
			o.Details = map[string]any{"limit_kind": e.LimitKind, "current": e.Current, "limit": e.Limit}
		}
		a.outcome(h.replyTo, o)
	}
}

// deadLetterFailed handles a dead letter the bus could not store for good (it
// retries what a retry can fix). The first time, it stores a copy without the
// body (a body too large for the DLQ is the usual cause), saying so in
// Dispatch-Body-Dropped; if that fails too, the message goes back to the
// stream, redelivered only after the ack wait, so it is neither lost nor spun on.
func (a *Actor) deadLetterFailed(h *held, err error) {
	r := h.snap
	if !h.bodiless {
		h.bodiless = true
		a.log.Error().Err(err).Str("request_id", r.ID).Msg("dead letter not stored; storing it without its body")
		hdr := make(nats.Header, len(h.msg.Headers())+1)
		for k, v := range h.msg.Headers() {
			hdr[k] = v
		}
		hdr.Set("Dispatch-Body-Dropped", strconv.Itoa(len(h.msg.Data())))
		if a.publishDead(h, hdr, nil) == nil {
			return
		}
	}
	a.log.Error().Err(err).Str("request_id", r.ID).Dur("retry_in", a.cfg.AckWait).Msg("dead letter not stored; the request goes back to the stream")
	_ = h.msg.NakWithDelay(a.cfg.AckWait)
	delete(a.held, r.Ref)
	h.rel.Release(1)
}

func (a *Actor) outcome(subject string, o bus.OutcomeMsg) {
	if err := a.d.Outcome(subject, o); err != nil {
		a.log.Warn().Err(err).Str("request_id", o.RequestID).Str("subject", subject).Msg("outcome not published")
	}
}

func (a *Actor) report(l loadMsg) {
	if !a.d.Scheduler.Report(a.cfg.Now().UnixNano(), l.rep) {
		a.d.Metrics.LoadDropped(string(workers.DropCapacity))
	}
}

func (a *Actor) connection(up bool) {
	if up == a.connected {
		return
	}
	a.connected = up
	a.d.Metrics.SetConnected(up)
	now := a.cfg.Now().UnixNano()
	if up {
		a.d.Scheduler.Resume(now)
		a.log.Info().Msg("connected: dispatching resumes")
	} else {
		a.d.Scheduler.Pause()
		a.log.Warn().Msg("disconnected: queues kept, dispatching paused")
	}
}

func (a *Actor) tick(now time.Time) {
	ns := now.UnixNano()
	inGrace := a.d.Scheduler.InGrace(ns)
	a.grace.Store(inGrace)
	if !inGrace && len(a.parked) > 0 {
		for _, h := range a.parked {
			if a.held[h.snap.Ref] == h {
				a.reject(h, h.err)
			}
		}
		clear(a.parked)
		a.parked = a.parked[:0]
	}
	a.tickDecs = a.d.Scheduler.Tick(ns, a.tickDecs[:0])
	for _, d := range a.tickDecs {
		if h := a.held[d.Req.Ref]; h != nil {
			a.reject(h, d.Err)
		}
	}
	clear(a.tickDecs)
	if a.connected {
		for range a.d.Keeper.Tick(now) {
			a.d.Metrics.ProgressAck()
		}
	}
}

// active reports whether the actor may admit and dispatch: it leads and is not stopping.
func (a *Actor) active() bool { return a.leading.Load() && !a.stopping }

// handBackQueued NAKs every held message that is neither in flight nor being
// dead-lettered, and returns how many.
func (a *Actor) handBackQueued() int {
	n := 0
	for seq, h := range a.held {
		if !h.inFlight && !h.dead {
			a.d.Scheduler.Remove(h.snap)
			a.handBack(seq, h)
			n++
		}
	}
	if n > 0 {
		a.log.Info().Int("handed_back", n).Msg("held requests handed back")
	}
	return n
}

func (a *Actor) shutdown(drain context.Context) {
	a.stopping = true
	n := a.handBackQueued()
	a.log.Info().Int("handed_back", n).Int("in_flight", a.inFlight).Msg("shutting down")
	for a.inFlight > 0 || a.deadPending() {
		select {
		case r := <-a.results:
			a.answer(r)
		case d := <-a.dlq:
			a.deadLettered(d)
		case batch := <-a.deliveries:
			for i := range batch {
				a.admit(a.cfg.Now(), &batch[i])
			}
		case <-drain.Done():
			a.log.Warn().Int("in_flight", a.inFlight).Msg("drain deadline: exiting with dispatches unanswered")
			return
		}
	}
}

func (a *Actor) deadPending() bool {
	for _, h := range a.held {
		if h.dead {
			return true
		}
	}
	return false
}

func (a *Actor) className(k int) string {
	if k < 0 {
		return ""
	}
	return a.d.Scheduler.Policy().Classes[k].Name
}

func queuedMs(now time.Time, r *request.Snapshot) int64 {
	return max(0, now.UnixNano()-r.Arrival) / 1e6
}

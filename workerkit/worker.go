package workerkit

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"fairdispatch/naming"
	"fairdispatch/wire"
)

// Handler decides on dispatched requests.
type Handler interface {
	// Offer is called once per dispatched request, from one goroutine, in
	// arrival order. It returns true to accept (the application then owns r and
	// must finish it with Done, Nak or Term) or false to refuse it as busy. An
	// accepting Offer must have counted r in the load given to SetLoad before it
	// returns. Offer must not block.
	Offer(r *Request) bool
}

// HandlerFunc adapts a function to [Handler].
type HandlerFunc func(r *Request) bool

// Offer calls f(r).
func (f HandlerFunc) Offer(r *Request) bool { return f(r) }

// ErrStarted is returned by a second Start, and by Start after Stop.
var ErrStarted = errors.New("worker: already started")

// Worker is the worker side of the wire contract. Build it with [New].
type Worker struct {
	nc         *nats.Conn
	cfg        Config
	h          Handler
	log        zerolog.Logger
	instance   string
	taints     []string
	workSubj   string
	loadSubj   string
	doneSubj   string
	cancelSubj string
	// ask carries the response path's requests (claims, pings, end
	// markers); set by Start.
	ask *asker

	kick chan struct{} // cap 1: a report is wanted
	// seenKick (cap 1) asks for a report after an answered dispatch, whose
	// news may be seen_seq alone: the loop does not wake for it while a
	// seen-only report is scheduled already, which will carry it.
	seenKick chan struct{}
	// progressKick (cap 1) wakes progressLoop when an acceptance is due
	// before progressWake, the loop's next wake (zero: none); guarded by mu.
	progressKick chan struct{}
	progressWake time.Time
	// fresh lists accepted requests that have had no +WPI yet, in acceptance
	// order; firstProgressLoop sends it FirstProgressDelay after acceptance to
	// those still held. freshKick (cap 1) wakes that loop.
	fresh     []freshReq
	freshKick chan struct{}
	published publishedState // the last report published
	peak      []RankLoad     // per rank, the highest load since the last report (capacityFreed)
	quit      chan struct{}  // closed by Stop to end the loops
	wg        sync.WaitGroup

	// ack sends confirmed acknowledgements (acker.go); nil with
	// Config.PlainAcks, and until Start.
	ack *acker
	// plainAcks counts acknowledgements published plain.
	plainAcks atomic.Uint64

	mu       sync.Mutex
	ranks    []RankLoad // indexed by rank - DPStart
	seenSeq  uint64
	draining bool
	offering bool
	held     map[*Request]struct{}
	// running indexes held requests by request id, finished the requests
	// finished here (finished.go), and joined and repeated count the
	// dispatches answered from them (dedupe.go).
	running   map[string]*Request
	finished  *finishedMemo
	joined    uint64
	repeated  uint64
	started   bool
	stopping  bool
	heldEmpty chan struct{} // closed when held empties while stopping
	sub       *nats.Subscription
	cancelSub *nats.Subscription // <prefix>.cancel.<id>
	kv        *kvPublisher       // KV cache events (kvcache.go); nil: not enabled
}

// New validates cfg, applies its defaults and returns a Worker that is not yet
// subscribed. It picks the worker's random instance id.
func New(nc *nats.Conn, cfg Config, h Handler, log zerolog.Logger) (*Worker, error) {
	if nc == nil || h == nil {
		return nil, fmt.Errorf("%w: nil connection or handler", ErrConfig)
	}
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	names, err := naming.New(cfg.Prefix) // validated by withDefaults
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	var id [8]byte
	if _, err := rand.Read(id[:]); err != nil {
		return nil, fmt.Errorf("worker: instance id: %w", err)
	}
	taints := append([]string{}, cfg.Taints...)
	w := &Worker{
		nc:           nc,
		cfg:          cfg,
		h:            h,
		log:          log.With().Str("component", "worker").Str("worker_id", cfg.ID).Logger(),
		instance:     hex.EncodeToString(id[:]),
		taints:       taints,
		workSubj:     names.Work(cfg.ID),
		loadSubj:     names.Load(cfg.ID),
		doneSubj:     names.Done(cfg.ID),
		cancelSubj:   names.CancelWorker(cfg.ID),
		kick:         make(chan struct{}, 1),
		seenKick:     make(chan struct{}, 1),
		freshKick:    make(chan struct{}, 1),
		progressKick: make(chan struct{}, 1),
		quit:         make(chan struct{}),
		ranks:        make([]RankLoad, cfg.DPSize),
		peak:         make([]RankLoad, cfg.DPSize),
		held:         map[*Request]struct{}{},
		running:      map[string]*Request{},
		finished:     newFinishedMemo(FinishedWindow, FinishedIDs),
		heldEmpty:    make(chan struct{}),
	}
	return w, nil
}

// Config returns the worker's configuration with defaults applied.
func (w *Worker) Config() Config { return w.cfg }

// Start subscribes to <prefix>.work.<id>, publishes the first report and starts
// the report loop and the progress ticker. Unless Config.PlainAcks, it
// first subscribes to an inbox of the connection for JetStream's answers to
// acknowledgements.
func (w *Worker) Start() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.started {
		return ErrStarted
	}
	var subs []*nats.Subscription
	fail := func(err error) error {
		for _, s := range subs {
			_ = s.Unsubscribe()
		}
		if w.ack != nil {
			w.ack.stop(canceled())
			w.ack = nil
		}
		return err
	}
	if !w.cfg.PlainAcks {
		a, err := newAcker(w.nc, w.log)
		if err != nil {
			return fmt.Errorf("worker: subscribe for acknowledgements: %w", err)
		}
		w.ack = a
	}
	// A queue group named after the id: should two processes run under one
	// id by mistake, each dispatch reaches exactly one of them (docs/protocol.md,
	// One worker id, one process).
	sub, err := w.nc.QueueSubscribe(w.workSubj, w.cfg.ID, w.onMsg)
	if err != nil {
		return fail(fmt.Errorf("worker: subscribe %s: %w", w.workSubj, err))
	}
	subs = append(subs, sub)
	if err := sub.SetPendingLimits(-1, -1); err != nil {
		return fail(fmt.Errorf("worker: pending limits %s: %w", w.workSubj, err))
	}
	csub, err := w.nc.Subscribe(w.cancelSubj, w.onCancel)
	if err != nil {
		return fail(fmt.Errorf("worker: subscribe %s: %w", w.cancelSubj, err))
	}
	subs = append(subs, csub)
	if w.kv != nil {
		if err := w.kv.start(); err != nil {
			return fail(err)
		}
	}
	w.sub, w.cancelSub, w.ask = sub, csub, newAsker(w.nc)
	w.started = true
	w.wg.Add(3)
	go w.reportLoop()
	go w.progressLoop()
	go w.firstProgressLoop()
	w.kickReport()
	w.log.Info().Str("subject", w.workSubj).Str("instance", w.instance).Bool("plain_acks", w.cfg.PlainAcks).Msg("worker started")
	return nil
}

// Held returns the number of accepted requests not yet finished.
func (w *Worker) Held() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.held)
}

// onMsg handles one dispatch; it runs on the subscription's goroutine.
func (w *Worker) onMsg(m *nats.Msg) {
	var r *Request
	// A dispatch without headers is a compact frame, whatever this worker
	// asked for: one sent just before the dispatcher read this process's
	// first report uses the form its predecessor of the same id asked for
	// (docs/protocol.md, Compact dispatch form).
	if len(m.Header) == 0 {
		var err error
		if r, err = parseCompact(m, time.Now()); err != nil {
			w.refuseMalformed(m, err)
			return
		}
	} else {
		r = parseRequest(m, w.cfg.DPStart, time.Now())
	}
	r.w = w
	r.resp = newResponse(r)
	for _, err := range r.HeaderErrors {
		about(w.log.Warn(), r).Err(err).Msg("malformed dispatch header")
	}
	if r.resp != nil && m.Reply != "" && !validResponseSubject(r.resp.subject, w.cfg.Prefix) {
		w.dropBadResponse(m, r)
		return
	}
	if m.Reply == "" {
		about(w.log.Warn(), r).Msg("dispatch without reply subject; accepting it is impossible, refusing")
	} else if w.dedupe(m, r) {
		return // joined to its running execution, or finished already (dedupe.go)
	}
	w.mu.Lock()
	refuse := w.stopping || m.Reply == ""
	inRange := r.DPRank >= w.cfg.DPStart && r.DPRank < w.cfg.DPStart+w.cfg.DPSize
	if !refuse && inRange {
		w.offering = true
		r.state = stateOffered
		w.held[r] = struct{}{}
		if r.RequestID != "" {
			w.running[r.RequestID] = r
		}
	}
	w.mu.Unlock()
	if !refuse && !inRange {
		about(w.log.Warn(), r).Int("dp_rank", r.DPRank).Msg("dispatch to a rank outside this worker, refusing")
		refuse = true
	}

	accepted := false
	if !refuse {
		accepted = w.h.Offer(r)
		w.mu.Lock()
		w.offering = false
		if r.Seq > w.seenSeq {
			w.seenSeq = r.Seq
		}
		wake := false
		switch {
		case r.state == stateFinished:
			// Finished inside Offer: it was accepted whatever Offer returned.
			accepted = true
		case accepted:
			r.state = stateHeld
			wake = w.scheduleProgress(r, time.Now())
		default:
			r.state = stateFinished
			delete(w.held, r)
			w.notRunningLocked(r)
		}
		w.mu.Unlock()
		w.kickSeen()
		if wake {
			select {
			case w.progressKick <- struct{}{}:
			default:
			}
		}
	}

	if m.Reply != "" {
		reply := &nats.Msg{Subject: m.Reply}
		if !accepted {
			reply.Header = nats.Header{wire.HeaderStatus: []string{wire.StatusBusy}}
		}
		if err := w.nc.PublishMsg(reply); err != nil {
			about(w.log.Error(), r).Err(err).Msg("reply to dispatch")
		}
	}
	if accepted && r.resp != nil && w.isHeld(r) {
		r.resp.claim() // after accepting, before any work (docs/protocol.md, Messages of a response)
	}
	if accepted && r.Ack != "" {
		due := time.Now().Add(min(w.cfg.FirstProgressDelay, w.keepAlive(r)))
		w.mu.Lock()
		// A request finished already (inside Offer, or since) needs no +WPI
		// and does not wake the loop. The loop's timer is set for the head
		// of the list: it needs waking only when this request comes due
		// first, not once per request.
		held := r.state == stateHeld
		kick := held && (len(w.fresh) == 0 || due.Before(w.fresh[0].due))
		if held {
			w.fresh = append(w.fresh, freshReq{r, due})
		}
		w.mu.Unlock()
		if kick {
			select {
			case w.freshKick <- struct{}{}:
			default:
			}
		}
	}
	about(w.log.Debug(), r).Bool("accepted", accepted).Str("class", r.Class).Int("dp_rank", r.DPRank).Msg("dispatch answered")
}

// dropBadResponse accepts a dispatch whose Dispatch-Response-To a worker may
// not respond to and drops it (+TERM) without calling Offer or sending
// anything there (docs/protocol.md, Asking for a response).
func (w *Worker) dropBadResponse(m *nats.Msg, r *Request) {
	about(w.log.Error(), r).Str("subject", r.resp.subject).Msg("Dispatch-Response-To may not be responded to; dropping the request")
	w.mu.Lock()
	if r.Seq > w.seenSeq {
		w.seenSeq = r.Seq
	}
	r.state, r.cause = stateFinished, ErrBadResponseSubject
	w.mu.Unlock()
	w.kickReport()
	if err := w.nc.PublishMsg(&nats.Msg{Subject: m.Reply}); err != nil {
		about(w.log.Error(), r).Err(err).Msg("reply to dispatch")
	}
	if err := w.acknowledge(r, r.Ack, ackTerm, nil); err != nil {
		about(w.log.Error(), r).Err(err).Msg("drop request")
	}
}

// about adds r's request id and sequence to e; e is nil (and stays so, at no
// cost) when its level is off, so a dispatch builds no logger of its own.
func about(e *zerolog.Event, r *Request) *zerolog.Event {
	return e.Str("request_id", r.RequestID).Uint64("seq", r.Seq)
}

// refuseMalformed refuses a dispatch that has no headers and is not a
// compact frame either: its request id and acknowledgement subject cannot be
// known. The dispatcher counts the refusal and logs its status.
func (w *Worker) refuseMalformed(m *nats.Msg, err error) {
	w.log.Error().Err(err).Int("bytes", len(m.Data)).Msg("dispatch without headers that is not a compact frame; refusing it")
	if m.Reply == "" {
		return
	}
	if err := w.nc.PublishMsg(&nats.Msg{Subject: m.Reply, Header: nats.Header{wire.HeaderStatus: []string{wire.StatusMalformed}}}); err != nil {
		w.log.Error().Err(err).Msg("reply to dispatch")
	}
}

func (w *Worker) isHeld(r *Request) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return r.state == stateHeld
}

// release marks r finished as body (+ACK, +TERM, -NAK; nil: left to
// another execution) says, remembering it when it is done or dropped
// (finished.go). It returns the acknowledgement subject of r's latest
// delivery, and false when r was finished already.
func (w *Worker) release(r *Request, body []byte) (ack string, ok bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if r.state == stateFinished {
		return "", false
	}
	r.state = stateFinished
	delete(w.held, r)
	w.notRunningLocked(r)
	if k := finishKindOf(body); k != finishedHandedBack && r.RequestID != "" {
		w.finished.add(r.RequestID, time.Now(), memoEntry{term: k == finishedDropped, recorded: r.recorded, status: memoStatus(r.recordStatus)})
	}
	if w.stopping && len(w.held) == 0 {
		w.closeHeldEmpty()
	}
	return r.ackSubjectLocked(), true
}

// notRunningLocked takes r out of the running index; w.mu is held.
func (w *Worker) notRunningLocked(r *Request) {
	if r.RequestID != "" && w.running[r.RequestID] == r {
		delete(w.running, r.RequestID)
	}
}

// closeHeldEmpty closes heldEmpty once; w.mu must be held.
func (w *Worker) closeHeldEmpty() {
	select {
	case <-w.heldEmpty:
	default:
		close(w.heldEmpty)
	}
}

type freshReq struct {
	r   *Request
	due time.Time
}

// firstProgressLoop sends the first +WPI of each accepted request
// FirstProgressDelay after its acceptance, if it is still held then.
func (w *Worker) firstProgressLoop() {
	defer w.wg.Done()
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	var due []string
	for {
		w.mu.Lock()
		now := time.Now()
		n := 0
		due = due[:0]
		for ; n < len(w.fresh) && !w.fresh[n].due.After(now); n++ {
			if f := w.fresh[n]; f.r.state == stateHeld {
				due = append(due, f.r.ackSubjectLocked())
			}
		}
		clear(w.fresh[:n])
		w.fresh = w.fresh[n:]
		var next time.Time
		if len(w.fresh) > 0 {
			next = w.fresh[0].due
		}
		w.mu.Unlock()
		w.sendProgress(due)
		select {
		case <-w.quit:
			return
		case <-w.freshKick:
		case <-armed(t, next):
		}
	}
}

// keepAlive returns r's keep-alive period: a third of the ack wait its
// dispatch carried (Dispatch-Ack-Wait-Ms), else of Config.AckWait; at least 1 ms.
func (w *Worker) keepAlive(r *Request) time.Duration {
	aw := r.AckWait
	if aw <= 0 {
		aw = w.cfg.AckWait
	}
	return max(aw/3, time.Millisecond)
}

// scheduleProgress sets the keep-alive of r, accepted at now, and reports
// whether progressLoop must wake earlier than planned for it; w.mu is held.
func (w *Worker) scheduleProgress(r *Request, now time.Time) bool {
	r.period = w.keepAlive(r)
	r.next = now.Add(r.period)
	return w.progressWake.IsZero() || r.next.Before(w.progressWake)
}

// progressLoop sends +WPI to every held request at least every keep-alive
// period of its own (a third of its ack wait). A request due within a quarter
// of its period gets it early, with the others sent then, so that the loop
// wakes a few times per period however many requests are held.
func (w *Worker) progressLoop() {
	defer w.wg.Done()
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	var subjects []string
	for {
		subjects = subjects[:0]
		w.mu.Lock()
		now := time.Now()
		var next time.Time
		for r := range w.held {
			ack := r.ackSubjectLocked()
			if r.state != stateHeld || ack == "" || r.period == 0 {
				continue
			}
			if !r.next.After(now.Add(r.period / 4)) {
				subjects = append(subjects, ack) // any delivery's subject keeps the message alive
				r.next = now.Add(r.period)
			}
			if next.IsZero() || r.next.Before(next) {
				next = r.next
			}
		}
		w.progressWake = next
		w.mu.Unlock()
		w.sendProgress(subjects)
		select {
		case <-w.quit:
			return
		case <-w.progressKick:
		case <-armed(t, next):
		}
	}
}

// sendProgress publishes +WPI to each of subjects, stopping at the first
// failure, which it logs.
func (w *Worker) sendProgress(subjects []string) {
	for _, s := range subjects {
		if err := w.nc.Publish(s, ackProgress); err != nil {
			w.log.Error().Err(err).Msg("progress ack")
			return
		}
	}
}

// armed resets t to fire at next and returns its channel; nil, which a
// select never receives from, when next is zero (nothing is due).
func armed(t *time.Timer, next time.Time) <-chan time.Time {
	if next.IsZero() {
		return nil
	}
	t.Reset(time.Until(next))
	return t.C
}

// reportLoop publishes a report on every kick that brings news (the load,
// the draining flag or seen_seq moved since the last report), at most one per
// MinReportInterval (one per SeenOnlyInterval when only seen_seq moved) unless
// it frees capacity, and at least every TTL/3.
func (w *Worker) reportLoop() {
	defer w.wg.Done()
	heartbeat := time.NewTimer(w.cfg.TTL / 3)
	defer heartbeat.Stop()
	gap := time.NewTimer(0)
	defer gap.Stop()
	seenOnly := time.NewTimer(time.Hour)
	seenOnly.Stop()
	defer seenOnly.Stop()
	var last time.Time
	// seenArmed: seenOnly runs, a seen-only report is scheduled. deferred:
	// the last report was put off by an Offer in progress, whose end (a
	// seen kick) must wake the loop whatever is scheduled.
	seenArmed, deferred := false, false
	for {
		beat := false
		var seenKick chan struct{}
		if !seenArmed || deferred {
			seenKick = w.seenKick
		}
		select {
		case <-w.quit:
			return
		case <-w.kick:
		case <-seenKick:
		case <-seenOnly.C:
			seenArmed = false
		case <-heartbeat.C:
			beat = true
		}
		// A report that frees capacity goes at once (capacityFreed).
		for wait := w.cfg.MinReportInterval - time.Since(last); wait > 0 && !w.capacityFreed(); wait = w.cfg.MinReportInterval - time.Since(last) {
			gap.Reset(wait)
			select {
			case <-w.quit:
				return
			case <-gap.C:
			case <-w.kick:
			}
		}
		news := w.news()
		if !beat && news == newsSeenOnly {
			if wait := w.cfg.SeenOnlyInterval - time.Since(last); wait > 0 {
				if !seenArmed {
					seenOnly.Reset(wait)
					seenArmed = true
					w.log.Debug().Dur("wait", wait).Msg("seen-only report scheduled")
				}
				continue
			}
		}
		if !beat && news == newsNone {
			w.log.Debug().Msg("no news since the last report: none sent")
			continue // a kick whose news the last report carried already
		}
		// The report about to go carries every answered dispatch so far.
		select {
		case <-w.seenKick:
		default:
		}
		ok, err := w.publishReport()
		if err != nil {
			w.log.Error().Err(err).Msg("load report")
		}
		deferred = !ok && err == nil
		if deferred {
			w.log.Debug().Msg("load report put off: an offer is in progress")
		}
		if ok || err != nil {
			last = time.Now()
			seenOnly.Stop()
			seenArmed = false
			heartbeat.Reset(w.cfg.TTL / 3)
		}
	}
}

// Stop drains the worker: it reports draining, refuses new dispatches (but
// still answers those of requests it runs or finished, dedupe.go), waits
// until every held request is finished or ctx ends, naks the requests still
// held, waits until ctx ends for JetStream to answer the acknowledgements
// outstanding (acker.go; those still unanswered are given up and counted in
// Stats.AcksUnconfirmed), publishes a last report and stops its goroutines.
// It returns ctx's error when requests had to be handed back. Stop does not
// close nc.
func (w *Worker) Stop(ctx context.Context) error {
	w.mu.Lock()
	if !w.started || w.stopping {
		w.mu.Unlock()
		return nil
	}
	w.stopping = true
	w.draining = true
	if len(w.held) == 0 {
		w.closeHeldEmpty()
	}
	sub := w.sub
	w.mu.Unlock()
	w.kickReport()

	var result error
	select {
	case <-w.heldEmpty:
	case <-ctx.Done():
		w.mu.Lock()
		left := make([]*Request, 0, len(w.held))
		for r := range w.held {
			left = append(left, r)
		}
		w.mu.Unlock()
		for _, r := range left {
			// -NAK, or for a response with a chunk written an end marker
			// with status failed and +TERM (abort).
			w.abort(r, ErrStopped)
		}
		if len(left) > 0 {
			w.log.Warn().Int("requests", len(left)).Msg("stopped with requests held; handed them back")
			result = fmt.Errorf("worker: stop: handed back %d requests: %w", len(left), ctx.Err())
		}
	}
	// Only now: until the dispatcher reads the draining report, a second
	// dispatch of a request held here must be joined, not met by no
	// responders, which would send it to another worker to run again.
	if err := sub.Unsubscribe(); err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
		w.log.Warn().Err(err).Msg("unsubscribe")
	}
	close(w.quit)
	w.wg.Wait()
	if err := w.cancelSub.Unsubscribe(); err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
		w.log.Warn().Err(err).Msg("unsubscribe")
	}
	w.ask.close()
	if w.ack != nil {
		w.ack.stop(ctx) // the confirmations outstanding, within what is left of ctx
	}
	if kv := w.kvPub(); kv != nil {
		kv.stop(5 * time.Second)
	}
	if _, err := w.publishReport(); err != nil {
		w.log.Error().Err(err).Msg("last load report")
	}
	if err := w.nc.Flush(); err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
		w.log.Warn().Err(err).Msg("flush on stop")
	}
	w.log.Info().Msg("worker stopped")
	return result
}

// Close stops the worker at once, handing back every held request (-NAK),
// without waiting for JetStream to confirm acknowledgements.
func (w *Worker) Close() error { return w.Stop(canceled()) }

// canceled returns a context that is done already.
func canceled() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}

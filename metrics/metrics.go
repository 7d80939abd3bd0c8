package metrics

import (
	"math"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"fairdispatch/request"
)

const namespace = "fairdispatch"

// Unresolved is the class index of a request whose class could not be resolved.
// Its series carry class="".
const Unresolved = -1

// The handshake outcomes (label outcome of fairdispatch_handshakes_total). The
// first four match the String of the bus package's outcomes.
const (
	OutcomeAccepted     = "accepted"
	OutcomeRefused      = "refused"
	OutcomeNoResponders = "no_responders"
	OutcomeTimeout      = "timeout"
	// OutcomeLate is an answer that arrived after its dispatch had timed out.
	OutcomeLate = "late"
)

// The reasons a load report is dropped (label reason of
// fairdispatch_load_reports_dropped_total, docs/protocol.md, Load report).
const (
	// DropParse: the report is not valid JSON of the expected shape.
	DropParse = "parse"
	// DropMismatch: worker_id disagrees with the subject token.
	DropMismatch = "mismatch"
	// DropRank: a rank outside [start, start + size).
	DropRank = "rank"
	// DropInvalid: a field out of its bounds (ttl_ms, size, ...).
	DropInvalid = "invalid"
	// DropCapacity: the registry is full and the worker is new.
	DropCapacity = "capacity"
	// DropInstance: the report is from a second instance of a worker id whose
	// holder is live (docs/protocol.md, One worker id, one process).
	DropInstance = "instance"
	// DropOverflow: reports of too many distinct workers wait for the queue
	// actor already.
	DropOverflow = "overflow"
)

// The fault classes of a failed dispatch send (label fault of
// fairdispatch_dispatch_send_failures_total; docs/decisions.md, Whose fault is an error).
const (
	FaultRequest    = "request"
	FaultWorker     = "worker"
	FaultConnection = "connection"
)

// What happened to a dead letter the DLQ refused (label action of
// fairdispatch_dead_letter_failures_total).
const (
	// DLQBodyDropped: it is stored again without the request's body.
	DLQBodyDropped = "body_dropped"
	// DLQHeadersDropped: it is stored again without any original header.
	DLQHeadersDropped = "headers_dropped"
	// DLQReturned: no form could be stored; the request goes back to the
	// stream, redelivered after the ack wait.
	DLQReturned = "returned"
)

// Where a cancellation found its request (label where of
// fairdispatch_cancels_total; docs/protocol.md, Cancellation).
const (
	// CancelQueued: queued in the dispatcher; taken out, no service charged.
	CancelQueued = "queued"
	// CancelSending: in a dispatch handshake; forwarded or taken out on the answer.
	CancelSending = "sending"
	// CancelRunning: accepted by a worker lately; forwarded to it.
	CancelRunning = "running"
	// CancelRejected: being dead-lettered; nothing to do.
	CancelRejected = "rejected"
	// CancelUnknown: not held, not dispatched lately; remembered only.
	CancelUnknown = "unknown"
	// CancelStandby: received by a dispatcher that does not lead; remembered only.
	CancelStandby = "standby"
	// CancelAdmission: a request whose id was remembered as cancelled arrived
	// and was dropped at admission.
	CancelAdmission = "admission"
	// CancelInvalid: the cancellation did not parse.
	CancelInvalid = "invalid"
	// CancelBacklog: dropped, too many cancellations waiting for the actor.
	CancelBacklog = "backlog"
)

var (
	cancelWheres = []string{CancelQueued, CancelSending, CancelRunning, CancelRejected, CancelUnknown, CancelStandby,
		CancelAdmission, CancelInvalid, CancelBacklog}
	outcomes    = []string{OutcomeAccepted, OutcomeRefused, OutcomeNoResponders, OutcomeTimeout, OutcomeLate}
	dropReasons = []string{DropParse, DropMismatch, DropRank, DropInvalid, DropCapacity, DropInstance, DropOverflow}
	faults      = []string{FaultRequest, FaultWorker, FaultConnection}
	dlqActions  = []string{DLQBodyDropped, DLQHeadersDropped, DLQReturned}
)

// QueueWaitBuckets are the upper bounds, in seconds, of the queue wait
// histogram: 1 ms doubling up to 1,048.576 s (21 buckets, about 17 min), so
// that a backlog's waits of minutes, when the queue-age alert fires at 60 s,
// still land in a bucket of their own.
var QueueWaitBuckets = prometheus.ExponentialBuckets(0.001, 2, 21)

// ClassState is the queue state of one class, as the queue actor last saw it.
type ClassState struct {
	// Requests is the number of queued requests.
	Requests uint64
	// ISLTokens is the sum of their raw input lengths, in tokens.
	ISLTokens uint64
	// CachedTokens is the sum of their cached input tokens.
	CachedTokens uint64
	// Deficit is the class's DRR deficit, in cost units (uncached tokens); negative while the class owes settlement corrections.
	Deficit int64
	// Keys is the number of fairness keys the class tracks.
	Keys int
	// Budgeted is set for a class with token budgets (docs/design.md, Token
	// budgets): ThrottledKeys is then the number of its keys waiting for
	// their budget, and BudgetCharged the cost units charged to its budgets
	// so far (cumulative; the counter takes its increase).
	Budgeted      bool
	ThrottledKeys int
	BudgetCharged float64
}

// Metrics is the dispatcher's set of Prometheus collectors. Build it with [New];
// the zero value is not usable.
type Metrics struct {
	classes []string

	// Per class, index k.
	pendingRequests []prometheus.Gauge
	pendingISL      []prometheus.Gauge
	pendingCached   []prometheus.Gauge
	deficit         []prometheus.Gauge
	keys            []prometheus.Gauge
	keyJain         []prometheus.Gauge
	keyShareMax     []prometheus.Gauge
	keyShareMin     []prometheus.Gauge
	dispatched      []prometheus.Counter
	queueWait       []prometheus.Observer

	// Per class including the unresolved one, index k+1 (0 is unresolved).
	rejected    [][]prometheus.Counter // [k+1][index in request.Codes]
	deadLetters []prometheus.Counter

	// The vectors of the per-class series, for SetClasses.
	pendingRequestsVec, pendingISLVec, pendingCachedVec, deficitVec *prometheus.GaugeVec
	keysVec, oldestQueuedVec                                        *prometheus.GaugeVec
	keyJainVec, keyShareMaxVec, keyShareMinVec                      *prometheus.GaugeVec
	dispatchedVec, deadLettersVec                                   *prometheus.CounterVec
	queueWaitVec                                                    *prometheus.HistogramVec

	policyRevision prometheus.Gauge
	policyRefused  prometheus.Counter
	policyApplied  prometheus.Counter

	rejectedVec    *prometheus.CounterVec
	handshakes     []prometheus.Counter // index in outcomes
	handshakesVec  *prometheus.CounterVec
	loadDropped    []prometheus.Counter // index in dropReasons
	loadDroppedVec *prometheus.CounterVec
	sendFailed     *prometheus.CounterVec
	dlqFailed      *prometheus.CounterVec
	dlqRetries     prometheus.Counter
	leaseFailed    prometheus.Counter
	settlements    *prometheus.CounterVec
	cancels        *prometheus.CounterVec
	preemptions    *prometheus.CounterVec
	throttled      *prometheus.GaugeVec
	budgetCharged  *prometheus.CounterVec
	lastCharged    map[string]float64 // class name -> the BudgetCharged last counted
	budgeted       map[string]bool    // class name -> its budget series are shown
	correction     *prometheus.CounterVec

	booked     *prometheus.GaugeVec
	reported   *prometheus.GaugeVec
	overloaded *prometheus.GaugeVec

	liveWorkers  prometheus.Gauge
	held         prometheus.Gauge
	redelivered  prometheus.Counter
	progressAcks prometheus.Counter
	idConflicts  prometheus.Counter
	coalesced    prometheus.Counter
	connected    prometheus.Gauge
	graceOver    prometheus.Gauge
	leader       prometheus.Gauge
	unknownToken prometheus.Counter

	mu      sync.Mutex          // guards workers and seen
	workers map[string]struct{} // workers whose series exist
	seen    map[string]struct{} // scratch for SetWorkers, kept to reuse its memory

	oldestQueued []prometheus.Gauge // per class, index k
}

// New builds the collectors for the given classes (in policy order; a class's
// index there is its index in every per-class method) and registers them on reg.
// A nil reg registers nothing, which suits tests and benchmarks. Like promauto,
// New panics if a collector cannot be registered (a metric of the same name is
// already on reg): that is a wiring bug, found at start-up.
func New(reg prometheus.Registerer, classes []string) *Metrics {
	classVec := func(name, help string) *prometheus.GaugeVec {
		return prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: namespace, Name: name, Help: help}, []string{"class"})
	}
	counter := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Namespace: namespace, Name: name, Help: help})
	}
	gauge := func(name, help string) prometheus.Gauge {
		return prometheus.NewGauge(prometheus.GaugeOpts{Namespace: namespace, Name: name, Help: help})
	}
	counterVec := func(name, help string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Name: name, Help: help}, labels)
	}
	workerVec := func(name, help string) *prometheus.GaugeVec {
		return prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: namespace, Name: name, Help: help}, []string{"worker"})
	}

	pendingRequests := classVec("pending_requests", "Requests queued, per policy class.")
	pendingISL := classVec("pending_isl_tokens", "Raw input tokens of the queued requests, per policy class.")
	pendingCached := classVec("pending_cached_tokens", "Cached input tokens of the queued requests, per policy class.")
	deficit := classVec("drr_deficit", "DRR deficit per policy class, in cost units (uncached tokens); negative while the class owes settlement corrections.")
	keys := classVec("fairness_keys", "Fairness keys a policy class tracks: backlogged, or owed a settlement.")
	keyJain := classVec("key_fairness_jain", "Jain's fairness index over the normalized service of the keys backlogged throughout the last key fairness window (5 to 10 s), per policy class: 1 when every key got its weight's due; NaN with fewer than two such keys or no service.")
	keyShareMax := classVec("key_share_max_over_weight", "Largest share of the service over the key's share of the weights, among the keys backlogged throughout the last key fairness window, per policy class (1: exactly its due); NaN when not measured.")
	keyShareMin := classVec("key_share_min_over_weight", "Least share of the service over the key's share of the weights, among the keys backlogged throughout the last key fairness window, per policy class (0: a key starved); NaN when not measured.")
	dispatched := counterVec("dispatched_total", "Requests accepted by a worker, per policy class.", "class")
	queueWait := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: namespace, Name: "queue_wait_seconds",
		Help:    "Time from a request's publication to its acceptance by a worker, per policy class.",
		Buckets: QueueWaitBuckets,
	}, []string{"class"})
	deadLetters := counterVec("dead_letters_total", "Requests published to the DLQ, per policy class (class=\"\": unresolved).", "class")

	m := &Metrics{
		classes: append([]string(nil), classes...),
		rejectedVec: counterVec("rejected_total",
			"Requests rejected, per policy class (class=\"\": unresolved) and docs/protocol.md, Outcomes error code.", "class", "reason"),
		handshakesVec:  counterVec("handshakes_total", "Dispatch handshakes, per outcome.", "outcome"),
		loadDroppedVec: counterVec("load_reports_dropped_total", "Load reports dropped without being applied, per reason.", "reason"),
		sendFailed:     counterVec("dispatch_send_failures_total", "Dispatches that could not be sent, per fault class: request (dead-lettered as bad_request), worker (handled as a refusal), connection (requeued).", "fault"),
		settlements:    counterVec("settlements_total", "Completion records received, per outcome: settled (the correction applied), unknown, foreign, already_settled (ignored, docs/design.md, Cost settlement), invalid (did not parse), backlog (dropped: too many waiting).", "outcome"),
		cancels:        counterVec("cancels_total", "Cancellations received on <prefix>.cancel, per where the request was: queued (taken out, no service charged), sending (in a handshake), running (forwarded to its worker), rejected, unknown and standby (remembered only), admission (a remembered id arrived and was dropped), invalid, backlog (dropped).", "where"),
		preemptions: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Name: "preemptions_total",
			Help: "Preemptions of running requests of sheddable classes (docs/design.md, Preemption), per class of the preempted request and event: asked (a cancellation with reason preempt sent to its worker), returned (the request came back from the stream, at the head of its lane)."},
			[]string{"class", "event"}),
		throttled: classVec("budget_throttled_keys",
			"Fairness keys of a class with token budgets waiting for their budget (docs/design.md, Token budgets); absent for a class without budgets. Set about once a second."),
		budgetCharged: counterVec("budget_tokens_charged_total",
			"Cost units (uncached tokens) charged to a class's token budgets: at dispatch, plus settlement corrections above the estimate. Taken from the queue view about once a second.", "class"),
		lastCharged: map[string]float64{},
		budgeted:    map[string]bool{},
		correction:  counterVec("settlement_correction_tokens_total", "Total settlement correction applied, in cost units: under (actual above the estimate, charged more) and over (actual below, refunded).", "direction"),
		dlqRetries:  counter("dead_letter_retries_total", "Dead-letter publishes that failed and were retried with backoff (100 ms to 5 s), copied from the dead letterer every 3 s."),
		leaseFailed: counter("lease_renewal_failures_total",
			"Renewals of the leader lease that failed (unanswered, or refused by JetStream), each retried a quarter TTL later; the lease is lost when none succeeds within 3/4 TTL."),
		dlqFailed:    counterVec("dead_letter_failures_total", "Dead letters the DLQ refused for good, per action taken: body_dropped, headers_dropped, returned (to the stream, after the ack wait).", "action"),
		booked:       workerVec("worker_booked_prefill_tokens", "Prefill tokens booked by dispatches the worker's last report does not count yet, per live worker."),
		reported:     workerVec("worker_reported_prefill_tokens", "Active prefill tokens in the worker's last load report (sum over ranks), per live worker."),
		overloaded:   workerVec("worker_overloaded", "1 if the live worker is overloaded for selection (docs/design.md, Worker selection), else 0."),
		liveWorkers:  gauge("live_workers", "Workers currently live."),
		held:         gauge("held_messages", "Request messages held by the dispatcher (queued or in a handshake)."),
		redelivered:  counter("redelivered_messages_total", "Request messages received again while or after being held."),
		progressAcks: counter("progress_acks_total", "Progress acknowledgements (+WPI) sent for held messages."),
		coalesced: counter("load_reports_coalesced_total",
			"Load reports replaced by a newer one of the same worker before the queue actor applied them (the latest wins; not an error)."),
		idConflicts: counter("worker_id_conflicts_total",
			"Load reports showing two live instances (processes) under one worker id."),
		connected: gauge("nats_connected", "1 while connected to NATS, else 0."),
		graceOver: gauge("startup_grace_over", "1 once the start-up grace has passed, else 0."),
		leader:    gauge("leader", "1 while this dispatcher holds the leader lease and dispatches, 0 while it stands by."),
		workers:   map[string]struct{}{},
		seen:      map[string]struct{}{},
	}
	m.pendingRequestsVec, m.pendingISLVec, m.pendingCachedVec, m.deficitVec = pendingRequests, pendingISL, pendingCached, deficit
	m.dispatchedVec, m.deadLettersVec, m.queueWaitVec = dispatched, deadLetters, queueWait
	m.policyRevision = gauge("policy_revision",
		"Revision of the policy bucket's key that this dispatcher runs (docs/design.md, Live policy); 0: the policy of --policy-config or the flags, not from the bucket.")
	m.policyRefused = counter("policy_refused_total",
		"Revisions of the policy bucket refused as invalid (the last good policy stays).")
	m.policyApplied = counter("policy_applied_total",
		"Revisions of the policy bucket applied.")
	m.unknownToken = counter("unknown_class_tokens_total",
		"Requests whose subject token names no explicit class and no policy family, resolved in the default family (docs/design.md, Class resolution).")
	oldestQueued := classVec("oldest_queued_seconds",
		"Age, from publication, of the oldest request of a policy class the dispatcher holds and no worker has accepted; 0 when none. Set about once a second.")
	m.keysVec, m.oldestQueuedVec = keys, oldestQueued
	m.keyJainVec, m.keyShareMaxVec, m.keyShareMinVec = keyJain, keyShareMax, keyShareMin
	m.bindClasses()
	for _, o := range outcomes {
		m.handshakes = append(m.handshakes, m.handshakesVec.WithLabelValues(o))
	}
	for _, r := range dropReasons {
		m.loadDropped = append(m.loadDropped, m.loadDroppedVec.WithLabelValues(r))
	}
	for _, f := range faults {
		m.sendFailed.WithLabelValues(f)
	}
	for _, a := range dlqActions {
		m.dlqFailed.WithLabelValues(a)
	}
	for _, o := range []string{"settled", "unknown", "foreign", "already_settled", "invalid", "backlog"} {
		m.settlements.WithLabelValues(o)
	}
	for _, w := range cancelWheres {
		m.cancels.WithLabelValues(w)
	}
	m.correction.WithLabelValues("under")
	m.correction.WithLabelValues("over")

	if reg != nil {
		reg.MustRegister(pendingRequests, pendingISL, pendingCached, deficit, keys, dispatched, queueWait,
			deadLetters, m.rejectedVec, m.handshakesVec, m.loadDroppedVec, m.sendFailed, m.dlqFailed, m.dlqRetries, m.leaseFailed, m.booked, m.reported,
			m.overloaded, m.liveWorkers, m.held, m.redelivered, m.progressAcks, m.idConflicts, m.coalesced, m.connected, m.graceOver, m.leader)
		reg.MustRegister(m.unknownToken, m.policyRevision, m.policyRefused, m.policyApplied)
		reg.MustRegister(m.settlements, m.correction, keyJain, keyShareMax, keyShareMin, m.cancels, m.preemptions, m.throttled, m.budgetCharged)
		reg.MustRegister(oldestQueued)
	}
	return m
}

// bindClasses builds the per-class series of m.classes.
func (m *Metrics) bindClasses() {
	n := len(m.classes)
	m.pendingRequests, m.pendingISL = make([]prometheus.Gauge, n), make([]prometheus.Gauge, n)
	m.pendingCached, m.deficit = make([]prometheus.Gauge, n), make([]prometheus.Gauge, n)
	m.dispatched, m.queueWait = make([]prometheus.Counter, n), make([]prometheus.Observer, n)
	m.keys, m.oldestQueued = make([]prometheus.Gauge, n), make([]prometheus.Gauge, n)
	m.keyJain, m.keyShareMax, m.keyShareMin = make([]prometheus.Gauge, n), make([]prometheus.Gauge, n), make([]prometheus.Gauge, n)
	m.rejected, m.deadLetters = make([][]prometheus.Counter, n+1), make([]prometheus.Counter, n+1)
	for k, c := range m.classes {
		m.pendingRequests[k] = m.pendingRequestsVec.WithLabelValues(c)
		m.pendingISL[k] = m.pendingISLVec.WithLabelValues(c)
		m.pendingCached[k] = m.pendingCachedVec.WithLabelValues(c)
		m.deficit[k] = m.deficitVec.WithLabelValues(c)
		m.keys[k] = m.keysVec.WithLabelValues(c)
		m.keyJain[k] = m.keyJainVec.WithLabelValues(c)
		m.keyShareMax[k] = m.keyShareMaxVec.WithLabelValues(c)
		m.keyShareMin[k] = m.keyShareMinVec.WithLabelValues(c)
		for _, g := range []prometheus.Gauge{m.keyJain[k], m.keyShareMax[k], m.keyShareMin[k]} {
			g.Set(math.NaN()) // not measured yet: the next snapshot sets them
		}
		m.oldestQueued[k] = m.oldestQueuedVec.WithLabelValues(c)
		m.dispatched[k] = m.dispatchedVec.WithLabelValues(c)
		m.queueWait[k] = m.queueWaitVec.WithLabelValues(c)
	}
	for slot := range m.rejected {
		c := ""
		if slot > 0 {
			c = m.classes[slot-1]
		}
		m.rejected[slot] = make([]prometheus.Counter, len(request.Codes))
		for i, code := range request.Codes {
			m.rejected[slot][i] = m.rejectedVec.WithLabelValues(c, string(code))
		}
		m.deadLetters[slot] = m.deadLettersVec.WithLabelValues(c)
	}
}

// SetClasses changes the class set after a policy change (docs/design.md,
// Live policy): classes are the new policy's class names in its order, and
// from then on a class's index there is its index in every per-class method.
// The queue gauges of classes no longer in the policy are deleted; their
// counters and histograms stay, so that their totals and rates remain
// correct. Like the per-class methods, it must be called from the one
// goroutine that owns the scheduler (the queue actor). O(classes).
func (m *Metrics) SetClasses(classes []string) {
	keep := make(map[string]bool, len(classes))
	for _, c := range classes {
		keep[c] = true
	}
	for _, c := range m.classes {
		if !keep[c] {
			// A class added again is a new class of the scheduler, its
			// budgets' charges counted from 0.
			delete(m.lastCharged, c)
			delete(m.budgeted, c)
			for _, v := range []*prometheus.GaugeVec{m.pendingRequestsVec, m.pendingISLVec, m.pendingCachedVec, m.deficitVec, m.keysVec, m.oldestQueuedVec,
				m.keyJainVec, m.keyShareMaxVec, m.keyShareMinVec, m.throttled} {
				v.DeleteLabelValues(c)
			}
		}
	}
	m.classes = append([]string(nil), classes...)
	m.bindClasses()
}

// PolicyApplied records that the policy of revision rev of the policy
// bucket runs now.
func (m *Metrics) PolicyApplied(rev uint64) {
	m.policyRevision.Set(float64(rev))
	m.policyApplied.Inc()
}

// PolicyRefused counts one revision of the policy bucket refused as invalid.
func (m *Metrics) PolicyRefused() { m.policyRefused.Inc() }

// Classes returns the class names given to New, in index order. The caller must
// not modify the slice.
func (m *Metrics) Classes() []string { return m.classes }

// slot maps a class index to its index in the slices that include the
// unresolved class: k+1 for a known class, 0 for anything else.
func (m *Metrics) slot(k int) int {
	if k < 0 || k >= len(m.classes) {
		return 0
	}
	return k + 1
}

// Dispatched counts one request of class k accepted by a worker. An index
// outside the classes is ignored. It does not allocate.
func (m *Metrics) Dispatched(k int) {
	if k >= 0 && k < len(m.dispatched) {
		m.dispatched[k].Inc()
	}
}

// QueueWait records the time, in seconds, from a request's publication to its
// acceptance, for class k; a negative value (clock skew) counts as 0. An index
// outside the classes is ignored. It does not allocate.
func (m *Metrics) QueueWait(k int, seconds float64) {
	if k < 0 || k >= len(m.queueWait) {
		return
	}
	if !(seconds > 0) { // also maps NaN to 0
		seconds = 0
	}
	m.queueWait[k].Observe(seconds)
}

// Rejected counts one request of class k (or [Unresolved]) rejected with code.
// For the codes of request.Codes it does not allocate; another code is counted
// under its own label value (a series created on first use).
func (m *Metrics) Rejected(k int, code request.Code) {
	s := m.slot(k)
	for i, c := range request.Codes {
		if c == code {
			m.rejected[s][i].Inc()
			return
		}
	}
	c := ""
	if s > 0 {
		c = m.classes[s-1]
	}
	m.rejectedVec.WithLabelValues(c, string(code)).Inc()
}

// DeadLetter counts one request of class k (or [Unresolved]) published to the
// DLQ. It does not allocate.
func (m *Metrics) DeadLetter(k int) { m.deadLetters[m.slot(k)].Inc() }

// Handshake counts one handshake outcome, one of the Outcome constants. It does
// not allocate for those; another value is counted under its own label value.
func (m *Metrics) Handshake(outcome string) { inc(outcomes, m.handshakes, m.handshakesVec, outcome) }

// LoadDropped counts one dropped load report, for reason one of the Drop
// constants. It does not allocate for those; another value is counted under its
// own label value.
func (m *Metrics) LoadDropped(reason string) {
	inc(dropReasons, m.loadDropped, m.loadDroppedVec, reason)
}

// inc counts one under label value v of vec: with the counter of counters
// made for v when v is one of known (same index; no allocation), else
// through vec.
func inc(known []string, counters []prometheus.Counter, vec *prometheus.CounterVec, v string) {
	for i, k := range known {
		if k == v {
			counters[i].Inc()
			return
		}
	}
	vec.WithLabelValues(v).Inc()
}

// SendFailed counts one dispatch that could not be sent, for fault one of
// the Fault constants.
func (m *Metrics) SendFailed(fault string) { m.sendFailed.WithLabelValues(fault).Inc() }

// DeadLetterFailed counts one dead letter the DLQ refused for good, for
// action one of the DLQ constants.
func (m *Metrics) DeadLetterFailed(action string) { m.dlqFailed.WithLabelValues(action).Inc() }

// Settlement counts one completion record by outcome (docs/design.md, Cost
// settlement) and adds the correction it applied, in cost units.
func (m *Metrics) Settlement(outcome string, correction int64) {
	m.settlements.WithLabelValues(outcome).Inc()
	switch {
	case correction > 0:
		m.correction.WithLabelValues("under").Add(float64(correction))
	case correction < 0:
		m.correction.WithLabelValues("over").Add(float64(-correction))
	}
}

// LeaseRenewalFailed counts one failed renewal of the leader lease.
func (m *Metrics) LeaseRenewalFailed() { m.leaseFailed.Inc() }

// Cancel counts a cancellation by where it found its request (Cancel*).
func (m *Metrics) Cancel(where string) { m.cancels.WithLabelValues(where).Inc() }

// Preempted counts one preemption event ("asked" or "returned") of a
// request of class.
func (m *Metrics) Preempted(class, event string) {
	m.preemptions.WithLabelValues(class, event).Inc()
}

// DeadLetterRetried counts one dead-letter publish retried with backoff.
func (m *Metrics) DeadLetterRetried() { m.dlqRetries.Inc() }

// UnknownClassToken counts one request whose subject token names neither an
// explicit class nor a policy family (it is resolved in the default family).
// It has no token label: tokens come from producers and are unbounded.
func (m *Metrics) UnknownClassToken() { m.unknownToken.Inc() }

// SetClass sets the queue gauges of class k. An index outside the classes is
// ignored. It does not allocate.
func (m *Metrics) SetClass(k int, s ClassState) {
	if k < 0 || k >= len(m.classes) {
		return
	}
	m.pendingRequests[k].Set(float64(s.Requests))
	m.pendingISL[k].Set(float64(s.ISLTokens))
	m.pendingCached[k].Set(float64(s.CachedTokens))
	m.deficit[k].Set(float64(s.Deficit))
	m.keys[k].Set(float64(s.Keys))
	name := m.classes[k]
	if !s.Budgeted {
		if m.budgeted[name] { // its budgets went with a policy revision
			m.throttled.DeleteLabelValues(name)
			m.budgeted[name] = false
		}
		return
	}
	m.budgeted[name] = true
	m.throttled.WithLabelValues(name).Set(float64(s.ThrottledKeys))
	if d := s.BudgetCharged - m.lastCharged[name]; d > 0 {
		m.budgetCharged.WithLabelValues(name).Add(d)
	}
	m.lastCharged[name] = max(m.lastCharged[name], s.BudgetCharged)
}

// SetOldestQueued sets the age, in seconds, of the oldest request of class k
// not yet accepted. An index outside the classes is ignored.
func (m *Metrics) SetOldestQueued(k int, seconds float64) {
	if k >= 0 && k < len(m.oldestQueued) {
		m.oldestQueued[k].Set(seconds)
	}
}

// KeyFairness is a class's key fairness over the last window (docs/design.md,
// Key fairness window); NaN fields were not measured.
type KeyFairness struct {
	Jain, MaxShareOverWeight, MinShareOverWeight float64
}

// SetKeyFairness sets the key fairness gauges of class k. An index outside the
// classes is ignored. It does not allocate.
func (m *Metrics) SetKeyFairness(k int, f KeyFairness) {
	if k < 0 || k >= len(m.classes) {
		return
	}
	m.keyJain[k].Set(f.Jain)
	m.keyShareMax[k].Set(f.MaxShareOverWeight)
	m.keyShareMin[k].Set(f.MinShareOverWeight)
}

// SetHeld sets the number of request messages the dispatcher holds.
func (m *Metrics) SetHeld(n int) { m.held.Set(float64(n)) }

// Redelivered counts one redelivered request message.
func (m *Metrics) Redelivered() { m.redelivered.Inc() }

// ProgressAck counts one progress acknowledgement sent for a held message.
func (m *Metrics) ProgressAck() { m.progressAcks.Inc() }

// LoadCoalesced counts one load report replaced by a newer one of the same
// worker before the queue actor applied it.
func (m *Metrics) LoadCoalesced() { m.coalesced.Inc() }

// IDConflict counts one load report showing two live instances under one worker id.
func (m *Metrics) IDConflict() { m.idConflicts.Inc() }

// SetConnected records whether the dispatcher is connected to NATS.
func (m *Metrics) SetConnected(up bool) { m.connected.Set(b2f(up)) }

// SetGraceOver records whether the start-up grace has passed.
func (m *Metrics) SetGraceOver(over bool) { m.graceOver.Set(b2f(over)) }

// SetLeader records whether this dispatcher leads (1) or stands by (0).
func (m *Metrics) SetLeader(lead bool) { m.leader.Set(b2f(lead)) }

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// RegisterBuildInfo registers fairdispatch_build_info{version,revision,goversion},
// always 1, on reg: which build runs, for dashboards and alerts to join on.
func RegisterBuildInfo(reg prometheus.Registerer, version, revision, goversion string) {
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: namespace, Name: "build_info",
		Help: "Always 1; its labels say which build runs: version (module version), revision (VCS commit, +modified for a dirty tree) and goversion."},
		[]string{"version", "revision", "goversion"})
	g.WithLabelValues(version, revision, goversion).Set(1)
	reg.MustRegister(g)
}

package scheduler

import (
	"math"

	"fairdispatch/internal/fifo"
)

// Completion is a worker's completion record as the core reads it
// (docs/protocol.md, Completion records): which dispatch it settles and what
// the request really cost.
type Completion struct {
	Seq           uint64 // the dispatch's Dispatch-Seq
	RequestID     string // the request id; "" skips the check
	PrefillTokens uint64 // uncached tokens actually computed
	OutputTokens  uint64
	// Cancelled is set for a record with status cancelled: the request
	// stopped before its end (for a dispatch the scheduler preempted, it
	// was handed back).
	Cancelled bool
}

// SettleOutcome says what Settle did with a completion record.
type SettleOutcome uint8

// The outcomes of Settle. Every outcome but Settled changes nothing.
const (
	// Settled: the correction was applied (it may be 0: the cost was exact, or
	// the request was dispatched at once, never arbitrated, so nothing was
	// charged to correct).
	Settled SettleOutcome = iota
	// Unknown: no dispatch with that Dispatch-Seq to that worker is remembered
	// (never made, handed back, or forgotten after the settlement window).
	Unknown
	// Foreign: that worker's dispatch with that sequence carried another
	// request: the record speaks of a request the worker was not given.
	Foreign
	// AlreadySettled: a record for that dispatch was applied before.
	AlreadySettled
)

// String returns the outcome's name, as used in metrics.
func (o SettleOutcome) String() string {
	switch o {
	case Settled:
		return "settled"
	case Unknown:
		return "unknown"
	case Foreign:
		return "foreign"
	case AlreadySettled:
		return "already_settled"
	}
	return "invalid"
}

// SettleResult is what Settle did.
type SettleResult struct {
	Outcome SettleOutcome
	// Correction is actual minus charged cost, in cost units, applied to the
	// key's service and the class's deficit when Outcome is Settled.
	Correction int64
	Class      int    // the dispatch's class, when known
	Key        string // the dispatch's fairness key, when known
}

// Settle applies the completion record c that worker published for one of its
// dispatches (docs/design.md, Cost settlement): actual = prefill_tokens +
// output_token_weight * output_tokens; the correction actual - charged goes to
// the key's normalized service and to the class's DRR deficit (which may go
// below zero). A record for an unknown, foreign or already settled dispatch
// changes nothing; the result says which. O(log K) for K keys of the class.
func (s *Scheduler) Settle(worker string, c Completion) SettleResult {
	rec := s.settle.find(worker, c.Seq)
	switch {
	case rec == nil:
		return SettleResult{Outcome: Unknown}
	case c.RequestID != "" && c.RequestID != rec.id:
		return SettleResult{Outcome: Foreign, Class: rec.class, Key: rec.key}
	case rec.settled:
		return SettleResult{Outcome: AlreadySettled, Class: rec.class, Key: rec.key}
	}
	if s.pre.on {
		if c.Cancelled && s.pre.handedBack(worker, c.Seq, rec.id) {
			// Preempted and handed back: refunded, not corrected
			// (docs/design.md, Preemption); it comes back from the stream.
			res := SettleResult{Outcome: Settled, Class: rec.class, Key: rec.key}
			if rec.owes {
				res.Correction = -int64(min(rec.charged, math.MaxInt64/4))
			}
			s.refund(worker, c.Seq)
			return res
		}
		s.pre.settled(worker, c.Seq, rec.id)
	}
	rec.settled = true
	res := SettleResult{Outcome: Settled, Class: rec.class, Key: rec.key}
	if !rec.owes {
		return res
	}
	ow := s.pol.Classes[rec.class].OutputTokenWeight
	actual := float64(c.PrefillTokens) + ow*float64(c.OutputTokens)
	actual = min(actual, float64(math.MaxInt64/4))
	res.Correction = int64(math.Round(actual)) - int64(min(rec.charged, math.MaxInt64/4))
	s.arb.Charge(rec.class, res.Correction)
	s.classes[rec.class].Settle(rec.key, res.Correction)
	if rec.budget > 0 {
		s.classes[rec.class].ChargeBudget(s.now, rec.key, res.Correction)
	}
	return res
}

// Unsettled returns the number of dispatches remembered for settlement,
// settled or not, within the settlement window.
func (s *Scheduler) Unsettled() int { return s.settle.live }

// releaseKey tells class c that key k is owed no settlement for one dispatch
// (settlements.release).
func (s *Scheduler) releaseKey(c int, k string) { s.classes[c].Release(k) }

// settlements remembers recent dispatches for settlement, for at most window
// nanoseconds and max dispatches: per worker in sequence order, to find one,
// and all of them in dispatch order, to forget the oldest.
//
// A worker's dispatch sequence only grows (the registry numbers each worker's
// dispatches, docs/protocol.md, Load report), so each worker's log is sorted
// by sequence and a record is found by binary search: no map of every
// dispatch, no allocation per dispatch, and far fewer objects for the garbage
// collector to visit. The one exception, a worker whose numbering started over
// (it expired and the registry no longer remembered its next sequence), gets
// a new log, and its earlier dispatches are forgotten, their keys released as
// at expiry: a completion record could no longer tell them from the new ones.
type settlements struct {
	logs    map[string]*seqLog  // each worker's current log
	fifo    fifo.Queue[*seqLog] // one entry per record, in dispatch order
	live    int                 // records neither forgotten nor expired
	window  int64
	max     int
	release func(class int, key string) // the key is owed no settlement (Scheduler.releaseKey)
}

// seqLog is one worker's dispatches, by growing sequence.
type seqLog struct {
	worker string
	recs   fifo.Queue[dispatchRec]
}

// dispatchRec is one dispatch remembered for settlement.
type dispatchRec struct {
	seq     uint64
	id      string
	key     string
	class   int
	charged uint64 // the cost DRR and the key were charged; 0 when not arbitrated
	at      int64  // dispatch time
	budget  uint64 // what the key's token budget was charged; 0: nothing
	owes    bool   // arbitrated: the key is owed this settlement
	settled bool
	dropped bool // forgotten: handed back, unsent, or its worker's numbering started over
}

func (st *settlements) init(cfg Config, release func(class int, key string)) {
	st.logs = make(map[string]*seqLog)
	st.window, st.max, st.release = cfg.SettleWindow, cfg.MaxUnsettled, release
	if st.window == 0 {
		st.window = DefaultSettleWindow
	}
	if st.max == 0 {
		st.max = DefaultMaxUnsettled
	}
}

// find returns the remembered, not forgotten, dispatch seq of worker, or nil.
// The pointer is good until the next record or expire.
func (st *settlements) find(worker string, seq uint64) *dispatchRec {
	l := st.logs[worker]
	if l == nil {
		return nil
	}
	recs := &l.recs
	if recs.Len() == 0 || seq < recs.Front().seq {
		return nil
	}
	// A worker's sequence grows by one per dispatch, so the record is
	// usually at its offset from the first; a jump (the registry moved the
	// sequence on past a worker's seen_seq) needs the search.
	var rec *dispatchRec
	if i := seq - recs.Front().seq; i < uint64(recs.Len()) {
		rec = recs.At(int(i))
	}
	if rec == nil || rec.seq != seq {
		j := recs.Search(func(r *dispatchRec) bool { return r.seq >= seq })
		if j == recs.Len() || recs.At(j).seq != seq {
			return nil
		}
		rec = recs.At(j)
	}
	if rec.dropped {
		return nil
	}
	return rec
}

// record remembers dispatch d; charged is what arbitration charged (owes: it
// went through the class's queue and its key is owed a settlement).
func (st *settlements) record(now int64, d Decision, charged uint64, owes bool) {
	l := st.logs[d.Worker]
	if l != nil && l.recs.Len() > 0 && l.recs.Back().seq >= d.Seq {
		st.dropAll(l) // the worker's numbering started over
		l = nil
	}
	if l == nil {
		l = &seqLog{worker: d.Worker}
		st.logs[d.Worker] = l
	}
	l.recs.Push(dispatchRec{seq: d.Seq, id: d.Req.ID, key: d.Req.Key, class: d.Req.Class,
		charged: charged, at: now, owes: owes})
	st.fifo.Push(l)
	st.live++
}

// dropAll forgets every record of l, releasing the keys still owed.
func (st *settlements) dropAll(l *seqLog) {
	for i := range l.recs.Len() {
		st.drop(l.recs.At(i), true)
	}
}

// drop forgets rec; with release, its key is owed nothing any more.
func (st *settlements) drop(rec *dispatchRec, release bool) {
	if rec.dropped {
		return
	}
	rec.dropped = true
	st.live--
	if release && rec.owes && !rec.settled {
		st.release(rec.class, rec.key)
	}
}

// reclass follows a policy change: to maps an old class index to the new one,
// or -1 for a removed class, whose dispatches are then owed no settlement
// (the class and its keys are gone). O(remembered dispatches). Logs no longer
// current hold only forgotten records, which are left as they are.
func (st *settlements) reclass(to []int) {
	for _, l := range st.logs {
		for i := range l.recs.Len() {
			rec := l.recs.At(i)
			if rec.dropped || rec.class < 0 || rec.class >= len(to) {
				continue
			}
			rec.class = to[rec.class]
			if rec.class < 0 {
				rec.owes = false
			}
		}
	}
}

// budgeted notes that dispatch d charged its key's budget cost units, so
// that its settlement corrects the budget too.
func (st *settlements) budgeted(d Decision, cost uint64) {
	if rec := st.find(d.Worker, d.Seq); rec != nil {
		rec.budget = cost
	}
}

// forget forgets the dispatch (worker, seq): it never reached the worker, or was
// refused. With release the request has left the scheduler, so its key is owed
// nothing; without, the request waits again, still charged, and its next
// dispatch's record takes over.
func (st *settlements) forget(worker string, seq uint64, release bool) {
	if rec := st.find(worker, seq); rec != nil {
		st.drop(rec, release)
	}
}

// expire forgets dispatches older than the window, or beyond max, releasing
// the keys still owed their settlement. Amortized O(1) per dispatch: a
// dispatch's record is always the oldest of its worker's log when its turn
// comes.
func (st *settlements) expire(now int64) {
	for st.fifo.Len() > 0 {
		l := *st.fifo.Front()
		if now-l.recs.Front().at < st.window && st.fifo.Len() <= st.max {
			break
		}
		st.fifo.Pop()
		rec := l.recs.Pop()
		st.drop(&rec, true)
		if l.recs.Len() == 0 && st.logs[l.worker] == l {
			delete(st.logs, l.worker)
		}
	}
}

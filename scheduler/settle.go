package scheduler

import (
	"math"

	"fairdispatch/lanes"
)

// Completion is a worker's completion record as the core reads it
// (docs/protocol.md, Completion records): which dispatch it settles and what
// the request really cost.
type Completion struct {
	Seq           uint64 // the dispatch's Dispatch-Seq
	RequestID     string // the request id; "" skips the check
	PrefillTokens uint64 // uncached tokens actually computed
	OutputTokens  uint64
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
	rec := s.settle.byKey[recKey{worker, c.Seq}]
	switch {
	case rec == nil:
		return SettleResult{Outcome: Unknown}
	case c.RequestID != "" && c.RequestID != rec.id:
		return SettleResult{Outcome: Foreign, Class: rec.class, Key: rec.key}
	case rec.settled:
		return SettleResult{Outcome: AlreadySettled, Class: rec.class, Key: rec.key}
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
	return res
}

// Unsettled returns the number of dispatches remembered for settlement,
// settled or not, within the settlement window.
func (s *Scheduler) Unsettled() int { return len(s.settle.byKey) }

// recKey names one dispatch: the worker and its Dispatch-Seq.
type recKey struct {
	worker string
	seq    uint64
}

// dispatchRec is one dispatch remembered for settlement.
type dispatchRec struct {
	recKey
	id      string
	key     string
	class   int
	charged uint64 // the cost DRR and the key were charged; 0 when not arbitrated
	at      int64  // dispatch time
	owes    bool   // arbitrated: the key is owed this settlement
	settled bool
	dropped bool // handed back: no longer in byKey
}

// settlements remembers recent dispatches, by (worker, seq) and in dispatch
// order, for at most window nanoseconds and max entries.
type settlements struct {
	byKey  map[recKey]*dispatchRec
	fifo   []*dispatchRec // dispatch order; fifo[head:] are live or dropped
	head   int
	window int64
	max    int
}

func (st *settlements) init(cfg Config) {
	st.byKey = make(map[recKey]*dispatchRec)
	st.window, st.max = cfg.SettleWindow, cfg.MaxUnsettled
	if st.window == 0 {
		st.window = DefaultSettleWindow
	}
	if st.max == 0 {
		st.max = DefaultMaxUnsettled
	}
}

// record remembers dispatch d; charged is what arbitration charged (owes: it
// went through the class's queue and its key is owed a settlement).
func (st *settlements) record(now int64, d Decision, charged uint64, owes bool, classes []*lanes.Keyed) {
	k := recKey{d.Worker, d.Seq}
	if old := st.byKey[k]; old != nil {
		// A restarted worker's sequence reused: the newer dispatch counts.
		old.dropped = true
		if old.owes && !old.settled {
			classes[old.class].Release(old.key)
		}
	}
	rec := &dispatchRec{recKey: k, id: d.Req.ID, key: d.Req.Key, class: d.Req.Class, charged: charged, at: now, owes: owes}
	st.byKey[k] = rec
	st.fifo = append(st.fifo, rec)
}

// reclass follows a policy change: to maps an old class index to the new one,
// or -1 for a removed class, whose dispatches are then owed no settlement
// (the class and its keys are gone). O(remembered dispatches).
func (st *settlements) reclass(to []int) {
	for _, rec := range st.fifo[st.head:] {
		if rec == nil || rec.class < 0 || rec.class >= len(to) {
			continue
		}
		rec.class = to[rec.class]
		if rec.class < 0 {
			rec.owes = false
		}
	}
}

// forget forgets the dispatch (worker, seq): it never reached the worker, or was
// refused. With release the request has left the scheduler, so its key is owed
// nothing; without, the request waits again, still charged, and its next
// dispatch's record takes over.
func (st *settlements) forget(worker string, seq uint64, release bool, classes []*lanes.Keyed) {
	k := recKey{worker, seq}
	rec := st.byKey[k]
	if rec == nil {
		return
	}
	rec.dropped = true
	delete(st.byKey, k)
	if release && rec.owes && !rec.settled {
		classes[rec.class].Release(rec.key)
	}
}

// expire forgets dispatches older than the window, or beyond max, releasing
// the keys still owed their settlement. Amortized O(1) per dispatch.
func (st *settlements) expire(now int64, classes []*lanes.Keyed) {
	for st.head < len(st.fifo) {
		rec := st.fifo[st.head]
		if now-rec.at < st.window && len(st.fifo)-st.head <= st.max {
			break
		}
		st.fifo[st.head] = nil
		st.head++
		if rec.dropped {
			continue
		}
		if st.byKey[rec.recKey] == rec {
			delete(st.byKey, rec.recKey)
		}
		if rec.owes && !rec.settled {
			classes[rec.class].Release(rec.key)
		}
	}
	if st.head > 1024 && st.head*2 > len(st.fifo) {
		n := copy(st.fifo, st.fifo[st.head:])
		clear(st.fifo[n:])
		st.fifo = st.fifo[:n]
		st.head = 0
	}
}

package dispatcher

import (
	"time"

	"fairdispatch/kvindex"
	"fairdispatch/wire"
	"fairdispatch/workers"
)

// kvEvent is a parsed KV cache event waiting for the actor.
type kvEvent struct {
	worker    string
	ev        wire.KVEvent
	published time.Time
}

// KVTiers are the tier names, in wire.Tier order: the label values of
// fairdispatch_kv_index_blocks (metrics.NewKV).
var KVTiers = func() []string {
	var t []string
	for i := range wire.NumTiers {
		t = append(t, i.String())
	}
	return t
}()

// maxPendingKV bounds the parsed KV events waiting for the actor. Past it an
// event is dropped: the worker's next event then shows a gap, and the rank
// resynchronises (docs/protocol.md, Resynchronisation), so a slow actor sheds
// load without ever keeping a wrong index.
const maxPendingKV = 1 << 16

// kvResyncEvery is how often a rank that stays stale is asked again to
// resynchronise (docs/protocol.md, Resynchronisation).
const kvResyncEvery = 5 * time.Second

// KVEvent parses a raw KV cache event on the caller's goroutine (the
// bus.ConsumeKV callback) and delivers it to the actor, which applies it to
// the KV cache index (Deps.KV). An event that does not parse, or comes under
// a subject token that is not a worker id, is dropped and logged (at most once
// per worker per interval); it counts as lost for the rank's sequence. It
// never blocks. Without an index it does nothing.
//
// published is the event's publication time, for the lag metric (zero:
// unknown).
func (a *Actor) KVEvent(token string, data []byte, published time.Time) {
	if a.d.KV == nil {
		return
	}
	if !workers.ValidID(token) {
		a.droppedKV(token, "the subject token is not a worker id", nil)
		return
	}
	ev, err := wire.ParseKVEvent(data)
	if err != nil {
		a.droppedKV(token, "invalid", err)
		return
	}
	if a.kv.len() >= maxPendingKV {
		a.droppedKV(token, "overflow", nil)
		return
	}
	a.kv.put(kvEvent{token, ev, published})
}

func (a *Actor) droppedKV(worker, reason string, err error) {
	a.d.KVMetrics.Event("dropped", 0, 0)
	ok, suppressed := a.kvDrops.allow(worker, a.cfg.Now())
	if !ok {
		return
	}
	a.log.Warn().Err(err).Str("worker_id", worker).Str("reason", reason).Int("suppressed", suppressed).
		Msg("KV cache event dropped (the rank's next event shows a gap and it resynchronises)")
}

// applyKV applies one event to the index and asks the ranks it made stale to
// resynchronise.
func (a *Actor) applyKV(e *kvEvent) {
	r, err := a.d.KV.Apply(e.worker, &e.ev)
	if err != nil {
		a.droppedKV(e.worker, "refused by the index", err)
		return
	}
	result, lag := "applied", -1.0
	if r.Duplicate {
		result = "duplicate"
	} else if !e.published.IsZero() {
		lag = a.cfg.Now().Sub(e.published).Seconds()
	}
	a.d.KVMetrics.Event(result, r.Ops, lag)
	if r.Gap || r.Evictions > 0 {
		a.log.Debug().Str("worker_id", e.worker).Int32("dp_rank", e.ev.Rank).Bool("gap", r.Gap).Int("evictions", r.Evictions).
			Msg("KV cache index: ranks became stale")
	}
	a.kvStale = a.d.KV.TakeStale(a.kvStale[:0])
	for _, rk := range a.kvStale {
		a.askResync(rk)
	}
}

// askResync asks a stale rank to resynchronise, best effort.
func (a *Actor) askResync(rk kvindex.Rank) {
	if a.d.KVResync == nil {
		return
	}
	if err := a.d.KVResync(rk.Worker, rk.Rank); err != nil {
		a.log.Debug().Err(err).Str("worker_id", rk.Worker).Int32("dp_rank", rk.Rank).Msg("KV resync request not sent")
	}
}

// kvTick records the index's size and asks every rank that is still stale
// to resynchronise again, every kvResyncEvery.
func (a *Actor) kvTick(now time.Time) {
	if a.d.KV == nil {
		return
	}
	st := a.d.KV.Stats()
	a.d.KVMetrics.SetIndex(KVTiers, st.TierBlocks[:], st.Stale)
	if now.Sub(a.kvAsked) < kvResyncEvery {
		return
	}
	a.kvAsked = now
	a.kvStale = a.d.KV.StaleRanks(a.kvStale[:0])
	for _, rk := range a.kvStale {
		a.askResync(rk)
	}
}

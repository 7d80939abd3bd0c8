package dispatcher

import (
	"time"

	"fairdispatch/metrics"
	"fairdispatch/request"
	"fairdispatch/workers"
)

func (a *Actor) report(rep workers.Report) {
	now := a.cfg.Now()
	ch, ok := a.d.Scheduler.ApplyReport(now.UnixNano(), rep)
	if !ok {
		a.d.Metrics.LoadDropped(string(workers.DropCapacity))
		return
	}
	if ch.Rival {
		a.d.Metrics.LoadDropped(metrics.DropInstance)
	}
	if ch.Conflict {
		a.d.Metrics.IDConflict()
		a.warnConflict(now, rep.WorkerID, ch)
	}
	if a.out {
		a.fleet(now)
	}
}

// conflictLogEvery is the shortest gap between two warnings about the
// instances of one worker id.
const conflictLogEvery = 10 * time.Second

// warnConflict logs two live instances under one worker id at warn, at most
// once per conflictLogEvery per id (docs/protocol.md, One worker id, one process).
func (a *Actor) warnConflict(now time.Time, id string, ch workers.Change) {
	if last, ok := a.conflictLog[id]; ok && now.Sub(last) < conflictLogEvery {
		return
	}
	if len(a.conflictLog) >= 1024 {
		clear(a.conflictLog) // bounded memory: a flood of ids must not grow it
	}
	a.conflictLog[id] = now
	a.log.Warn().Str("worker_id", id).Str("instance", ch.Owner).Str("other_instance", ch.Other).
		Msg("two live processes report under one worker id: the holding instance keeps it, the other's reports are dropped")
}

// fleet follows fleet outages (docs/design.md, Fleet outage): when no worker
// is live any more (after the start-up grace) it closes the pull gate, so that
// the backlog waits in the stream, and logs a warning; when one reports again
// it opens the gate and logs the outage's length and the backlog it held. The
// scheduler holds the queued requests meanwhile, and the Keeper keeps them alive.
func (a *Actor) fleet(now time.Time) {
	since, out := a.d.Scheduler.Outage(now.UnixNano())
	if out == a.out {
		return
	}
	a.out = out
	a.d.Gate.Set(out) // before NoLiveWorkers says so: once /readyz shows the outage, no pull starts
	a.fleetOut.Store(out)
	queued := 0
	for k := range a.d.Scheduler.Policy().Classes {
		queued += a.d.Scheduler.Queued(k)
	}
	if out {
		a.outSince = since
		a.log.Warn().Time("since", time.Unix(0, since)).Int("held", len(a.held)).Int("queued", queued).Bool("leader", a.leading.Load()).
			Msg("no live workers: requests are held and pulling stops until a worker reports")
	} else {
		id := ""
		if ws := a.d.Scheduler.Workers().All(); len(ws) > 0 {
			id = ws[0].ID
		}
		a.log.Info().Str("worker_id", id).Dur("outage", now.Sub(time.Unix(0, a.outSince))).Int("held", len(a.held)).Int("queued", queued).Bool("leader", a.leading.Load()).
			Msg("a worker is live again: dispatching and pulling resume")
	}
	a.publishView(now)
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
	a.sendPaused = false // a send that failed for the connection's fault is tried again
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
	a.fleet(now)
	for _, d := range a.tickDecs {
		if h := a.held[d.Req.Ref]; h != nil {
			a.reject(h, d.Err)
		}
	}
	clear(a.tickDecs)
	a.preempt(now)
	if a.connected {
		for range a.d.Keeper.Tick(now) {
			a.d.Metrics.ProgressAck()
		}
	}
}

// active reports whether the actor may admit and dispatch: it leads and is not stopping.
func (a *Actor) active() bool { return a.leading.Load() && !a.stopping }

func (a *Actor) className(k int) string {
	if k < 0 {
		return ""
	}
	return a.d.Scheduler.Policy().Classes[k].Name
}

func queuedMs(now time.Time, r *request.Snapshot) int64 {
	return max(0, now.UnixNano()-r.Arrival) / 1e6
}

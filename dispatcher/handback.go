package dispatcher

import "context"

// handBack NAKs a held message for immediate redelivery and forgets it.
func (a *Actor) handBack(seq uint64, h *held) {
	_ = h.msg.Nak()
	a.d.Keeper.Drop(seq)
	a.dropHeld(seq, h)
	h.rel.Release(1)
}

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

// shutdown stops admitting, hands back what is queued and what was pulled and
// not admitted, and waits for dispatches in flight and dead letters pending,
// until drain ends. Callbacks never block (mailbox.go), so nothing they do can
// keep it from ending.
func (a *Actor) shutdown(drain context.Context) {
	a.stopping = true
	a.syncTerm()
	n := a.handBackQueued() + a.retire(a.cur)
	a.log.Info().Int("handed_back", n).Int("in_flight", a.inFlight).Msg("shutting down")
	for a.inFlight > 0 || a.deadPending() {
		select {
		case <-a.results.wake:
			a.answerAll()
		case <-a.dlq.wake:
			a.deadLetteredAll()
		case batch := <-a.cur.ch: // a consumer still running: hand back (not active)
			a.admitBatch(batch)
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

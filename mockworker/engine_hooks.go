package mockworker

import "time"

// What the response writing and cancellation need from the timing model
// (engine.go): when each output token of a job comes out, and taking a job
// out before it finishes. They read the engine's fields; a new timing model
// keeps these two functions true to it, and nothing else here changes. The
// batched engines (batched.go) answer through engine.alt.

// timing is what engine_hooks.go asks of a timing model.
type timing interface {
	tokenAt(j *job, k int) (time.Time, bool)
	produced(j *job, now time.Time) int
	remove(j *job, now time.Time) bool
}

// tokenAt returns when the k-th output token (from 1) of running job j is
// produced: the first at the end of its prefill, each further one a decode
// step later (docs: mockworker/doc.go, Model). ok is false while j waits for
// a slot (its times are not known yet).
func (e *engine) tokenAt(j *job, k int) (at time.Time, ok bool) {
	if e.alt != nil {
		return e.alt.tokenAt(j, k)
	}
	if j.phase == phaseWaiting {
		return time.Time{}, false
	}
	return j.prefillEnd.Add(time.Duration(k-1) * e.decodePerTok), true
}

// produced returns how many output tokens of j are out at now, at most j.out.
func (e *engine) produced(j *job, now time.Time) int {
	if e.alt != nil {
		return e.alt.produced(j, now)
	}
	if j.phase == phaseWaiting || now.Before(j.prefillEnd) {
		return 0
	}
	if e.decodePerTok <= 0 {
		return j.out
	}
	return min(j.out, 1+int(now.Sub(j.prefillEnd)/e.decodePerTok))
}

// remove takes j out of its rank at now, wherever it is (waiting or
// running), releasing its load and starting the next waiting job in its
// slot. It reports whether j was in the engine.
func (e *engine) remove(j *job, now time.Time) bool {
	if e.alt != nil {
		return e.alt.remove(j, now)
	}
	rs := e.rank(j.rank)
	for i, w := range rs.waiting {
		if w == j {
			rs.waiting = append(rs.waiting[:i], rs.waiting[i+1:]...)
			rs.load.ActiveRequests--
			rs.load.ActivePrefillTokens -= j.uncached
			return true
		}
	}
	for i, r := range rs.running {
		if r != j {
			continue
		}
		rs.running = append(rs.running[:i], rs.running[i+1:]...)
		rs.load.ActiveRequests--
		rs.load.KVUsedBlocks -= j.blocks
		if j.phase == phasePrefill {
			rs.load.ActivePrefillTokens -= j.uncached
		} else {
			rs.load.ActiveDecodeBlocks -= j.blocks
		}
		if len(rs.waiting) > 0 {
			nj := rs.waiting[0]
			rs.waiting[0] = nil
			rs.waiting = rs.waiting[1:]
			e.start(rs, nj, now)
		}
		return true
	}
	return false
}

package mockworker

import (
	"time"

	"fairdispatch/mockworker/batching"

	"fairdispatch/workerkit"
)

type phase uint8

const (
	phaseWaiting phase = iota
	phasePrefill
	phaseDecode
)

// job is one request inside the engine.
type job struct {
	req        *workerkit.Request // nil in engine tests
	id         string
	rank       int
	uncached   uint64
	cached     uint64 // prompt tokens found in the rank's prefix cache
	blocks     uint64 // KV blocks once running
	out        int
	phase      phase
	receivedAt time.Time
	startedAt  time.Time
	prefillEnd time.Time
	finishAt   time.Time
	// seq is the job in its rank's batched engine (Config.Model).
	seq *batching.Seq
}

// rankState is one rank's slots and queue.
type rankState struct {
	waiting []*job // FIFO
	running []*job // at most maxSeqs
	load    workerkit.RankLoad
}

// engine is the simulation core: no goroutines, locks or clock.
// Costs: admit O(1) amortised; advance O(events * ranks * maxSeqs); next O(ranks * maxSeqs).
type engine struct {
	dpStart        int
	maxSeqs        int
	refuseWhenFull int
	prefillPerTok  float64 // seconds per token
	decodePerTok   time.Duration
	ranks          []rankState
	// alt, when not nil, answers engine_hooks.go's questions instead: the
	// batched engines (Config.Model, batched.go) hold the jobs then.
	alt timing
}

func newEngine(cfg Config) *engine {
	return &engine{
		dpStart:        cfg.DPStart,
		maxSeqs:        cfg.MaxNumSeqs,
		refuseWhenFull: cfg.RefuseWhenFull,
		prefillPerTok:  1 / cfg.PrefillTokensPerSec,
		decodePerTok:   cfg.DecodePerToken,
		ranks:          make([]rankState, cfg.DPSize),
	}
}

func (e *engine) rank(r int) *rankState { return &e.ranks[r-e.dpStart] }

// admit takes j at now, or returns false when its rank refuses it.
func (e *engine) admit(now time.Time, j *job) bool {
	rs := e.rank(j.rank)
	full := len(rs.running) >= e.maxSeqs
	if full && e.refuseWhenFull > 0 && len(rs.waiting) >= e.refuseWhenFull {
		return false
	}
	j.receivedAt = now
	rs.load.ActiveRequests++
	rs.load.ActivePrefillTokens += j.uncached
	if full {
		j.phase = phaseWaiting
		rs.waiting = append(rs.waiting, j)
		return true
	}
	e.start(rs, j, now)
	return true
}

func (e *engine) start(rs *rankState, j *job, at time.Time) {
	j.phase = phasePrefill
	j.startedAt = at
	j.prefillEnd = at.Add(time.Duration(float64(j.uncached) * e.prefillPerTok * float64(time.Second)))
	j.finishAt = j.prefillEnd.Add(time.Duration(max(0, j.out-1)) * e.decodePerTok)
	rs.running = append(rs.running, j)
	rs.load.KVUsedBlocks += j.blocks
}

// eventAt is the time of j's next event.
func (j *job) eventAt() time.Time {
	if j.phase == phasePrefill {
		return j.prefillEnd
	}
	return j.finishAt
}

// next returns the time of the earliest pending event; ok is false when idle.
func (e *engine) next() (at time.Time, ok bool) {
	for i := range e.ranks {
		for _, j := range e.ranks[i].running {
			if t := j.eventAt(); !ok || t.Before(at) {
				at, ok = t, true
			}
		}
	}
	return at, ok
}

// advance applies, in time order, every event due at or before now and returns
// the requests finished, in finishing order.
func (e *engine) advance(now time.Time) []*job {
	var done []*job
	for {
		var (
			best   *job
			bestRS *rankState
			bestI  int
		)
		for ri := range e.ranks {
			rs := &e.ranks[ri]
			for i, j := range rs.running {
				if best == nil || j.eventAt().Before(best.eventAt()) {
					best, bestRS, bestI = j, rs, i
				}
			}
		}
		if best == nil || best.eventAt().After(now) {
			return done
		}
		rs, j, t := bestRS, best, best.eventAt()
		if j.phase == phasePrefill {
			j.phase = phaseDecode
			rs.load.ActivePrefillTokens -= j.uncached
			rs.load.ActiveDecodeBlocks += j.blocks
			continue // a one-token request finishes at the same instant, next round
		}
		rs.running = append(rs.running[:bestI], rs.running[bestI+1:]...)
		rs.load.ActiveDecodeBlocks -= j.blocks
		rs.load.KVUsedBlocks -= j.blocks
		rs.load.ActiveRequests--
		done = append(done, j)
		if len(rs.waiting) > 0 {
			nj := rs.waiting[0]
			rs.waiting[0] = nil
			rs.waiting = rs.waiting[1:]
			e.start(rs, nj, t)
		}
	}
}

package dispatcher

import (
	"sync"
	"time"
)

// Rate limits of the operator warnings of this file (docs/decisions.md,
// Operations: operator warnings are bounded).
const (
	// dropLogEvery is how often a worker's dropped load reports are logged at
	// most: one warning per worker per interval, carrying the count suppressed since.
	dropLogEvery = 10 * time.Second
	// dropLogWorkers bounds the workers remembered by the drop limiter; report
	// subjects come from the network, so their tokens are not a bounded set.
	dropLogWorkers = 1024
	// unknownTokensLogged is how many distinct unknown class tokens are each
	// logged once; later ones are only counted (metric).
	unknownTokensLogged = 100
)

// dropLimiter decides which dropped load reports are logged. It is called
// from the load-report subscription's goroutine and is safe for concurrent use.
type dropLimiter struct {
	mu   sync.Mutex
	last map[string]*dropEntry
}

type dropEntry struct {
	at         time.Time // last warning
	suppressed int       // drops not logged since
}

// allow reports whether a drop for worker at now is logged, and how many drops
// of that worker were suppressed since its last warning.
func (d *dropLimiter) allow(worker string, now time.Time) (bool, int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.last == nil {
		d.last = make(map[string]*dropEntry)
	}
	e := d.last[worker]
	if e == nil {
		if len(d.last) >= dropLogWorkers {
			for w, old := range d.last {
				if now.Sub(old.at) >= dropLogEvery {
					delete(d.last, w)
				}
			}
		}
		if len(d.last) >= dropLogWorkers {
			// Still full of recent warnings: the new worker shares one slot.
			worker = ""
			if e = d.last[worker]; e == nil {
				e = &dropEntry{at: now}
				d.last[worker] = e
				return true, 0
			}
		} else {
			d.last[worker] = &dropEntry{at: now}
			return true, 0
		}
	}
	if now.Sub(e.at) < dropLogEvery {
		e.suppressed++
		return false, 0
	}
	n := e.suppressed
	e.at, e.suppressed = now, 0
	return true, n
}

// tokenNotes remembers the unknown class tokens already logged. Owned by the
// actor goroutine.
type tokenNotes struct {
	seen map[string]struct{}
}

// first reports whether token should be logged: the first time it is seen,
// among the first unknownTokensLogged distinct tokens.
func (n *tokenNotes) first(token string) bool {
	if n.seen == nil {
		n.seen = make(map[string]struct{})
	}
	if _, ok := n.seen[token]; ok || len(n.seen) >= unknownTokensLogged {
		return false
	}
	n.seen[token] = struct{}{}
	return true
}

// opsLog holds the state of the actor's rate-limited operator warnings.
type opsLog struct {
	drops  dropLimiter
	tokens tokenNotes
	full   dropLimiter // dead letters refused for want of room, one key ""
}

// droppedReport logs a dropped load report at warn, rate-limited per worker.
func (a *Actor) droppedReport(worker, reason string, err error) {
	ok, suppressed := a.ops.drops.allow(worker, a.cfg.Now())
	if !ok {
		return
	}
	a.log.Warn().Err(err).Str("worker_id", worker).Str("reason", reason).Int("suppressed", suppressed).
		Str("every", dropLogEvery.String()).Msg("load report dropped (logged at most once per worker per interval; fairdispatch_load_reports_dropped_total counts all)")
}

// noteToken counts a request whose subject token names no explicit class and
// no family (it resolves in the default family) and logs the first ones once.
func (a *Actor) noteToken(token string) {
	if a.d.Scheduler.Policy().Known(token) {
		return
	}
	a.d.Metrics.UnknownClassToken()
	if a.ops.tokens.first(token) {
		a.log.Warn().Str("subject", a.cfg.Prefix+".req."+token).Str("default_family", a.d.Scheduler.Policy().DefaultFamily).
			Msg("unknown class token: resolved in the default family (logged once per token, for the first 100 tokens; fairdispatch_unknown_class_tokens_total counts all)")
	}
}

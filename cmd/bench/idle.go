package main

import (
	"context"
	"fmt"
	"time"

	"github.com/rs/zerolog"

	"fairdispatch/loadgen"
	"fairdispatch/mockworker"
)

// idlePoint is one point of the idle-capacity curve (issue 13, goal 4): a
// backlog of requests of one service time through fairdispatch to one mock
// engine of burstSeqs sequences.
type idlePoint struct {
	ServiceMs float64 `json:"service_ms"`
	Requests  int     `json:"requests"`
	Seconds   float64 `json:"seconds"` // first publication to last completion
	// Idle is the share of the engine's sequence time not spent serving:
	// 1 - requests × service / (sequences × seconds).
	Idle  float64 `json:"idle_share"`
	Error string  `json:"error,omitempty"`
}

// idleCurve runs the backlog at 5, 50 and 500 ms per request (prefill only:
// 512 tokens at 512/service tokens per second, one output token), each long
// enough for about 2 s of work (at least 8 rounds of the sequences).
func (b *bench) idleCurve() []idlePoint {
	var out []idlePoint
	for _, ms := range []float64{5, 50, 500} {
		svc := time.Duration(ms * float64(time.Millisecond))
		n := min(burstPerClass, burstSeqs*max(8, int(2*time.Second/svc)))
		b.logf("idle: %v per request, %d requests", svc, n)
		p := b.idlePoint(svc, n)
		if p.Error != "" {
			b.logf("idle %v: %s", svc, p.Error)
		} else {
			b.logf("idle %v: %.2f s, %.1f%% of the sequences' time idle", svc, p.Seconds, 100*p.Idle)
		}
		out = append(out, p)
	}
	return out
}

func (b *bench) idlePoint(svc time.Duration, n int) (p idlePoint) {
	p = idlePoint{ServiceMs: float64(svc) / 1e6, Requests: n}
	fail := func(what string, err error) idlePoint {
		p.Error = fmt.Sprintf("%s: %v", what, err)
		return p
	}
	loadConn, stop, err := b.mockBehindDispatcher("idle", mockworker.Config{MaxNumSeqs: burstSeqs,
		PrefillTokensPerSec: burstISL / svc.Seconds()})
	if err != nil {
		return fail("set-up", err)
	}
	defer stop()
	r, err := loadgen.Run(context.Background(), loadConn, loadgen.Config{
		Prefix: b.opt.prefix, Classes: []loadgen.ClassCount{{Class: "premium", Count: n}},
		ISL: burstISL, Timeout: 2 * time.Minute,
	}, zerolog.Nop())
	if r == nil || err != nil {
		return fail("loadgen", err)
	}
	var first, last time.Time
	for _, c := range r.Completions {
		if first.IsZero() || c.PublishedAt.Before(first) {
			first = c.PublishedAt
		}
		if c.FinishedAt.After(last) {
			last = c.FinishedAt
		}
	}
	p.Seconds = last.Sub(first).Seconds()
	if p.Seconds > 0 {
		p.Idle = 1 - float64(len(r.Completions))*svc.Seconds()/(burstSeqs*p.Seconds)
	}
	return p
}

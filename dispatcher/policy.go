package dispatcher

import (
	"context"
	"time"

	"fairdispatch/configs"
	"fairdispatch/wire"
)

type policyReq struct {
	rev     uint64
	created time.Time
	p       *configs.Policy
	done    chan struct{}
}

// ApplyPolicy has the actor apply policy p, revision rev of the policy
// bucket stored at created, between two arbitration calls, and returns once
// it runs (policy.Applier). p must be valid.
func (a *Actor) ApplyPolicy(ctx context.Context, rev uint64, created time.Time, p *configs.Policy) error {
	req := policyReq{rev, created, p, make(chan struct{})}
	return ask(ctx, a.policies, req, req.done)
}

// RefusePolicy records that revision rev was refused as invalid (the caller
// has logged it): it is counted, and shown in the View. It never blocks.
func (a *Actor) RefusePolicy(rev uint64, created time.Time, err error) {
	a.d.Metrics.PolicyRefused()
	a.polMu.Lock()
	defer a.polMu.Unlock()
	v := *a.polView.Load()
	v.Refused++
	v.LastRefused = &wire.RefusedPolicy{Revision: rev, At: a.cfg.Now(), Error: err.Error()}
	a.polView.Store(&v)
}

// Policy returns the policy the actor runs, as its View shows it.
func (a *Actor) Policy() wire.PolicyView { return *a.polView.Load() }

// applyPolicy runs on the actor's goroutine: the scheduler takes the new
// policy, requests in flight get their new class, the metrics follow the new
// class set, and a new View is published at once.
func (a *Actor) applyPolicy(req policyReq) {
	now := a.cfg.Now()
	s := a.d.Scheduler
	ch := s.SetPolicy(now.UnixNano(), req.p)
	for _, h := range a.held {
		if h.snap != nil && h.snap.Index < 0 {
			s.Reclass(h.snap, ch)
		}
	}
	names := classNamesOf(req.p)
	a.d.Metrics.SetClasses(names)
	a.d.Metrics.PolicyApplied(req.rev)
	a.polRev = req.rev
	a.polMu.Lock()
	v := *a.polView.Load()
	v.Revision, v.Source, v.Classes, v.AppliedAt = req.rev, "bucket", names, &now
	a.polView.Store(&v)
	a.polMu.Unlock()
	ev := a.log.Info().Uint64("revision", req.rev).Strs("classes", names).Strs("added", ch.Added).Strs("removed", ch.Removed).
		Int("moved", ch.Moved).Bool("leader", a.leading.Load())
	if !req.created.IsZero() {
		ev = ev.Dur("lag", now.Sub(req.created))
	}
	ev.Msg("policy applied")
	// The trace's requests from here on ran under this policy: a header
	// says so, as a restart's does (docs/protocol.md, Trace records).
	a.d.Trace.Record(wire.TraceRecord{Event: wire.TraceHeader, T: now.UnixNano(), Format: wire.TraceFormat,
		Version: wire.TraceVersion, Policy: string(req.p.Source), Revision: req.rev})
	a.publishView(now)
}

func classNamesOf(p *configs.Policy) []string {
	out := make([]string, len(p.Classes))
	for i, c := range p.Classes {
		out[i] = c.Name
	}
	return out
}

package dispatcher

import (
	"time"

	"fairdispatch/request"
	"fairdispatch/wire"
)

// Tracer takes trace records from the queue actor without blocking
// (recorder.Recorder; docs/protocol.md, Trace records).
type Tracer interface {
	Record(wire.TraceRecord)
}

// noTracer is the Tracer of an actor given none.
type noTracer struct{}

func (noTracer) Record(wire.TraceRecord) {}

// traceKey is the request's fairness key for the trace, "_" when it has none.
func traceKey(r *request.Snapshot) string {
	if r.Key == "" {
		return "_"
	}
	return r.Key
}

// traceArrive records a request taken in with its snapshot built.
func (a *Actor) traceArrive(now time.Time, h *held) {
	r := h.snap
	a.d.Trace.Record(wire.TraceRecord{Event: wire.TraceArrive, T: now.UnixNano(), ID: r.ID, Token: h.msg.Token(),
		Class: a.className(r.Class), Key: traceKey(r), Published: r.Arrival, ISL: r.ISL, Cached: r.Cached, Cost: r.Cost})
}

// traceDispatch records a worker's answer to a dispatch of h.
func (a *Actor) traceDispatch(now time.Time, h *held, outcome string) {
	r, rank := h.snap, int(h.rank)
	a.d.Trace.Record(wire.TraceRecord{Event: wire.TraceDispatch, T: now.UnixNano(), ID: r.ID, Class: a.className(r.Class),
		Key: traceKey(r), Cost: r.Cost, Worker: h.worker, Rank: &rank, Outcome: outcome})
}

// traceReject records a request rejected with code.
func (a *Actor) traceReject(h *held, code request.Code) {
	r := h.snap
	a.d.Trace.Record(wire.TraceRecord{Event: wire.TraceReject, T: a.cfg.Now().UnixNano(), ID: r.ID, Class: a.className(r.Class),
		Key: traceKey(r), Outcome: string(code)})
}

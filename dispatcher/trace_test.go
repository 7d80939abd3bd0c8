package dispatcher

import (
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"fairdispatch/bus"
	"fairdispatch/configs"
	"fairdispatch/recorder"
	"fairdispatch/wire"
)

// benchTracer, when set, is the Tracer of BenchmarkAdmitDispatchAccept.
var benchTracer Tracer

// traceLog is a Tracer that keeps every record.
type traceLog []wire.TraceRecord

func (l *traceLog) Record(r wire.TraceRecord) { *l = append(*l, r) }

// TestActorTraces: the actor records an arrival with its class, key and
// costs, every worker's answer to a dispatch (refused, then accepted, with
// worker and rank), and a rejection with its code; no body.
func TestActorTraces(t *testing.T) {
	f := newFixture(t, policy)
	var log traceLog
	f.a.d.Trace = &log
	f.now = f.now.Add(time.Second)
	f.report("w1", 0)
	published := f.now.UnixNano()
	f.deliver(7, "premium", nats.Header{"Dispatch-ISL-Tokens": {"300"}, "Dispatch-Cached-Tokens": {"100"}, "Nats-Msg-Id": {"r7"}})
	f.a.answer(bus.Result{Token: 7, Worker: "w1", Outcome: bus.Refused})
	f.now = f.now.Add(time.Second)
	f.report("w1", 0)
	f.a.answer(bus.Result{Token: 7, Worker: "w1", Outcome: bus.Accepted})
	f.deliver(8, "premium", nats.Header{"Dispatch-ISL-Tokens": {"abc"}, "Nats-Msg-Id": {"r8"}})

	if len(log) != 4 {
		t.Fatalf("%d records %+v, want 4: arrive, dispatch refused, dispatch accepted, reject", len(log), log)
	}
	a := log[0]
	if a.Event != wire.TraceArrive || a.ID != "r7" || a.Token != "premium" || a.Class != "premium" || a.Key != "_" ||
		a.ISL != 300 || a.Cached != 100 || a.Cost != 200 || a.Published != published {
		t.Errorf("arrive record %+v", a)
	}
	for i, want := range []string{"refused", "accepted"} {
		d := log[1+i]
		if d.Event != wire.TraceDispatch || d.ID != "r7" || d.Outcome != want || d.Worker != "w1" || d.Rank == nil || *d.Rank != 0 || d.Cost != 200 {
			t.Errorf("dispatch record %d %+v, want %s by w1 rank 0", i, d, want)
		}
	}
	if log[2].T <= log[1].T {
		t.Errorf("accepted at %d, not after the refusal at %d", log[2].T, log[1].T)
	}
	if r := log[3]; r.Event != wire.TraceReject || r.ID != "r8" || r.Outcome != "bad_request" {
		t.Errorf("reject record %+v, want r8 bad_request", r)
	}
}

// discardSink is a recorder.Sink that keeps nothing.
type discardSink struct{}

func (discardSink) Write([]byte) error { return nil }
func (discardSink) Flush() error       { return nil }
func (discardSink) Close() error       { return nil }

type nopCounters struct{}

func (nopCounters) TraceRecorded() {}
func (nopCounters) TraceDropped()  {}

// BenchmarkAdmitDispatchAcceptRecorded is BenchmarkAdmitDispatchAccept while
// recording: what the trace costs the queue actor (two records a request).
func BenchmarkAdmitDispatchAcceptRecorded(b *testing.B) {
	rec, err := recorder.New("", 0, 0, nopCounters{}, zerolog.Nop(), discardSink{})
	if err != nil {
		b.Fatal(err)
	}
	defer rec.Close()
	benchTracer = rec
	defer func() { benchTracer = nil }()
	BenchmarkAdmitDispatchAccept(b)
}

// TestActorTracesAPolicyChange: a policy revision applied live writes a
// header with its text, so that the trace says which policy its later
// requests ran under (fairctl sim then refuses to read across it as one
// policy, naming the line to split at).
func TestActorTracesAPolicyChange(t *testing.T) {
	f := newFixture(t, policy)
	var log traceLog
	f.a.d.Trace = &log
	next := strings.Replace(policy, "quantum: 512", "quantum: 1024", 1)
	p, err := configs.Parse("next.yaml", []byte(next))
	if err != nil {
		t.Fatal(err)
	}
	f.a.applyPolicy(policyReq{rev: 2, p: p})
	if len(log) != 1 || log[0].Event != wire.TraceHeader || log[0].Policy != next || log[0].Format != wire.TraceFormat ||
		log[0].Version != wire.TraceVersion || log[0].T != f.now.UnixNano() || log[0].Revision != 2 {
		t.Fatalf("records %+v, want one header with the new policy's text and revision", log)
	}
}

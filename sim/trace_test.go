package sim

import (
	"strings"
	"testing"
)

const hdr = `{"ev":"header","t":1,"format":"fairdispatch-trace","version":1,"policy":"p"}`

func TestReadTrace(t *testing.T) {
	tr, err := ReadTrace(strings.NewReader(hdr + `
{"ev":"arrive","t":10,"id":"a","token":"premium","class":"premium","published":9,"isl":512,"cost":512}
{"ev":"dispatch","t":20,"id":"a","class":"premium","key":"_","cost":512,"worker":"w1","rank":1,"outcome":"refused"}
{"ev":"dispatch","t":30,"id":"a","class":"premium","key":"_","cost":512,"worker":"w1","rank":1,"outcome":"accepted"}
{"ev":"kv_event","t":31}
{"ev":"reject","t":40,"id":"b","class":"regular","outcome":"queue_full"}
`))
	if err != nil {
		t.Fatal(err)
	}
	if tr.Policy != "p" || len(tr.Arrivals) != 1 || tr.Arrivals[0].Key != "_" || tr.Arrivals[0].ISL != 512 ||
		len(tr.Dispatches) != 1 || tr.Dispatches[0].T != 30 || tr.Dispatches[0].Rank != 1 ||
		len(tr.Rejects) != 1 || tr.Rejects[0].Code != "queue_full" {
		t.Fatalf("trace %+v: want one arrival (key _), the accepted dispatch only, one reject; unknown events skipped", tr)
	}
	for _, c := range []struct{ in, want string }{
		{"", "empty"},
		{`{"ev":"arrive","t":1}`, "not a trace header"},
		{`{"ev":"header","format":"fairdispatch-trace","version":2}`, "version 2"},
		{hdr + "\n" + `{"ev":"header","format":"fairdispatch-trace","version":1,"policy":"q"}`, "line 2: the policy changed"},
		{hdr + "\n{", "line 2"},
	} {
		if _, err := ReadTrace(strings.NewReader(c.in)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("ReadTrace(%q) = %v, want an error with %q", c.in, err, c.want)
		}
	}
}

// TestFromTrace: one worker per id, ranks from the highest rank used, the
// rate from the cost dispatched between its first and last dispatch (the
// last one's cost left out) per rank, joining at its first dispatch.
func TestFromTrace(t *testing.T) {
	tr := &Trace{Dispatches: []Dispatch{
		{T: 1e9, Worker: "b", Rank: 0, Cost: 1000},
		{T: 2e9, Worker: "b", Rank: 1, Cost: 3000},
		{T: 3e9, Worker: "b", Rank: 0, Cost: 500},
		{T: 5e9, Worker: "a", Rank: 0, Cost: 100},
	}}
	f, err := FromTrace(tr, 777, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(f) != 2 || f[0].ID != "a" || f[0].Rate != 777 || f[0].Join != 5e9 || f[0].Ranks != 1 ||
		f[1].ID != "b" || f[1].Ranks != 2 || f[1].Rate != 1000 || f[1].Join != 1e9 {
		t.Fatalf("fleet %+v: want a (default rate, joins at 5 s) and b (2 ranks, (1000+3000)/2 s/2 = 1000 tokens/s, joins at 1 s)", f)
	}
	// A restart at 10 s: the gap to it is not a span of service.
	tr.Restarts = []int64{10e9}
	tr.Dispatches = append(tr.Dispatches, Dispatch{T: 100e9, Worker: "b", Cost: 2000}, Dispatch{T: 101e9, Worker: "b", Cost: 9})
	if f, err = FromTrace(tr, 777, 0, 0); err != nil || f[1].Rate != (4000.0+2000)/3/2 {
		t.Fatalf("fleet %+v (%v): want b at (1000+3000+2000) tokens / (2 s + 1 s) / 2 ranks = 1000", f, err)
	}
	if _, err := FromTrace(&Trace{}, 1, 0, 0); err == nil {
		t.Error("FromTrace of a trace without dispatches: want an error")
	}
}

// TestRestartKeepsOneArrival: a request the old dispatcher held, taken in
// again after a restart (the same id, arriving while still waiting), is one
// request: one arrival, no phantom backlog, so a trace of one class at a
// time shows no contention and the model serves it once.
func TestRestartKeepsOneArrival(t *testing.T) {
	tr, err := ReadTrace(strings.NewReader(hdr + `
{"ev":"arrive","t":10,"id":"p1","token":"premium","class":"premium","published":9,"isl":512,"cost":512}
` + strings.Replace(hdr, `"t":1`, `"t":50`, 1) + `
{"ev":"arrive","t":60,"id":"p1","token":"premium","class":"premium","published":9,"isl":512,"cost":512}
{"ev":"dispatch","t":61,"id":"p1","class":"premium","key":"_","cost":512,"worker":"w1","rank":0,"outcome":"accepted"}
{"ev":"arrive","t":70,"id":"r1","token":"regular","class":"regular","published":70,"isl":512,"cost":512}
{"ev":"dispatch","t":71,"id":"r1","class":"regular","key":"_","cost":512,"worker":"w1","rank":0,"outcome":"accepted"}
{"ev":"arrive","t":80,"id":"r2","token":"regular","class":"regular","published":80,"isl":512,"cost":512}
{"ev":"dispatch","t":81,"id":"r2","class":"regular","key":"_","cost":512,"worker":"w1","rank":0,"outcome":"accepted"}
`))
	if err != nil {
		t.Fatal(err)
	}
	if len(tr.Arrivals) != 3 || tr.Redelivered != 1 || len(tr.Restarts) != 1 {
		t.Fatalf("%d arrivals, %d redelivered, %d restarts; want 3, 1, 1", len(tr.Arrivals), tr.Redelivered, len(tr.Restarts))
	}
	if st := Analyze(tr.Recorded(), seedPolicy(t, 512, 128), 0); st.Contended {
		t.Errorf("recorded: contended %v (shares %+v); want no contention: one class waited at a time", st.Contended, st.Classes)
	}
}

// TestSamePolicyRevisionIsNoRestart: a live revision that put the same
// policy again writes a header with its revision; the trace reads on across
// it as one part, where a start's header begins a new part (Restarts).
func TestSamePolicyRevisionIsNoRestart(t *testing.T) {
	again := strings.Replace(hdr, `"t":1`, `"t":50`, 1)
	revision := strings.Replace(again, `"version":1`, `"version":1,"revision":7`, 1)
	if revision == again {
		t.Fatal("the header has no version field to put the revision after")
	}
	for _, c := range []struct {
		header   string
		restarts int
	}{{again, 1}, {revision, 0}} {
		tr, err := ReadTrace(strings.NewReader(hdr + "\n" + c.header + "\n"))
		if err != nil || len(tr.Restarts) != c.restarts {
			t.Errorf("%s: %v, restarts %v; want %d", c.header, err, tr, c.restarts)
		}
	}
}

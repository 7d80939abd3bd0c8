package dispatcher

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"fairdispatch/bus"
)

// TestActorSettlesCompletionRecords: a completion record received for a
// dispatch corrects the key's service and the class's deficit (docs/design.md,
// Cost settlement); a forged record published under another worker's id, a
// repeat and an unparsable one change nothing.
func TestActorSettlesCompletionRecords(t *testing.T) {
	f := newFixture(t, policy)
	f.now = f.now.Add(time.Second)
	f.report("w1", 2000) // busy: the request queues, and is arbitrated when w1 frees up
	f.deliver(1, "premium", nats.Header{"Dispatch-ISL-Tokens": {"100"}, "Nats-Msg-Id": {"r1"}, "Dispatch-Fairness-Key": {"tenant-a"}})
	f.report("w1", 0)
	if len(f.b.sent) != 1 {
		t.Fatalf("sent %d, want 1", len(f.b.sent))
	}
	f.a.answer(bus.Result{Token: 1, Worker: "w1", Outcome: bus.Accepted})
	s := f.a.d.Scheduler
	deficit := s.Stats(nil)[0].Deficit
	v0, ok := s.Class(0).Service("tenant-a")
	if !ok {
		t.Fatal("key tenant-a not tracked after its dispatch (owed its settlement)")
	}
	deliver := func(worker, body string) {
		f.a.CompletionRecord(worker, []byte(body))
		for _, d := range f.a.done.take() {
			f.a.settle(d)
		}
	}
	deliver("w2", `{"request_id":"r1","seq":1,"prefill_tokens":100000}`) // forged: w2 never got seq 1
	deliver("w1", `{"request_id":"r9","seq":1,"prefill_tokens":100000}`) // foreign request id
	deliver("w1", `{"seq":"x"}`)                                         // does not parse
	if got := s.Stats(nil)[0].Deficit; got != deficit {
		t.Fatalf("ignored records moved the deficit to %d, want %d", got, deficit)
	}
	deliver("w1", `{"request_id":"r1","seq":1,"class":"premium","fairness_key":"tenant-a","prefill_tokens":1100,"output_tokens":3,"status":"ok"}`)
	if got := s.Stats(nil)[0].Deficit; got != deficit-1000 {
		t.Fatalf("deficit after settlement: got %d, want %d (charged 100, actual 1100)", got, deficit-1000)
	}
	if _, ok := s.Class(0).Service("tenant-a"); ok {
		t.Fatalf("key tenant-a still tracked after its only dispatch settled (service was %v)", v0)
	}
	deliver("w1", `{"request_id":"r1","seq":1,"prefill_tokens":5}`) // repeat
	if got := s.Stats(nil)[0].Deficit; got != deficit-1000 {
		t.Fatalf("a repeated record moved the deficit to %d", got)
	}
}

func TestParseCompletion(t *testing.T) {
	c, err := parseCompletion([]byte(`{"request_id":"r1","seq":7,"class":"premium","fairness_key":"t1","prefill_tokens":900,"output_tokens":20,"status":"failed","finished_at":"2026-01-01T00:00:00Z"}`))
	if err != nil {
		t.Fatal(err)
	}
	if c.RequestID != "r1" || c.Seq != 7 || c.FairnessKey != "t1" || c.PrefillTokens != 900 || c.OutputTokens != 20 || c.Status != "failed" {
		t.Fatalf("got %+v", c)
	}
	if c, err := parseCompletion([]byte(`{"seq":1}`)); err != nil || c.Status != "ok" {
		t.Fatalf("absent status: got %+v, %v; want ok", c, err)
	}
	for _, bad := range []string{
		`{}`, `{"seq":0}`, `[1]`, `{"seq":-1}`, `{"seq":1,"status":"done"}`,
		`{"seq":1,"prefill_tokens":1099511627777}`, `{"seq":1,"output_tokens":1e30}`,
		`{"seq":1,"request_id":"` + strings.Repeat("x", maxCompletionBytes) + `"}`,
	} {
		if _, err := parseCompletion([]byte(bad)); !errors.Is(err, errCompletion) {
			t.Errorf("parseCompletion(%.60s): got %v, want errCompletion", bad, err)
		}
	}
}

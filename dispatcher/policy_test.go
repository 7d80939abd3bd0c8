package dispatcher

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"fairdispatch/bus"
	"fairdispatch/configs"
)

// twoPolicy has classes premium and batch; onePolicy drops batch, whose
// token then resolves to the default family, premium, and renames nothing.
const (
	twoPolicy = `default_policy_family: premium
uncached_isl_buckets: [{min_tokens: 0, bucket: all}]
policy_classes:
  - {name: premium, policy_family: premium, cache_bucket: all, quantum: 512, prefill_busy_threshold: 1000}
  - {name: batch, quantum: 64, prefill_busy_threshold: 1000}
`
	onePolicy = `default_policy_family: premium
uncached_isl_buckets: [{min_tokens: 0, bucket: all}]
policy_classes:
  - {name: premium, policy_family: premium, cache_bucket: all, quantum: 512, prefill_busy_threshold: 1000}
`
)

// A request in flight when its class is removed is given its new class: the
// refusal hands it back into that class's queue, and the next dispatch names
// it; the View and the outcome name the revision.
func TestActorPolicyChangeReclassesRequestsInFlight(t *testing.T) {
	f := newFixture(t, twoPolicy)
	f.now = f.now.Add(time.Second)
	f.report("w1", 0)
	f.deliver(1, "batch", nats.Header{"Dispatch-ISL-Tokens": {"100"}, "Dispatch-Reply-To": {"out.1"}})
	f.deliver(2, "premium", nats.Header{"Dispatch-ISL-Tokens": {"100"}, "Dispatch-Reply-To": {"out.2"}})
	if len(f.b.sent) != 2 || f.b.sent[0].hdr.Get("Dispatch-Class") != "batch" {
		t.Fatalf("sent %d, first class %q; want 2, batch", len(f.b.sent), f.b.sent[0].hdr.Get("Dispatch-Class"))
	}
	p, err := configs.Parse("one.yaml", []byte(onePolicy))
	if err != nil {
		t.Fatal(err)
	}
	f.a.applyPolicy(policyReq{rev: 7, p: p})
	if v := f.a.View().Policy; v.Revision != 7 || v.Source != "bucket" || len(v.Classes) != 1 {
		t.Fatalf("view policy %+v, want revision 7 from the bucket with one class", v)
	}
	// The batch request (now premium, index 0) is refused: back into premium.
	f.a.answer(bus.Result{Token: 1, Worker: "w1", Outcome: bus.Refused})
	if q := f.a.d.Scheduler.Queued(0); q != 1 {
		t.Fatalf("premium queued %d after the refusal, want 1", q)
	}
	f.a.answer(bus.Result{Token: 2, Worker: "w1", Outcome: bus.Accepted})
	if len(f.outcomes) != 1 || f.outcomes[0].PolicyClass != "premium" || f.outcomes[0].PolicyRevision != 0 {
		t.Fatalf("outcomes %+v, want premium dispatched under revision 0 (sent before the change)", f.outcomes)
	}
	f.now = f.now.Add(time.Second) // past the refusal's exclusion
	f.report("w1", 0)
	if len(f.b.sent) != 3 || f.b.sent[2].hdr.Get("Dispatch-Class") != "premium" {
		t.Fatalf("sent %d, last class %q; want the handed-back request sent again as premium", len(f.b.sent), f.b.sent[2].hdr.Get("Dispatch-Class"))
	}
	f.a.answer(bus.Result{Token: 1, Worker: "w1", Outcome: bus.Accepted})
	if o := f.outcomes[len(f.outcomes)-1]; o.PolicyClass != "premium" || o.PolicyRevision != 7 {
		t.Fatalf("outcome %+v, want premium under revision 7", o)
	}
}

func TestActorRefusePolicyIsShownAndKeepsThePolicy(t *testing.T) {
	f := newFixture(t, policy)
	f.a.RefusePolicy(3, time.Time{}, &configs.ValidationError{Name: "b@3", Problems: []configs.Problem{{Line: 2, Path: "x", Msg: "bad"}}})
	f.a.publishView(f.now)
	v := f.a.View().Policy
	if v.Revision != 0 || v.Source != "file" || v.Refused != 1 || v.LastRefused == nil || v.LastRefused.Revision != 3 || v.LastRefused.Error != "b@3:2: x: bad" {
		t.Fatalf("view policy %+v (last %+v), want the file's policy running and revision 3 refused", v, v.LastRefused)
	}
}

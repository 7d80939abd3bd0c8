package dispatcher

import (
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// TestViewKeyFairness: the snapshot carries the key fairness window
// (docs/design.md, Key fairness window): two keys backlogged throughout and
// served alike give Jain's index 1 and each key's share next to its weight's.
func TestViewKeyFairness(t *testing.T) {
	f := newFixture(t, policy)
	f.now = f.now.Add(time.Second)
	f.report("w1", 5000) // busy: everything queues
	for i := range uint64(20) {
		key := []string{"a", "b"}[i%2]
		f.deliver(i+1, "premium", nats.Header{"Dispatch-ISL-Tokens": {"600"}, "Dispatch-Fairness-Key": {key}, "Nats-Msg-Id": {fmt.Sprint("r", i)}})
	}
	// The first mark was taken with the first snapshot, before the keys were
	// backlogged; the next, 5 s later, finds them backlogged.
	f.now = f.now.Add(5 * time.Second)
	f.a.publishView(f.now)
	if kf := f.a.View().Classes[0].KeyFairness; kf == nil || kf.Keys != 0 || kf.Jain != nil {
		t.Fatalf("over a window from before the keys: got %+v, want nothing measured", kf)
	}
	f.now = f.now.Add(2 * time.Second)
	f.report("w1", 0) // free: two dispatches of 600 tokens reach the 1000-token gate
	if len(f.b.sent) < 2 {
		t.Fatalf("sent %d, want at least 2", len(f.b.sent))
	}
	f.now = f.now.Add(3 * time.Second)
	f.a.publishView(f.now) // a new mark; the window is the 5 s since the last
	c := f.a.View().Classes[0]
	kf := c.KeyFairness
	if kf == nil || kf.Keys != 2 || kf.Jain == nil || *kf.Jain != 1 || kf.WindowSeconds != 5 {
		t.Fatalf("got key fairness %+v, want 2 keys over 5 s with Jain's index 1", kf)
	}
	for _, ks := range c.TopKeys {
		if ks.Share == nil || *ks.Share != 0.5 || *ks.WeightShare != 0.5 {
			t.Errorf("key %s: got %+v, want share and weight share 0.5", ks.Key, ks)
		}
	}
}

package dispatcher

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"fairdispatch/workers"
)

// TestActorWarnsTwoInstancesRateLimited: two live instances under one worker
// id are logged at warn with both instances, at most once per 10 s per id.
func TestActorWarnsTwoInstancesRateLimited(t *testing.T) {
	f := newFixture(t, policy)
	var buf bytes.Buffer
	f.a.log = zerolog.New(&buf)
	rep := func(inst string) {
		f.a.report(workers.Report{WorkerID: "w1", DPSize: 1, TTLms: 3000, Instance: inst})
	}
	// bothFor has both instances report once a second for secs seconds.
	bothFor := func(secs int) {
		for range secs {
			f.now = f.now.Add(time.Second)
			rep("b")
			rep("a")
		}
	}
	warnings := func() []string {
		var out []string
		for _, l := range strings.Split(buf.String(), "\n") {
			if strings.Contains(l, `"level":"warn"`) && strings.Contains(l, "two live processes") {
				out = append(out, l)
			}
		}
		return out
	}
	rep("a")
	rep("b") // a quick restart looks the same: dropped, not yet a conflict
	if w := warnings(); len(w) != 0 {
		t.Fatalf("warned after the second instance's first report: %v", w)
	}
	f.now = f.now.Add(100 * time.Millisecond)
	rep("a") // the holder is alive too: a conflict
	w := warnings()
	if len(w) != 1 || !strings.Contains(w[0], `"instance":"a"`) || !strings.Contains(w[0], `"other_instance":"b"`) ||
		!strings.Contains(w[0], `"worker_id":"w1"`) {
		t.Fatalf("warnings %v, want one naming w1, instance a and other_instance b", w)
	}
	bothFor(5)
	if got := len(warnings()); got != 1 {
		t.Fatalf("%d warnings within 10 s, want 1", got)
	}
	// Both keep reporting every second: one more warning 10 s after the first.
	bothFor(10)
	if got := len(warnings()); got != 2 {
		t.Fatalf("%d warnings over 15 s, want 2", got)
	}
	if got := f.a.d.Scheduler.Workers().Get("w1").Instance; got != "a" {
		t.Fatalf("w1 held by %q, want a (the first instance keeps the id)", got)
	}
}

package scheduler

import (
	"testing"

	"fairdispatch/request"
)

// TestChargeAtDispatch: a queued request is charged, at its dispatch, the
// uncached prefill of the rank chosen for it, not its estimate at admission
// (docs/design.md, Cost settlement). Here the request arrives while nothing
// of its prompt is cached (cost 400); while it waits, its conversation's
// earlier turn leaves 6 of its blocks (96 tokens) on w1, which then takes it:
// the key is charged 304, and a completion record that confirms 304 corrects
// nothing. The control, with no index to see the blocks, keeps 400 and
// leaves the whole correction to the completion.
func TestChargeAtDispatch(t *testing.T) {
	prompt := []uint64{1, 2, 3, 4, 5, 6, 7, 8}
	for _, tc := range []struct {
		name        string
		hashes      []uint64
		wantService float64
		wantCorr    int64
	}{
		{"the index sees the blocks stored meanwhile", prompt, 304, 0},
		{"control: no block hashes", nil, 400, -96},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, x := kvFixture(t)
			f.report("w1", 5000)
			d := f.arrive("premium", 400, func(a *request.Arrival) { a.Key = "k"; a.Hashes = tc.hashes })
			f.wantKind(d, Queued)
			if d.Req.Cost != 400 {
				t.Fatalf("cost at admission %d, want 400 (nothing cached yet)", d.Req.Cost)
			}
			kvApply(t, x, "w1", 1, prompt[:6], nil)
			f.report("w1", 0)
			got := f.s.Next(f.now)
			f.wantKind(got, Dispatch)
			if v, _ := f.keyService(0, "k"); v != tc.wantService {
				t.Fatalf("key k's service after the dispatch = %v, want %v", v, tc.wantService)
			}
			res := f.s.Settle("w1", Completion{Seq: got.Seq, RequestID: got.Req.ID, PrefillTokens: 304})
			if res.Outcome != Settled || res.Correction != tc.wantCorr {
				t.Fatalf("settlement %v, correction %+d; want settled, %+d", res.Outcome, res.Correction, tc.wantCorr)
			}
		})
	}
}

package lanes

import (
	"fmt"
	"slices"
	"testing"

	"fairdispatch/request"
)

// fakeCheck is a Checker whose answers the test sets: a request is not
// dispatchable when its target is blocked (the zero Target stands for the shared
// lane) or when its own id is blocked. It counts its calls.
type fakeCheck struct {
	targets map[request.Target]bool
	ids     map[string]bool
	calls   int
}

func newFakeCheck() *fakeCheck {
	return &fakeCheck{targets: map[request.Target]bool{}, ids: map[string]bool{}}
}

func (f *fakeCheck) Dispatchable(r *request.Snapshot) bool {
	f.calls++
	return !f.targets[r.Pin] && !f.ids[r.ID]
}

// shared is the target of unpinned requests in fakeCheck.targets.
var shared = request.Target{}

// pin returns the target (worker, rank); rank request.AnyRank for a pin without one.
func pin(worker string, rank int32) request.Target {
	return request.Target{Worker: worker, Rank: rank}
}

// mk returns an unqueued request of cost 1 with the given order keys.
func mk(id string, seq uint64, strict uint32, score float64, t request.Target) *request.Snapshot {
	return &request.Snapshot{
		ID: id, Seq: seq, Strict: strict, Score: score, Pin: t,
		ISL: 1, Cost: 1, Index: -1, DeadlineIndex: -1,
	}
}

// fcfs is the FCFS score of docs/design.md, Lanes: jump - arrival_seconds.
func fcfs(jump, arrival float64) float64 { return jump - arrival }

// wspt is the WSPT score of docs/design.md, Lanes: (1 + jump) / cost.
func wspt(jump float64, cost uint64) float64 { return (1 + jump) / float64(cost) }

// drain pops every dispatchable candidate and returns their ids in order.
func drain(t *testing.T, c *Class) []string {
	t.Helper()
	var got []string
	for {
		if _, ok := c.Candidate(); !ok {
			return got
		}
		c.Pop()
		got = append(got, c.Last().ID)
		checkInvariants(t, c)
	}
}

// candidateID returns the id of the class candidate, or "" when there is none,
// without popping it.
func candidateID(c *Class) string {
	if _, ok := c.Candidate(); !ok {
		return ""
	}
	return c.cand.ID
}

// checkInvariants checks the invariants of the package doc: heap positions and
// order in every lane and in the index, each pinned lane in exactly one of the
// index and the blocked set, and the totals.
func checkInvariants(t *testing.T, c *Class) {
	t.Helper()
	if err := invariants(c); err != nil {
		t.Fatal(err)
	}
}

func invariants(c *Class) error {
	n, isl, cached := 0, uint64(0), uint64(0)
	checkQueue := func(name string, q queue) error {
		for i, r := range q {
			if r.Index != i {
				return fmt.Errorf("%s: request %s at %d: got Index %d, want %d", name, r.ID, i, r.Index, i)
			}
			if p := (i - 1) / 2; i > 0 && r.Before(q[p]) {
				return fmt.Errorf("%s: request %s at %d ranks before its parent %s", name, r.ID, i, q[p].ID)
			}
			n++
			isl += r.ISL
			cached += r.Cached
		}
		return nil
	}
	if c.shared.pos != -1 || c.shared.blocked {
		return fmt.Errorf("shared lane: got pos %d blocked %v, want -1 false", c.shared.pos, c.shared.blocked)
	}
	if err := checkQueue("shared", c.shared.q); err != nil {
		return err
	}
	for _, r := range c.shared.q {
		if r.Pin.Pinned() {
			return fmt.Errorf("shared lane holds pinned request %s", r.ID)
		}
	}
	for tgt, l := range c.pinned {
		name := fmt.Sprintf("lane %v", tgt)
		if l.target != tgt {
			return fmt.Errorf("%s: got target %v", name, l.target)
		}
		if len(l.q) == 0 {
			return fmt.Errorf("%s: empty lane kept", name)
		}
		if err := checkQueue(name, l.q); err != nil {
			return err
		}
		for _, r := range l.q {
			if r.Pin != tgt {
				return fmt.Errorf("%s holds request %s pinned to %v", name, r.ID, r.Pin)
			}
		}
		indexed := l.pos >= 0 && l.pos < len(c.ready) && c.ready[l.pos] == l
		if l.pos >= 0 && !indexed {
			return fmt.Errorf("%s: pos %d does not point at it", name, l.pos)
		}
		inBlocked := slices.Contains(c.blocked[tgt.Worker], l)
		if l.blocked != inBlocked {
			return fmt.Errorf("%s: got blocked flag %v, in blocked set %v", name, l.blocked, inBlocked)
		}
		if indexed == inBlocked {
			return fmt.Errorf("%s: indexed %v, blocked %v: want exactly one", name, indexed, inBlocked)
		}
	}
	for i, l := range c.ready {
		if l.pos != i {
			return fmt.Errorf("index: lane %v at %d: got pos %d", l.target, i, l.pos)
		}
		if c.pinned[l.target] != l {
			return fmt.Errorf("index: lane %v is not the class's lane for its target", l.target)
		}
		if p := (i - 1) / 2; i > 0 && l.q[0].Before(c.ready[p].q[0]) {
			return fmt.Errorf("index: lane %v at %d ranks before its parent", l.target, i)
		}
	}
	blocked := 0
	for w, ls := range c.blocked {
		if len(ls) == 0 {
			return fmt.Errorf("blocked set: empty entry for worker %q", w)
		}
		for _, l := range ls {
			if l.target.Worker != w || c.pinned[l.target] != l {
				return fmt.Errorf("blocked set: lane %v filed under %q or not the class's", l.target, w)
			}
			blocked++
		}
	}
	if got, want := len(c.ready)+blocked, len(c.pinned); got != want {
		return fmt.Errorf("got %d indexed + blocked lanes, want %d pinned lanes", got, want)
	}
	if c.n != n || c.isl != isl || c.cached != cached {
		return fmt.Errorf("got totals n=%d isl=%d cached=%d, want %d %d %d", c.n, c.isl, c.cached, n, isl, cached)
	}
	for _, l := range c.free {
		if len(l.q) != 0 {
			return fmt.Errorf("free lane %v holds %d requests", l.target, len(l.q))
		}
	}
	return nil
}

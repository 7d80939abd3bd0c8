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
func drain(t *testing.T, c *Keyed) []string {
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
func candidateID(c *Keyed) string {
	if _, ok := c.Candidate(); !ok {
		return ""
	}
	return c.cand.ID
}

// checkInvariants checks the invariants of the package doc: heap positions and
// order in every lane and in the index, each pinned lane in exactly one of the
// index and the blocked set, and the totals.
func checkInvariants(t *testing.T, c *Keyed) {
	t.Helper()
	if err := invariants(c); err != nil {
		t.Fatal(err)
	}
}

// invariants checks, for every key, its lanes' heap positions and order, that
// each pinned lane holds only its target's requests and sits in exactly one of
// its key's ready index and the class's blocked set; that a key is in the key
// heap exactly when it has a lane not known to be blocked; and the totals.
func invariants(c *Keyed) error {
	if err := keyedInvariants(c); err != nil {
		return err
	}
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
	for name, k := range c.byName {
		if err := checkQueue("key "+name+" shared", k.shared); err != nil {
			return err
		}
		for _, r := range k.shared {
			if r.Pin.Pinned() {
				return fmt.Errorf("key %s: shared lane holds pinned request %s", name, r.ID)
			}
		}
		for i, l := range k.ready {
			if l.pos != i || l.owner != k {
				return fmt.Errorf("key %s: ready lane %v at %d: got pos %d", name, l.target, i, l.pos)
			}
			if p := (i - 1) / 2; i > 0 && l.q[0].Before(k.ready[p].q[0]) {
				return fmt.Errorf("key %s: ready lane %v at %d ranks before its parent", name, l.target, i)
			}
		}
	}
	for kt, l := range c.pinned {
		name := fmt.Sprintf("lane %v", kt)
		if l.target != kt.target {
			return fmt.Errorf("%s: got target %v", name, l.target)
		}
		if err := checkQueue(name, l.q); err != nil {
			return err
		}
		for _, r := range l.q {
			if r.Pin != kt.target || keyName(r) != kt.key {
				return fmt.Errorf("%s holds request %s of key %s pinned to %v", name, r.ID, keyName(r), r.Pin)
			}
		}
		if inBlocked := slices.Contains(c.blocked[kt.target.Worker], l); l.blocked != inBlocked {
			return fmt.Errorf("%s: got blocked flag %v, in blocked set %v", name, l.blocked, inBlocked)
		}
	}
	for w, ls := range c.blocked {
		if len(ls) == 0 {
			return fmt.Errorf("blocked set: empty entry for worker %q", w)
		}
		for _, l := range ls {
			if l.target.Worker != w || c.pinned[keyTarget{l.owner.name, l.target}] != l {
				return fmt.Errorf("blocked set: lane %v filed under %q or not the class's", l.target, w)
			}
		}
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

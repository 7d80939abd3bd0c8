package lanes

import (
	"fmt"
	"slices"
	"testing"

	"fairdispatch/request"
)

// layouts put a set of requests into lanes in different ways; the order must
// not depend on the lanes when everything is dispatchable.
var layouts = []struct {
	name string
	pin  func(i int) request.Target
}{
	{"shared", func(int) request.Target { return shared }},
	{"one pinned lane", func(int) request.Target { return pin("w0", 0) }},
	{"a lane each", func(i int) request.Target { return pin(fmt.Sprintf("w%d", i), request.AnyRank) }},
	{"mixed", func(i int) request.Target {
		if i%2 == 0 {
			return shared
		}
		return pin("w1", int32(i%3))
	}},
}

func TestOrder(t *testing.T) {
	type in struct {
		id     string
		strict uint32
		score  float64
	}
	tests := []struct {
		name string
		in   []in // pushed in this order; seq is the position + 1
		want []string
	}{
		{
			name: "strict priority 1 beats a score 10000 higher",
			in:   []in{{"jumped", 0, fcfs(10000, 100)}, {"strict", 1, fcfs(0, 100)}},
			want: []string{"strict", "jumped"},
		},
		{
			name: "higher strict first, then score",
			in:   []in{{"a", 0, 5}, {"b", 2, 1}, {"c", 1, 9}, {"d", 2, 3}},
			want: []string{"d", "b", "c", "a"},
		},
		{
			name: "higher score first",
			in:   []in{{"low", 0, -3}, {"high", 0, 7.5}, {"mid", 0, 0}},
			want: []string{"high", "mid", "low"},
		},
		{
			name: "equal keys: lower seq first",
			in:   []in{{"first", 0, 1}, {"second", 0, 1}, {"third", 0, 1}},
			want: []string{"first", "second", "third"},
		},
		{
			name: "FCFS keeps arrival order",
			in:   []in{{"long-early", 0, fcfs(0, 100)}, {"short-late", 0, fcfs(0, 101)}},
			want: []string{"long-early", "short-late"},
		},
		{
			name: "FCFS jump of N s ranks as published N s earlier",
			in: []in{
				{"t100", 0, fcfs(0, 100)},
				{"t103-jump5", 0, fcfs(5, 103)}, // as if at 98
				{"t101", 0, fcfs(0, 101)},
			},
			want: []string{"t103-jump5", "t100", "t101"},
		},
		{
			name: "FCFS jump of 10000 s beats an hour-old backlog",
			in:   []in{{"old", 0, fcfs(0, 1000)}, {"jumped", 0, fcfs(10000, 4600)}},
			want: []string{"jumped", "old"},
		},
		{
			name: "WSPT prefers the short request",
			in:   []in{{"long-early", 0, wspt(0, 5000)}, {"short-late", 0, wspt(0, 10)}},
			want: []string{"short-late", "long-early"},
		},
		{
			name: "WSPT jump scales the weight",
			in: []in{
				{"cost100", 0, wspt(0, 100)},    // 0.01
				{"cost300-j4", 0, wspt(4, 300)}, // 0.0167
				{"cost50", 0, wspt(0, 50)},      // 0.02
			},
			want: []string{"cost50", "cost300-j4", "cost100"},
		},
	}
	for _, tt := range tests {
		for _, lo := range layouts {
			t.Run(tt.name+"/"+lo.name, func(t *testing.T) {
				c := NewKeyed(newFakeCheck(), KeyConfig{})
				for i, x := range tt.in {
					c.Push(mk(x.id, uint64(i+1), x.strict, x.score, lo.pin(i)))
					checkInvariants(t, c)
				}
				if got := drain(t, c); !slices.Equal(got, tt.want) {
					t.Errorf("got order %v, want %v", got, tt.want)
				}
				if !c.Empty() {
					t.Errorf("got Len %d after draining, want 0", c.Len())
				}
			})
		}
	}
}

func TestCandidate(t *testing.T) {
	w0, w0r1, w1 := pin("w0", 0), pin("w0", 1), pin("w1", request.AnyRank)
	tests := []struct {
		name           string
		reqs           []*request.Snapshot
		targets        []request.Target // blocked targets
		ids            []string         // blocked requests
		want           string           // candidate id, "" for none
		wantBlocked    int              // pinned lanes in the blocked set afterwards
		wantCheckCalls int
	}{
		{
			name: "empty class",
			want: "",
		},
		{
			name:           "shared head only",
			reqs:           []*request.Snapshot{mk("s1", 1, 0, 0, shared), mk("s2", 2, 0, 0, shared)},
			want:           "s1",
			wantCheckCalls: 1,
		},
		{
			name:           "shared head outranks every pinned head: pinned lanes not examined",
			reqs:           []*request.Snapshot{mk("s1", 1, 0, 9, shared), mk("p1", 2, 0, 5, w0), mk("p2", 3, 0, 1, w1)},
			targets:        []request.Target{w0},
			want:           "s1",
			wantCheckCalls: 1,
		},
		{
			name:           "pinned head outranks the shared head",
			reqs:           []*request.Snapshot{mk("s1", 1, 0, 1, shared), mk("p1", 2, 0, 5, w0)},
			want:           "p1",
			wantCheckCalls: 2,
		},
		{
			name:           "shared head blocked: best pinned head",
			reqs:           []*request.Snapshot{mk("s1", 1, 0, 9, shared), mk("p1", 2, 0, 1, w0), mk("p2", 3, 0, 5, w1)},
			targets:        []request.Target{shared},
			want:           "p2",
			wantCheckCalls: 2,
		},
		{
			name: "shared head blocked: the lane does not look past it",
			reqs: []*request.Snapshot{
				mk("s1", 1, 0, 9, shared), mk("s2", 2, 0, 8, shared), mk("p1", 3, 0, 1, w0),
			},
			ids:            []string{"s1"},
			want:           "p1",
			wantCheckCalls: 2,
		},
		{
			name: "pinned head blocked: its lane does not look past it",
			reqs: []*request.Snapshot{
				mk("p1", 1, 0, 9, w0), mk("p2", 2, 0, 8, w0), mk("s1", 3, 0, 1, shared),
			},
			ids:            []string{"p1"},
			want:           "s1",
			wantBlocked:    1,
			wantCheckCalls: 2,
		},
		{
			name: "blocked best pinned lane does not block another pinned lane",
			reqs: []*request.Snapshot{
				mk("p1", 1, 0, 9, w0), mk("q1", 2, 0, 5, w0r1), mk("r1", 3, 0, 3, w1), mk("s1", 4, 0, 1, shared),
			},
			targets:        []request.Target{w0},
			want:           "q1",
			wantBlocked:    1,
			wantCheckCalls: 3,
		},
		{
			name: "blocked pinned lanes do not block the shared head",
			reqs: []*request.Snapshot{
				mk("p1", 1, 0, 9, w0), mk("q1", 2, 0, 5, w0r1), mk("s1", 3, 0, 1, shared),
			},
			targets:        []request.Target{w0, w0r1},
			want:           "s1",
			wantBlocked:    2,
			wantCheckCalls: 3,
		},
		{
			name: "every lane blocked",
			reqs: []*request.Snapshot{
				mk("p1", 1, 0, 9, w0), mk("q1", 2, 0, 5, w1), mk("s1", 3, 0, 1, shared),
			},
			targets:        []request.Target{w0, w1, shared},
			want:           "",
			wantBlocked:    2,
			wantCheckCalls: 3,
		},
		{
			name: "strict pinned head beats a higher-scored shared head",
			reqs: []*request.Snapshot{
				mk("s1", 1, 0, fcfs(10000, 0), shared), mk("p1", 2, 1, fcfs(0, 0), w1),
			},
			want:           "p1",
			wantCheckCalls: 2,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			chk := newFakeCheck()
			for _, tg := range tt.targets {
				chk.targets[tg] = true
			}
			for _, id := range tt.ids {
				chk.ids[id] = true
			}
			c := NewKeyed(chk, KeyConfig{})
			for _, r := range tt.reqs {
				c.Push(r)
			}
			if got := candidateID(c); got != tt.want {
				t.Errorf("got candidate %q, want %q", got, tt.want)
			}
			if got := chk.calls; got != tt.wantCheckCalls {
				t.Errorf("got %d Checker calls, want %d", got, tt.wantCheckCalls)
			}
			if _, got := c.Lanes(); got != tt.wantBlocked {
				t.Errorf("got %d blocked lanes, want %d", got, tt.wantBlocked)
			}
			checkInvariants(t, c)
			// Asking again changes nothing and re-examines no blocked lane.
			chk.calls = 0
			if got := candidateID(c); got != tt.want {
				t.Errorf("second call: got candidate %q, want %q", got, tt.want)
			}
			if _, got := c.Lanes(); got != tt.wantBlocked {
				t.Errorf("second call: got %d blocked lanes, want %d", got, tt.wantBlocked)
			}
			if maxCalls := tt.wantCheckCalls - tt.wantBlocked; chk.calls > maxCalls {
				t.Errorf("second call: got %d Checker calls, want at most %d", chk.calls, maxCalls)
			}
		})
	}
}

func TestCandidateCost(t *testing.T) {
	tests := []struct {
		name    string
		cost    uint64
		charged bool
		want    uint64
	}{
		{"uncharged", 700, false, 700},
		{"charged before a refused dispatch", 700, true, 0},
		{"cost 1", 1, false, 1},
	}
	for _, tt := range tests {
		for _, tg := range []request.Target{shared, pin("w0", 3)} {
			t.Run(fmt.Sprintf("%s/%v", tt.name, tg), func(t *testing.T) {
				c := NewKeyed(newFakeCheck(), KeyConfig{})
				r := mk("r", 1, 0, 0, tg)
				r.Cost, r.Charged = tt.cost, tt.charged
				c.Push(r)
				got, ok := c.Candidate()
				if !ok || got != tt.want {
					t.Errorf("got Candidate (%d, %v), want (%d, true)", got, ok, tt.want)
				}
			})
		}
	}
}

// op is one step of a scripted scenario on a class with a fakeCheck.
type op struct {
	do          func(c *Keyed, chk *fakeCheck, rs map[string]*request.Snapshot)
	want        string // the candidate after the step, "" for none
	wantPinned  int
	wantBlocked int
}

func runOps(t *testing.T, reqs []*request.Snapshot, ops []op) {
	t.Helper()
	chk := newFakeCheck()
	c := NewKeyed(chk, KeyConfig{})
	rs := map[string]*request.Snapshot{}
	for _, r := range reqs {
		rs[r.ID] = r
		c.Push(r)
	}
	for i, o := range ops {
		o.do(c, chk, rs)
		checkInvariants(t, c)
		if got := candidateID(c); got != o.want {
			t.Errorf("step %d: got candidate %q, want %q", i, got, o.want)
		}
		checkInvariants(t, c)
		if p, b := c.Lanes(); p != o.wantPinned || b != o.wantBlocked {
			t.Errorf("step %d: got Lanes (%d, %d), want (%d, %d)", i, p, b, o.wantPinned, o.wantBlocked)
		}
	}
}

func block(tg request.Target, v bool) func(*Keyed, *fakeCheck, map[string]*request.Snapshot) {
	return func(_ *Keyed, chk *fakeCheck, _ map[string]*request.Snapshot) { chk.targets[tg] = v }
}

func recheck(id string) func(*Keyed, *fakeCheck, map[string]*request.Snapshot) {
	return func(c *Keyed, _ *fakeCheck, _ map[string]*request.Snapshot) { c.Recheck(id) }
}

func push(r *request.Snapshot) func(*Keyed, *fakeCheck, map[string]*request.Snapshot) {
	return func(c *Keyed, _ *fakeCheck, rs map[string]*request.Snapshot) { rs[r.ID] = r; c.Push(r) }
}

func remove(id string) func(*Keyed, *fakeCheck, map[string]*request.Snapshot) {
	return func(c *Keyed, _ *fakeCheck, rs map[string]*request.Snapshot) { c.Remove(rs[id]) }
}

func pop(c *Keyed, _ *fakeCheck, _ map[string]*request.Snapshot) {
	if _, ok := c.Candidate(); !ok {
		panic("pop: no candidate")
	}
	c.Pop()
}

func nop(*Keyed, *fakeCheck, map[string]*request.Snapshot) {}

func TestBlockedLanes(t *testing.T) {
	a0, a1, b := pin("a", 0), pin("a", 1), pin("b", request.AnyRank)
	t.Run("back only on Recheck of its worker", func(t *testing.T) {
		runOps(t, []*request.Snapshot{
			mk("a0", 1, 0, 9, a0), mk("a1", 2, 0, 8, a1), mk("b", 3, 0, 7, b),
		}, []op{
			{do: nop, want: "a0", wantPinned: 3},
			{do: block(a0, true), want: "a1", wantPinned: 3, wantBlocked: 1},
			{do: block(a0, false), want: "a1", wantPinned: 3, wantBlocked: 1}, // not rechecked yet
			{do: recheck("b"), want: "a1", wantPinned: 3, wantBlocked: 1},     // another worker
			{do: recheck("nobody"), want: "a1", wantPinned: 3, wantBlocked: 1},
			{do: recheck("a"), want: "a0", wantPinned: 3},
		})
	})
	t.Run("Recheck of a worker returns all its lanes", func(t *testing.T) {
		runOps(t, []*request.Snapshot{
			mk("a0", 1, 0, 9, a0), mk("a1", 2, 0, 8, a1), mk("b", 3, 0, 7, b),
		}, []op{
			{do: func(c *Keyed, chk *fakeCheck, rs map[string]*request.Snapshot) {
				block(a0, true)(c, chk, rs)
				block(a1, true)(c, chk, rs)
			}, want: "b", wantPinned: 3, wantBlocked: 2},
			{do: block(a1, false), want: "b", wantPinned: 3, wantBlocked: 2},
			// Both come back; a0 is still blocked and moves aside again.
			{do: recheck("a"), want: "a1", wantPinned: 3, wantBlocked: 1},
		})
	})
	t.Run("RecheckAll returns every lane", func(t *testing.T) {
		runOps(t, []*request.Snapshot{
			mk("a0", 1, 0, 9, a0), mk("b", 2, 0, 8, b), mk("s", 3, 0, 1, shared),
		}, []op{
			{do: func(c *Keyed, chk *fakeCheck, rs map[string]*request.Snapshot) {
				block(a0, true)(c, chk, rs)
				block(b, true)(c, chk, rs)
			}, want: "s", wantPinned: 2, wantBlocked: 2},
			{do: func(c *Keyed, chk *fakeCheck, rs map[string]*request.Snapshot) {
				block(a0, false)(c, chk, rs)
				block(b, false)(c, chk, rs)
			}, want: "s", wantPinned: 2, wantBlocked: 2},
			{do: func(c *Keyed, _ *fakeCheck, _ map[string]*request.Snapshot) { c.RecheckAll() },
				want: "a0", wantPinned: 2},
			{do: pop, want: "b", wantPinned: 1},
			{do: pop, want: "s"},
			{do: pop, want: ""},
		})
	})
	t.Run("a new head unblocks the lane; a new tail does not", func(t *testing.T) {
		runOps(t, []*request.Snapshot{
			mk("a0", 10, 0, 5, a0), mk("s", 11, 0, 1, shared),
		}, []op{
			{do: func(c *Keyed, chk *fakeCheck, _ map[string]*request.Snapshot) { chk.ids["a0"] = true },
				want: "s", wantPinned: 1, wantBlocked: 1},
			{do: push(mk("a0-tail", 12, 0, 4, a0)), want: "s", wantPinned: 1, wantBlocked: 1},
			{do: push(mk("a0-head", 13, 0, 6, a0)), want: "a0-head", wantPinned: 1},
			{do: pop, want: "s", wantPinned: 1, wantBlocked: 1}, // a0 is the head again
		})
	})
	t.Run("a charged request handed back as head unblocks its lane", func(t *testing.T) {
		back := mk("back", 1, 0, 9, a0)
		back.Charged = true
		runOps(t, []*request.Snapshot{mk("a0", 5, 0, 5, a0)}, []op{
			{do: func(c *Keyed, chk *fakeCheck, _ map[string]*request.Snapshot) { chk.ids["a0"] = true },
				want: "", wantPinned: 1, wantBlocked: 1},
			{do: push(back), want: "back", wantPinned: 1},
		})
	})
	t.Run("removing a blocked head keeps the lane blocked until Recheck", func(t *testing.T) {
		runOps(t, []*request.Snapshot{
			mk("a0", 1, 0, 9, a0), mk("a0-2", 2, 0, 8, a0), mk("s", 3, 0, 1, shared),
		}, []op{
			{do: block(a0, true), want: "s", wantPinned: 1, wantBlocked: 1},
			{do: remove("a0"), want: "s", wantPinned: 1, wantBlocked: 1},
			{do: block(a0, false), want: "s", wantPinned: 1, wantBlocked: 1},
			{do: recheck("a"), want: "a0-2", wantPinned: 1},
		})
	})
	t.Run("emptying a blocked lane drops it", func(t *testing.T) {
		runOps(t, []*request.Snapshot{
			mk("a0", 1, 0, 9, a0), mk("a1", 2, 0, 8, a1), mk("b", 3, 0, 1, b),
		}, []op{
			{do: func(c *Keyed, chk *fakeCheck, rs map[string]*request.Snapshot) {
				block(a0, true)(c, chk, rs)
				block(a1, true)(c, chk, rs)
			}, want: "b", wantPinned: 3, wantBlocked: 2},
			{do: remove("a0"), want: "b", wantPinned: 2, wantBlocked: 1},
			{do: remove("a1"), want: "b", wantPinned: 1},
			{do: recheck("a"), want: "b", wantPinned: 1},
			// The target comes back as a fresh, indexed lane (reused from the free list).
			{do: func(c *Keyed, chk *fakeCheck, rs map[string]*request.Snapshot) {
				block(a0, false)(c, chk, rs)
				push(mk("a0-new", 4, 0, 9, a0))(c, chk, rs)
			}, want: "a0-new", wantPinned: 2},
		})
	})
	t.Run("blocked shared head holds the shared lane only", func(t *testing.T) {
		runOps(t, []*request.Snapshot{
			mk("s1", 1, 0, 9, shared), mk("s2", 2, 0, 8, shared), mk("a0", 3, 0, 1, a0),
		}, []op{
			{do: nop, want: "s1", wantPinned: 1},
			{do: func(_ *Keyed, chk *fakeCheck, _ map[string]*request.Snapshot) { chk.ids["s1"] = true },
				want: "a0", wantPinned: 1},
			{do: pop, want: "", wantPinned: 0},
			// The shared lane is checked on every call: no recheck needed.
			{do: func(_ *Keyed, chk *fakeCheck, _ map[string]*request.Snapshot) { chk.ids["s1"] = false },
				want: "s1"},
		})
	})
}

func TestRemove(t *testing.T) {
	a0, b := pin("a", 0), pin("b", request.AnyRank)
	reqs := func() []*request.Snapshot {
		return []*request.Snapshot{
			mk("s1", 1, 0, 9, shared), mk("s2", 2, 0, 7, shared), mk("s3", 3, 0, 5, shared),
			mk("a1", 4, 0, 8, a0), mk("a2", 5, 0, 6, a0), mk("b1", 6, 0, 4, b),
		}
	}
	tests := []struct {
		name   string
		remove []string
		want   []string // drain order afterwards
	}{
		{"nothing", nil, []string{"s1", "a1", "s2", "a2", "s3", "b1"}},
		{"shared head", []string{"s1"}, []string{"a1", "s2", "a2", "s3", "b1"}},
		{"shared middle", []string{"s2"}, []string{"s1", "a1", "a2", "s3", "b1"}},
		{"pinned head", []string{"a1"}, []string{"s1", "s2", "a2", "s3", "b1"}},
		{"pinned tail", []string{"a2"}, []string{"s1", "a1", "s2", "s3", "b1"}},
		{"whole lane", []string{"a2", "a1"}, []string{"s1", "s2", "s3", "b1"}},
		{"twice is a no-op", []string{"b1", "b1"}, []string{"s1", "a1", "s2", "a2", "s3"}},
		{"everything", []string{"s1", "s2", "s3", "a1", "a2", "b1"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := NewKeyed(newFakeCheck(), KeyConfig{})
			rs := map[string]*request.Snapshot{}
			for _, r := range reqs() {
				rs[r.ID] = r
				c.Push(r)
			}
			for _, id := range tt.remove {
				c.Remove(rs[id])
				checkInvariants(t, c)
				if got := rs[id].Index; got != -1 {
					t.Errorf("removed %s: got Index %d, want -1", id, got)
				}
			}
			if got, want := c.Len(), len(tt.want); got != want {
				t.Errorf("got Len %d, want %d", got, want)
			}
			if got := drain(t, c); !slices.Equal(got, tt.want) {
				t.Errorf("got order %v, want %v", got, tt.want)
			}
		})
	}
	t.Run("a request never queued", func(t *testing.T) {
		c := NewKeyed(newFakeCheck(), KeyConfig{})
		c.Push(mk("s1", 1, 0, 0, shared))
		c.Remove(mk("stranger", 2, 0, 0, pin("x", 0)))
		if got := c.Len(); got != 1 {
			t.Errorf("got Len %d, want 1", got)
		}
	})
	t.Run("the candidate", func(t *testing.T) {
		c := NewKeyed(newFakeCheck(), KeyConfig{})
		s1, s2 := mk("s1", 1, 0, 0, shared), mk("s2", 2, 0, 0, shared)
		c.Push(s1)
		c.Push(s2)
		if got := candidateID(c); got != "s1" {
			t.Fatalf("got candidate %q, want s1", got)
		}
		c.Remove(s1)
		if c.cand != nil {
			t.Errorf("got candidate %s kept after its removal, want none", c.cand.ID)
		}
		if got := candidateID(c); got != "s2" {
			t.Errorf("got candidate %q, want s2", got)
		}
	})
}

func TestTotals(t *testing.T) {
	type want struct {
		n, pinned   int
		isl, cached uint64
	}
	r := func(id string, seq uint64, tg request.Target, isl, cached uint64) *request.Snapshot {
		x := mk(id, seq, 0, -float64(seq), tg)
		x.ISL, x.Cached, x.Cost = isl, cached, max(1, isl-cached)
		return x
	}
	s1, s2 := r("s1", 1, shared, 1000, 200), r("s2", 2, shared, 50, 50)
	a1, a2 := r("a1", 3, pin("a", 0), 300, 0), r("a2", 4, pin("a", 0), 7, 3)
	b1 := r("b1", 5, pin("b", request.AnyRank), 10, 10)
	c := NewKeyed(newFakeCheck(), KeyConfig{})
	steps := []struct {
		name string
		do   func()
		want want
	}{
		{"empty", func() {}, want{}},
		{"push s1", func() { c.Push(s1) }, want{1, 0, 1000, 200}},
		{"push s2", func() { c.Push(s2) }, want{2, 0, 1050, 250}},
		{"push a1", func() { c.Push(a1) }, want{3, 1, 1350, 250}},
		{"push a2", func() { c.Push(a2) }, want{4, 1, 1357, 253}},
		{"push b1", func() { c.Push(b1) }, want{5, 2, 1367, 263}},
		{"remove a2", func() { c.Remove(a2) }, want{4, 2, 1360, 260}},
		{"pop s1", func() { c.Candidate(); c.Pop() }, want{3, 2, 360, 60}},
		{"pop s2", func() { c.Candidate(); c.Pop() }, want{2, 2, 310, 10}},
		{"pop a1", func() { c.Candidate(); c.Pop() }, want{1, 1, 10, 10}},
		{"remove b1", func() { c.Remove(b1) }, want{0, 0, 0, 0}},
	}
	for _, s := range steps {
		s.do()
		checkInvariants(t, c)
		isl, cached := c.Tokens()
		pinned, _ := c.Lanes()
		got := want{c.Len(), pinned, isl, cached}
		if got != s.want {
			t.Errorf("%s: got Len, pinned lanes, Tokens %+v, want %+v", s.name, got, s.want)
		}
		if got, want := c.Empty(), s.want.n == 0; got != want {
			t.Errorf("%s: got Empty %v, want %v", s.name, got, want)
		}
	}
}

func TestPopLast(t *testing.T) {
	c := NewKeyed(newFakeCheck(), KeyConfig{})
	if got := c.Last(); got != nil {
		t.Errorf("got Last %v before any Pop, want nil", got)
	}
	s, p := mk("s", 1, 0, 1, shared), mk("p", 2, 0, 2, pin("a", 0))
	c.Push(s)
	c.Push(p)
	for _, want := range []*request.Snapshot{p, s} {
		if _, ok := c.Candidate(); !ok {
			t.Fatalf("got no candidate, want %s", want.ID)
		}
		c.Pop()
		if got := c.Last(); got != want {
			t.Errorf("got Last %s, want %s", got.ID, want.ID)
		}
		if got := want.Index; got != -1 {
			t.Errorf("popped %s: got Index %d, want -1", want.ID, got)
		}
	}
	if c.cand != nil {
		t.Errorf("got candidate %s after Pop, want none", c.cand.ID)
	}
}

func TestEach(t *testing.T) {
	c := NewKeyed(newFakeCheck(), KeyConfig{})
	want := []string{"a1", "a2", "b1", "s1", "s2"}
	for i, id := range want {
		tg := shared
		if id[0] != 's' {
			tg = pin(id[:1], 0)
		}
		c.Push(mk(id, uint64(i), 0, 0, tg))
	}
	var got []string
	c.Each(func(r *request.Snapshot) bool { got = append(got, r.ID); return true })
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
	for stop := 1; stop <= len(want); stop++ {
		n := 0
		c.Each(func(*request.Snapshot) bool { n++; return n < stop })
		if n != stop {
			t.Errorf("stop after %d: got %d calls, want %d", stop, n, stop)
		}
	}
}

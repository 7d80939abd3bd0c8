package lanes

import (
	"fmt"
	"math"
	"runtime"
	"testing"

	"pgregory.net/rapid"

	"fairdispatch/request"
)

// queueOf is what the fairness checks need of a class: Keyed, or oneKey.
type queueOf interface {
	Push(*request.Snapshot)
	Candidate() (uint64, bool)
	Pop()
	Last() *request.Snapshot
	Len() int
}

// spread tracks, for every pair of keys, the range of D = S_a/w_a - S_b/w_b
// over the current interval in which both stayed backlogged; its worst is the
// largest |change of D| over any such interval, the quantity docs/design.md,
// Fairness keys bounds by 2 * Cmax / min(w_a, w_b).
type spread struct {
	names   []string
	weights map[string]float64
	served  map[string]float64 // S / w
	lo, hi  map[[2]string]float64
	worst   map[[2]string]float64
}

func newSpread(weights map[string]float64) *spread {
	s := &spread{weights: weights, served: map[string]float64{},
		lo: map[[2]string]float64{}, hi: map[[2]string]float64{}, worst: map[[2]string]float64{}}
	for n := range weights {
		s.names = append(s.names, n)
	}
	return s
}

// observe records the state after a dispatch; backlogged says which keys stayed
// backlogged and dispatchable since the previous observation.
func (s *spread) observe(backlogged map[string]bool) {
	for _, a := range s.names {
		for _, b := range s.names {
			if a >= b {
				continue
			}
			p := [2]string{a, b}
			if !backlogged[a] || !backlogged[b] {
				delete(s.lo, p)
				delete(s.hi, p)
				continue
			}
			d := s.served[a] - s.served[b]
			if _, ok := s.lo[p]; !ok {
				s.lo[p], s.hi[p] = d, d
			}
			s.lo[p] = min(s.lo[p], d)
			s.hi[p] = max(s.hi[p], d)
			s.worst[p] = max(s.worst[p], s.hi[p]-s.lo[p])
		}
	}
}

// excess returns the pair whose worst spread exceeds 2*cmax/min(w) by the most,
// and by how much (<= 0: the bound holds).
func (s *spread) excess(cmax float64) (string, float64) {
	worst, at := math.Inf(-1), ""
	for p, w := range s.worst {
		bound := 2 * cmax / min(s.weights[p[0]], s.weights[p[1]])
		if e := w - bound; e > worst {
			worst, at = e, fmt.Sprintf("%s/%s spread %.2f bound %.2f", p[0], p[1], w, bound)
		}
	}
	return at, worst
}

// flood runs one class with every key kept backlogged; key "flood" (when
// present) is refilled rate times as often as the others. Requests are FCFS by
// seq. It returns the spread after steps dispatches.
func flood(t testing.TB, q queueOf, weights map[string]float64, costs func(i int) uint64, rate, steps int) *spread {
	s := newSpread(weights)
	var seq uint64
	queued := map[string]int{}
	add := func(key string) {
		seq++
		r := mk(fmt.Sprint(seq), seq, 0, -float64(seq), shared)
		r.Key = key
		r.Cost = costs(int(seq))
		q.Push(r)
		queued[key]++
	}
	refill := func() {
		for _, n := range s.names {
			per := 1
			if n == "flood" {
				per = rate
			}
			for queued[n] < 2*per {
				add(n)
			}
		}
	}
	all := map[string]bool{}
	for _, n := range s.names {
		all[n] = true
	}
	for range steps {
		refill()
		if _, ok := q.Candidate(); !ok {
			t.Fatal("nothing dispatchable")
		}
		q.Pop()
		r := q.Last()
		queued[r.Key]--
		s.served[r.Key] += float64(r.Cost) / weights[r.Key]
		s.observe(all)
	}
	return s
}

func tenKeys() map[string]float64 {
	w := map[string]float64{"flood": 1}
	for i := range 9 {
		w[fmt.Sprint("k", i)] = 1
	}
	return w
}

// TestKeyedFloodBound: one key sending 10 times the others' rate stays within
// the bound of docs/design.md, Fairness keys, of every other key.
func TestKeyedFloodBound(t *testing.T) {
	w := tenKeys()
	cost := func(i int) uint64 { return uint64(1 + i*7919%500) }
	s := flood(t, NewKeyed(always{}, KeyConfig{Weights: w}), w, cost, 10, 5000)
	if at, e := s.excess(500); e > 0 {
		t.Fatalf("bound exceeded: %s", at)
	}
}

// TestClassFloodUnfair is the negative control of TestKeyedFloodBound: the same
// check on a class without the key level (one FCFS order for every key) fails.
func TestClassFloodUnfair(t *testing.T) {
	w := tenKeys()
	cost := func(i int) uint64 { return uint64(1 + i*7919%500) }
	s := flood(t, oneKey{NewKeyed(always{}, KeyConfig{}), map[*request.Snapshot]string{}}, w, cost, 10, 5000)
	if at, e := s.excess(500); e <= 0 {
		t.Fatalf("want the bound exceeded without keys, got %s", at)
	}
}

// oneKey is a class without the key level: it queues every request under the
// default key, whatever its own, and gives a popped request its key back for
// the accounting.
type oneKey struct {
	*Keyed
	keys map[*request.Snapshot]string
}

func (o oneKey) Push(r *request.Snapshot) {
	o.keys[r], r.Key = r.Key, ""
	o.Keyed.Push(r)
}

func (o oneKey) Last() *request.Snapshot {
	r := o.Keyed.Last()
	r.Key = o.keys[r]
	return r
}

type always struct{}

func (always) Dispatchable(*request.Snapshot) bool { return true }

// TestKeyedBound checks the bound of docs/design.md, Fairness keys, on random
// weights, costs and backlogs: over any interval in which two keys both stay
// backlogged and dispatchable, |S_a/w_a - S_b/w_b| changes by at most
// 2 * Cmax / min(w_a, w_b). Keys go idle and come back (the lift gives them no
// credit), and some of their requests are pinned to a worker that is blocked
// for a while (the key keeps its standing, its interval ends).
func TestKeyedBound(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		names := []string{"a", "b", "c", "d", "e"}
		weights := map[string]float64{}
		for _, n := range names {
			weights[n] = rapid.Float64Range(0.01, 20).Draw(t, "weight")
		}
		cmax := rapid.Uint64Range(1, 1000).Draw(t, "cmax")
		chk := newFakeCheck()
		c := NewKeyed(chk, KeyConfig{Weights: weights})
		s := newSpread(weights)
		queued := map[string]int{}
		pinnedQ := map[string]int{}
		active := map[string]bool{}
		held := map[string]bool{}
		var seq uint64
		blockedW := request.Target{Worker: "w", Rank: request.AnyRank}
		for _, n := range names {
			active[n] = rapid.Bool().Draw(t, "active")
		}
		steps := rapid.IntRange(1, 400).Draw(t, "steps")
		for range steps {
			switch rapid.IntRange(0, 9).Draw(t, "op") {
			case 0: // a key goes idle or comes back
				n := rapid.SampledFrom(names).Draw(t, "key")
				active[n] = !active[n]
			case 1: // the pinned worker blocks or unblocks
				chk.targets[blockedW] = !chk.targets[blockedW]
				c.Recheck("w")
			}
			for _, n := range names {
				for active[n] && queued[n] < 3 {
					seq++
					tg := shared
					if rapid.IntRange(0, 5).Draw(t, "pinned") == 0 {
						tg = blockedW
					}
					r := mk(fmt.Sprint(seq), seq, 0, 0, tg)
					r.Key = n
					r.Cost = rapid.Uint64Range(1, cmax).Draw(t, "cost")
					c.Push(r)
					queued[n]++
					if tg.Pinned() {
						pinnedQ[n]++
					}
				}
			}
			if _, ok := c.Candidate(); !ok {
				continue
			}
			c.Pop()
			r := c.Last()
			queued[r.Key]--
			if r.Pin.Pinned() {
				pinnedQ[r.Key]--
			}
			s.served[r.Key] += float64(r.Cost) / weights[r.Key]
			// Backlogged and dispatchable: active (refilled to 3) and with no
			// request waiting on the blocked worker (whose lane holds it up).
			// A key that was held up by the blocked worker keeps its standing
			// (docs/decisions.md, Fairness keys): it may come back with the credit of
			// the time it waited, so the bound covers it only once it has caught up
			// with the class's virtual time.
			ok := map[string]bool{}
			for _, n := range names {
				if pinnedQ[n] > 0 && chk.targets[blockedW] {
					held[n] = true
				}
				if v, _ := c.Service(n); v >= c.vnow {
					held[n] = false
				}
				ok[n] = active[n] && queued[n] > 0 && !held[n]
			}
			s.observe(ok)
		}
		if at, e := s.excess(float64(cmax)); e > 1e-6 {
			t.Fatalf("bound exceeded: %s", at)
		}
	})
}

// TestKeyedWeights: weights 3:1 between two backlogged keys give 75/25.
func TestKeyedWeights(t *testing.T) {
	w := map[string]float64{"a": 3, "b": 1}
	c := NewKeyed(always{}, KeyConfig{Weights: w})
	var seq uint64
	served := map[string]uint64{}
	queued := map[string]int{}
	for range 4000 {
		for _, n := range []string{"a", "b"} {
			for queued[n] < 4 {
				seq++
				r := mk(fmt.Sprint(seq), seq, 0, -float64(seq), shared)
				r.Key, r.Cost = n, uint64(10+seq*31%90)
				c.Push(r)
				queued[n]++
			}
		}
		c.Candidate()
		c.Pop()
		served[c.Last().Key] += c.Last().Cost
		queued[c.Last().Key]--
	}
	share := float64(served["a"]) / float64(served["a"]+served["b"])
	if share < 0.73 || share > 0.77 {
		t.Fatalf("got share of a %.3f, want 0.75 +- 0.02", share)
	}
}

// TestKeyedStrictIsPerKey: a strict tier orders its key's requests only; it does
// not jump another key.
func TestKeyedStrictIsPerKey(t *testing.T) {
	c := NewKeyed(always{}, KeyConfig{})
	a1 := mk("a1", 1, 0, 0, shared)
	a1.Key = "a"
	b1 := mk("b1", 2, 0, 0, shared)
	b1.Key = "b"
	b2 := mk("b2", 3, 9, 0, shared) // strict tier 9
	b2.Key = "b"
	a2 := mk("a2", 4, 0, 0, shared)
	a2.Key = "a"
	for _, r := range []*request.Snapshot{a1, b1, b2, a2} {
		c.Push(r)
	}
	var got []string
	for c.Len() > 0 {
		c.Candidate()
		c.Pop()
		got = append(got, c.Last().ID)
	}
	want := []string{"a1", "b2", "a2", "b1"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("got order %v, want %v", got, want)
	}
}

// TestKeyedBlockedKeepsStanding: a key whose only requests wait on a blocked
// worker keeps its service; the others go on; the gate of unconstrained shared
// heads is probed once per Candidate.
func TestKeyedBlockedKeepsStanding(t *testing.T) {
	chk := newFakeCheck()
	c := NewKeyed(chk, KeyConfig{})
	w := pin("w", request.AnyRank)
	p := mk("p", 1, 0, 0, w)
	p.Key = "p"
	c.Push(p)
	chk.targets[w] = true
	var seq uint64 = 1
	for range 5 {
		seq++
		r := mk(fmt.Sprint("s", seq), seq, 0, 0, shared)
		r.Key = "s"
		c.Push(r)
	}
	for range 5 {
		if _, ok := c.Candidate(); !ok || c.cand.Key != "s" {
			t.Fatalf("want a request of key s dispatched")
		}
		c.Pop()
	}
	if v, _ := c.Service("p"); v != 0 {
		t.Fatalf("blocked key p: got service %v, want 0 kept", v)
	}
	chk.targets[w] = false
	c.Recheck("w")
	if _, ok := c.Candidate(); !ok || c.cand != p {
		t.Fatal("want p once its worker is rechecked")
	}
	// The gate: every shared head refused, then one probe lets them all go again.
	for i := range 3 {
		r := mk(fmt.Sprint("g", i), uint64(100+i), 0, 0, shared)
		r.Key = fmt.Sprint("g", i)
		c.Push(r)
	}
	c.Pop() // p
	chk.targets[shared] = true
	if _, ok := c.Candidate(); ok {
		t.Fatal("want nothing while the gate is closed")
	}
	if len(c.gated) != 3 || len(c.keys) != 0 {
		t.Fatalf("got %d gated keys and %d in the heap, want 3 and 0", len(c.gated), len(c.keys))
	}
	chk.calls = 0
	c.Candidate()
	if chk.calls != 1 {
		t.Fatalf("closed gate: got %d checker calls, want 1 probe", chk.calls)
	}
	chk.targets[shared] = false
	if _, ok := c.Candidate(); !ok {
		t.Fatal("want a candidate once the gate opens")
	}
}

// pushKeyed returns push, which queues on c a shared request of key and cost,
// each one arriving after the last (FCFS).
func pushKeyed(c *Keyed) (push func(key string, cost uint64)) {
	var seq uint64
	return func(key string, cost uint64) {
		seq++
		r := mk(fmt.Sprint(seq), seq, 0, -float64(seq), shared)
		r.Key, r.Cost = key, cost
		c.Push(r)
	}
}

// TestKeyedIdleReturnNoBurst: a key idle while others were served starts at the
// class's virtual time, so its lead over a backlogged key stays within the bound
// (the largest lead is measured).
func TestKeyedIdleReturnNoBurst(t *testing.T) {
	c := NewKeyed(always{}, KeyConfig{})
	push := pushKeyed(c)
	const cmax = 100
	served := map[string]float64{}
	pop := func() string {
		c.Candidate()
		c.Pop()
		served[c.Last().Key] += float64(c.Last().Cost)
		return c.Last().Key
	}
	// "a" once, then idle, while "b" is served 1000 times.
	push("a", cmax)
	pop()
	for range 1000 {
		push("b", cmax)
		pop()
	}
	push("b", cmax)
	// "a" returns with a deep backlog.
	for range 200 {
		push("a", cmax)
	}
	a0, b0 := served["a"], served["b"]
	lead := 0.0
	for range 200 {
		pop()
		if c.cand == nil {
			push("b", cmax)
		}
		if n := c.Len(); n < 2 {
			push("b", cmax)
		}
		lead = max(lead, (served["a"]-a0)-(served["b"]-b0))
	}
	if lead > 2*cmax {
		t.Fatalf("returning key's largest lead %.0f, want <= 2*Cmax = %d", lead, 2*cmax)
	}
	t.Logf("largest lead of the returning key: %.0f (bound %d)", lead, 2*cmax)
}

// TestKeyedOverflow: beyond MaxKeys, new keys share OverflowKey, and idle keys
// are forgotten.
func TestKeyedOverflow(t *testing.T) {
	c := NewKeyed(always{}, KeyConfig{MaxKeys: 3})
	var rs []*request.Snapshot
	for i := range 5 {
		r := mk(fmt.Sprint(i), uint64(i+1), 0, 0, shared)
		r.Key = fmt.Sprint("k", i)
		c.Push(r)
		rs = append(rs, r)
	}
	if c.Keys() != 4 || rs[3].Key != OverflowKey || rs[4].Key != OverflowKey {
		t.Fatalf("got %d keys, keys %q %q, want 4 and %q", c.Keys(), rs[3].Key, rs[4].Key, OverflowKey)
	}
	for _, r := range rs {
		c.Remove(r)
	}
	if c.Keys() != 0 {
		t.Fatalf("got %d keys tracked after every request left, want 0", c.Keys())
	}
	// A popped request keeps its key (owed a settlement) until settled.
	c.Push(rs[0])
	c.Candidate()
	c.Pop()
	if c.Keys() != 1 {
		t.Fatalf("got %d keys after a pop, want 1 owed", c.Keys())
	}
	c.Settle(rs[0].Key, 5)
	if c.Keys() != 0 {
		t.Fatalf("got %d keys after settlement, want 0", c.Keys())
	}
}

// TestKeyedBytesPerKey measures the memory a backlogged key costs beyond its
// request: the heap after queuing one request under each of n distinct keys,
// minus the heap after queuing the same requests under one key, divided by n.
// The goal (docs/design.md, Fairness keys) is under 200 bytes.
func TestKeyedBytesPerKey(t *testing.T) {
	const n = 50000
	perKey := bytesPerKey(n)
	t.Logf("%.0f B per backlogged key", perKey)
	if perKey >= 200 {
		t.Fatalf("got %.0f B per backlogged key, want < 200", perKey)
	}
}

func bytesPerKey(n int) float64 {
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("tenant-%08d", i)
	}
	heapWith := func(distinct bool) (uint64, *Keyed) {
		rs := make([]request.Snapshot, n)
		var m runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&m)
		before := m.HeapAlloc
		c := NewKeyed(always{}, KeyConfig{})
		for i := range rs {
			r := &rs[i]
			*r = request.Snapshot{ID: names[i], Seq: uint64(i + 1), Cost: 1, Index: -1, DeadlineIndex: -1, Key: "one"}
			if distinct {
				r.Key = names[i]
			}
			c.Push(r)
		}
		runtime.GC()
		runtime.ReadMemStats(&m)
		runtime.KeepAlive(rs)
		return m.HeapAlloc - before, c
	}
	one, c1 := heapWith(false)
	many, c2 := heapWith(true)
	runtime.KeepAlive(c1)
	runtime.KeepAlive(c2)
	return (float64(many) - float64(one)) / float64(n)
}

// TestKeyedDistinctKeysBounded: 100,000 distinct keys over a run, at most 10
// backlogged at once, each settled after its dispatch: the keys tracked never
// exceed the backlog, and the heap does not grow with the keys seen.
func TestKeyedDistinctKeysBounded(t *testing.T) {
	c := NewKeyed(always{}, KeyConfig{})
	var m runtime.MemStats
	heap := func() uint64 {
		runtime.GC()
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	const keys, backlog = 100000, 10
	var before uint64
	for i := range keys {
		r := &request.Snapshot{ID: "r", Key: fmt.Sprintf("tenant-%06d", i), Cost: 1, Seq: uint64(i + 1), Index: -1, DeadlineIndex: -1}
		c.Push(r)
		if c.Len() == backlog {
			c.Candidate()
			c.Pop()
			c.Settle(c.Last().Key, 0)
		}
		if got := c.Keys(); got > backlog {
			t.Fatalf("after %d keys: %d tracked, want <= %d", i+1, got, backlog)
		}
		if i == 1000 {
			before = heap()
		}
	}
	if grown := int64(heap()) - int64(before); grown > 64<<10 {
		t.Fatalf("heap grew by %d bytes over 99,000 more distinct keys, want < 64 KiB", grown)
	}
}

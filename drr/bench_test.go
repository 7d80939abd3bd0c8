package drr_test

import (
	"fmt"
	"runtime"
	"testing"

	"fairdispatch/drr"
	"fairdispatch/lanes"
	"fairdispatch/request"
)

// always is a lanes.Checker under which every request is dispatchable.
type always struct{}

func (always) Dispatchable(*request.Snapshot) bool { return true }

const (
	benchQuantum   = 64 // every class's quantum, in cost units
	perLane        = 4  // requests queued in each pinned lane
	sharedPerClass = 16 // requests queued in each class's shared lane
)

// BenchmarkArbiter is the acceptance benchmark of one dispatch decision: an
// arbiter call (docs/design.md, DRR) over C real class queues (lanes.Keyed, every request of one key) holding L pinned lanes
// between them (spread round robin, perLane requests each) plus sharedPerClass
// shared requests per class, with every request costing R quanta. One op is
// Arbiter.Next, Last on the class taken, and a push of a fresh request into the
// lane just served, so the queues keep their size and the steady state allocates
// nothing. Scores are FCFS (a later arrival scores lower), so every queued request
// comes round in turn and each op moves a head in its lane heap and in the index.
func BenchmarkArbiter(b *testing.B) {
	for _, classes := range []int{1, 8, 64} {
		for _, pinned := range []int{0, 100, 10000} {
			for _, ratio := range []uint64{1, 1000000} {
				name := fmt.Sprintf("classes=%d/lanes=%d/ratio=%d", classes, pinned, ratio)
				b.Run(name, func(b *testing.B) { benchArbiter(b, classes, pinned, ratio) })
			}
		}
	}
}

func benchArbiter(b *testing.B, nclass, nlanes int, ratio uint64) {
	cost := ratio * benchQuantum
	cls, qs, a := benchClasses(nclass)

	fill := filler(cost)
	// The backlog, preallocated in one pool and interleaved so that consecutive
	// seqs go to different lanes.
	pool := make([]request.Snapshot, nlanes*perLane+nclass*sharedPerClass)
	p := 0
	for d := range max(perLane, sharedPerClass) {
		if d < perLane {
			for l := range nlanes {
				r := &pool[p]
				p++
				r.ID = fmt.Sprintf("req-%016d", p)
				r.Class = l % nclass
				r.Pin = request.Target{Worker: fmt.Sprintf("w%d", l/8), Rank: int32(l % 8)}
				fill(r)
				cls[r.Class].Push(r)
			}
		}
		if d < sharedPerClass {
			for k := range nclass {
				r := &pool[p]
				p++
				r.ID = fmt.Sprintf("req-%016d", p)
				r.Class = k
				fill(r)
				cls[k].Push(r)
			}
		}
	}
	want := make([]int, nclass)
	for l := range nlanes {
		want[l%nclass]++
	}
	for k, c := range cls {
		if got, _ := c.Lanes(); got != want[k] {
			b.Fatalf("class %d: got %d pinned lanes, want %d", k, got, want[k])
		}
	}

	steadyState(b, a, cls, qs, fill)
}

// filler returns fill, which resets r as a freshly admitted request of cost
// (docs/design.md, Snapshot), keeping its id, class, pin and key: the next
// seq, and the FCFS score of an arrival one millisecond after the previous
// one.
func filler(cost uint64) (fill func(r *request.Snapshot)) {
	var seq uint64
	return func(r *request.Snapshot) {
		seq++
		*r = request.Snapshot{
			ID: r.ID, Class: r.Class, Pin: r.Pin, Key: r.Key,
			ISL: cost, Cost: cost, Seq: seq, Score: -float64(seq) / 1000,
			Arrival: int64(seq) * 1e6, Index: -1, DeadlineIndex: -1,
		}
	}
}

// benchClasses is nclass class queues, also as drr.Queues, and an arbiter
// over them, every class's quantum benchQuantum.
func benchClasses(nclass int) ([]*lanes.Keyed, []drr.Queue, *drr.Arbiter) {
	cls := make([]*lanes.Keyed, nclass)
	qs := make([]drr.Queue, nclass)
	quanta := make([]uint64, nclass)
	for k := range cls {
		cls[k] = lanes.NewKeyed(always{}, lanes.KeyConfig{})
		qs[k] = cls[k]
		quanta[k] = benchQuantum
	}
	return cls, qs, drr.New(quanta)
}

// steadyState is the loop the arbiter benchmarks time: one op is Arbiter.Next,
// Last on the class taken, and that request, refilled by fill, pushed back as
// a new arrival in the same lane (under the same key), so that the queues
// keep their size and nothing is allocated.
func steadyState(b *testing.B, a *drr.Arbiter, cls []*lanes.Keyed, qs []drr.Queue, fill func(*request.Snapshot)) {
	b.ReportAllocs()
	for b.Loop() {
		k, ok := a.Next(qs)
		if !ok {
			b.Fatal("nothing dispatched")
		}
		r := cls[k].Last()
		fill(r)
		cls[k].Push(r)
	}
}

// BenchmarkHeldBytes measures the memory a queued unconstrained request holds:
// the heap in use after queuing heldN requests (each with its own Snapshot and a
// 20-byte id, spread over 8 classes' shared lanes) minus the heap before, divided
// by heldN, reported as B/req. The goal is under 256. One op is then a
// Candidate, Pop and Push (the request back at the tail) on those full classes.
func BenchmarkHeldBytes(b *testing.B) {
	const (
		heldN  = 100000
		nclass = 8
	)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)

	cls := make([]*lanes.Keyed, nclass)
	for k := range cls {
		cls[k] = lanes.NewKeyed(always{}, lanes.KeyConfig{})
	}
	for i := range heldN {
		seq := uint64(i + 1)
		r := &request.Snapshot{
			ID:    fmt.Sprintf("req-%016d", seq), // 20 bytes
			Ref:   seq,
			Class: i % nclass,
			ISL:   1000, Cached: 200, Cost: 800,
			Arrival: int64(seq) * 1e6, Seq: seq, Score: -float64(seq) / 1000,
			Index: -1, DeadlineIndex: -1,
		}
		cls[r.Class].Push(r)
	}

	runtime.GC()
	runtime.ReadMemStats(&after)
	held := float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / heldN

	seq := uint64(heldN)
	b.ReportAllocs()
	k := 0
	for b.Loop() {
		c := cls[k]
		if k++; k == nclass {
			k = 0
		}
		if _, ok := c.Candidate(); !ok {
			b.Fatal("nothing dispatchable")
		}
		c.Pop()
		r := c.Last()
		seq++
		r.Seq, r.Score = seq, -float64(seq)/1000
		c.Push(r)
	}
	b.ReportMetric(held, "B/req")
	runtime.KeepAlive(cls)
}

// BenchmarkArbiterKeys is BenchmarkArbiter with the key level (docs/design.md,
// Fairness keys): C classes, each holding keys backlogged keys with perKey
// shared requests each. One op is Arbiter.Next, Last on the class taken, and a
// push of a fresh request under the key just served, so every key stays
// backlogged and the steady state allocates nothing. keys=1 is a class whose
// requests name no key (the key level has one key: the lanes alone); the goal
// is 10 and 10,000 keys within 2x of it.
func BenchmarkArbiterKeys(b *testing.B) {
	for _, classes := range []int{1, 8} {
		for _, keys := range []int{1, 10, 10000} {
			b.Run(fmt.Sprintf("classes=%d/keys=%d", classes, keys), func(b *testing.B) {
				benchKeys(b, classes, keys)
			})
		}
	}
}

func benchKeys(b *testing.B, nclass, nkeys int) {
	const perKey = 2
	cls, qs, a := benchClasses(nclass)
	fill := filler(benchQuantum)
	names := make([]string, nkeys)
	for i := range names {
		names[i] = fmt.Sprintf("tenant-%06d", i)
	}
	pool := make([]request.Snapshot, nclass*nkeys*perKey)
	p := 0
	for range perKey {
		for i := range nkeys {
			for k := range nclass {
				r := &pool[p]
				p++
				r.ID, r.Class, r.Key = fmt.Sprintf("req-%016d", p), k, names[i]
				fill(r)
				cls[k].Push(r)
			}
		}
	}
	steadyState(b, a, cls, qs, fill)
}

// BenchmarkKeyedSettle is one settlement: a correction to a backlogged key's
// service among keys keys (docs/design.md, Cost settlement).
func BenchmarkKeyedSettle(b *testing.B) {
	for _, keys := range []int{10, 10000} {
		b.Run(fmt.Sprintf("keys=%d", keys), func(b *testing.B) {
			c := lanes.NewKeyed(always{}, lanes.KeyConfig{})
			names := make([]string, keys)
			for i := range names {
				names[i] = fmt.Sprintf("tenant-%06d", i)
				c.Push(&request.Snapshot{ID: names[i], Key: names[i], Cost: 1, Seq: uint64(i + 1), Index: -1, DeadlineIndex: -1})
			}
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				c.Settle(names[i], int64(i%7)-3)
				if i++; i == keys {
					i = 0
				}
			}
		})
	}
}

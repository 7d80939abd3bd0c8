package sim

import (
	"cmp"
	"maps"
	"math"
	"slices"

	"fairdispatch/configs"
)

// Stats is what a run gave each class and key (docs/operations.md, Recording
// traffic and fairctl sim, defines every figure).
type Stats struct {
	// Contended is whether two or more classes were ever backlogged at once;
	// the shares are of the cost dispatched while they were.
	Contended bool `json:"contended"`
	// ContendedCost is the cost dispatched during contention.
	ContendedCost uint64 `json:"contended_cost"`
	// Jain is Jain's fairness index over the contending classes of
	// share / weight: 1 when each got exactly its weight.
	Jain float64 `json:"jain"`
	// FirstN is the number of first completions counted in ClassStats.FirstN
	// (0 when completions are not known).
	FirstN  int          `json:"first_n"`
	Classes []ClassStats `json:"classes"`
}

// ClassStats is one class's figures.
type ClassStats struct {
	Name    string `json:"name"`
	Quantum uint64 `json:"quantum"`
	// Weight is the class's due share of the contended cost: of each
	// contended dispatch, its quantum's part of the quanta of the classes
	// waiting then; Share is its share of the cost dispatched during
	// contention.
	Weight     float64 `json:"weight"`
	Share      float64 `json:"share"`
	Arrived    int     `json:"arrived"`
	Dispatched int     `json:"dispatched"`
	Rejected   int     `json:"rejected"`
	Cost       uint64  `json:"cost"` // dispatched, over the whole run
	// WaitP50Ms and WaitP99Ms are of the time from publication to dispatch.
	WaitP50Ms float64 `json:"wait_p50_ms"`
	WaitP99Ms float64 `json:"wait_p99_ms"`
	// FirstN is the class's requests among the run's first Stats.FirstN completions.
	FirstN int `json:"first_n"`
	// KeyJain is Jain's index over the class's keys that waited during
	// contention, of each one's share of the class's contended cost against
	// its key weight's part (key_weights); 1 with one key.
	KeyJain float64    `json:"key_jain"`
	Keys    []KeyStats `json:"keys,omitempty"`
}

// KeyStats is one fairness key's figures within its class.
type KeyStats struct {
	Key        string  `json:"key"`
	Share      float64 `json:"share"` // of the class's contended cost
	Arrived    int     `json:"arrived"`
	Dispatched int     `json:"dispatched"`
	WaitP50Ms  float64 `json:"wait_p50_ms"`
	WaitP99Ms  float64 `json:"wait_p99_ms"`
}

// Analyze measures run under pol (whose classes the run's arrivals carry).
// firstN > 0 counts each class among the first firstN completions.
//
// A dispatch is contended when, just before it, two or more classes had
// requests waiting (arrived, neither dispatched nor rejected yet). A class's
// share is its part of the contended dispatches' cost, and its weight its
// due part: of each contended dispatch's cost, its quantum's part of the
// quanta of the classes waiting at that moment, summed, over the contended
// cost. (Two classes backlogged together: the quantum share.) A key's share
// is weighed likewise, by its key weight among the class's keys that waited
// during contention.
func Analyze(run *Run, pol *configs.Policy, firstN int) Stats {
	type ev struct {
		t    int64
		kind int // 0 arrive, 1 leave (dispatch or reject): arrivals first at one instant
		cls  string
		key  string
		cost uint64
		disp bool
		wait int64
	}
	pub := make(map[string]int64, len(run.Arrivals))
	evs := make([]ev, 0, len(run.Arrivals)+len(run.Dispatches)+len(run.Rejects))
	for _, a := range run.Arrivals {
		pub[a.ID] = a.Published
		evs = append(evs, ev{t: a.T, cls: a.Class, key: a.Key})
	}
	for _, d := range run.Dispatches {
		w := int64(0)
		if p, ok := pub[d.ID]; ok {
			w = max(0, d.T-p)
		}
		evs = append(evs, ev{t: d.T, kind: 1, cls: d.Class, key: d.Key, cost: d.Cost, disp: true, wait: w})
	}
	for _, r := range run.Rejects {
		evs = append(evs, ev{t: r.T, kind: 1, cls: r.Class, key: r.Key})
	}
	slices.SortStableFunc(evs, func(a, b ev) int {
		if c := cmp.Compare(a.t, b.t); c != 0 {
			return c
		}
		return cmp.Compare(a.kind, b.kind)
	})

	type keyAcc struct {
		arrived, dispatched int
		waiting             int
		contended           uint64
		expected            float64 // its key weight's part of each contended dispatch of its class it waited for
		waits               []int64
	}
	type acc struct {
		ClassStats
		waiting   int
		contended uint64
		expected  float64 // its quantum's part of each contended dispatch it waited for
		contends  bool
		waits     []int64
		keys      map[string]*keyAcc
		keyWeight func(key string) float64
	}
	by := map[string]*acc{}
	get := func(name string) *acc {
		a := by[name]
		if a == nil {
			a = &acc{ClassStats: ClassStats{Name: name}, keys: map[string]*keyAcc{}, keyWeight: func(string) float64 { return 1 }}
			if k := pol.Index(name); k >= 0 {
				pc := &pol.Classes[k]
				a.Quantum = pc.Quantum
				a.keyWeight = func(key string) float64 {
					if key == "_" {
						key = "" // the default key, as the policy spells it
					}
					return pc.KeyWeight(key)
				}
			}
			by[name] = a
		}
		return a
	}
	getKey := func(a *acc, key string) *keyAcc {
		k := a.keys[key]
		if k == nil {
			k = &keyAcc{}
			a.keys[key] = k
		}
		return k
	}
	backlogged := 0 // classes with a request waiting
	var st Stats
	for _, e := range evs {
		a := get(e.cls)
		if e.kind == 0 {
			a.Arrived++
			k := getKey(a, e.key)
			k.arrived++
			k.waiting++
			if a.waiting == 0 {
				backlogged++
			}
			a.waiting++
			continue
		}
		if backlogged >= 2 && e.disp {
			st.Contended = true
			st.ContendedCost += e.cost
			a.contended += e.cost
			getKey(a, e.key).contended += e.cost
			var quanta uint64 // of the classes waiting now
			for _, b := range by {
				if b.waiting > 0 {
					quanta += b.Quantum
				}
			}
			for _, b := range by {
				if b.waiting > 0 {
					if quanta > 0 {
						b.expected += float64(e.cost) * float64(b.Quantum) / float64(quanta)
					}
					b.contends = true
				}
			}
			// Within the class, likewise by key weight among its keys waiting now.
			var weights float64
			for kn, k := range a.keys {
				if k.waiting > 0 {
					weights += a.keyWeight(kn)
				}
			}
			for kn, k := range a.keys {
				if k.waiting > 0 && weights > 0 {
					k.expected += float64(e.cost) * a.keyWeight(kn) / weights
				}
			}
		}
		if k := getKey(a, e.key); k.waiting > 0 {
			k.waiting--
		}
		if a.waiting > 0 {
			a.waiting--
			if a.waiting == 0 {
				backlogged--
			}
		}
		if e.disp {
			a.Dispatched++
			a.Cost += e.cost
			a.waits = append(a.waits, e.wait)
			k := getKey(a, e.key)
			k.dispatched++
			k.waits = append(k.waits, e.wait)
		} else {
			a.Rejected++
		}
	}

	var xs []float64
	for _, name := range slices.Sorted(maps.Keys(by)) { // a fixed order: the sums are the same every run
		a := by[name]
		c := &a.ClassStats
		if a.contends {
			c.Weight = a.expected / float64(st.ContendedCost)
			c.Share = float64(a.contended) / float64(st.ContendedCost)
			if c.Weight > 0 { // a class the policy does not name has no quantum
				xs = append(xs, c.Share/c.Weight)
			}
		}
		c.WaitP50Ms, c.WaitP99Ms = quantileMs(a.waits, 0.50), quantileMs(a.waits, 0.99)
		// Keys: each one's share of the class's contended cost against its
		// due part of it (expected, as for classes).
		var ks []float64
		for _, name := range slices.Sorted(maps.Keys(a.keys)) {
			k := a.keys[name]
			ksh := 0.0
			if a.contended > 0 {
				ksh = float64(k.contended) / float64(a.contended)
				if k.expected > 0 {
					ks = append(ks, ksh/(k.expected/float64(a.contended)))
				}
			}
			c.Keys = append(c.Keys, KeyStats{Key: name, Share: ksh, Arrived: k.arrived, Dispatched: k.dispatched,
				WaitP50Ms: quantileMs(k.waits, 0.50), WaitP99Ms: quantileMs(k.waits, 0.99)})
		}
		slices.SortFunc(c.Keys, func(x, y KeyStats) int { return cmp.Compare(x.Key, y.Key) })
		c.KeyJain = Jain(ks)
		st.Classes = append(st.Classes, *c)
	}
	st.Jain = Jain(xs)
	if firstN > 0 && run.Completions != nil {
		st.FirstN = min(firstN, len(run.Completions))
		n := map[string]int{}
		for _, d := range run.Completions[:st.FirstN] {
			n[d.Class]++
		}
		for i := range st.Classes {
			st.Classes[i].FirstN = n[st.Classes[i].Name]
		}
	}
	// Policy order first, then classes the policy does not name.
	slices.SortFunc(st.Classes, func(x, y ClassStats) int {
		ix, iy := pol.Index(x.Name), pol.Index(y.Name)
		if ix < 0 {
			ix = math.MaxInt
		}
		if iy < 0 {
			iy = math.MaxInt
		}
		if c := cmp.Compare(ix, iy); c != 0 {
			return c
		}
		return cmp.Compare(x.Name, y.Name)
	})
	return st
}

// Class returns the stats of class name, or nil.
func (s Stats) Class(name string) *ClassStats {
	for i := range s.Classes {
		if s.Classes[i].Name == name {
			return &s.Classes[i]
		}
	}
	return nil
}

// Jain returns Jain's fairness index of xs, (Σx)² / (n Σx²): 1 when all are
// equal, 1/n when one has everything; 1 for no values or all zero.
func Jain(xs []float64) float64 {
	var s, s2 float64
	for _, x := range xs {
		s += x
		s2 += x * x
	}
	if len(xs) == 0 || s2 == 0 {
		return 1
	}
	return s * s / (float64(len(xs)) * s2)
}

// quantileMs is the q-quantile (nearest rank) of ns, in milliseconds; 0 for none.
func quantileMs(ns []int64, q float64) float64 {
	if len(ns) == 0 {
		return 0
	}
	s := slices.Clone(ns)
	slices.Sort(s)
	i := int(math.Ceil(q*float64(len(s)))) - 1
	return float64(s[max(0, min(i, len(s)-1))]) / 1e6
}

// Series is the cumulative cost dispatched to one class over time, for the chart.
type Series struct {
	Class string
	T     []float64 // seconds since the run's first event
	Cost  []float64 // cumulative
}

// Cumulative returns each class's cumulative service (cost dispatched) over
// time, in the order of the classes' first dispatch.
func Cumulative(run *Run) []Series {
	if len(run.Dispatches) == 0 {
		return nil
	}
	t0 := run.Dispatches[0].T
	if len(run.Arrivals) > 0 {
		t0 = min(t0, run.Arrivals[0].T)
	}
	idx := map[string]int{}
	var out []Series
	for _, d := range run.Dispatches {
		i, ok := idx[d.Class]
		if !ok {
			i = len(out)
			idx[d.Class] = i
			out = append(out, Series{Class: d.Class, T: []float64{0}, Cost: []float64{0}})
		}
		s := &out[i]
		s.T = append(s.T, float64(d.T-t0)/1e9)
		s.Cost = append(s.Cost, s.Cost[len(s.Cost)-1]+float64(d.Cost))
	}
	return out
}

package lanes

import (
	"math"

	"fairdispatch/internal/iheap"
)

// Budget is a key's token budget (docs/design.md, Token budgets): a token
// bucket refilled at Rate cost units per second up to Burst.
type Budget struct {
	Rate           float64 // cost units per second, > 0
	Burst          uint64  // cost units, >= 1
	WorkConserving bool    // may be served over budget when nothing else is dispatchable
}

// minLevel bounds a bucket's debt: settlement corrections cannot push a key
// further than this below empty (the same floor as a DRR deficit's).
const minLevel = -(1 << 40)

// bucket is one key's budget state. The level at time t is
// min(burst, level + rate × (t - at)); dispatches and corrections move it.
type bucket struct {
	name     string
	rate     float64 // per second
	burst    float64
	level    float64 // at time at
	at       int64
	conserve bool
	key      *key    // the tracked key, nil once it is forgotten
	queued   float64 // the cost of the key's queued requests not yet charged
	need     float64 // while throttled: the level the key waits for
	ready    int64   // while throttled: when the level reaches need
	tpos     int     // position in Keyed.throttled, -1 when not throttled
}

func newBucket(name string, b *Budget, now int64) *bucket {
	bk := &bucket{name: name, tpos: -1}
	bk.set(b, now)
	bk.level = bk.burst // a new key starts with a full bucket
	return bk
}

// set applies a (new) budget at now: the level so far is kept, capped by the
// new burst.
func (b *bucket) set(bg *Budget, now int64) {
	b.advance(now)
	b.rate, b.burst, b.conserve = bg.Rate, float64(bg.Burst), bg.WorkConserving
	b.level = min(b.level, b.burst)
}

// levelAt returns the level at now (now >= at; an earlier now reads the
// level at at).
func (b *bucket) levelAt(now int64) float64 {
	if now <= b.at {
		return b.level
	}
	return min(b.burst, b.level+b.rate*float64(now-b.at)/1e9)
}

func (b *bucket) advance(now int64) {
	if now > b.at {
		b.level, b.at = b.levelAt(now), now
	}
}

// needFor is the level a request of cost takes: its cost, or the whole burst
// for a request larger than the bucket.
func (b *bucket) needFor(cost uint64) float64 { return min(float64(cost), b.burst) }

// wait returns how long, in nanoseconds from now, until the level reaches
// need; 0 when it has.
func (b *bucket) wait(now int64, need float64) int64 {
	lack := need - b.levelAt(now)
	if lack <= 0 {
		return 0
	}
	w := math.Ceil(lack / b.rate * 1e9)
	if w > math.MaxInt64/4 {
		return math.MaxInt64 / 4
	}
	return int64(w)
}

// charge takes delta cost units from the bucket at now (a negative delta
// gives them back).
func (b *bucket) charge(now int64, delta float64) {
	b.advance(now)
	b.level = max(minLevel, min(b.burst, b.level-delta))
}

// throttleHeap holds the keys over budget, by the time their level reaches
// what their candidate needs.
type throttleHeap = iheap.Heap[*bucket, byReady]

type byReady struct{}

func (byReady) Less(a, b *bucket) bool    { return a.ready < b.ready }
func (byReady) SetIndex(b *bucket, i int) { b.tpos = i }
func (c *Keyed) budgetOf(name string) *Budget {
	if b, ok := c.cfg.Budgets[name]; ok {
		return b
	}
	return c.cfg.DefaultBudget
}

// budgeted reports whether any key of the class may have a budget.
func (cfg *KeyConfig) budgeted() bool { return cfg.DefaultBudget != nil || len(cfg.Budgets) > 0 }

// attachBudget gives a newly tracked key its bucket: the one kept from when
// it was tracked before, if its level has not refilled yet, else a full one.
func (c *Keyed) attachBudget(k *key) {
	bg := c.budgetOf(k.name)
	if bg == nil {
		return
	}
	b := c.buckets[k.name]
	if b == nil {
		b = newBucket(k.name, bg, c.now)
		c.buckets[k.name] = b
	}
	b.key = k
	k.ext().bud = b
}

// SetNow gives the class the time, in Unix nanoseconds, for its budgets
// (docs/design.md, Token budgets): call it before each arbitration of a class
// with budgets. Time never goes back: an earlier now is ignored.
func (c *Keyed) SetNow(now int64) { c.now = max(c.now, now) }

// Budgeted reports whether any key of the class has a budget.
func (c *Keyed) Budgeted() bool { return c.cfg.budgeted() }

// KeyBudgeted reports whether key name has a budget in the class. O(1).
func (c *Keyed) KeyBudgeted(name string) bool { return c.cfg.budgeted() && c.budgetOf(name) != nil }

// SetConserve lets Candidate serve work-conserving keys over their budget
// (the scheduler's second arbitration pass, when nothing else anywhere was
// dispatchable). Such a dispatch is not charged to the budget.
func (c *Keyed) SetConserve(on bool) { c.conserve = on }

// Conserving reports whether a key over budget could be served by
// SetConserve(true): a throttled key is work-conserving.
func (c *Keyed) Conserving() bool {
	for _, b := range c.throttled {
		if b.conserve {
			return true
		}
	}
	return false
}

// Throttled returns the number of keys waiting for their budget.
func (c *Keyed) Throttled() int { return len(c.throttled) }

// NextReady returns when the first key waiting for its budget may be served
// (Unix ns), or 0 when none waits: the caller arbitrates again then.
func (c *Keyed) NextReady() int64 {
	if len(c.throttled) == 0 {
		return 0
	}
	return max(1, c.throttled[0].ready)
}

// BudgetWait returns how long, in nanoseconds from now, a request of cost
// queued now under key name would wait for the key's budget alone: until
// the level pays for the key's requests queued ahead of it and then for
// itself (other keys and the fleet are not counted). conserving reports a
// work-conserving budget, ok whether the key has a budget at all. O(1).
func (c *Keyed) BudgetWait(now int64, name string, cost uint64) (wait int64, conserving, ok bool) {
	bg := c.budgetOf(name)
	if bg == nil {
		return 0, false, false
	}
	b := c.buckets[name]
	if b == nil {
		b = &bucket{rate: bg.Rate, burst: float64(bg.Burst), level: float64(bg.Burst), at: now}
	}
	need := b.queued + b.needFor(cost)
	lack := need - b.levelAt(now)
	if lack <= 0 {
		return 0, bg.WorkConserving, true
	}
	return int64(min(math.Ceil(lack/b.rate*1e9), math.MaxInt64/4)), bg.WorkConserving, true
}

// BudgetLevel returns key name's budget level in cost units at now, its
// rate and burst, whether it waits for its budget, and whether it has a
// budget at all.
func (c *Keyed) BudgetLevel(now int64, name string) (level, rate float64, burst uint64, throttled, ok bool) {
	bg := c.budgetOf(name)
	if bg == nil {
		return 0, 0, 0, false, false
	}
	b := c.buckets[name]
	if b == nil {
		return float64(bg.Burst), bg.Rate, bg.Burst, false, true
	}
	return b.levelAt(now), b.rate, uint64(b.burst), b.tpos >= 0, true
}

// BudgetCharged returns the cost units charged to the class's budgets so far:
// at dispatch, plus corrections above the estimate (refunds not subtracted).
func (c *Keyed) BudgetCharged() float64 { return c.charged }

// ChargeBudget applies a settlement correction (or, negative, a refund) of
// delta cost units to key name's budget at now; false when the key has no
// budget state. A key waiting for its budget waits for the new level.
// O(log K).
func (c *Keyed) ChargeBudget(now int64, name string, delta int64) bool {
	b := c.buckets[name]
	if b == nil {
		return false
	}
	b.charge(now, float64(delta))
	if delta > 0 {
		c.charged += float64(delta)
	}
	if b.tpos >= 0 {
		b.ready = now + b.wait(now, b.need)
		c.throttled.Fix(b.tpos)
	}
	return true
}

// throttle sets key k aside until its budget has the level a request of
// cost needs. k is out of the key heap.
func (c *Keyed) throttle(k *key, cost uint64) {
	b := k.x.bud
	b.need = b.needFor(cost)
	b.ready = c.now + max(1, b.wait(c.now, b.need))
	k.thr = true
	c.throttled.Push(b)
}

// unthrottle returns to the key heap every key whose budget has refilled by
// now.
func (c *Keyed) unthrottle() {
	for len(c.throttled) > 0 && c.throttled[0].ready <= c.now {
		b := c.throttled[0]
		c.throttled.Remove(0)
		b.key.thr = false
		c.enter(b.key)
	}
}

// dropThrottle takes a key that is being forgotten out of the throttled heap.
func (c *Keyed) dropThrottle(k *key) {
	if k.thr {
		c.throttled.Remove(k.x.bud.tpos)
		k.thr = false
	}
}

// reexamine returns throttled key k, whose candidate may have changed (a
// request removed or served free, a new lane head queued), to the key heap:
// the next Candidate looks at it again and throttles it again if it is
// still short. Without it the key would wait for the level its old
// candidate needed, or be served free in the work-conserving pass while its
// new candidate is within its budget.
func (c *Keyed) reexamine(k *key) {
	if k.thr {
		c.dropThrottle(k)
		c.enter(k)
	}
}

// conserveCandidate is the second pass's candidate: the best request of the
// first work-conserving throttled key (in heap order) with one dispatchable.
func (c *Keyed) conserveCandidate() bool {
	for _, b := range c.throttled {
		if !b.conserve {
			continue
		}
		if r := c.keyCandidate(b.key); r != nil {
			c.cand, c.candKey, c.candFree = r, b.key, true
			return true
		}
	}
	return false
}

// PruneBudgets forgets the budget state of keys no longer tracked whose
// bucket has refilled by now (they would start full anyway). It runs at most
// once a second of now; O(budget states) when it runs.
func (c *Keyed) PruneBudgets(now int64) {
	if now-c.pruned < 1e9 || len(c.buckets) == 0 {
		return
	}
	c.pruned = now
	for name, b := range c.buckets {
		if b.key == nil && b.levelAt(now) >= b.burst {
			delete(c.buckets, name)
		}
	}
}

// setBudgets applies a new budget configuration to every budget state, at
// c.now: a key that keeps a budget keeps its level (capped by the new burst),
// a key that loses it is freed (and leaves the throttled heap), a tracked key
// that gains one starts full.
func (c *Keyed) setBudgets() {
	for name, b := range c.buckets {
		bg := c.budgetOf(name)
		if bg != nil {
			b.set(bg, c.now)
			if b.tpos >= 0 {
				// A request larger than the new burst needs the burst only
				// (a larger burst is found at the key's return: it waits again).
				b.need = min(b.need, b.burst)
				b.ready = c.now + b.wait(c.now, b.need)
				c.throttled.Fix(b.tpos)
			}
			continue
		}
		if k := b.key; k != nil {
			c.dropThrottle(k)
			k.x.bud = nil
			c.enter(k)
		}
		delete(c.buckets, name)
	}
	for _, k := range c.byName {
		if k.budget() == nil {
			c.attachBudget(k)
		}
	}
}

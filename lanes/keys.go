package lanes

import (
	"slices"

	"fairdispatch/internal/iheap"
	"fairdispatch/request"
)

// DefaultKey is the fairness key of a request that names none (docs/protocol.md,
// Request headers: Dispatch-Fairness-Key).
const DefaultKey = "_"

// OverflowKey is the key shared by every new key of a class that already tracks
// KeyConfig.MaxKeys keys (docs/design.md, Fairness keys).
const OverflowKey = "_overflow"

// KeyConfig configures the key level of one class (docs/config.md, key_weights).
type KeyConfig struct {
	// Weights maps a key to its weight, in [0.01, 1000]. Keys not listed weigh Default.
	Weights map[string]float64
	// Default is the weight of a key not in Weights, in [0.01, 1000]; 0 means 1.
	Default float64
	// MaxKeys bounds the keys tracked at once (backlogged or owed a correction);
	// beyond it new keys share OverflowKey. 0 means no bound.
	MaxKeys int
	// Budgets maps a key to its token budget (docs/design.md, Token
	// budgets); a nil value is a key listed as unlimited. Keys not listed
	// take DefaultBudget; nil: unlimited.
	Budgets       map[string]*Budget
	DefaultBudget *Budget
	// MinShare maps a strict tier to its floor: the least share of its key's
	// cost served it gets while backlogged (docs/design.md, Tier floors).
	MinShare map[uint32]float64
	// Tally, when set, is told of every request entering and leaving the
	// class's queue (the scheduler's shedding estimate, docs/design.md,
	// Shedding).
	Tally Tally
}

// Tally follows the requests queued in a class.
type Tally interface {
	Add(r *request.Snapshot)
	Sub(r *request.Snapshot)
}

// key is one fairness key of a class: its normalized service and its own lanes.
// The struct is kept small (136 bytes on 64-bit platforms): it is the memory a
// backlogged key costs beyond its requests (docs/design.md, Fairness keys).
type key struct {
	name   string
	weight float64
	v      float64    // normalized service: cost charged / weight, plus corrections
	order  uint64     // tie-break among equal v: when the key last became backlogged
	shared queue      // the key's unpinned requests
	ready  index      // the key's pinned lanes not known to be blocked
	mark   [2]float64 // v when Keyed.Mark last ran on each slot, if backlogged then
	pos    int32      // position in Keyed.keys, -1 when out of it
	spos   int32      // position in Keyed.gated or Keyed.sblocked when sblock != 0
	n      int32      // queued requests
	owed   int32      // charged dispatches not yet settled or released
	sblock uint8      // shared head: 0 unblocked, sGated or sBlocked
	thr    bool       // waiting for its budget, in Keyed.throttled (budget.go)
	fblk   bool       // in Keyed.floorBlocked: left the key heap with only floor heads, none dispatchable
	x      *keyExt    // its budget state and tier floors; nil: unlimited, no floor
}

// keyExt is the part of a key that only budgets and tier floors use, kept
// out of key so that a key of a class using neither costs no more.
type keyExt struct {
	bud    *bucket // its budget state; nil: unlimited
	floors []floor // its tiers with a floor share (floor.go); nil without
}

// ext returns k's extension, creating it.
func (k *key) ext() *keyExt {
	if k.x == nil {
		k.x = &keyExt{}
	}
	return k.x
}

// budget returns k's budget state, or nil.
func (k *key) budget() *bucket {
	if k.x == nil {
		return nil
	}
	return k.x.bud
}

// floorList returns k's tier floors, or nil.
func (k *key) floorList() []floor {
	if k.x == nil {
		return nil
	}
	return k.x.floors
}

// Values of key.sblock.
const (
	sOpen    = iota // the shared head is not known to be blocked
	sGated          // unconstrained head refused: waits in Keyed.gated
	sBlocked        // constrained head refused: waits in Keyed.sblocked
)

// keyTarget names a pinned lane of one key.
type keyTarget struct {
	key    string
	target request.Target
}

// Keyed is one physical policy class's queue with fairness keys (docs/design.md,
// Fairness keys): the class's requests split by key, each key holding a shared
// lane and pinned lanes (see the package documentation, Lanes), and the candidate taken from the key
// with the least normalized service among keys with a dispatchable request. It
// implements drr.Queue. See the package documentation, Fairness keys.
type Keyed struct {
	check Checker
	cfg   KeyConfig

	byName   map[string]*key
	keys     keyHeap             // keys with a lane not known to be blocked, by (v, order)
	pinned   map[keyTarget]*lane // every pinned lane, of every key
	blocked  map[string][]*lane  // pinned lanes with a blocked head, by worker id
	gated    []*key              // keys whose unconstrained shared head was refused
	sblocked []*key              // keys whose constrained shared head was refused
	free     []*lane             // empty lanes kept for reuse
	spare    []*key              // forgotten keys kept for reuse

	vnow  float64 // the class's virtual time: the largest v at which a key was served
	order uint64
	// markOrder is order when Mark last ran on each slot: a key backlogged
	// now whose order is at most that has stayed backlogged since.
	markOrder [2]uint64
	marked    [2]bool

	n           int
	isl, cached uint64

	cand, last *request.Snapshot
	candKey    *key
	candFree   bool // the candidate is a throttled key's, served by SetConserve: not charged to its budget
	lastFree   bool // candFree of the last Pop
	candOwed   bool // the candidate is an owed floor head, gone before a higher tier

	// Budgets (budget.go): the time, every key's budget state that is not
	// full or whose key is tracked, the keys waiting for their budget.
	now       int64
	buckets   map[string]*bucket
	throttled throttleHeap
	charged   float64 // cost units charged to budgets, for BudgetCharged
	conserve  bool
	pruned    int64

	floorBlocked []*key // keys that left the key heap with only undispatchable floor heads (floor.go)
}

// NewKeyed returns an empty keyed class whose heads are checked with check.
func NewKeyed(check Checker, cfg KeyConfig) *Keyed {
	if cfg.Default == 0 {
		cfg.Default = 1
	}
	return &Keyed{
		check:   check,
		cfg:     cfg,
		byName:  make(map[string]*key),
		pinned:  make(map[keyTarget]*lane),
		blocked: make(map[string][]*lane),
		buckets: make(map[string]*bucket),
	}
}

// SetKeyConfig changes the key weights (a live policy change, docs/design.md,
// Live policy): every tracked key takes its new weight, which applies to the
// service charged from now on; the service a key has received so far stays.
// MaxKeys changes too, for keys tracked from now on. O(tracked keys).
func (c *Keyed) SetKeyConfig(cfg KeyConfig) {
	if cfg.Default == 0 {
		cfg.Default = 1
	}
	c.cfg = cfg
	for name, k := range c.byName {
		k.weight = c.Weight(name)
	}
	c.setBudgets()
}

// Len returns the number of queued requests.
func (c *Keyed) Len() int { return c.n }

// Empty reports whether the class holds no request.
func (c *Keyed) Empty() bool { return c.n == 0 }

// Tokens returns the queued requests' total raw ISL and cached tokens.
func (c *Keyed) Tokens() (isl, cached uint64) { return c.isl, c.cached }

// Keys returns the number of keys tracked: backlogged or owed a correction.
func (c *Keyed) Keys() int { return len(c.byName) }

// Lanes returns the number of pinned lanes, and how many of them are blocked.
func (c *Keyed) Lanes() (pinned, blocked int) {
	for _, ls := range c.blocked {
		blocked += len(ls)
	}
	return len(c.pinned), blocked
}

// Service returns key's normalized service (cost charged divided by its weight,
// plus corrections) and whether the key is tracked. O(1).
func (c *Keyed) Service(name string) (float64, bool) {
	k := c.byName[name]
	if k == nil {
		return 0, false
	}
	return k.v, true
}

// VirtualTime returns the class's virtual time: the largest normalized service
// at which a key was served. A key that becomes backlogged starts at no less.
func (c *Keyed) VirtualTime() float64 { return c.vnow }

// Weight returns the weight a key has in this class.
func (c *Keyed) Weight(name string) float64 {
	if w, ok := c.cfg.Weights[name]; ok {
		return w
	}
	return c.cfg.Default
}

func keyName(r *request.Snapshot) string {
	if r.Key == "" {
		return DefaultKey
	}
	return r.Key
}

// Push queues r under its key, in its lane. A key that was not backlogged starts
// at no less than the class's virtual time (idle time earns no credit).
// O(log n + log L + log K) for n requests in the lane, L lanes of the key and K
// keys; O(b) more when it unblocks a lane among b blocked ones of its worker.
func (c *Keyed) Push(r *request.Snapshot) {
	k := c.keyFor(keyName(r))
	if k.name != keyName(r) {
		r.Key = k.name // the class is full: r shares OverflowKey
	}
	if k.n == 0 {
		// Becoming backlogged: no credit for the idle time.
		k.v = max(k.v, c.vnow)
		c.order++
		k.order = c.order
	}
	k.n++
	c.n++
	c.isl += r.ISL
	c.cached += r.Cached
	if b := k.budget(); b != nil {
		b.queued += float64(r.DRRCost())
	}
	if c.cfg.Tally != nil {
		c.cfg.Tally.Add(r)
	}
	if !r.Pin.Pinned() {
		if c.cfg.MinShare != nil {
			if f := c.floorFor(k, r.Strict); f != nil {
				f.q.Push(r)
				c.enter(k)
				return
			}
		}
		k.shared.Push(r)
		if k.sblock != sOpen && r.Index == 0 {
			c.openShared(k) // a new head may be dispatchable where the old one was not
		}
		c.enter(k)
		return
	}
	kt := keyTarget{k.name, r.Pin}
	l := c.pinned[kt]
	if l == nil {
		l = c.newLane(kt, k)
	}
	l.q.Push(r)
	switch {
	case l.blocked && r.Index == 0:
		c.dropBlocked(l)
		k.ready.Push(l)
	case l.pos >= 0:
		k.ready.Fix(l.pos)
	case !l.blocked:
		k.ready.Push(l)
	}
	c.enter(k)
}

// keyFor returns the tracked key named name, creating it (or taking OverflowKey
// when the class is full).
func (c *Keyed) keyFor(name string) *key {
	if k := c.byName[name]; k != nil {
		return k
	}
	if c.cfg.MaxKeys > 0 && len(c.byName) >= c.cfg.MaxKeys && name != OverflowKey {
		if k := c.byName[OverflowKey]; k != nil {
			return k
		}
		name = OverflowKey
	}
	var k *key
	if n := len(c.spare); n > 0 {
		k = c.spare[n-1]
		c.spare[n-1] = nil
		c.spare = c.spare[:n-1]
	} else {
		k = &key{}
	}
	*k = key{name: name, weight: c.Weight(name), v: c.vnow, pos: -1, spos: -1, shared: k.shared[:0], ready: k.ready[:0]}
	c.byName[name] = k
	if c.cfg.budgeted() {
		c.attachBudget(k)
	}
	return k
}

// enter puts k in the key heap when it has a lane not known to be blocked. A key
// that returns after all its lanes were set aside as blocked keeps its standing:
// its service is not lifted (docs/decisions.md, Fairness keys).
func (c *Keyed) enter(k *key) {
	if k.pos < 0 && !k.thr && (len(k.ready) > 0 || (len(k.shared) > 0 && k.sblock == sOpen) || k.x != nil && floorsQueued(k)) {
		c.keys.Push(keyEntry{k.v, k.order, k})
	}
}

// leave takes k out of the key heap when it has no lane left that is not known
// to be blocked, and forgets it when it holds nothing and is owed nothing.
func (c *Keyed) leave(k *key) {
	if k.pos >= 0 && len(k.ready) == 0 && (len(k.shared) == 0 || k.sblock != sOpen) && (k.x == nil || !floorsQueued(k)) {
		c.keys.Remove(int(k.pos))
	}
	c.maybeForget(k)
}

func (c *Keyed) maybeForget(k *key) {
	if k.n > 0 || k.owed > 0 {
		return
	}
	if k.pos >= 0 {
		c.keys.Remove(int(k.pos))
	}
	if k.sblock != sOpen {
		c.openShared(k)
	}
	if b := k.budget(); b != nil {
		c.dropThrottle(k)
		b.key = nil // the state stays until it has refilled (PruneBudgets)
	}
	if k.fblk {
		i := slices.Index(c.floorBlocked, k)
		c.floorBlocked = slices.Delete(c.floorBlocked, i, i+1)
		k.fblk = false
	}
	k.x = nil
	delete(c.byName, k.name)
	k.shared, k.ready = k.shared[:0], k.ready[:0]
	if cap(k.shared) > 64 || cap(k.ready) > 64 {
		k.shared, k.ready = nil, nil // do not keep a burst's storage for ever
	}
	c.spare = append(c.spare, k)
}

// Remove takes r out of the class wherever it waits (an expired deadline, a
// hand-back). A request already charged (handed back after a refused dispatch)
// releases its key's debt. O(log n + log L + log K).
func (c *Keyed) Remove(r *request.Snapshot) {
	if r.Index < 0 {
		return
	}
	k := c.byName[keyName(r)]
	c.remove(k, r)
	if r.Charged && k.owed > 0 {
		k.owed--
	}
	c.leave(k)
}

func (c *Keyed) remove(k *key, r *request.Snapshot) {
	if c.cand == r {
		c.cand, c.candKey = nil, nil
	}
	if !r.Pin.Pinned() {
		if k.x != nil && k.x.floors != nil {
			if f := inFloor(k, r); f != nil {
				f.q.Remove(r.Index)
				if len(f.q) == 0 {
					f.credit = min(f.credit, 0)
				}
				goto counted
			}
		}
		head := r.Index == 0
		k.shared.Remove(r.Index)
		if head && k.sblock != sOpen {
			c.openShared(k) // the next head may be dispatchable
		}
	} else {
		l := c.pinned[keyTarget{k.name, r.Pin}]
		l.q.Remove(r.Index)
		c.settleLane(k, l)
	}
counted:
	k.n--
	c.n--
	c.isl -= r.ISL
	c.cached -= r.Cached
	if b := k.budget(); b != nil {
		b.queued = max(0, b.queued-float64(r.DRRCost()))
	}
	if c.cfg.Tally != nil {
		c.cfg.Tally.Sub(r)
	}
}

// Candidate returns the DRR cost of the class candidate (docs/design.md, Fairness
// keys): among the keys with a dispatchable request, the one with the least
// normalized service supplies its best dispatchable request. Keys found with
// nothing dispatchable leave the key heap, keeping their service.
// Cost: one Checker call for the gated keys, plus per key examined the calls of
// the lanes' Candidate and O(log K) when it leaves the heap.
func (c *Keyed) Candidate() (uint64, bool) {
	c.cand, c.candKey, c.candFree, c.candOwed = nil, nil, false, false
	if len(c.throttled) > 0 {
		c.unthrottle()
	}
	if len(c.gated) > 0 && c.check.Dispatchable(c.gated[0].shared[0]) {
		// The class gate opened: every unconstrained shared head may go again.
		for len(c.gated) > 0 {
			k := c.gated[len(c.gated)-1]
			c.openShared(k)
			c.enter(k)
		}
	}
	if len(c.floorBlocked) > 0 && c.floorsOpen(c.floorBlocked[0]) {
		c.reopenFloors()
	}
	for len(c.keys) > 0 {
		k := c.keys[0].k
		if r := c.keyCandidate(k); r != nil {
			if b := k.budget(); b != nil && b.levelAt(c.now) < b.needFor(r.DRRCost()) {
				c.keys.Remove(0)
				c.throttle(k, r.DRRCost()) // over budget: it waits, others go on
				continue
			}
			c.cand, c.candKey = r, k
			return r.DRRCost(), true
		}
		c.keys.Remove(0)
		if k.x != nil && k.x.floors != nil && !k.fblk && floorsQueued(k) {
			k.fblk = true
			c.floorBlocked = append(c.floorBlocked, k)
		}
	}
	if c.conserve && c.conserveCandidate() {
		return c.cand.DRRCost(), true
	}
	return 0, false
}

// keyCandidate returns k's best dispatchable request, or nil; lanes found
// blocked are set aside on the way.
func (c *Keyed) keyCandidate(k *key) *request.Snapshot {
	var best *request.Snapshot
	if len(k.shared) > 0 && k.sblock == sOpen {
		h := k.shared[0]
		if c.check.Dispatchable(h) {
			best = h
		} else if h.Constrained() {
			k.sblock, k.spos = sBlocked, int32(len(c.sblocked))
			c.sblocked = append(c.sblocked, k)
		} else {
			k.sblock, k.spos = sGated, int32(len(c.gated))
			c.gated = append(c.gated, k)
		}
	}
	for len(k.ready) > 0 {
		l := k.ready[0]
		h := l.q[0]
		if best != nil && best.Before(h) {
			break
		}
		if c.check.Dispatchable(h) {
			best = h
			break
		}
		k.ready.Remove(0)
		l.blocked = true
		c.blocked[l.target.Worker] = append(c.blocked[l.target.Worker], l)
	}
	if k.x != nil && k.x.floors != nil {
		best = c.floorCandidate(k, best)
	}
	return best
}

// Pop removes the candidate found by the last Candidate call and charges its
// key cost / weight. A request's first charge makes its key owed a settlement
// (kept in memory) until [Keyed.Settle] or [Keyed.Release].
func (c *Keyed) Pop() {
	r, k := c.cand, c.candKey
	cost := r.DRRCost()
	var from *floor
	if k.x != nil && k.x.floors != nil {
		from = inFloor(k, r)
	}
	c.remove(k, r)
	if k.x != nil && k.x.floors != nil {
		chargeFloors(k, r, from, float64(r.Cost), c.candOwed)
	}
	if b := k.budget(); b != nil && !c.candFree {
		b.charge(c.now, float64(cost))
		c.charged += float64(cost)
	}
	c.lastFree = c.candFree
	c.vnow = max(c.vnow, k.v) // the v at which k was served
	c.setV(k, k.v+float64(cost)/k.weight)
	if cost > 0 {
		k.owed++
	}
	c.leave(k)
	c.last = r
}

// setV sets k's normalized service, and its place in the key heap.
func (c *Keyed) setV(k *key, v float64) {
	k.v = v
	if k.pos >= 0 {
		c.keys[k.pos].v = v
		c.keys.Fix(int(k.pos))
	}
}

// Last returns the request removed by the last Pop.
func (c *Keyed) Last() *request.Snapshot { return c.last }

// LastFree reports whether the last Pop served a key over its budget in the
// work-conserving pass (SetConserve), so that its budget was not charged.
func (c *Keyed) LastFree() bool { return c.lastFree }

// Settle applies a settlement correction of delta cost units (actual minus
// charged) to key name's service and releases one debt of the key
// (docs/design.md, Cost settlement). It returns false when the key is not
// tracked (nothing was owed). O(log K).
func (c *Keyed) Settle(name string, delta int64) bool {
	k := c.byName[name]
	if k == nil {
		return false
	}
	c.setV(k, k.v+float64(delta)/k.weight)
	if k.owed > 0 {
		k.owed--
	}
	c.maybeForget(k)
	return true
}

// Release drops one debt of key name without a correction (the record expired,
// or the dispatch failed). O(log K).
func (c *Keyed) Release(name string) { c.Settle(name, 0) }

// Recheck returns the blocked lanes of worker id to their keys, and every key
// whose constrained shared head was refused (any worker's change may help it).
// O((b + s) log K) for b lanes and s keys.
func (c *Keyed) Recheck(id string) {
	c.openSBlocked()
	c.reopenFloors()
	ls := c.blocked[id]
	if len(ls) == 0 {
		return
	}
	delete(c.blocked, id)
	for _, l := range ls {
		l.blocked = false
		l.owner.ready.Push(l)
		c.enter(l.owner)
	}
}

// RecheckAll returns every blocked lane and shared head to its key.
func (c *Keyed) RecheckAll() {
	for id := range c.blocked {
		c.Recheck(id)
	}
	c.openSBlocked()
	c.reopenFloors()
	for len(c.gated) > 0 {
		k := c.gated[len(c.gated)-1]
		c.openShared(k)
		c.enter(k)
	}
}

func (c *Keyed) openSBlocked() {
	for len(c.sblocked) > 0 {
		k := c.sblocked[len(c.sblocked)-1]
		c.openShared(k)
		c.enter(k)
	}
}

// openShared takes k's shared lane out of the gated or blocked list.
func (c *Keyed) openShared(k *key) {
	list := &c.gated
	if k.sblock == sBlocked {
		list = &c.sblocked
	}
	l := *list
	i, last := int(k.spos), len(l)-1
	l[i] = l[last]
	l[i].spos = int32(i)
	l[last] = nil
	*list = l[:last]
	k.sblock, k.spos = sOpen, -1
	if k.pos < 0 && len(k.shared) > 0 {
		c.enter(k)
	}
}

// Each calls fn for every queued request, in no particular order, until fn returns false.
func (c *Keyed) Each(fn func(*request.Snapshot) bool) {
	for _, k := range c.byName {
		for _, r := range k.shared {
			if !fn(r) {
				return
			}
		}
		for i := range k.floorList() {
			for _, r := range k.x.floors[i].q {
				if !fn(r) {
					return
				}
			}
		}
	}
	for _, l := range c.pinned {
		for _, r := range l.q {
			if !fn(r) {
				return
			}
		}
	}
}

// EachKey calls fn for every tracked key with its normalized service, weight and
// queued requests, in no particular order, until fn returns false.
func (c *Keyed) EachKey(fn func(name string, service, weight float64, queued int) bool) {
	for _, k := range c.byName {
		if !fn(k.name, k.v, k.weight, int(k.n)) {
			return
		}
	}
}

// Mark starts a measurement window on slot (0 or 1; docs/design.md, Key
// fairness window): it records every backlogged key's normalized service, for
// [Keyed.EachSince]. O(K) for K tracked keys; nothing on the dispatch path.
func (c *Keyed) Mark(slot int) {
	for _, k := range c.byName {
		if k.n > 0 {
			k.mark[slot] = k.v
		}
	}
	c.markOrder[slot], c.marked[slot] = c.order, true
}

// EachSince calls fn, until fn returns false, for every key that has stayed
// backlogged since the last Mark(slot): gained is its normalized service
// gained since then (cost charged divided by its weight, plus settlement
// corrections). A key that became backlogged after the mark, even again, is
// left out: its service would count a lift to the virtual time, not service.
// Nothing is called before the first Mark(slot). O(K).
func (c *Keyed) EachSince(slot int, fn func(name string, gained, weight float64, queued int) bool) {
	if !c.marked[slot] {
		return
	}
	for _, k := range c.byName {
		if k.n > 0 && k.order <= c.markOrder[slot] {
			if !fn(k.name, k.v-k.mark[slot], k.weight, int(k.n)) {
				return
			}
		}
	}
}

func (c *Keyed) newLane(kt keyTarget, k *key) *lane {
	var l *lane
	if n := len(c.free); n > 0 {
		l = c.free[n-1]
		c.free[n-1] = nil
		c.free = c.free[:n-1]
	} else {
		l = &lane{}
	}
	l.target, l.pos, l.blocked, l.owner = kt.target, -1, false, k
	c.pinned[kt] = l
	return l
}

// settleLane updates l's place in k's index after its head changed, and drops it
// when empty.
func (c *Keyed) settleLane(k *key, l *lane) {
	if len(l.q) > 0 {
		if l.pos >= 0 {
			k.ready.Fix(l.pos)
		}
		return
	}
	if l.pos >= 0 {
		k.ready.Remove(l.pos)
	}
	if l.blocked {
		c.dropBlocked(l)
	}
	delete(c.pinned, keyTarget{k.name, l.target})
	l.owner = nil
	c.free = append(c.free, l)
}

// dropBlocked takes l out of the blocked set.
func (c *Keyed) dropBlocked(l *lane) {
	ls := c.blocked[l.target.Worker]
	for i, x := range ls {
		if x == l {
			ls[i] = ls[len(ls)-1]
			ls[len(ls)-1] = nil
			ls = ls[:len(ls)-1]
			break
		}
	}
	if len(ls) == 0 {
		delete(c.blocked, l.target.Worker)
	} else {
		c.blocked[l.target.Worker] = ls
	}
	l.blocked = false
}

// keyHeap is a heap of keys ordered by (v, order). Each entry carries a copy of
// its key's v and order, so that sifting reads the heap's own array rather than
// the keys; each key knows its position (key.pos), -1 when it is not in the
// heap. While a key is in the heap, Keyed.setV keeps both copies of v equal.
type keyHeap = iheap.Heap[keyEntry, byService]

type keyEntry struct {
	v     float64
	order uint64
	k     *key
}

type byService struct{}

func (byService) Less(a, b keyEntry) bool {
	if a.v != b.v {
		return a.v < b.v
	}
	return a.order < b.order
}

func (byService) SetIndex(e keyEntry, i int) { e.k.pos = int32(i) }

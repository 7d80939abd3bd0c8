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
				if r.Index == 0 {
					c.reexamine(k) // a new head: the key's candidate may change
				}
				c.enter(k)
				return
			}
		}
		k.shared.Push(r)
		if k.sblock != sOpen && r.Index == 0 {
			c.openShared(k) // a new head may be dispatchable where the old one was not
		}
		if r.Index == 0 {
			c.reexamine(k)
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
	if r.Index == 0 {
		c.reexamine(k)
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
	k := reuse(&c.spare)
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
// hand-back). A request that paid its cost at arbitration (Paid: handed back
// after a refused dispatch) releases its key's debt for that dispatch; one
// charged without paying (dispatched at arrival, then refused) owes none.
// O(log n + log L + log K).
func (c *Keyed) Remove(r *request.Snapshot) {
	if r.Index < 0 {
		return
	}
	k := c.byName[keyName(r)]
	c.remove(k, r)
	if r.Paid && k.owed > 0 {
		k.owed--
	}
	c.reexamine(k) // its candidate may have gone
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

// reuse takes the last entry off a free list, or returns a new zero T when
// the list is empty; the caller sets every field it reads.
func reuse[T any](free *[]*T) *T {
	n := len(*free)
	if n == 0 {
		return new(T)
	}
	x := (*free)[n-1]
	(*free)[n-1] = nil
	*free = (*free)[:n-1]
	return x
}

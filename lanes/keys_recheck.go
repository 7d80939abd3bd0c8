package lanes

// Blocked lanes and shared heads, and their return to their keys when a
// worker changes (docs/design.md, When queues are re-checked).

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

func (c *Keyed) newLane(kt keyTarget, k *key) *lane {
	l := reuse(&c.free)
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

package lanes

import "fairdispatch/request"

// queue is a binary heap of requests ordered by request.Snapshot.Before. Each
// request knows its position (Snapshot.Index), so removal is O(log n).
type queue []*request.Snapshot

func (q queue) head() *request.Snapshot { return q[0] }

func (q *queue) push(r *request.Snapshot) {
	r.Index = len(*q)
	*q = append(*q, r)
	q.up(r.Index)
}

// remove removes the request at position i and returns it.
func (q *queue) remove(i int) *request.Snapshot {
	h := *q
	n := len(h) - 1
	r := h[i]
	if i != n {
		h.swap(i, n)
	}
	h[n] = nil
	*q = h[:n]
	if i != n {
		if !q.down(i) {
			q.up(i)
		}
	}
	r.Index = -1
	return r
}

func (q queue) swap(i, j int) {
	q[i], q[j] = q[j], q[i]
	q[i].Index = i
	q[j].Index = j
}

func (q queue) up(j int) {
	for j > 0 {
		i := (j - 1) / 2
		if !q[j].Before(q[i]) {
			break
		}
		q.swap(i, j)
		j = i
	}
}

func (q queue) down(i0 int) bool {
	i, n := i0, len(q)
	for {
		j := 2*i + 1
		if j >= n {
			break
		}
		if k := j + 1; k < n && q[k].Before(q[j]) {
			j = k
		}
		if !q[j].Before(q[i]) {
			break
		}
		q.swap(i, j)
		i = j
	}
	return i > i0
}

// index is a binary heap of lanes ordered by their heads; each lane knows its
// position (lane.pos), -1 when it is not in the index.
type index []*lane

func (x index) less(i, j int) bool { return x[i].q.head().Before(x[j].q.head()) }

func (x index) swap(i, j int) {
	x[i], x[j] = x[j], x[i]
	x[i].pos = i
	x[j].pos = j
}

func (x *index) push(l *lane) {
	l.pos = len(*x)
	*x = append(*x, l)
	x.up(l.pos)
}

func (x *index) remove(i int) {
	h := *x
	n := len(h) - 1
	l := h[i]
	if i != n {
		h.swap(i, n)
	}
	h[n] = nil
	*x = h[:n]
	if i != n {
		x.fix(i)
	}
	l.pos = -1
}

func (x index) fix(i int) {
	if !x.down(i) {
		x.up(i)
	}
}

func (x index) up(j int) {
	for j > 0 {
		i := (j - 1) / 2
		if !x.less(j, i) {
			break
		}
		x.swap(i, j)
		j = i
	}
}

func (x index) down(i0 int) bool {
	i, n := i0, len(x)
	for {
		j := 2*i + 1
		if j >= n {
			break
		}
		if k := j + 1; k < n && x.less(k, j) {
			j = k
		}
		if !x.less(j, i) {
			break
		}
		x.swap(i, j)
		i = j
	}
	return i > i0
}

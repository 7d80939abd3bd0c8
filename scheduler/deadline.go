package scheduler

import "fairdispatch/request"

// deadlines is a min-heap of queued requests by Deadline; each request knows
// its position (Snapshot.DeadlineIndex).
type deadlines []*request.Snapshot

func (d *deadlines) push(r *request.Snapshot) {
	r.DeadlineIndex = len(*d)
	*d = append(*d, r)
	d.up(r.DeadlineIndex)
}

func (d *deadlines) remove(r *request.Snapshot) {
	i := r.DeadlineIndex
	if i < 0 {
		return
	}
	h := *d
	n := len(h) - 1
	if i != n {
		h.swap(i, n)
	}
	h[n] = nil
	*d = h[:n]
	if i != n && !d.down(i) {
		d.up(i)
	}
	r.DeadlineIndex = -1
}

func (d deadlines) swap(i, j int) {
	d[i], d[j] = d[j], d[i]
	d[i].DeadlineIndex = i
	d[j].DeadlineIndex = j
}

func (d deadlines) up(j int) {
	for j > 0 {
		i := (j - 1) / 2
		if d[i].Deadline <= d[j].Deadline {
			break
		}
		d.swap(i, j)
		j = i
	}
}

func (d deadlines) down(i0 int) bool {
	i, n := i0, len(d)
	for {
		j := 2*i + 1
		if j >= n {
			break
		}
		if k := j + 1; k < n && d[k].Deadline < d[j].Deadline {
			j = k
		}
		if d[i].Deadline <= d[j].Deadline {
			break
		}
		d.swap(i, j)
		i = j
	}
	return i > i0
}

package metrics

// WorkerLoad is what the per-worker gauges show of one live worker.
type WorkerLoad struct {
	// ID is the worker id (label worker).
	ID string
	// BookedPrefill is the prefill tokens booked by dispatches its last report
	// does not count yet, summed over its ranks.
	BookedPrefill uint64
	// ReportedPrefill is active_prefill_tokens of its last report, summed over
	// its ranks.
	ReportedPrefill uint64
	// Overloaded reports whether the worker is overloaded for selection (docs/design.md, Worker selection).
	Overloaded bool
}

// SetWorkers replaces the per-worker series with ws, the whole set of live
// workers: it sets the three gauges of each, deletes the series of every worker
// of the previous call that is not in ws, and sets the live worker gauge to the
// number of distinct ids. If an id appears twice, the last entry wins. Cost
// O(len(ws) + previous workers). It is meant for the snapshot the queue actor
// publishes, not for the per-request path.
func (m *Metrics) SetWorkers(ws []WorkerLoad) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, w := range ws {
		m.booked.WithLabelValues(w.ID).Set(float64(w.BookedPrefill))
		m.reported.WithLabelValues(w.ID).Set(float64(w.ReportedPrefill))
		m.overloaded.WithLabelValues(w.ID).Set(b2f(w.Overloaded))
		m.seen[w.ID] = struct{}{}
	}
	for id := range m.workers {
		if _, ok := m.seen[id]; !ok {
			m.booked.DeleteLabelValues(id)
			m.reported.DeleteLabelValues(id)
			m.overloaded.DeleteLabelValues(id)
		}
	}
	clear(m.workers)
	m.workers, m.seen = m.seen, m.workers
	m.liveWorkers.Set(float64(len(m.workers)))
}

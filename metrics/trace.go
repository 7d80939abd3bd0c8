package metrics

import "github.com/prometheus/client_golang/prometheus"

// Trace counts the records of the traffic trace (recorder.Counters).
type Trace struct {
	recorded prometheus.Counter
	dropped  prometheus.Counter
}

// NewTrace builds the trace counters and registers them on reg (nil: none).
func NewTrace(reg prometheus.Registerer) *Trace {
	t := &Trace{
		recorded: prometheus.NewCounter(prometheus.CounterOpts{Namespace: namespace, Name: "trace_records_total",
			Help: "Trace records written (--record, --record-stream)."}),
		dropped: prometheus.NewCounter(prometheus.CounterOpts{Namespace: namespace, Name: "trace_records_dropped_total",
			Help: "Trace records dropped because the trace writer fell behind the queue actor (its buffer was full)."}),
	}
	if reg != nil {
		reg.MustRegister(t.recorded, t.dropped)
	}
	return t
}

// TraceRecorded counts one record written.
func (t *Trace) TraceRecorded() { t.recorded.Inc() }

// TraceDropped counts one record dropped.
func (t *Trace) TraceDropped() { t.dropped.Inc() }

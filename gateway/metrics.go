package gateway

import (
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the gateway's Prometheus series (docs/config.md, Gateway:
// Health and metrics). Every label value comes from the configuration or a fixed set:
// tenant is a tenant name of the file (bounded by it; "" before the key is
// known), class a class a tenant may use, model a model of the file ("" for
// an unknown one), status an HTTP status code. No label takes a value a
// client chose.
type metrics struct {
	requests   *prometheus.CounterVec   // tenant, class, model, status
	ttfc       *prometheus.HistogramVec // class
	queueWait  *prometheus.HistogramVec // class
	duration   *prometheus.HistogramVec // class, stream
	tokens     *prometheus.CounterVec   // tenant, class, kind
	inflight   *prometheus.GaugeVec     // tenant
	broken     prometheus.Counter
	clientGone prometheus.Counter
	duplicates prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) *metrics {
	// Up to 30 min: a long response streams for minutes, and the request
	// timeout is 10 min by default.
	lat := []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800}
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "fairdispatch_gateway_requests_total",
			Help: "Requests answered, by tenant, class, model and HTTP status."}, []string{"tenant", "class", "model", "status"}),
		ttfc: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "fairdispatch_gateway_time_to_first_chunk_seconds",
			Help: "From the request's arrival to its first response chunk from the worker.", Buckets: lat}, []string{"class"}),
		queueWait: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "fairdispatch_gateway_queue_wait_seconds",
			Help: "Time from publication to a worker's acceptance (the dispatched outcome's queued_ms).", Buckets: lat}, []string{"class"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "fairdispatch_gateway_request_duration_seconds",
			Help: "From the request's arrival to its last byte.", Buckets: lat}, []string{"class", "stream"}),
		tokens: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "fairdispatch_gateway_tokens_total",
			Help: "Tokens by kind: prompt (the engine's count), cached, completion, and estimated (the gateway's input count sent as Dispatch-ISL-Tokens)."},
			[]string{"tenant", "class", "kind"}),
		inflight: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "fairdispatch_gateway_requests_in_flight",
			Help: "Requests in flight on this gateway, by tenant."}, []string{"tenant"}),
		broken: prometheus.NewCounter(prometheus.CounterOpts{Name: "fairdispatch_gateway_responses_broken_total",
			Help: "Responses that broke off after their first chunk (a gap, a lost chunk, silence)."}),
		clientGone: prometheus.NewCounter(prometheus.CounterOpts{Name: "fairdispatch_gateway_client_gone_total",
			Help: "Requests whose client went away before the end; each was cancelled."}),
		duplicates: prometheus.NewCounter(prometheus.CounterOpts{Name: "fairdispatch_gateway_duplicates_total",
			Help: "Requests JetStream deduplicated (a retry with the same Idempotency-Key)."}),
	}
	reg.MustRegister(m.requests, m.ttfc, m.queueWait, m.duration, m.tokens, m.inflight, m.broken, m.clientGone, m.duplicates)
	return m
}

func (m *metrics) answered(tenant, class, model string, status int) {
	m.requests.WithLabelValues(tenant, class, model, strconv.Itoa(status)).Inc()
}

func (m *metrics) since(h *prometheus.HistogramVec, class string, t time.Time) {
	h.WithLabelValues(class).Observe(time.Since(t).Seconds())
}

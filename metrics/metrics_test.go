package metrics

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"

	"fairdispatch/request"
)

var testClasses = []string{"premium", "regular"}

func newTest(t testing.TB) (*Metrics, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	return New(reg, testClasses), reg
}

func TestNamesTypesAndLabels(t *testing.T) {
	m, reg := newTest(t)
	m.SetWorkers([]WorkerLoad{{ID: "w1"}}) // so the per-worker families are gathered
	m.Preempted("batch", "asked")
	m.SetClass(0, ClassState{Budgeted: true, ThrottledKeys: 1, BudgetCharged: 10})
	mfs := gather(t, reg)
	tests := []struct {
		name   string
		typ    string
		labels []string
	}{
		{"fairdispatch_pending_requests", "GAUGE", []string{"class"}},
		{"fairdispatch_pending_isl_tokens", "GAUGE", []string{"class"}},
		{"fairdispatch_pending_cached_tokens", "GAUGE", []string{"class"}},
		{"fairdispatch_drr_deficit", "GAUGE", []string{"class"}},
		{"fairdispatch_fairness_keys", "GAUGE", []string{"class"}},
		{"fairdispatch_key_fairness_jain", "GAUGE", []string{"class"}},
		{"fairdispatch_key_share_max_over_weight", "GAUGE", []string{"class"}},
		{"fairdispatch_key_share_min_over_weight", "GAUGE", []string{"class"}},
		{"fairdispatch_dispatched_total", "COUNTER", []string{"class"}},
		{"fairdispatch_rejected_total", "COUNTER", []string{"class", "reason"}},
		{"fairdispatch_queue_wait_seconds", "HISTOGRAM", []string{"class"}},
		{"fairdispatch_dead_letters_total", "COUNTER", []string{"class"}},
		{"fairdispatch_handshakes_total", "COUNTER", []string{"outcome"}},
		{"fairdispatch_load_reports_dropped_total", "COUNTER", []string{"reason"}},
		{"fairdispatch_dispatch_send_failures_total", "COUNTER", []string{"fault"}},
		{"fairdispatch_dead_letter_failures_total", "COUNTER", []string{"action"}},
		{"fairdispatch_dead_letter_retries_total", "COUNTER", nil},
		{"fairdispatch_lease_renewal_failures_total", "COUNTER", nil},
		{"fairdispatch_worker_booked_prefill_tokens", "GAUGE", []string{"worker"}},
		{"fairdispatch_worker_reported_prefill_tokens", "GAUGE", []string{"worker"}},
		{"fairdispatch_worker_overloaded", "GAUGE", []string{"worker"}},
		{"fairdispatch_live_workers", "GAUGE", nil},
		{"fairdispatch_held_messages", "GAUGE", nil},
		{"fairdispatch_redelivered_messages_total", "COUNTER", nil},
		{"fairdispatch_progress_acks_total", "COUNTER", nil},
		{"fairdispatch_worker_id_conflicts_total", "COUNTER", nil},
		{"fairdispatch_load_reports_coalesced_total", "COUNTER", nil},
		{"fairdispatch_nats_connected", "GAUGE", nil},
		{"fairdispatch_startup_grace_over", "GAUGE", nil},
		{"fairdispatch_leader", "GAUGE", nil},
		{"fairdispatch_unknown_class_tokens_total", "COUNTER", nil},
		{"fairdispatch_policy_revision", "GAUGE", nil},
		{"fairdispatch_policy_refused_total", "COUNTER", nil},
		{"fairdispatch_policy_applied_total", "COUNTER", nil},
		{"fairdispatch_settlements_total", "COUNTER", []string{"outcome"}},
		{"fairdispatch_settlement_correction_tokens_total", "COUNTER", []string{"direction"}},
		{"fairdispatch_cancels_total", "COUNTER", []string{"where"}},
		{"fairdispatch_preemptions_total", "COUNTER", []string{"class", "event"}},
		{"fairdispatch_budget_throttled_keys", "GAUGE", []string{"class"}},
		{"fairdispatch_budget_tokens_charged_total", "COUNTER", []string{"class"}},
		{"fairdispatch_oldest_queued_seconds", "GAUGE", []string{"class"}},
	}
	for _, tt := range tests {
		mf := mfs[tt.name]
		if mf == nil {
			t.Errorf("%s: not gathered", tt.name)
			continue
		}
		if got := mf.GetType().String(); got != tt.typ {
			t.Errorf("%s: got type %s, want %s", tt.name, got, tt.typ)
		}
		var got []string
		for _, lp := range mf.GetMetric()[0].GetLabel() {
			got = append(got, lp.GetName())
		}
		if len(got) != len(tt.labels) {
			t.Errorf("%s: got labels %v, want %v", tt.name, got, tt.labels)
			continue
		}
		for i := range got {
			if got[i] != tt.labels[i] {
				t.Errorf("%s: got labels %v, want %v", tt.name, got, tt.labels)
				break
			}
		}
	}
	if got, want := len(mfs), len(tests); got != want {
		t.Errorf("families: got %d, want %d", got, want)
	}

	problems, err := promlint.NewWithMetricFamilies(collect(mfs)).Lint()
	if err != nil {
		t.Fatalf("lint: %v", err)
	}
	for _, p := range problems {
		t.Errorf("lint %s: %s", p.Metric, p.Text)
	}
}

func TestPreinitialisedSeries(t *testing.T) {
	_, reg := newTest(t)
	for _, c := range append([]string{""}, testClasses...) {
		for _, code := range request.Codes {
			if got := value(t, reg, "fairdispatch_rejected_total", "class", c, "reason", string(code)); got != 0 {
				t.Errorf("rejected{class=%q,reason=%q}: got %v, want 0", c, code, got)
			}
		}
		if got := value(t, reg, "fairdispatch_dead_letters_total", "class", c); got != 0 {
			t.Errorf("dead_letters{class=%q}: got %v, want 0", c, got)
		}
	}
	tests := []struct {
		name string
		want int
	}{
		{"fairdispatch_rejected_total", (len(testClasses) + 1) * len(request.Codes)},
		{"fairdispatch_dead_letters_total", len(testClasses) + 1},
		{"fairdispatch_dispatched_total", len(testClasses)},
		{"fairdispatch_pending_requests", len(testClasses)},
		{"fairdispatch_queue_wait_seconds", len(testClasses)},
		{"fairdispatch_handshakes_total", 5},
		{"fairdispatch_load_reports_dropped_total", 7},
		{"fairdispatch_dispatch_send_failures_total", 3},
		{"fairdispatch_dead_letter_failures_total", 3},
		{"fairdispatch_worker_booked_prefill_tokens", 0},
	}
	for _, tt := range tests {
		if got := count(t, reg, tt.name); got != tt.want {
			t.Errorf("%s: got %d series, want %d", tt.name, got, tt.want)
		}
	}
	for _, o := range []string{"accepted", "refused", "no_responders", "timeout", "late"} {
		value(t, reg, "fairdispatch_handshakes_total", "outcome", o)
	}
	for _, r := range []string{"parse", "mismatch", "rank", "invalid", "capacity", "instance", "overflow"} {
		value(t, reg, "fairdispatch_load_reports_dropped_total", "reason", r)
	}
}

func TestCountersIncrement(t *testing.T) {
	m, reg := newTest(t)
	m.Dispatched(0)
	m.Dispatched(0)
	m.Dispatched(1)
	m.Dispatched(7)  // ignored
	m.Dispatched(-1) // ignored
	m.Rejected(1, request.QueueFull)
	m.Rejected(Unresolved, request.BadRequest)
	m.Rejected(99, request.BadRequest) // out of range counts as unresolved
	m.Rejected(0, "future_code")
	m.DeadLetter(Unresolved)
	m.DeadLetter(0)
	m.Handshake(OutcomeAccepted)
	m.Handshake(OutcomeLate)
	m.Handshake(OutcomeLate)
	m.LoadDropped(DropMismatch)
	m.Redelivered()
	m.ProgressAck()
	m.ProgressAck()

	checkValues(t, reg, []want{
		{"fairdispatch_dispatched_total", []string{"class", "premium"}, 2},
		{"fairdispatch_dispatched_total", []string{"class", "regular"}, 1},
		{"fairdispatch_rejected_total", []string{"class", "regular", "reason", "queue_full"}, 1},
		{"fairdispatch_rejected_total", []string{"class", "premium", "reason", "queue_full"}, 0},
		{"fairdispatch_rejected_total", []string{"class", "", "reason", "bad_request"}, 2},
		{"fairdispatch_rejected_total", []string{"class", "premium", "reason", "future_code"}, 1},
		{"fairdispatch_dead_letters_total", []string{"class", ""}, 1},
		{"fairdispatch_dead_letters_total", []string{"class", "premium"}, 1},
		{"fairdispatch_dead_letters_total", []string{"class", "regular"}, 0},
		{"fairdispatch_handshakes_total", []string{"outcome", "accepted"}, 1},
		{"fairdispatch_handshakes_total", []string{"outcome", "late"}, 2},
		{"fairdispatch_handshakes_total", []string{"outcome", "timeout"}, 0},
		{"fairdispatch_load_reports_dropped_total", []string{"reason", "mismatch"}, 1},
		{"fairdispatch_load_reports_dropped_total", []string{"reason", "parse"}, 0},
		{"fairdispatch_redelivered_messages_total", nil, 1},
		{"fairdispatch_progress_acks_total", nil, 2},
	})
}

func TestQueueWait(t *testing.T) {
	m, reg := newTest(t)
	m.QueueWait(0, 0.0005)
	m.QueueWait(0, 2)
	m.QueueWait(0, -3) // clock skew: counted as 0
	m.QueueWait(5, 1)  // ignored

	h := find(t, reg, "fairdispatch_queue_wait_seconds", "class", "premium").GetHistogram()
	if got, want := h.GetSampleCount(), uint64(3); got != want {
		t.Errorf("count: got %d, want %d", got, want)
	}
	if got, want := h.GetSampleSum(), 2.0005; got != want {
		t.Errorf("sum: got %v, want %v", got, want)
	}
	for _, b := range h.GetBucket() {
		want := uint64(0)
		switch {
		case b.GetUpperBound() >= 2:
			want = 3
		case b.GetUpperBound() >= 0.001:
			want = 2
		}
		if got := b.GetCumulativeCount(); got != want {
			t.Errorf("bucket le=%v: got %d, want %d", b.GetUpperBound(), got, want)
		}
	}
	if got := find(t, reg, "fairdispatch_queue_wait_seconds", "class", "regular").GetHistogram().GetSampleCount(); got != 0 {
		t.Errorf("regular count: got %d, want 0", got)
	}

	if got, want := len(QueueWaitBuckets), 21; got != want {
		t.Errorf("buckets: got %d, want %d", got, want)
	}
	if got := QueueWaitBuckets[0]; got != 0.001 {
		t.Errorf("first bucket: got %v, want 0.001", got)
	}
	// Minutes of backlog land in buckets of their own, well past the 60 s
	// queue-age alert.
	if last := QueueWaitBuckets[len(QueueWaitBuckets)-1]; last < 900 || last > 1800 {
		t.Errorf("last bucket: got %v, want about 17 minutes", last)
	}
}

func TestGauges(t *testing.T) {
	m, reg := newTest(t)
	m.SetClass(1, ClassState{Requests: 3, ISLTokens: 3000, CachedTokens: 1200, Deficit: 512})
	m.SetClass(9, ClassState{Requests: 1}) // ignored
	m.SetHeld(42)
	m.SetConnected(true)
	m.SetGraceOver(true)
	m.SetGraceOver(false)
	checkValues(t, reg, []want{
		{"fairdispatch_pending_requests", []string{"class", "regular"}, 3},
		{"fairdispatch_pending_requests", []string{"class", "premium"}, 0},
		{"fairdispatch_pending_isl_tokens", []string{"class", "regular"}, 3000},
		{"fairdispatch_pending_cached_tokens", []string{"class", "regular"}, 1200},
		{"fairdispatch_drr_deficit", []string{"class", "regular"}, 512},
		{"fairdispatch_held_messages", nil, 42},
		{"fairdispatch_nats_connected", nil, 1},
		{"fairdispatch_startup_grace_over", nil, 0},
	})
}

func TestSetClassesFollowsThePolicy(t *testing.T) {
	m, reg := newTest(t)
	m.SetClass(0, ClassState{Requests: 5})
	m.Dispatched(0)
	m.SetClasses([]string{"gold", "regular"}) // premium removed, gold added at index 0
	m.SetClass(0, ClassState{Requests: 7})
	m.Dispatched(0)
	m.Dispatched(1)
	m.Rejected(0, request.QueueFull)
	m.PolicyApplied(4)
	m.PolicyRefused()
	checkValues(t, reg, []want{
		{"fairdispatch_pending_requests", []string{"class", "gold"}, 7},
		{"fairdispatch_dispatched_total", []string{"class", "gold"}, 1},
		{"fairdispatch_dispatched_total", []string{"class", "premium"}, 1}, // a counter stays
		{"fairdispatch_dispatched_total", []string{"class", "regular"}, 1},
		{"fairdispatch_rejected_total", []string{"class", "gold", "reason", "queue_full"}, 1},
		{"fairdispatch_policy_revision", nil, 4},
		{"fairdispatch_policy_refused_total", nil, 1},
		{"fairdispatch_policy_applied_total", nil, 1},
	})
	for _, mf := range gather(t, reg) {
		if mf.GetName() != "fairdispatch_pending_requests" {
			continue
		}
		for _, s := range mf.GetMetric() {
			if s.GetLabel()[0].GetValue() == "premium" {
				t.Errorf("the pending gauge of removed class premium is still exported")
			}
		}
	}
}

var workerFamilies = []string{
	"fairdispatch_worker_booked_prefill_tokens",
	"fairdispatch_worker_reported_prefill_tokens",
	"fairdispatch_worker_overloaded",
}

func TestSetWorkersDeletesGone(t *testing.T) {
	m, reg := newTest(t)
	m.SetWorkers([]WorkerLoad{
		{ID: "w1", BookedPrefill: 100, ReportedPrefill: 1000, Overloaded: true},
		{ID: "w2", BookedPrefill: 5},
	})
	tests := []struct {
		name, worker string
		want         float64
	}{
		{"fairdispatch_worker_booked_prefill_tokens", "w1", 100},
		{"fairdispatch_worker_reported_prefill_tokens", "w1", 1000},
		{"fairdispatch_worker_overloaded", "w1", 1},
		{"fairdispatch_worker_booked_prefill_tokens", "w2", 5},
		{"fairdispatch_worker_overloaded", "w2", 0},
	}
	for _, tt := range tests {
		if got := value(t, reg, tt.name, "worker", tt.worker); got != tt.want {
			t.Errorf("%s{worker=%q}: got %v, want %v", tt.name, tt.worker, got, tt.want)
		}
	}
	if got := value(t, reg, "fairdispatch_live_workers"); got != 2 {
		t.Errorf("live workers: got %v, want 2", got)
	}

	// w1 goes, w3 arrives, w2 changes; w3 listed twice: the last entry wins.
	m.SetWorkers([]WorkerLoad{{ID: "w2", ReportedPrefill: 7}, {ID: "w3", BookedPrefill: 1}, {ID: "w3", BookedPrefill: 2}})
	for _, name := range workerFamilies {
		if got := count(t, reg, name); got != 2 {
			t.Errorf("%s: got %d series, want 2", name, got)
		}
		if find(t, reg, name, "worker", "w1") != nil {
			t.Errorf("%s{worker=\"w1\"}: still present after w1 left", name)
		}
	}
	if got := value(t, reg, "fairdispatch_worker_reported_prefill_tokens", "worker", "w2"); got != 7 {
		t.Errorf("reported w2: got %v, want 7", got)
	}
	if got := value(t, reg, "fairdispatch_worker_booked_prefill_tokens", "worker", "w3"); got != 2 {
		t.Errorf("booked w3: got %v, want 2", got)
	}
	if got := value(t, reg, "fairdispatch_live_workers"); got != 2 {
		t.Errorf("live workers: got %v, want 2", got)
	}

	// Every worker gone.
	m.SetWorkers(nil)
	for _, name := range workerFamilies {
		if got := count(t, reg, name); got != 0 {
			t.Errorf("%s: got %d series after SetWorkers(nil), want 0", name, got)
		}
	}
	if got := value(t, reg, "fairdispatch_live_workers"); got != 0 {
		t.Errorf("live workers: got %v, want 0", got)
	}
}

func TestNilRegistererAndDuplicateRegistration(t *testing.T) {
	m := New(nil, testClasses) // registers nothing
	m.Dispatched(0)
	reg := prometheus.NewRegistry()
	New(reg, testClasses)
	defer func() {
		if recover() == nil {
			t.Error("second New on the same registry: got no panic, want one")
		}
	}()
	New(reg, testClasses)
}

func TestHotPathDoesNotAllocate(t *testing.T) {
	m, _ := newTest(t)
	tests := []struct {
		name string
		f    func()
	}{
		{"Dispatched", func() { m.Dispatched(1) }},
		{"Rejected", func() { m.Rejected(0, request.Expired) }},
		{"Rejected unresolved", func() { m.Rejected(Unresolved, request.BadRequest) }},
		{"QueueWait", func() { m.QueueWait(1, 0.25) }},
		{"DeadLetter", func() { m.DeadLetter(1) }},
		{"Handshake", func() { m.Handshake(OutcomeTimeout) }},
		{"LoadDropped", func() { m.LoadDropped(DropCapacity) }},
		{"SetClass", func() { m.SetClass(0, ClassState{Requests: 1}) }},
	}
	for _, tt := range tests {
		if got := testing.AllocsPerRun(100, tt.f); got != 0 {
			t.Errorf("%s: got %v allocations per call, want 0", tt.name, got)
		}
	}
}

func BenchmarkDispatched(b *testing.B) {
	m := New(prometheus.NewRegistry(), testClasses)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		m.Dispatched(i & 1)
	}
}

func BenchmarkRejected(b *testing.B) {
	m := New(prometheus.NewRegistry(), testClasses)
	b.ReportAllocs()
	for b.Loop() {
		m.Rejected(1, request.Expired)
	}
}

func BenchmarkQueueWait(b *testing.B) {
	m := New(prometheus.NewRegistry(), testClasses)
	b.ReportAllocs()
	for b.Loop() {
		m.QueueWait(0, 0.042)
	}
}

func TestSettlement(t *testing.T) {
	m, reg := newTest(t)
	m.Settlement("settled", 250)
	m.Settlement("settled", -40)
	m.Settlement("unknown", 0)
	for _, tc := range []struct {
		name, label, value string
		want               float64
	}{
		{"fairdispatch_settlements_total", "outcome", "settled", 2},
		{"fairdispatch_settlements_total", "outcome", "unknown", 1},
		{"fairdispatch_settlements_total", "outcome", "foreign", 0},
		{"fairdispatch_settlement_correction_tokens_total", "direction", "under", 250},
		{"fairdispatch_settlement_correction_tokens_total", "direction", "over", 40},
	} {
		if got := value(t, reg, tc.name, tc.label, tc.value); got != tc.want {
			t.Errorf("%s{%s=%q}: got %v, want %v", tc.name, tc.label, tc.value, got, tc.want)
		}
	}
}

package metrics

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// The helpers below stand in for prometheus/testutil, whose text diff needs a
// module (kylelemons/godebug) that go.mod does not require.

// gather returns the metric families of reg by name.
func gather(t *testing.T, reg prometheus.Gatherer) map[string]*dto.MetricFamily {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	out := make(map[string]*dto.MetricFamily, len(mfs))
	for _, mf := range mfs {
		out[mf.GetName()] = mf
	}
	return out
}

// find returns the series of family name whose labels are exactly pairs
// (name, value, name, value, ...), or nil.
func find(t *testing.T, reg prometheus.Gatherer, name string, pairs ...string) *dto.Metric {
	t.Helper()
	mf := gather(t, reg)[name]
	if mf == nil {
		return nil
	}
	for _, m := range mf.GetMetric() {
		if labelsEqual(m.GetLabel(), pairs) {
			return m
		}
	}
	return nil
}

func labelsEqual(lps []*dto.LabelPair, pairs []string) bool {
	if len(lps)*2 != len(pairs) {
		return false
	}
	for i, lp := range lps {
		if lp.GetName() != pairs[2*i] || lp.GetValue() != pairs[2*i+1] {
			return false
		}
	}
	return true
}

// value returns the value of a counter or gauge series; it fails the test if
// the series does not exist.
// want is one sample a test expects: the metric's name, its label pairs
// (name, value, ...) and its value.
type want struct {
	name   string
	labels []string
	want   float64
}

// checkValues requires each sample of ws in reg, with its value.
func checkValues(t *testing.T, reg prometheus.Gatherer, ws []want) {
	t.Helper()
	for _, w := range ws {
		if got := value(t, reg, w.name, w.labels...); got != w.want {
			t.Errorf("%s%v: got %v, want %v", w.name, w.labels, got, w.want)
		}
	}
}

func value(t *testing.T, reg prometheus.Gatherer, name string, pairs ...string) float64 {
	t.Helper()
	m := find(t, reg, name, pairs...)
	switch {
	case m == nil:
		t.Fatalf("%s%v: no such series", name, pairs)
	case m.Counter != nil:
		return m.GetCounter().GetValue()
	case m.Gauge != nil:
		return m.GetGauge().GetValue()
	}
	t.Fatalf("%s%v: neither counter nor gauge", name, pairs)
	return 0
}

// count returns the number of series of family name.
func count(t *testing.T, reg prometheus.Gatherer, name string) int {
	t.Helper()
	return len(gather(t, reg)[name].GetMetric())
}

// collect flattens a gathered map back into a slice.
func collect(mfs map[string]*dto.MetricFamily) []*dto.MetricFamily {
	out := make([]*dto.MetricFamily, 0, len(mfs))
	for _, mf := range mfs {
		out = append(out, mf)
	}
	return out
}

package metrics

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
)

func TestStorage(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	s := NewStorage(reg, []string{"DISPATCH_REQ", "DISPATCH_DLQ"}, true)
	for _, c := range []struct{ name, label, value string }{
		{"fairdispatch_stream_bytes", "stream", "DISPATCH_DLQ"},
		{"fairdispatch_stream_max_messages", "stream", "DISPATCH_REQ"},
		{"fairdispatch_jetstream_account_max_bytes", "storage", "memory"},
		{"fairdispatch_jetstream_server_bytes", "storage", "file"},
	} {
		if v := value(t, reg, c.name, c.label, c.value); v != 0 {
			t.Errorf("%s{%s=%q} at start: %v, want 0", c.name, c.label, c.value, v)
		}
	}
	s.SetStream("DISPATCH_REQ", StreamUsage{Bytes: 900, Msgs: 3, MaxBytes: 1000, MaxMsgs: -1})
	s.SetAccount(StoreUsage{FileBytes: 5000, MemoryBytes: 40, FileMax: -1, MemoryMax: 1 << 20})
	s.SetServer(StoreUsage{FileBytes: 5000, MemoryBytes: 40, FileMax: 8000, MemoryMax: 1 << 30})
	for _, c := range []struct {
		name  string
		pairs []string
		want  float64
	}{
		{"fairdispatch_stream_bytes", []string{"stream", "DISPATCH_REQ"}, 900},
		{"fairdispatch_stream_messages", []string{"stream", "DISPATCH_REQ"}, 3},
		{"fairdispatch_stream_max_bytes", []string{"stream", "DISPATCH_REQ"}, 1000},
		{"fairdispatch_stream_max_messages", []string{"stream", "DISPATCH_REQ"}, 0}, // -1: none
		{"fairdispatch_jetstream_account_bytes", []string{"storage", "file"}, 5000},
		{"fairdispatch_jetstream_account_max_bytes", []string{"storage", "file"}, 0},
		{"fairdispatch_jetstream_account_max_bytes", []string{"storage", "memory"}, 1 << 20},
		{"fairdispatch_jetstream_server_max_bytes", []string{"storage", "file"}, 8000},
		{"fairdispatch_jetstream_server_bytes", []string{"storage", "memory"}, 40},
	} {
		if got := value(t, reg, c.name, c.pairs...); got != c.want {
			t.Errorf("%s%v: got %v, want %v", c.name, c.pairs, got, c.want)
		}
	}
	problems, err := promlint.NewWithMetricFamilies(collect(gather(t, reg))).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint %s: %s", p.Metric, p.Text)
	}

	// Without an embedded server there are no server gauges, and SetServer does nothing.
	reg2 := prometheus.NewPedanticRegistry()
	NewStorage(reg2, nil, false).SetServer(StoreUsage{FileBytes: 1})
	if _, ok := gather(t, reg2)["fairdispatch_jetstream_server_bytes"]; ok {
		t.Error("server gauges registered without an embedded server")
	}
	var none *Storage
	none.SetStream("x", StreamUsage{}) // a nil *Storage records nothing and does not panic
	none.SetAccount(StoreUsage{})
	none.SetServer(StoreUsage{})
}

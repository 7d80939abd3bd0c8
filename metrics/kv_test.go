package metrics

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
)

func TestKV(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	tiers := []string{"device", "host"}
	k := NewKV(reg, tiers)
	for _, tier := range tiers {
		if v := value(t, reg, "fairdispatch_kv_index_blocks", "tier", tier); v != 0 {
			t.Fatalf("%s blocks at start: %v", tier, v)
		}
	}
	k.Event("applied", 16, 0.002)
	k.Event("applied", 4, -1) // lag unknown: not observed
	k.Event("duplicate", 3, 0)
	k.Event("dropped", 0, 0)
	k.SetIndex(tiers, []int{7, 2}, 1)
	k.Dispatch(64, 40)
	k.Dispatch(10, 0)
	checkValues(t, reg, []want{
		{"fairdispatch_kv_events_total", []string{"result", "applied"}, 2},
		{"fairdispatch_kv_events_total", []string{"result", "duplicate"}, 1},
		{"fairdispatch_kv_events_total", []string{"result", "dropped"}, 1},
		{"fairdispatch_kv_block_operations_total", nil, 20},
		{"fairdispatch_kv_index_blocks", []string{"tier", "device"}, 7},
		{"fairdispatch_kv_index_blocks", []string{"tier", "host"}, 2},
		{"fairdispatch_kv_stale_ranks", nil, 1},
		{"fairdispatch_kv_prompt_blocks_total", nil, 74},
		{"fairdispatch_kv_overlap_blocks_total", nil, 40},
	})
	if n := find(t, reg, "fairdispatch_kv_event_lag_seconds").GetHistogram().GetSampleCount(); n != 1 {
		t.Errorf("lag samples: got %d, want 1", n)
	}
	problems, err := promlint.NewWithMetricFamilies(collect(gather(t, reg))).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint %s: %s", p.Metric, p.Text)
	}
	var none *KV
	none.Event("applied", 1, 1) // a nil *KV counts nothing and does not panic
	none.SetIndex(tiers, []int{1, 1}, 1)
}

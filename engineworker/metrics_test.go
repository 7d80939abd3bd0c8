package engineworker

import "testing"

// Laid out as prometheus_client renders vllm/v1/metrics/loggers.py's gauges
// and counters (a _total suffix on counters, labels model_name and engine).
const vllmText = `# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 3.0
vllm:num_requests_running{engine="1",model_name="m"} 1.0
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="m"} 2.0
vllm:gpu_cache_usage_perc{engine="0",model_name="m"} 0.9
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.25
vllm:prefix_cache_hits_total{engine="0",model_name="m"} 160.0
vllm:cache_config_info{block_size="16",cache_dtype="auto",engine="0",num_gpu_blocks="4096",sliding_window="None"} 1.0
python_gc_objects_collected_total{generation="0"} 1.0
`

func TestLoadsFromVLLMMetrics(t *testing.T) {
	s, err := ParseMetrics([]byte(vllmText), "vllm:")
	if err != nil {
		t.Fatal(err)
	}
	got := LoadsFromMetrics("vllm", s, 0)
	want := EngineLoad{Running: 3, Waiting: 2, KVUsage: 0.25, TotalKVBlocks: 4096, BlockSize: 16, PrefixHits: 160}
	if got[0] != want {
		t.Errorf("rank 0: got %+v, want %+v", got[0], want)
	}
	if got[1].Running != 1 {
		t.Errorf("rank 1: got %+v", got[1])
	}
}

func TestLoadsFromSGLangMetrics(t *testing.T) {
	s, err := ParseMetrics([]byte("sglang:num_running_reqs{model_name=\"m\"} 4\nsglang:num_queue_reqs{model_name=\"m\"} 1\nsglang:token_usage{model_name=\"m\"} 0.5\n"), "sglang:")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := LoadsFromMetrics("sglang", s, 2)[2], (EngineLoad{Running: 4, Waiting: 1, KVUsage: 0.5}); got != want {
		t.Errorf("got %+v, want %+v", got, want)
	}
}

func TestParseMetricsRefusesBadLines(t *testing.T) {
	for _, l := range []string{"vllm:x{a=\"1\" 2", "vllm:x{a=1} 2", "vllm:x", "vllm:x abc"} {
		if _, err := ParseMetrics([]byte(l), "vllm:"); err == nil {
			t.Errorf("%q: parsed", l)
		}
	}
}

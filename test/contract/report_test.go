package contract

import (
	"encoding/json"
	"reflect"
	"testing"

	"fairdispatch/workerkit"
	"fairdispatch/workers"
)

// TestLoadReportRoundTrip: a report the Go worker helper encodes is what the
// dispatcher's strict parser (workers.ParseReport) reads back, and the
// helper's decoder reads it back too.
func TestLoadReportRoundTrip(t *testing.T) {
	rep := workerkit.Report{WorkerID: "w1", DPStart: 4, DPSize: 2, MaxNumBatchedTokens: 8192, TotalKVBlocks: 1000, MaxActiveRequests: 2,
		Taints: []string{"h200", "zone-a"}, Draining: true, TTLMs: 600, Instance: "i1", SeenSeq: 7,
		Ranks: []workerkit.RankReport{{DPRank: 4, ActivePrefillTokens: 10, ActiveDecodeBlocks: 2, KVUsedBlocks: 3, ActiveRequests: 1}, {DPRank: 5}}}
	b, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	got, err := workers.ParseReport("w1", b)
	if err != nil {
		t.Fatalf("ParseReport(%s): %v", b, err)
	}
	want := workers.Report{WorkerID: "w1", DPStart: 4, DPSize: 2, MaxBatched: 8192, TotalKV: 1000, MaxActive: 2,
		Taints: []string{"h200", "zone-a"}, Draining: true, TTLms: 600, Instance: "i1", SeenSeq: 7, HasSeenSeq: true,
		Ranks: []workers.RankLoad{{Rank: 4, ActivePrefillTokens: 10, ActiveDecodeBlocks: 2, KVUsedBlocks: 3, ActiveRequests: 1}, {Rank: 5}}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("parsed %s:\ngot  %+v\nwant %+v", b, got, want)
	}
	var back workerkit.Report
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, rep) {
		t.Errorf("decoded %s:\ngot  %+v\nwant %+v", b, back, rep)
	}
	// 0 means unknown (no capacity) and is left out; the parser then reads it so.
	rep.MaxNumBatchedTokens, rep.MaxActiveRequests = 0, 0
	b, _ = json.Marshal(rep)
	var fields map[string]json.RawMessage
	_ = json.Unmarshal(b, &fields)
	for _, k := range []string{"max_num_batched_tokens", "max_active_requests"} {
		if _, ok := fields[k]; ok {
			t.Errorf("%s written as 0: %s", k, b)
		}
	}
	for _, k := range []string{"worker_id", "data_parallel_start_rank", "data_parallel_size", "total_kv_blocks", "taints",
		"draining", "ttl_ms", "instance", "seen_seq", "ranks"} {
		if _, ok := fields[k]; !ok {
			t.Errorf("%s: field %q missing", b, k)
		}
	}
}

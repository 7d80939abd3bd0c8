package wire_test

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"fairdispatch/wire"
	"fairdispatch/workerkit"
	"fairdispatch/workers"
)

func ptr[T any](v T) *T { return &v }

// TestOutcomeRoundTrip: what the dispatcher marshals, a reader decodes to the
// same record, with the field names of docs/protocol.md, Outcomes.
func TestOutcomeRoundTrip(t *testing.T) {
	for _, o := range []wire.Outcome{
		{RequestID: "r1", Status: wire.StatusDispatched, PolicyClass: "premium", WorkerID: "w1", DPRank: ptr(0), QueuedMs: ptr(int64(12)), Attempt: 2},
		{RequestID: "r2", Status: wire.StatusRejected, PolicyClass: "regular", Attempt: 1, Error: "queue_full", Message: "m",
			Details: map[string]any{"limit_kind": "requests", "current": float64(2), "limit": float64(2)}},
	} {
		b, err := wire.MarshalOutcome(o)
		if err != nil {
			t.Fatal(err)
		}
		var got wire.Outcome
		if err := json.Unmarshal(b, &got); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, o) {
			t.Errorf("round trip of %s:\ngot  %+v\nwant %+v", b, got, o)
		}
		var fields map[string]any
		_ = json.Unmarshal(b, &fields)
		for _, k := range []string{"request_id", "status", "policy_class", "attempt"} {
			if _, ok := fields[k]; !ok {
				t.Errorf("%s: field %q missing", b, k)
			}
		}
	}
	if _, err := wire.MarshalOutcome(wire.Outcome{RequestID: "r", Status: "done"}); err == nil {
		t.Error("unknown status accepted")
	}
}

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

// TestCompletionRoundTrip: a completion record survives encoding, times to the
// nanosecond.
func TestCompletionRoundTrip(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)
	c := wire.Completion{RequestID: "r1", Class: "premium", WorkerID: "w1", DPRank: 1, Seq: 9, QueuedMs: 12,
		ReceivedAt: at, StartedAt: at.Add(time.Millisecond), FinishedAt: at.Add(time.Second)}
	b, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	var got wire.Completion
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, c) {
		t.Errorf("round trip of %s:\ngot  %+v\nwant %+v", b, got, c)
	}
}

// TestKVEventFieldNames: a KV event EncodeKVEvent writes carries the field
// names of docs/protocol.md, KV cache events, and ParseKVEvent reads it back;
// the resync request body is {"dp_rank": r}.
func TestKVEventFieldNames(t *testing.T) {
	ev := wire.KVEvent{Instance: "i1", ID: 3, Rank: 2, Cleared: 1 << wire.Disk}
	ev.Stored[wire.Device] = []uint64{1}
	ev.Removed[wire.Host] = []uint64{2}
	b, err := wire.EncodeKVEvent(&ev)
	if err != nil {
		t.Fatal(err)
	}
	var fields map[string]any
	if err := json.Unmarshal(b, &fields); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"instance", "event_id", "dp_rank", "stored", "removed", "cleared"} {
		if _, ok := fields[k]; !ok {
			t.Errorf("%s: field %q missing", b, k)
		}
	}
	if fields["instance"] != "i1" || fields["event_id"] != 3.0 || fields["dp_rank"] != 2.0 ||
		!reflect.DeepEqual(fields["cleared"], []any{"disk"}) {
		t.Errorf("fields %v", fields)
	}
	if got, err := wire.ParseKVEvent(b); err != nil || !reflect.DeepEqual(got, ev) {
		t.Fatalf("decoded %+v, %v from %s, want %+v", got, err, b, ev)
	}
	if b, _ := json.Marshal(wire.KVResync{Rank: 5}); string(b) != `{"dp_rank":5}` {
		t.Fatalf("resync body %s", b)
	}
}

package workers_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"fairdispatch/workers"
)

func TestParseReportDefaults(t *testing.T) {
	r, err := workers.ParseReport("w1", []byte(`{"worker_id":"w1"}`))
	if err != nil {
		t.Fatalf("ParseReport: got error %v, want nil", err)
	}
	checks := []struct {
		name      string
		got, want any
	}{
		{"WorkerID", r.WorkerID, "w1"},
		{"DPStart", r.DPStart, uint32(0)},
		{"DPSize", r.DPSize, uint32(1)},
		{"TTLms", r.TTLms, uint64(workers.DefaultTTL)},
		{"MaxBatched", r.MaxBatched, uint64(0)},
		{"TotalKV", r.TotalKV, uint64(0)},
		{"Draining", r.Draining, false},
		{"Instance", r.Instance, ""},
		{"HasSeenSeq", r.HasSeenSeq, false},
		{"SeenSeq", r.SeenSeq, uint64(0)},
		{"len(Taints)", len(r.Taints), 0},
		{"len(Ranks)", len(r.Ranks), 0},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s: got %v, want %v", c.name, c.got, c.want)
		}
	}
	if workers.DefaultTTL != 3000 {
		t.Errorf("DefaultTTL: got %d, want 3000", workers.DefaultTTL)
	}
}

func TestParseReportFull(t *testing.T) {
	const body = `{
	  "worker_id": "w1",
	  "data_parallel_start_rank": 4,
	  "data_parallel_size": 2,
	  "max_num_batched_tokens": 8192,
	  "total_kv_blocks": 16384,
	  "taints": ["h200", "zone-a"],
	  "draining": true,
	  "ttl_ms": 1500,
	  "instance": "8f3c2a",
	  "seen_seq": 1234,
	  "future_field": {"ignored": true},
	  "ranks": [
	    {"dp_rank": 5, "active_prefill_tokens": 1024, "active_decode_blocks": 310,
	     "kv_used_blocks": 500, "active_requests": 4}
	  ]
	}`
	r, err := workers.ParseReport("w1", []byte(body))
	if err != nil {
		t.Fatalf("ParseReport: got error %v, want nil", err)
	}
	want := workers.Report{
		WorkerID: "w1", DPStart: 4, DPSize: 2, MaxBatched: 8192, TotalKV: 16384,
		Taints: []string{"h200", "zone-a"}, Draining: true, TTLms: 1500, Instance: "8f3c2a",
		SeenSeq: 1234, HasSeenSeq: true,
		Ranks: []workers.RankLoad{{Rank: 5, ActivePrefillTokens: 1024, ActiveDecodeBlocks: 310, KVUsedBlocks: 500, ActiveRequests: 4}},
	}
	if got := fmt.Sprintf("%+v", r); got != fmt.Sprintf("%+v", want) {
		t.Errorf("ParseReport:\n got %s\nwant %+v", got, want)
	}
}

func TestParseReportExplicitZeroes(t *testing.T) {
	// Present-but-zero fields are distinct from absent ones where it matters.
	r, err := workers.ParseReport("w1", []byte(`{"worker_id":"w1","max_num_batched_tokens":0,"seen_seq":0,"data_parallel_start_rank":0}`))
	if err != nil {
		t.Fatalf("ParseReport: got error %v, want nil", err)
	}
	if !r.HasSeenSeq || r.SeenSeq != 0 {
		t.Errorf("seen_seq 0: got HasSeenSeq=%v SeenSeq=%d, want true 0", r.HasSeenSeq, r.SeenSeq)
	}
	if r.MaxBatched != 0 {
		t.Errorf("MaxBatched: got %d, want 0 (unknown)", r.MaxBatched)
	}
}

func TestParseReportAccepts(t *testing.T) {
	tests := []struct {
		name string
		body string
	}{
		{"ttl at minimum", `{"worker_id":"w1","ttl_ms":100}`},
		{"ttl at maximum", `{"worker_id":"w1","ttl_ms":600000}`},
		{"last rank of range", `{"worker_id":"w1","data_parallel_start_rank":2,"data_parallel_size":3,"ranks":[{"dp_rank":4}]}`},
		{"first rank of range", `{"worker_id":"w1","data_parallel_start_rank":2,"data_parallel_size":3,"ranks":[{"dp_rank":2}]}`},
		{"every rank", `{"worker_id":"w1","data_parallel_size":3,"ranks":[{"dp_rank":2},{"dp_rank":0},{"dp_rank":1}]}`},
		{"highest rank 65535", `{"worker_id":"w1","data_parallel_start_rank":65535,"data_parallel_size":1}`},
		{"taint charset", `{"worker_id":"w1","taints":["a.b:c/d-e_F9"]}`},
		{"64 taints", `{"worker_id":"w1","taints":[` + taintList(workers.MaxTaints) + `]}`},
		{"null taints", `{"worker_id":"w1","taints":null}`},
		{"id of 128 bytes", `{"worker_id":"` + strings.Repeat("a", 128) + `"}`},
		{"id charset", `{"worker_id":"Az09_-"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			token := idOf(t, tt.body)
			if _, err := workers.ParseReport(token, []byte(tt.body)); err != nil {
				t.Errorf("ParseReport: got error %v, want nil", err)
			}
		})
	}
}

func TestParseReportDrops(t *testing.T) {
	long := strings.Repeat("a", 129)
	tests := []struct {
		name  string
		token string
		body  string
		want  workers.DropReason
	}{
		{"not json", "w1", `{"worker_id":`, workers.DropParse},
		{"trailing garbage", "w1", `{"worker_id":"w1"} x`, workers.DropParse},
		{"not an object", "w1", `[1,2]`, workers.DropParse},
		{"wrong type", "w1", `{"worker_id":7}`, workers.DropParse},
		{"negative size", "w1", `{"worker_id":"w1","data_parallel_size":-1}`, workers.DropParse},
		{"negative load", "w1", `{"worker_id":"w1","ranks":[{"dp_rank":0,"active_prefill_tokens":-5}]}`, workers.DropParse},
		{"missing worker_id", "w1", `{"data_parallel_size":1}`, workers.DropParse},
		{"null worker_id", "w1", `{"worker_id":null}`, workers.DropParse},
		{"json null", "w1", `null`, workers.DropParse},
		{"subject mismatch", "w2", `{"worker_id":"w1"}`, workers.DropMismatch},
		{"subject mismatch case", "W1", `{"worker_id":"w1"}`, workers.DropMismatch},
		{"empty id", "", `{"worker_id":""}`, workers.DropInvalid},
		{"id with dot", "a.b", `{"worker_id":"a.b"}`, workers.DropInvalid},
		{"id too long", long, `{"worker_id":"` + long + `"}`, workers.DropInvalid},
		{"size 0", "w1", `{"worker_id":"w1","data_parallel_size":0}`, workers.DropInvalid},
		{"range past 65535", "w1", `{"worker_id":"w1","data_parallel_start_rank":65535,"data_parallel_size":2}`, workers.DropInvalid},
		{"rank below start", "w1", `{"worker_id":"w1","data_parallel_start_rank":2,"data_parallel_size":2,"ranks":[{"dp_rank":1}]}`, workers.DropRank},
		{"rank at start+size", "w1", `{"worker_id":"w1","data_parallel_start_rank":2,"data_parallel_size":2,"ranks":[{"dp_rank":4}]}`, workers.DropRank},
		{"rank 1 with default size", "w1", `{"worker_id":"w1","ranks":[{"dp_rank":1}]}`, workers.DropRank},
		{"duplicate rank", "w1", `{"worker_id":"w1","data_parallel_size":2,"ranks":[{"dp_rank":0},{"dp_rank":0}]}`, workers.DropRank},
		{"more ranks than size", "w1", `{"worker_id":"w1","data_parallel_size":2,"ranks":[{"dp_rank":0},{"dp_rank":1},{"dp_rank":1}]}`, workers.DropRank},
		{"ttl 99", "w1", `{"worker_id":"w1","ttl_ms":99}`, workers.DropInvalid},
		{"ttl 0", "w1", `{"worker_id":"w1","ttl_ms":0}`, workers.DropInvalid},
		{"ttl 600001", "w1", `{"worker_id":"w1","ttl_ms":600001}`, workers.DropInvalid},
		{"taint with space", "w1", `{"worker_id":"w1","taints":["a b"]}`, workers.DropInvalid},
		{"empty taint", "w1", `{"worker_id":"w1","taints":[""]}`, workers.DropInvalid},
		{"taint too long", "w1", `{"worker_id":"w1","taints":["` + long + `"]}`, workers.DropInvalid},
		{"65 taints", "w1", `{"worker_id":"w1","taints":[` + taintList(workers.MaxTaints+1) + `]}`, workers.DropInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := workers.ParseReport(tt.token, []byte(tt.body))
			if err == nil {
				t.Fatalf("ParseReport: got %+v, nil error; want drop %q", r, tt.want)
			}
			var re *workers.ReportError
			if !errors.As(err, &re) {
				t.Fatalf("ParseReport: got error of type %T, want *ReportError", err)
			}
			if got := workers.Reason(err); got != tt.want {
				t.Errorf("Reason: got %q, want %q (error %v)", got, tt.want, err)
			}
			if !strings.HasPrefix(err.Error(), "load report "+string(tt.want)+": ") {
				t.Errorf("Error(): got %q, want prefix %q", err.Error(), "load report "+string(tt.want)+": ")
			}
			if r.WorkerID != "" {
				t.Errorf("report on error: got WorkerID %q, want zero Report", r.WorkerID)
			}
		})
	}
}

func TestReason(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want workers.DropReason
	}{
		{"nil", nil, ""},
		{"report error", &workers.ReportError{Reason: workers.DropRank, Msg: "x"}, workers.DropRank},
		{"wrapped", fmt.Errorf("bus: %w", &workers.ReportError{Reason: workers.DropMismatch}), workers.DropMismatch},
		{"other error", errors.New("boom"), workers.DropParse},
	}
	for _, tt := range tests {
		if got := workers.Reason(tt.err); got != tt.want {
			t.Errorf("%s: Reason: got %q, want %q", tt.name, got, tt.want)
		}
	}
}

func TestValidIDAndTaint(t *testing.T) {
	tests := []struct {
		s              string
		wantID, wantTa bool
	}{
		{"w1", true, true},
		{"A-z_9", true, true},
		{"", false, false},
		{"a.b", false, true},
		{"a:b/c", false, true},
		{"a b", false, false},
		{"é", false, false},
		{"a*", false, false},
		{"a>", false, false},
		{strings.Repeat("x", 128), true, true},
		{strings.Repeat("x", 129), false, false},
	}
	for _, tt := range tests {
		if got := workers.ValidID(tt.s); got != tt.wantID {
			t.Errorf("ValidID(%q): got %v, want %v", tt.s, got, tt.wantID)
		}
		if got := workers.ValidTaint(tt.s); got != tt.wantTa {
			t.Errorf("ValidTaint(%q): got %v, want %v", tt.s, got, tt.wantTa)
		}
	}
}

func taintList(n int) string {
	ts := make([]string, n)
	for i := range ts {
		ts[i] = fmt.Sprintf("%q", fmt.Sprintf("t%d", i))
	}
	return strings.Join(ts, ",")
}

// idOf extracts the worker_id of a test body, for use as the subject token.
func idOf(t *testing.T, body string) string {
	t.Helper()
	const key = `"worker_id":"`
	i := strings.Index(body, key)
	if i < 0 {
		t.Fatalf("no worker_id in %s", body)
	}
	rest := body[i+len(key):]
	return rest[:strings.IndexByte(rest, '"')]
}

func TestParseReportInstanceBound(t *testing.T) {
	long := strings.Repeat("i", 129)
	_, err := workers.ParseReport("w1", []byte(`{"worker_id":"w1","instance":"`+long+`"}`))
	if workers.Reason(err) != workers.DropInvalid {
		t.Fatalf("instance of 129 bytes: reason %q, want invalid", workers.Reason(err))
	}
	if _, err := workers.ParseReport("w1", []byte(`{"worker_id":"w1","instance":"`+long[:128]+`"}`)); err != nil {
		t.Fatalf("instance of 128 bytes: %v, want accepted", err)
	}
}

// TestParseReportMaxActiveRequests: max_active_requests is optional (absent:
// no capacity), an integer in [1, 1000000]; anything else drops the report.
func TestParseReportMaxActiveRequests(t *testing.T) {
	tests := []struct {
		field string
		want  uint64
		drop  workers.DropReason
	}{
		{``, 0, ""},
		{`,"max_active_requests":null`, 0, ""},
		{`,"max_active_requests":1`, 1, ""},
		{`,"max_active_requests":2`, 2, ""},
		{`,"max_active_requests":1000000`, 1_000_000, ""},
		{`,"max_active_requests":0`, 0, workers.DropInvalid},
		{`,"max_active_requests":1000001`, 0, workers.DropInvalid},
		{`,"max_active_requests":-1`, 0, workers.DropParse},
		{`,"max_active_requests":1.5`, 0, workers.DropParse},
		{`,"max_active_requests":"2"`, 0, workers.DropParse},
	}
	for _, tt := range tests {
		r, err := workers.ParseReport("w1", []byte(`{"worker_id":"w1"`+tt.field+`}`))
		if got := workers.Reason(err); got != tt.drop {
			t.Errorf("%q: reason %q (%v), want %q", tt.field, got, err, tt.drop)
			continue
		}
		if err == nil && r.MaxActive != tt.want {
			t.Errorf("%q: MaxActive %d, want %d", tt.field, r.MaxActive, tt.want)
		}
	}
}

package workers_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"fairdispatch/workers"
)

// FuzzParseReport feeds ParseReport arbitrary subject tokens and bodies. It
// must not panic; an error must be a *ReportError with a known reason; and a
// nil error implies every bound of docs/protocol.md, Load report. Each body is parsed twice: with
// the fuzzed token, and with the token the body claims (its worker_id), so
// that the checks after the subject/worker_id match are reached too. The seed
// corpus is in testdata/fuzz/FuzzParseReport.
func FuzzParseReport(f *testing.F) {
	for _, body := range []string{
		`{"worker_id":"w1"}`,
		`{"worker_id":"w1","data_parallel_start_rank":4,"data_parallel_size":2,"max_num_batched_tokens":8192,` +
			`"total_kv_blocks":16384,"taints":["h200","zone-a"],"draining":true,"ttl_ms":1500,"instance":"8f3c2a",` +
			`"seen_seq":1234,"ranks":[{"dp_rank":5,"active_prefill_tokens":1024,"active_decode_blocks":310,` +
			`"kv_used_blocks":500,"active_requests":4},{"dp_rank":4}]}`,
		`{"worker_id":"w1","data_parallel_start_rank":65535,"data_parallel_size":1,"ranks":[{"dp_rank":65535}]}`,
		`{"worker_id":"w1","data_parallel_size":0}`,
		`{"worker_id":"w1","data_parallel_size":4294967295,"data_parallel_start_rank":4294967295}`,
		`{"worker_id":"w1","ttl_ms":99}`,
		`{"worker_id":"w1","ttl_ms":600001}`,
		`{"worker_id":"w1","ttl_ms":-1}`,
		`{"worker_id":"w1","taints":["a b"]}`,
		`{"worker_id":"w1","taints":[` + strings.TrimSuffix(strings.Repeat(`"t",`, 65), ",") + `]}`,
		`{"worker_id":"w1","data_parallel_size":16,"ranks":[` + rankList(9, 3) + `]}`,
		`{"worker_id":"w1","data_parallel_size":3,"ranks":[{"dp_rank":0},{"dp_rank":1},{"dp_rank":0}]}`,
		`{"worker_id":"w1","ranks":[{"dp_rank":1}]}`,
		`{"worker_id":"w2"}`,
		`{"worker_id":null}`,
		`{"WORKER_ID":"w1","Worker_Id":"w1"}`,
		`{"worker_id":"w1","worker_id":"w1"}`,
		`{"worker_id":"w1","seen_seq":18446744073709551615,"max_num_batched_tokens":18446744073709551615}`,
		`{"worker_id":"w1","ranks":[{"dp_rank":0,"active_prefill_tokens":1.5}]}`,
		`{"worker_id":"` + strings.Repeat("w", 129) + `"}`,
		`{"worker_id":"w1","max_active_requests":2}`,
		`{"worker_id":"w1","max_active_requests":0}`,
		`{"worker_id":"w1","max_active_requests":1000001}`,
		`{"worker_id":"w1","max_active_requests":-1}`,
		`{"worker_id":"w1","max_active_requests":null}`,
		`[]`, `null`, `{`, "\xff", ``,
	} {
		f.Add(idOfBody(body), []byte(body))
	}
	f.Fuzz(func(t *testing.T, token string, data []byte) {
		checkParse(t, token, data)
		if id := idOfBody(string(data)); id != token {
			checkParse(t, id, data)
		}
	})
}

// checkParse parses one report and checks the contract of ParseReport.
func checkParse(t *testing.T, token string, data []byte) {
	t.Helper()
	r, err := workers.ParseReport(token, data)
	if err != nil {
		var re *workers.ReportError
		if !asReportError(err, &re) {
			t.Fatalf("got %T error %v, want *workers.ReportError", err, err)
		}
		switch re.Reason {
		case workers.DropParse, workers.DropMismatch, workers.DropRank, workers.DropInvalid:
		default:
			t.Fatalf("got reason %q in %v, want parse, mismatch, rank or invalid", re.Reason, err)
		}
		if workers.Reason(err) != re.Reason {
			t.Fatalf("Reason(%v) = %q, want %q", err, workers.Reason(err), re.Reason)
		}
		return
	}
	if r.WorkerID != token || !workers.ValidID(r.WorkerID) {
		t.Fatalf("accepted worker id %q on token %q", r.WorkerID, token)
	}
	if r.DPSize == 0 || uint64(r.DPStart)+uint64(r.DPSize) > workers.MaxRanks {
		t.Fatalf("accepted ranks [%d, %d+%d)", r.DPStart, r.DPStart, r.DPSize)
	}
	if r.TTLms < workers.MinTTLms || r.TTLms > workers.MaxTTLms {
		t.Fatalf("accepted ttl_ms %d", r.TTLms)
	}
	if len(r.Taints) > workers.MaxTaints {
		t.Fatalf("accepted %d taints", len(r.Taints))
	}
	for _, ta := range r.Taints {
		if !workers.ValidTaint(ta) {
			t.Fatalf("accepted taint %q", ta)
		}
	}
	if len(r.Ranks) > int(r.DPSize) {
		t.Fatalf("accepted %d ranks for size %d", len(r.Ranks), r.DPSize)
	}
	seen := map[uint32]bool{}
	for _, rk := range r.Ranks {
		if rk.Rank < r.DPStart || uint64(rk.Rank) >= uint64(r.DPStart)+uint64(r.DPSize) {
			t.Fatalf("accepted rank %d outside [%d, %d+%d)", rk.Rank, r.DPStart, r.DPStart, r.DPSize)
		}
		if seen[rk.Rank] {
			t.Fatalf("accepted rank %d twice", rk.Rank)
		}
		seen[rk.Rank] = true
	}
	if r.MaxActive > workers.MaxActiveRequests {
		t.Fatalf("accepted max_active_requests %d", r.MaxActive)
	}
	if r.MaxActive == 0 && strings.Contains(string(data), `"max_active_requests":0`) {
		t.Fatalf("accepted max_active_requests 0")
	}
	if !r.HasSeenSeq && r.SeenSeq != 0 {
		t.Fatalf("seen_seq %d without HasSeenSeq", r.SeenSeq)
	}
}

func asReportError(err error, target **workers.ReportError) bool {
	re, ok := err.(*workers.ReportError)
	if ok {
		*target = re
	}
	return ok
}

// idOfBody returns the worker_id a body claims, or "" when it claims none.
func idOfBody(body string) string {
	var probe struct {
		WorkerID string `json:"worker_id"`
	}
	_ = json.Unmarshal([]byte(body), &probe)
	return probe.WorkerID
}

// rankList returns n rank objects numbered from 0, the last one repeating rank dup.
func rankList(n, dup int) string {
	parts := make([]string, n)
	for i := range parts {
		parts[i] = fmt.Sprintf(`{"dp_rank":%d}`, i)
	}
	parts[n-1] = fmt.Sprintf(`{"dp_rank":%d}`, dup)
	return strings.Join(parts, ",")
}

// TestParseReportManyRanks checks the repeat detection of large reports (the
// bitset path) at its edges: the largest rank range, a repeat at the very end,
// and ranks starting above 0.
func TestParseReportManyRanks(t *testing.T) {
	many := func(start, size int, ranks []int) string {
		parts := make([]string, len(ranks))
		for i, r := range ranks {
			parts[i] = fmt.Sprintf(`{"dp_rank":%d}`, r)
		}
		return fmt.Sprintf(`{"worker_id":"w1","data_parallel_start_rank":%d,"data_parallel_size":%d,"ranks":[%s]}`,
			start, size, strings.Join(parts, ","))
	}
	seq := func(from, n int) []int {
		out := make([]int, n)
		for i := range out {
			out[i] = from + i
		}
		return out
	}
	tests := []struct {
		name string
		body string
		want workers.DropReason // "" for accepted
	}{
		{"all 65536 ranks", many(0, workers.MaxRanks, seq(0, workers.MaxRanks)), ""},
		{"repeat at the end", many(0, workers.MaxRanks, append(seq(0, 20000), 19999)), workers.DropRank},
		{"repeat of the first", many(0, 100, append(seq(0, 50), 0)), workers.DropRank},
		{"offset start", many(65000, 536, seq(65000, 536)), ""},
		{"offset start repeat of the last rank", many(65000, 536, append(seq(65000, 535), 65534, 65535)), workers.DropRank},
		{"nine ranks, no repeat", many(3, 9, seq(3, 9)), ""},
		{"nine ranks, a repeat", many(3, 9, append(seq(3, 8), 10)), workers.DropRank},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := workers.ParseReport("w1", []byte(tc.body))
			if got := workers.Reason(err); got != tc.want {
				t.Fatalf("got reason %q (%v), want %q", got, err, tc.want)
			}
		})
	}
}

// BenchmarkParseReportRanks shows the cost of a report growing linearly with
// its ranks (it was quadratic: 2.6 s for 58,000 ranks).
func BenchmarkParseReportRanks(b *testing.B) {
	for _, n := range []int{1, 8, 64, 1024, 16384, 58000} {
		parts := make([]string, n)
		for i := range parts {
			parts[i] = fmt.Sprintf(`{"dp_rank":%d,"active_prefill_tokens":%d}`, i, i)
		}
		body := []byte(fmt.Sprintf(`{"worker_id":"w1","data_parallel_size":%d,"ranks":[%s]}`, workers.MaxRanks, strings.Join(parts, ",")))
		b.Run(fmt.Sprintf("ranks=%d", n), func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			for b.Loop() {
				if _, err := workers.ParseReport("w1", body); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

package wire

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

// reportBodies are the seed corpus of FuzzDecodeLoadReport and the cases of
// TestDecodeLoadReportMatchesEncodingJSON: the forms workers send, and every
// edge the hand-written path must either decode as encoding/json does or
// leave to it.
var reportBodies = []string{
	`{"worker_id":"w1"}`,
	`{"worker_id":"w1","data_parallel_start_rank":4,"data_parallel_size":2,"max_num_batched_tokens":8192,` +
		`"total_kv_blocks":16384,"taints":["h200","zone-a"],"draining":true,"ttl_ms":1500,"instance":"8f3c2a",` +
		`"seen_seq":1234,"ranks":[{"dp_rank":5,"active_prefill_tokens":1024,"active_decode_blocks":310,` +
		`"kv_used_blocks":500,"active_requests":4},{"dp_rank":4}],"compact_dispatch":1}`,
	`{"compact_dispatch":0}`, `{"compact_dispatch":7}`, `{"compact_dispatch":-1}`, `{"compact_dispatch":null}`,
	`{"compact_dispatch":1,"compact_dispatch":null}`, `{"Compact_Dispatch":1}`,
	" \t\n{ \"worker_id\" : \"w1\" , \"ranks\" : [ ] , \"taints\" : [ ] } \r\n",
	`{}`, `null`, `[]`, `{`, `}`, ``, `{"worker_id":"w1"}x`, `{"worker_id":"w1",}`, `{,}`,
	`{"worker_id":null}`, `{"worker_id":""}`, `{"instance":""}`, `{"worker_id":"w1","worker_id":"w2"}`, `{"worker_id":"w1","worker_id":null}`,
	`{"WORKER_ID":"w1"}`, `{"Worker_Id":"w1","worker_id":"w2"}`, `{"worker_id":"w1","RANKS":[{"DP_RANK":3}]}`,
	`{"worker_id":"w\u0031"}`, `{"worker_id":"w\"1"}`, "{\"worker_id\":\"w\xff\"}", "{\"worker_id\":\"w\x7f\"}",
	"{\"worker_id\":\"w\x01\"}", `{"worker_\u0069d":"w1"}`,
	`{"data_parallel_size":4294967295,"data_parallel_start_rank":4294967296}`,
	`{"seen_seq":18446744073709551615}`, `{"seen_seq":18446744073709551616}`, `{"seen_seq":99999999999999999999}`,
	`{"seen_seq":-1}`, `{"seen_seq":-0}`, `{"seen_seq":0}`, `{"seen_seq":01}`, `{"seen_seq":1.0}`, `{"seen_seq":1e3}`,
	`{"seen_seq":1E3}`, `{"seen_seq":"1"}`, `{"seen_seq":null}`, `{"seen_seq":1,"seen_seq":null}`, `{"seen_seq":true}`,
	`{"total_kv_blocks":null}`, `{"total_kv_blocks":5,"total_kv_blocks":null}`, `{"total_kv_blocks":-5}`,
	`{"draining":true}`, `{"draining":false}`, `{"draining":null}`, `{"draining":true,"draining":null}`,
	`{"draining":1}`, `{"draining":tru}`, `{"draining":truex}`,
	`{"instance":null}`, `{"instance":"a","instance":null}`, `{"instance":7}`,
	`{"taints":null}`, `{"taints":["a",null]}`, `{"taints":["a"],"taints":["b"]}`, `{"taints":["a",]}`,
	`{"taints":[1]}`, `{"taints":"a"}`, `{"taints":[]}`,
	`{"ranks":null}`, `{"ranks":[null]}`, `{"ranks":[{}]}`, `{"ranks":[{"dp_rank":null,"kv_used_blocks":null}]}`,
	`{"ranks":[{"dp_rank":1,"dp_rank":2}]}`, `{"ranks":[{"dp_rank":1,"kv_used_blocks":5}],"ranks":[{"dp_rank":2}]}`,
	`{"ranks":[{"dp_rank":4294967296}]}`, `{"ranks":[{"dp_rank":1,"x":[1,{"y":null}]}]}`, `{"ranks":[{"dp_rank":1},]}`,
	`{"ranks":{}}`, `{"ranks":[[]]}`,
	`{"worker_id":"w1","extra":{"a":[1,-2.5e+3,"s\n\u00e9\\",true,false,null,{}],"b":[]},"more":-0.0}`,
	`{"worker_id":"w1","extra":"\uZZZZ"}`, `{"worker_id":"w1","extra":"\x"}`, `{"worker_id":"w1","extra":01}`,
	`{"worker_id":"w1","extra":1.}`, `{"worker_id":"w1","extra":.5}`, `{"worker_id":"w1","extra":1e}`, `{"worker_id":"w1","extra":-}`,
	`{"worker_id":"w1","extra":` + strings.Repeat("[", 40) + strings.Repeat("]", 40) + `}`,
	`{"worker_id":"w1","extra":` + strings.Repeat("[", 40) + strings.Repeat("]", 39) + `}`,
	`{"worker_id":"w1","extra":nul}`, `{"worker_id":"w1" "x":1}`, `{"worker_id" "w1"}`, `{worker_id:"w1"}`,
}

func checkSameAsEncodingJSON(t *testing.T, data []byte) {
	var got, want LoadReport
	gotErr := DecodeLoadReport(data, &got)
	wantErr := json.Unmarshal(data, &want)
	if (gotErr == nil) != (wantErr == nil) || gotErr != nil && gotErr.Error() != wantErr.Error() {
		t.Fatalf("%q: error %v, encoding/json %v", data, gotErr, wantErr)
	}
	if wantErr == nil && !reflect.DeepEqual(got, want) {
		t.Fatalf("%q:\n got %+v\nwant %+v", data, got, want)
	}
}

func TestDecodeLoadReportMatchesEncodingJSON(t *testing.T) {
	for _, body := range reportBodies {
		checkSameAsEncodingJSON(t, []byte(body))
	}
}

// TestDecodeLoadReportFastPath: the reports workers send are decoded without
// encoding/json, or DecodeLoadReport would be correct and as slow as before.
func TestDecodeLoadReportFastPath(t *testing.T) {
	full := LoadReport{WorkerID: ptr("w-1"), DPStart: ptr(uint32(4)), DPSize: ptr(uint32(2)),
		MaxBatched: ptr(uint64(8192)), TotalKV: 16384, MaxActive: ptr(uint64(4)), Taints: []string{"gpu:h200", "zone/a"},
		Draining: true, TTLms: ptr(uint64(3000)), Instance: "8f3c2a", SeenSeq: ptr(uint64(1 << 63)),
		Ranks: []RankLoad{{Rank: 5, ActivePrefillTokens: 1024, ActiveDecodeBlocks: 310, KVUsedBlocks: 500, ActiveRequests: 4}, {Rank: 4}}}
	minimal := LoadReport{WorkerID: ptr("w2")}
	for _, r := range []LoadReport{full, minimal} {
		data, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		var got LoadReport
		if !decodeReportFast(data, &got) {
			t.Fatalf("%s took encoding/json", data)
		}
		if !reflect.DeepEqual(got, r) {
			t.Fatalf("%s:\n got %+v\nwant %+v", data, got, r)
		}
	}
}

func ptr[T any](v T) *T { return &v }

// FuzzDecodeLoadReport holds DecodeLoadReport to encoding/json's result and
// error on any input.
func FuzzDecodeLoadReport(f *testing.F) {
	for _, body := range reportBodies {
		f.Add([]byte(body))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		checkSameAsEncodingJSON(t, data)
	})
}

// BenchmarkDecodeLoadReport: a 4-rank worker's report, hand-written path
// against encoding/json.
func BenchmarkDecodeLoadReport(b *testing.B) {
	data := []byte(`{"worker_id":"w-17","data_parallel_start_rank":0,"data_parallel_size":4,"total_kv_blocks":16384,` +
		`"taints":[],"draining":false,"ttl_ms":3000,"instance":"8f3c2a91","seen_seq":123456,"ranks":[` +
		`{"dp_rank":0,"active_prefill_tokens":1024,"active_decode_blocks":310,"kv_used_blocks":500,"active_requests":4},` +
		`{"dp_rank":1,"active_prefill_tokens":0,"active_decode_blocks":12,"kv_used_blocks":40,"active_requests":1},` +
		`{"dp_rank":2,"active_prefill_tokens":512,"active_decode_blocks":0,"kv_used_blocks":0,"active_requests":1},` +
		`{"dp_rank":3,"active_prefill_tokens":0,"active_decode_blocks":0,"kv_used_blocks":0,"active_requests":0}]}`)
	b.Run("fast", func(b *testing.B) {
		b.SetBytes(int64(len(data)))
		b.ReportAllocs()
		for b.Loop() {
			var w LoadReport
			if err := DecodeLoadReport(data, &w); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("encoding_json", func(b *testing.B) {
		b.SetBytes(int64(len(data)))
		b.ReportAllocs()
		for b.Loop() {
			var w LoadReport
			if err := json.Unmarshal(data, &w); err != nil {
				b.Fatal(err)
			}
		}
	})
}

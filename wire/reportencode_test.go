package wire

import (
	"encoding/json"
	"testing"

	"pgregory.net/rapid"
)

// TestAppendLoadReportMatchesEncodingJSON: the hand-written encoder writes
// json.Marshal's bytes for any report, strings that need escaping included.
func TestAppendLoadReportMatchesEncodingJSON(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		str := rapid.OneOf(rapid.StringMatching(`[A-Za-z0-9_.:/-]{0,12}`), rapid.String())
		opt32 := func(name string) *uint32 {
			if rapid.Bool().Draw(t, name+" set") {
				v := rapid.Uint32().Draw(t, name)
				return &v
			}
			return nil
		}
		opt64 := func(name string) *uint64 {
			if rapid.Bool().Draw(t, name+" set") {
				v := rapid.Uint64().Draw(t, name)
				return &v
			}
			return nil
		}
		r := LoadReport{DPStart: opt32("start"), DPSize: opt32("size"), MaxBatched: opt64("batched"),
			TotalKV: rapid.Uint64().Draw(t, "kv"), MaxActive: opt64("active"), Draining: rapid.Bool().Draw(t, "draining"),
			TTLms: opt64("ttl"), Instance: str.Draw(t, "instance"), SeenSeq: opt64("seen"),
			CompactDispatch: rapid.SampledFrom([]uint64{0, 1, 1 << 40}).Draw(t, "compact")}
		if rapid.Bool().Draw(t, "id set") {
			id := str.Draw(t, "id")
			r.WorkerID = &id
		}
		if rapid.Bool().Draw(t, "taints set") {
			r.Taints = rapid.SliceOfN(str, 0, 3).Draw(t, "taints")
		}
		if rapid.Bool().Draw(t, "ranks set") {
			r.Ranks = rapid.SliceOfN(rapid.Custom(func(t *rapid.T) RankLoad {
				return RankLoad{Rank: rapid.Uint32().Draw(t, "rank"), ActivePrefillTokens: rapid.Uint64().Draw(t, "prefill"),
					ActiveDecodeBlocks: rapid.Uint64().Draw(t, "decode"), KVUsedBlocks: rapid.Uint64().Draw(t, "used"),
					ActiveRequests: rapid.Uint64().Draw(t, "requests")}
			}), 0, 3).Draw(t, "ranks")
		}
		want, err := json.Marshal(&r)
		if err != nil {
			t.Fatal(err)
		}
		if got := AppendLoadReport([]byte("x"), &r); string(got[1:]) != string(want) || got[0] != 'x' {
			t.Fatalf("got  %s\nwant x%s", got, want)
		}
	})
}

func BenchmarkAppendLoadReport(b *testing.B) {
	id, start, size, ttl, seen := "w12", uint32(0), uint32(2), uint64(3000), uint64(123456)
	r := LoadReport{WorkerID: &id, DPStart: &start, DPSize: &size, TTLms: &ttl, Instance: "5f2c1e0a9b8d7c6e", SeenSeq: &seen,
		Ranks: []RankLoad{{Rank: 0, ActivePrefillTokens: 1024, ActiveRequests: 3}, {Rank: 1}}, CompactDispatch: 1}
	b.Run("hand", func(b *testing.B) {
		buf := make([]byte, 0, 512)
		for b.Loop() {
			buf = AppendLoadReport(buf[:0], &r)
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		for b.Loop() {
			_, _ = json.Marshal(&r)
		}
	})
}

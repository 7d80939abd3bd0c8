package filters_test

import (
	"testing"

	"fairdispatch/filters"
	"fairdispatch/kvindex"
	"fairdispatch/request"
	"fairdispatch/wire"
)

// TestSelectKVPerRank: with the index, the credit is per rank and replaces
// Dispatch-Worker-Overlap: worker a's rank 1 holds the prompt and wins over
// the less loaded rank 0 and over worker b, which the producer's header
// claims; without hashes the header decides.
func TestSelectKVPerRank(t *testing.T) {
	reg := registry(t, spec{id: "a", prefill: []uint64{0, 16}}, spec{id: "b", prefill: []uint64{0}})
	x, err := kvindex.New(kvindex.Config{Weights: kvindex.DefaultWeights, MaxBlocks: 1 << 16})
	if err != nil {
		t.Fatal(err)
	}
	prompt := []uint64{1, 2, 3, 4}
	ev := &wire.KVEvent{Instance: "i", ID: 1, Rank: 1}
	ev.Stored[wire.Device] = prompt
	if _, err := x.Apply("a", ev); err != nil {
		t.Fatal(err)
	}
	s := newSelector(filters.DefaultScoring(), filters.Thresholds{}, 1)
	s.KV = x
	header := []request.Overlap{{Worker: "b", Tokens: 64}}
	r := &request.Snapshot{ISL: 64, Route: &request.Route{Hashes: prompt, Overlap: header}}
	if ch, code := s.Select(reg, r); code != "" || ch.Worker.ID != "a" || ch.Rank != 1 {
		t.Fatalf("with hashes: got %v/%d (%s), want a/1", ch.Worker, ch.Rank, code)
	}
	r = &request.Snapshot{ISL: 64, Route: &request.Route{Overlap: header}}
	if ch, code := s.Select(reg, r); code != "" || ch.Worker.ID != "b" {
		t.Fatalf("without hashes: got %v/%d (%s), want b", ch.Worker, ch.Rank, code)
	}
}

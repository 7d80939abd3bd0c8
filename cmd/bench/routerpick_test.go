package main

import (
	"testing"

	"fairdispatch/wire"
)

func testPicker(t *testing.T, policy string, workers ...string) *picker {
	t.Helper()
	p, err := newPicker(policy, 64, 1, 1)
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range workers {
		id := w
		zero := uint64(0)
		p.report(&wire.LoadReport{WorkerID: &id, SeenSeq: &zero})
	}
	return p
}

func stored(p *picker, t *testing.T, worker string, hs ...uint64) {
	t.Helper()
	ev := wire.KVEvent{Instance: "i-" + worker}
	ev.Stored[wire.Device] = hs
	if err := p.kvEvent(worker, &ev); err != nil {
		t.Fatal(err)
	}
}

// Round robin sends request n to worker n mod N, whatever the loads and caches.
func TestRouterRoundRobin(t *testing.T) {
	p := testPicker(t, policyRR, "a", "b", "c")
	stored(p, t, "c", 1, 2, 3)
	var got []string
	for i := range 7 {
		w, _ := p.pick(192, []uint64{1, 2, 3})
		p.dispatched(w, string(rune('0'+i)), 192, 192)
		got = append(got, w.id)
	}
	if want := []string{"a", "b", "c", "a", "b", "c", "a"}; !equal(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
}

// Least loaded sends each request to a worker with the fewest unfinished
// requests, counting its own dispatches until their completion records.
func TestRouterLeastLoaded(t *testing.T) {
	p := testPicker(t, policyLL, "a", "b", "c")
	counts := map[string]int{}
	for i := range 6 {
		w, _ := p.pick(64, nil)
		p.dispatched(w, "r"+string(rune('0'+i)), 64, 64)
		counts[w.id]++
	}
	if counts["a"] != 2 || counts["b"] != 2 || counts["c"] != 2 {
		t.Fatalf("six requests over three idle workers: got %v, want two each", counts)
	}
	// Finish both of b's: b is now the least loaded, every time until it
	// catches up.
	for id, a := range p.active {
		if a.w.id == "b" {
			p.completed(id)
		}
	}
	for i := range 2 {
		w, _ := p.pick(64, nil)
		if w.id != "b" {
			t.Fatalf("pick %d after b emptied: got %s, want b", i, w.id)
		}
		p.dispatched(w, "s"+string(rune('0'+i)), 64, 64)
	}
}

// The cache-aware router follows Dynamo's cost: with equal loads the largest
// overlap wins; a worker whose prefill load exceeds the overlap's saving
// loses to an idle one; decode blocks count.
func TestRouterCacheAware(t *testing.T) {
	p := testPicker(t, policyKV, "a", "b", "c")
	hashes := []uint64{10, 11, 12, 13}
	stored(p, t, "a", 10)
	stored(p, t, "b", 10, 11, 12)
	w, overlap := p.pick(4*64, hashes)
	if w.id != "b" || overlap != 3 {
		t.Fatalf("equal loads: got %s with %d cached blocks, want b with 3", w.id, overlap)
	}
	// b reports 4 blocks of prefill queued: costs a 3 (3 blocks to prefill),
	// b 4 + 1 = 5, c 4.
	id, four := "b", uint64(4*64)
	seen := uint64(0)
	p.report(&wire.LoadReport{WorkerID: &id, SeenSeq: &seen, Ranks: []wire.RankLoad{{ActivePrefillTokens: four}}})
	if w, _ := p.pick(4*64, hashes); w.id != "a" {
		t.Errorf("b loaded with 4 blocks of prefill: got %s, want a (cost 3 against b's 5 and c's 4)", w.id)
	}
	// A dispatch counts as prefill until a report covers it, and its blocks
	// as decode blocks until its completion.
	wa := p.byID["a"]
	seq := p.dispatched(wa, "x", 64*8, 64*8)
	if got := wa.prefillTokens(); got != 64*8 {
		t.Errorf("a's prefill after a dispatch: got %d, want %d", got, 64*8)
	}
	ida := "a"
	p.report(&wire.LoadReport{WorkerID: &ida, SeenSeq: &seq})
	if got := wa.prefillTokens(); got != 0 || wa.decodeBlocks != 8 {
		t.Errorf("after a report counting it: prefill %d, decode blocks %d; want 0 and 8", got, wa.decodeBlocks)
	}
	if w, _ := p.pick(4*64, hashes); w.id != "c" {
		t.Errorf("a holding 8 decode blocks: got %s, want c (cost 4 against a's 3 + 8 and b's 5)", w.id)
	}
	p.completed("x")
	if wa.decodeBlocks != 0 || wa.active != 0 {
		t.Errorf("after x's completion: %d decode blocks, %d active", wa.decodeBlocks, wa.active)
	}
}

// KV events: removals and a new instance drop blocks; a cleared drops all.
func TestRouterKVEvents(t *testing.T) {
	p := testPicker(t, policyKV, "a", "b")
	stored(p, t, "a", 1, 2, 3)
	stored(p, t, "b", 1, 2)
	rm := wire.KVEvent{Instance: "i-a"}
	rm.Removed[wire.Device] = []uint64{2}
	if err := p.kvEvent("a", &rm); err != nil {
		t.Fatal(err)
	}
	if got := p.overlap(p.byID["a"], []uint64{1, 2, 3}); got != 1 {
		t.Errorf("a after removing 2: overlap %d, want 1", got)
	}
	if got := p.overlap(p.byID["b"], []uint64{1, 2, 3}); got != 2 {
		t.Errorf("b untouched: overlap %d, want 2", got)
	}
	if err := p.kvEvent("a", &wire.KVEvent{Instance: "i-a2"}); err != nil {
		t.Fatal(err)
	}
	if got := p.overlap(p.byID["a"], []uint64{1}); got != 0 {
		t.Errorf("a after a restart: overlap %d, want 0", got)
	}
	if err := p.kvEvent("b", &wire.KVEvent{Instance: "i-b", Cleared: wire.AllTiers}); err != nil {
		t.Fatal(err)
	}
	if len(p.held) != 0 {
		t.Errorf("after both dropped everything: %d blocks held", len(p.held))
	}
	// What the router reads off the stream: an encoded event, parsed.
	ev := wire.KVEvent{Instance: "i-b", ID: 9}
	ev.Stored[wire.Device] = []uint64{7, 8}
	data, err := wire.EncodeKVEvent(&ev)
	if err != nil {
		t.Fatal(err)
	}
	parsed, err := wire.ParseKVEvent(data)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.kvEvent("b", &parsed); err != nil {
		t.Fatal(err)
	}
	if got := p.overlap(p.byID["b"], []uint64{7, 8, 9}); got != 2 {
		t.Errorf("b after an encoded event: overlap %d, want 2", got)
	}
}

func equal(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

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
		p.dispatched(w, string(rune('0'+i)), 192, nil, 192)
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
		p.dispatched(w, "r"+string(rune('0'+i)), 64, nil, 64)
		counts[w.id]++
	}
	if counts["a"] != 2 || counts["b"] != 2 || counts["c"] != 2 {
		t.Fatalf("six requests over three idle workers: got %v, want two each", counts)
	}
	// Finish both of b's: b is now the least loaded, every time until it
	// catches up.
	for id, a := range p.active {
		if a.w.id == "b" {
			p.completed(id, "b", a.seq)
		}
	}
	for i := range 2 {
		w, _ := p.pick(64, nil)
		if w.id != "b" {
			t.Fatalf("pick %d after b emptied: got %s, want b", i, w.id)
		}
		p.dispatched(w, "s"+string(rune('0'+i)), 64, nil, 64)
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
	seq := p.dispatched(wa, "x", 64*8, nil, 64*8)
	if got := wa.prefillTokens(); got != 64*8 {
		t.Errorf("a's prefill after a dispatch: got %d, want %d", got, 64*8)
	}
	ida := "a"
	p.report(&wire.LoadReport{WorkerID: &ida, SeenSeq: &seq})
	if got := wa.prefillTokens(); got != 0 || wa.decodeBlocks() != 8 {
		t.Errorf("after a report counting it: prefill %d, decode blocks %d; want 0 and 8", got, wa.decodeBlocks())
	}
	if w, _ := p.pick(4*64, hashes); w.id != "c" {
		t.Errorf("a holding 8 decode blocks: got %s, want c (cost 4 + 4 against a's 3 + 8 + 4 and b's 5 + 4)", w.id)
	}
	p.completed("x", "a", seq+1) // another dispatch's record: nothing released
	if wa.decodeBlocks() != 8 || wa.active != 1 {
		t.Errorf("after another dispatch's record of x: %d decode blocks, %d active; want 8 and 1", wa.decodeBlocks(), wa.active)
	}
	p.completed("x", "a", seq)
	if wa.decodeBlocks() != 0 || wa.active != 0 {
		t.Errorf("after x's completion: %d decode blocks, %d active", wa.decodeBlocks(), wa.active)
	}
}

// Dynamo's decode term counts a block shared by a worker's active requests
// once, and adds the request's blocks not among them: the next turn of a
// conversation stays on the worker that runs its earlier turns and holds
// its prefix, rather than moving to an idle one and missing the cache (the
// fourth review's case: three turns on a 100-block prefix).
func TestRouterCacheAwareCountsSharedBlocksOnce(t *testing.T) {
	p := testPicker(t, policyKV, "a", "b")
	prefix := make([]uint64, 100)
	for i := range prefix {
		prefix[i] = uint64(1000 + i)
	}
	stored(p, t, "a", prefix...)
	wa := p.byID["a"]
	var seq uint64
	for i := range 3 {
		turn := append(append([]uint64(nil), prefix...), uint64(2000+i))
		seq = p.dispatched(wa, "turn"+string(rune('0'+i)), 101*64, turn, 64)
	}
	ida := "a"
	p.report(&wire.LoadReport{WorkerID: &ida, SeenSeq: &seq}) // their prefill done
	if got := wa.decodeBlocks(); got != 103 {
		t.Fatalf("a's active blocks: %d, want 103 (the shared 100 once, and each turn's own)", got)
	}
	next := append(append([]uint64(nil), prefix...), 3000)
	// a: 1 block to prefill + 103 active + 1 new = 105; b: 101 + 0 + 101 = 202.
	if w, overlap := p.pick(101*64, next); w.id != "a" || overlap != 100 {
		t.Errorf("the next turn: got %s with %d cached blocks, want a with 100", w.id, overlap)
	}
}

// A router's log line of retries is read back.
func TestRouterRetriesFromTheLog(t *testing.T) {
	path := t.TempDir() + "/router.log"
	if err := os.WriteFile(path, []byte("router: kv event of w1: x\nrouter: 7 dispatches placed again (refused, or unanswered for 2s)\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := routerRetries(path); got != 7 {
		t.Errorf("routerRetries = %d, want 7", got)
	}
	if got := routerRetries(path + ".missing"); got != 0 {
		t.Errorf("without a log: %d, want 0", got)
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

// A --fleet-systems name that is no system is refused, naming it, rather
// than left out of the run.
func TestFleetSystemsRefusesAnUnknownName(t *testing.T) {
	o := fleetOptions{engines: 8, speedup: 70}
	if err := o.parse("0.8", "rr,fair-nokv-nokey"); err == nil || !strings.Contains(err.Error(), `"fair-nokv-nokey"`) {
		t.Errorf("a typo: %v, want an error naming it", err)
	}
	if err := o.parse("0.8", "rr,kv"); err != nil || len(o.systems) != 2 {
		t.Errorf("rr,kv: %v, %d systems; want 2", err, len(o.systems))
	}
	if err := o.parse("0.8", "all"); err != nil || len(o.systems) != len(fleetSystems) {
		t.Errorf("all: %v, %d systems", err, len(o.systems))
	}
}

// A request JetStream delivers again while its first placement is active
// (the worker never acknowledged it) releases that placement's load and
// blocks, and counts as placed again.
func TestRouterRedeliveryReleasesTheFirstPlacement(t *testing.T) {
	p := testPicker(t, policyKV, "a", "b")
	wa, wb := p.byID["a"], p.byID["b"]
	p.dispatched(wa, "x", 128, []uint64{1, 2}, 128)
	p.dispatched(wb, "x", 128, []uint64{1, 2}, 128)
	if wa.active != 0 || wa.decodeBlocks() != 0 || wb.active != 1 || wb.decodeBlocks() != 2 || p.redelivered != 1 {
		t.Errorf("a: %d active, %d blocks; b: %d, %d; redelivered %d; want a released, b holding it, 1",
			wa.active, wa.decodeBlocks(), wb.active, wb.decodeBlocks(), p.redelivered)
	}
}

// A trace whose requests all arrive at 0 ms has no rate to scale to a load:
// the fleet bench says so before it starts anything, rather than replay at
// an infinite rate.
func TestFleetRefusesATraceWithNoSpan(t *testing.T) {
	path := filepath.Join(t.TempDir(), "trace.jsonl")
	rec := `{"timestamp":0,"input_length":1,"output_length":1,"hash_ids":[7]}` + "\n"
	if err := os.WriteFile(path, []byte(rec+rec), 0o644); err != nil {
		t.Fatal(err)
	}
	b := &bench{opt: options{fleet: fleetOptions{trace: path, engines: 1, speedup: 1}}, started: time.Now()}
	if _, err := b.fleet(nil); err == nil || !strings.Contains(err.Error(), "all arrive at 0 ms") {
		t.Errorf("a trace of one instant: %v, want an error saying so", err)
	}
}

// An --only part that is no part is refused, naming it, rather than a run
// that measures nothing and exits 0.
func TestOnlyRefusesAnUnknownPart(t *testing.T) {
	if _, err := parseOptions([]string{"--only", "bare,fiar"}); err == nil || !strings.Contains(err.Error(), `no part "fiar"`) {
		t.Errorf("a typo: %v, want an error naming it", err)
	}
	if _, err := parseOptions([]string{"--only", strings.Join(onlyParts, ",")}); err != nil {
		t.Errorf("every part: %v", err)
	}
}

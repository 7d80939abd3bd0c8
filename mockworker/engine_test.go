package mockworker

import (
	"slices"
	"testing"
	"time"

	"fairdispatch/workerkit"
)

func testEngine(t *testing.T, cfg Config) *engine {
	t.Helper()
	cfg, err := cfg.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	return newEngine(cfg)
}

// The seed workload: one worker, four sequences, 512-token prompts, one output token.
func TestEngineSeedWorkload(t *testing.T) {
	e := testEngine(t, Config{ID: "w1", MaxNumSeqs: 4, PrefillTokensPerSec: 20000})
	t0 := time.Unix(1000, 0)
	for i := range 6 {
		if !e.admit(t0, &job{id: string(rune('a' + i)), rank: 0, uncached: 512, blocks: 33, out: 1}) {
			t.Fatalf("admit %d refused", i)
		}
	}
	want := workerkit.RankLoad{ActivePrefillTokens: 6 * 512, ActiveRequests: 6, KVUsedBlocks: 4 * 33}
	if got := e.rank(0).load; got != want {
		t.Errorf("load after 6 arrivals: got %+v, want %+v", got, want)
	}
	prefill := 25600 * time.Microsecond // 512 / 20000 s
	next, ok := e.next()
	if !ok || !next.Equal(t0.Add(prefill)) {
		t.Errorf("next event: got %v %v, want %v", next, ok, t0.Add(prefill))
	}
	if done := e.advance(t0.Add(prefill - time.Nanosecond)); len(done) != 0 {
		t.Errorf("finished before prefill ends: %d", len(done))
	}
	done := e.advance(t0.Add(prefill))
	if len(done) != 4 || done[0].id != "a" || done[3].id != "d" {
		t.Fatalf("first wave: got %d finished, want a..d", len(done))
	}
	want = workerkit.RankLoad{ActivePrefillTokens: 2 * 512, ActiveRequests: 2, KVUsedBlocks: 2 * 33}
	if got := e.rank(0).load; got != want {
		t.Errorf("load after the first wave: got %+v, want %+v", got, want)
	}
	// A late wake-up still starts the waiting requests when the slots freed.
	done = e.advance(t0.Add(10 * prefill))
	if len(done) != 2 || !done[0].startedAt.Equal(t0.Add(prefill)) || !done[1].finishAt.Equal(t0.Add(2*prefill)) {
		t.Fatalf("second wave: got %d finished, started %v", len(done), done[0].startedAt)
	}
	if got := e.rank(0).load; got != (workerkit.RankLoad{}) {
		t.Errorf("load when idle: got %+v, want zero", got)
	}
	if _, ok := e.next(); ok {
		t.Errorf("next event when idle: got one, want none")
	}
}

func TestEngineDecode(t *testing.T) {
	e := testEngine(t, Config{ID: "w1", MaxNumSeqs: 1, PrefillTokensPerSec: 1000, DecodePerToken: 10 * time.Millisecond})
	t0 := time.Unix(1000, 0)
	e.admit(t0, &job{id: "a", uncached: 100, blocks: 7, out: 3})
	e.advance(t0.Add(100 * time.Millisecond))
	want := workerkit.RankLoad{ActiveDecodeBlocks: 7, KVUsedBlocks: 7, ActiveRequests: 1}
	if got := e.rank(0).load; got != want {
		t.Errorf("load while decoding: got %+v, want %+v", got, want)
	}
	done := e.advance(t0.Add(120 * time.Millisecond))
	if len(done) != 1 || !done[0].finishAt.Equal(t0.Add(120*time.Millisecond)) {
		t.Fatalf("decode: got %d finished", len(done))
	}
}

func TestEngineRefuseWhenFull(t *testing.T) {
	e := testEngine(t, Config{ID: "w1", DPStart: 3, DPSize: 2, MaxNumSeqs: 1, RefuseWhenFull: 2})
	t0 := time.Unix(1000, 0)
	var got []bool
	for range 4 {
		got = append(got, e.admit(t0, &job{rank: 4, uncached: 10}))
	}
	if want := []bool{true, true, true, false}; !slices.Equal(got, want) {
		t.Errorf("admissions: got %v, want %v", got, want)
	}
	if !e.admit(t0, &job{rank: 3, uncached: 10}) {
		t.Errorf("other rank refused")
	}
}

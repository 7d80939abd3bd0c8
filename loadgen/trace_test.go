package loadgen_test

import (
	"context"
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"fairdispatch/internal/natstest"
	"fairdispatch/loadgen"
	"fairdispatch/mockworker"
	"fairdispatch/mockworker/batching"
	"fairdispatch/wire"
)

const mooncake = "mooncake-synthetic.jsonl.gz"

// sharedTrace reads the Mooncake synthetic trace from ../shared/traces/
// (never a copy in the repository), skipping when it is not there.
func sharedTrace(t *testing.T) []loadgen.TraceRecord {
	t.Helper()
	path, err := loadgen.FindTrace(mooncake)
	if err != nil {
		t.Skip(err)
	}
	recs, err := loadgen.ReadTraceFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return recs
}

// The shared trace parses as its README describes it: 3,993 requests over
// 1,022 s, and 64% of its blocks (65% of its prompt tokens) reused by an
// unbounded cache. The replay's protocol hashes give the same reuse as the
// trace's hash ids (on a prefix of the trace: hashing all of it takes
// seconds under the race detector).
func TestReadTheSharedTrace(t *testing.T) {
	recs := sharedTrace(t)
	if len(recs) != 3993 || recs[len(recs)-1].Timestamp != 1022025 {
		t.Fatalf("got %d records ending at %d ms, want 3993 ending at 1022025", len(recs), recs[len(recs)-1].Timestamp)
	}
	if got := traceReuse(recs); got < 0.64 || got > 0.66 {
		t.Errorf("reuse by hash ids: got %.3f, want about 0.65", got)
	}
	head := recs[:600]
	reqs, err := loadgen.PrepareReplay(head, loadgen.ReplayOptions{BlockSize: 64, Class: "chat"})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := loadgen.IdealReuse(reqs, 64), traceReuse(head); math.Abs(got-want) > 0.005 {
		t.Errorf("first 600 records: reuse by protocol hashes %.4f, by hash ids %.4f", got, want)
	}
	for i, r := range reqs {
		if r.ISL != head[i].InputLength || r.Output != head[i].OutputLength || len(r.Hashes) != r.ISL/64 {
			t.Fatalf("request %d: isl %d output %d hashes %d, want %d %d %d", i, r.ISL, r.Output, len(r.Hashes),
				head[i].InputLength, head[i].OutputLength, head[i].InputLength/64)
		}
	}
}

// traceReuse is the trace's own unbounded-cache reuse: each record's longest
// prefix of hash ids seen before, in tokens (at most its input), over all
// input tokens.
func traceReuse(recs []loadgen.TraceRecord) float64 {
	seen := map[int64]bool{}
	var cached, total int
	for _, r := range recs {
		k := 0
		for k < len(r.HashIDs) && seen[r.HashIDs[k]] {
			k++
		}
		cached += min(k*512, r.InputLength-1)
		total += r.InputLength
		for _, h := range r.HashIDs {
			seen[h] = true
		}
	}
	return float64(cached) / float64(total)
}

// Two records sharing their first k hash ids share exactly their first
// k × 512 tokens, so exactly their first k × 512 / B protocol hashes, at
// every block size B dividing 512.
func TestReplayHashesShareExactlyTheSharedBlocks(t *testing.T) {
	recs := []loadgen.TraceRecord{
		{Timestamp: 0, InputLength: 3 * 512, OutputLength: 1, HashIDs: []int64{7, 8, 9}},
		{Timestamp: 1, InputLength: 4*512 + 100, OutputLength: 2, HashIDs: []int64{7, 8, 10, 11, 12}},
		{Timestamp: 2, InputLength: 300, OutputLength: 3, HashIDs: []int64{7}}, // a partial first block
		{Timestamp: 3, InputLength: 2 * 512, OutputLength: 1, HashIDs: []int64{99, 8}},
	}
	a := loadgen.TraceTokens(nil, 7, 512)
	if b := loadgen.TraceTokens(nil, 7, 300); !slices.Equal(a[:300], b) {
		t.Errorf("a partial block's tokens are not the full block's first ones")
	}
	for _, bs := range []int{1, 16, 64, 512} {
		reqs, err := loadgen.PrepareReplay(recs, loadgen.ReplayOptions{BlockSize: bs, Class: "chat"})
		if err != nil {
			t.Fatal(err)
		}
		per := 512 / bs
		common := func(x, y []uint64) int {
			n := 0
			for n < len(x) && n < len(y) && x[n] == y[n] {
				n++
			}
			return n
		}
		for _, c := range []struct{ i, j, blocks int }{{0, 1, 2}, {0, 2, 0}, {1, 3, 0}} {
			want := c.blocks * per
			if c.i == 0 && c.j == 2 {
				want = 300 / bs // record 2 is 300 tokens of block 7
			}
			if got := common(reqs[c.i].Hashes, reqs[c.j].Hashes); got != want {
				t.Errorf("block size %d: records %d and %d share %d hashes, want %d", bs, c.i, c.j, got, want)
			}
		}
		// The hashes are those of docs/protocol.md, Block hashes, over the
		// derived tokens.
		tokens := append(loadgen.TraceTokens(nil, 7, 512), loadgen.TraceTokens(nil, 8, 512)...)
		tokens = append(tokens, loadgen.TraceTokens(nil, 9, 512)...)
		if want := wire.ChainHashes(nil, tokens, bs); !slices.Equal(reqs[0].Hashes, want) {
			t.Errorf("block size %d: hashes are not the chained hashes of the derived tokens", bs)
		}
	}
	if _, err := loadgen.PrepareReplay(recs, loadgen.ReplayOptions{BlockSize: 48, Class: "chat"}); err == nil {
		t.Errorf("block size 48 (not dividing 512): got nil, want an error")
	}
}

// The tenant rule: a conversation (the records sharing their first hash id)
// belongs to one tenant, and the tenants get about their share of the
// trace's conversations.
func TestReplayTenantsByConversation(t *testing.T) {
	recs := sharedTrace(t)
	tenants := []loadgen.TraceTenant{{Key: "a", Share: 4}, {Key: "b", Share: 3}, {Key: "c", Share: 2}, {Key: "d", Share: 1}}
	convs := map[string]int{}
	of := map[int64]string{}
	for _, r := range recs {
		if _, ok := of[r.HashIDs[0]]; !ok {
			of[r.HashIDs[0]] = loadgen.TenantOf(r.HashIDs[0], tenants)
			convs[of[r.HashIDs[0]]]++
		}
	}
	for _, tn := range tenants {
		share := float64(convs[tn.Key]) / float64(len(of))
		if math.Abs(share-tn.Share/10) > 0.03 {
			t.Errorf("tenant %s: %.3f of the %d conversations, want %.2f", tn.Key, share, len(of), tn.Share/10)
		}
	}
	reqs, err := loadgen.PrepareReplay(recs[:300], loadgen.ReplayOptions{BlockSize: 512, Class: "chat", Tenants: tenants})
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range reqs {
		if r.Conversation != recs[i].HashIDs[0] || r.Tenant != of[r.Conversation] {
			t.Errorf("request %d: conversation %d tenant %q, want %d %q", i, r.Conversation, r.Tenant, recs[i].HashIDs[0], of[recs[i].HashIDs[0]])
		}
	}
}

func TestReadTraceRejectsBadRecords(t *testing.T) {
	for _, c := range []struct{ text, want string }{
		{`{"timestamp":0,"input_length":600,"output_length":1,"hash_ids":[1]}`, "1 hash ids for 600 input tokens: want 2"},
		{`{"timestamp":0,"input_length":0,"output_length":1,"hash_ids":[]}`, "want >= 1"},
		{`{"timestamp":5,"input_length":1,"output_length":1,"hash_ids":[1]}` + "\n" + `{"timestamp":4,"input_length":1,"output_length":1,"hash_ids":[1]}`, "before"},
		{`{"timestamp":`, "line 1"},
		{`{"timestamp":-1,"input_length":1,"output_length":1,"hash_ids":[1]}`, "timestamp -1: want >= 0"},
		{"", "no records"},
		{"\n  \n", "no records"},
	} {
		_, err := loadgen.ReadTrace(strings.NewReader(c.text))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want an error with %q", c.text, err, c.want)
		}
	}
}

// A short replay through the fake dispatcher to a batched mock engine: every
// request is published no sooner than its time over the speedup, and its
// completion carries its tenant (sent or not), its output tokens and its
// first token.
func TestRunReplay(t *testing.T) {
	_, nc := natstest.StartServer(t)
	model := batching.Llama70BH100.Scaled(1000)
	startMock(t, nc, mockworker.Config{ID: "w1", Model: &model})
	natstest.StartFakeDispatcher(t, nc, "dispatch", 30*time.Second, toW1)

	var recs []loadgen.TraceRecord
	for i := range 12 {
		recs = append(recs, loadgen.TraceRecord{Timestamp: int64(i) * 100, InputLength: 600, OutputLength: 1 + i, HashIDs: []int64{int64(i % 3), int64(100 + i)}})
	}
	reqs, err := loadgen.PrepareReplay(recs, loadgen.ReplayOptions{BlockSize: 64, Class: "chat",
		Tenants: []loadgen.TraceTenant{{Key: "x", Share: 1}, {Key: "y", Share: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	// The schedule runs from a moment inside Run, after this one: a request
	// published before its time is published less than its time after before.
	before := time.Now()
	res, err := loadgen.Run(context.Background(), nc, loadgen.Config{
		Replay: &loadgen.Replay{Requests: reqs, Speedup: 10}, Timeout: 30 * time.Second,
	}, logger(t))
	if err != nil {
		t.Fatal(err)
	}
	if !res.Complete || len(res.Completions) != 12 || res.Classes[0] != "chat" {
		t.Fatalf("got complete %v, %d completions, classes %v", res.Complete, len(res.Completions), res.Classes)
	}
	for _, c := range res.Completions {
		n, err := strconv.Atoi(c.RequestID[strings.LastIndexByte(c.RequestID, '-')+1:])
		if err != nil {
			t.Fatal(err)
		}
		if got, want := c.PublishedAt.Sub(before), reqs[n].At/10; got < want {
			t.Errorf("request %d published at %v, before its time %v", n, got, want)
		}
		if c.Key != "" || c.Tenant != reqs[n].Tenant || c.OutputTokens != uint64(reqs[n].Output) || c.TTFT <= 0 || c.TTFT > c.Latency {
			t.Errorf("request %d: key %q tenant %q output %d ttft %v latency %v; want no key, tenant %q, output %d, 0 < ttft <= latency",
				n, c.Key, c.Tenant, c.OutputTokens, c.TTFT, c.Latency, reqs[n].Tenant, reqs[n].Output)
		}
	}
}

package mockworker_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"fairdispatch/internal/natstest"
	"fairdispatch/mockworker"
	"fairdispatch/mockworker/batching"
	"fairdispatch/wire"
)

// The batched engine behind the fake dispatcher: output lengths honoured, the
// first token's time in the record, the second of two requests sharing a
// prefix served from the cache, and the cache's blocks published as KV
// cache events.
func TestBatchedEngineServesFromItsCache(t *testing.T) {
	_, nc := natstest.StartServer(t)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateStream(context.Background(), jetstream.StreamConfig{Name: "DISPATCH_KV", Subjects: []string{"dispatch.kv.*"}}); err != nil {
		t.Fatal(err)
	}
	received := collect(t, nc)
	recs := func() map[string]mockworker.Completion { // the last record of each request
		by := map[string]mockworker.Completion{}
		for _, r := range received() {
			by[r.RequestID] = r.Completion
		}
		return by
	}

	model := batching.Llama70BH100.Scaled(100)
	w := startMock(t, nc, mockworker.Config{ID: "w1", Model: &model})
	natstest.StartFakeDispatcher(t, nc, "dispatch", 30*time.Second, toW1)

	tokens := make([]uint32, 4096)
	for i := range tokens {
		tokens[i] = uint32(i)
	}
	hashes := wire.ChainHashes(nil, tokens, model.BlockSize) // 64 blocks
	send := func(id string, out int) {
		m := nats.NewMsg("dispatch.req.chat")
		m.Header.Set(jetstream.MsgIDHeader, id)
		m.Header.Set("Dispatch-ISL-Tokens", strconv.Itoa(len(tokens)))
		m.Header.Set("Dispatch-Output-Tokens", strconv.Itoa(out))
		m.Header.Set("Dispatch-Block-Hashes", wire.EncodeHashes(hashes))
		if _, err := js.PublishMsg(context.Background(), m); err != nil {
			t.Fatal(err)
		}
	}
	send("a", 7)
	natstest.Eventually(t, wait, func() bool { return len(recs()) == 1 }, "a's record")
	send("b", 3)
	natstest.Eventually(t, wait, func() bool { return len(recs()) == 2 }, "b's record")

	a, b := recs()["a"], recs()["b"]
	if a.OutputTokens != 7 || b.OutputTokens != 3 {
		t.Errorf("output tokens: got %d and %d, want 7 and 3 (Dispatch-Output-Tokens)", a.OutputTokens, b.OutputTokens)
	}
	if a.CachedTokens != 0 || a.PrefillTokens != 4096 || b.CachedTokens != 4095 || b.PrefillTokens != 1 {
		t.Errorf("cache: a cached %d prefilled %d, b cached %d prefilled %d; want 0 4096, 4095 1",
			a.CachedTokens, a.PrefillTokens, b.CachedTokens, b.PrefillTokens)
	}
	for _, c := range []mockworker.Completion{a, b} {
		if c.FirstTokenAt.IsZero() || c.FirstTokenAt.Before(c.StartedAt) || c.FinishedAt.Before(c.FirstTokenAt) {
			t.Errorf("%s: times out of order: started %v first token %v finished %v", c.RequestID, c.StartedAt, c.FirstTokenAt, c.FinishedAt)
		}
	}
	// a's prefill is one step of 4096 tokens; b's of one token is shorter.
	if a.FirstTokenAt.Sub(a.StartedAt) <= b.FirstTokenAt.Sub(b.StartedAt) {
		t.Errorf("prefill: a took %v, b (cached) %v; want b's shorter", a.FirstTokenAt.Sub(a.StartedAt), b.FirstTokenAt.Sub(b.StartedAt))
	}
	if got := w.CacheStats(); got.Requests != 2 || got.CachedTokens != 4095 {
		t.Errorf("cache stats: got %+v", got)
	}
	// a's blocks reach the stream as KV cache events: in an event of their
	// own, or in the start's resynchronisation when a ran before it.
	st, err := js.Stream(context.Background(), "DISPATCH_KV")
	if err != nil {
		t.Fatal(err)
	}
	natstest.Eventually(t, wait, func() bool {
		held := map[uint64]bool{}
		for seq := uint64(1); ; seq++ {
			m, err := st.GetMsg(context.Background(), seq)
			if err != nil {
				break
			}
			ev, err := wire.ParseKVEvent(m.Data)
			if err != nil {
				t.Errorf("event %d: %v", seq, err)
				return true
			}
			if ev.Cleared.Has(wire.Device) {
				clear(held)
			}
			for _, h := range ev.Removed[wire.Device] {
				delete(held, h)
			}
			for _, h := range ev.Stored[wire.Device] {
				held[h] = true
			}
		}
		for _, h := range hashes {
			if !held[h] {
				return false
			}
		}
		return true
	}, "a's blocks in the KV cache events")
}

// The batched engine streams one chunk per output token and stops a request
// cancelled midway, as the default engine does (engine_hooks.go answers
// through the batched engines).
func TestBatchedEngineStreamsAndCancels(t *testing.T) {
	_, nc := natstest.StartServer(t)
	acks := confirmAcks(t, nc)
	recs := collect(t, nc)
	model := batching.Llama70BH100.Scaled(10) // about 2 ms a decode step
	w := startMock(t, nc, mockworker.Config{ID: "w1", Model: &model})
	p := natstest.NewProducer(t, nc, "resp.s1", natstest.GoOK)
	dispatchTo(t, nc, "s1", 1, "resp.s1", map[string]string{wire.HeaderOutputTokens: "7"}, "prompt")
	p.WaitEnd(t, wait, "the end marker")
	if n := len(p.Of(wire.MsgChunk)); n != 7 {
		t.Errorf("%d chunks, want 7", n)
	}
	natstest.Eventually(t, wait, func() bool { return len(acks("s1")) == 1 }, "the confirmed +ACK")

	q := natstest.NewProducer(t, nc, "resp.c1", natstest.GoOK)
	dispatchTo(t, nc, "c1", 2, "resp.c1", map[string]string{wire.HeaderOutputTokens: "100000"}, "")
	natstest.Eventually(t, wait, func() bool { return len(q.Of(wire.MsgChunk)) >= 3 }, "a few chunks")
	q.SetAnswer(natstest.CancelPings)
	natstest.Eventually(t, wait, func() bool { return w.Stats().Cancelled == 1 }, "the job stopped")
	natstest.Eventually(t, wait, func() bool { return len(acks("c1")) == 1 && acks("c1")[0] == "+TERM cancelled" }, "the +TERM")
	natstest.Eventually(t, wait, func() bool {
		recs := recs()
		return len(recs) == 2 && recs[1].Status == wire.StatusCancelled && recs[1].OutputTokens > 0 && recs[1].OutputTokens < 100000
	}, "a cancelled record with the tokens made")
	natstest.Eventually(t, wait, func() bool { return w.Helper().Held() == 0 }, "nothing held")
}

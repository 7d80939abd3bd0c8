package engineworker

import (
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"fairdispatch/internal/fakeengine"
	"fairdispatch/internal/natstest"
	"fairdispatch/wire"
)

// streamBody is a streaming chat request of max output tokens.
func streamBody(words string, max int) []byte {
	b, _ := json.Marshal(map[string]any{"model": "fake-model", "stream": true, "max_tokens": max,
		"messages": []map[string]string{{"role": "system", "content": "a shared system prompt of some words to fill one block"}, {"role": "user", "content": words}}})
	return b
}

// chunkSeqs returns the Dispatch-Response-Seq of each chunk, in arrival order.
func chunkSeqs(p *natstest.Producer) []int {
	var out []int
	for _, m := range p.Of(wire.MsgChunk) {
		n, _ := strconv.Atoi(m.Header.Get(wire.HeaderResponseSeq))
		out = append(out, n)
	}
	return out
}

// TestStreamInOrderWithUsage: after the claim, each chunk of the engine's
// stream is one numbered chunk, in order, without the usage chunk the
// caller did not ask for; the end marker carries the engine's usage; the
// request is acknowledged (+ACK) and settled by a record of its real
// uncached tokens: the second run of the same prompt finds it cached.
func TestStreamInOrderWithUsage(t *testing.T) {
	t.Parallel()
	k := newRig(t, fakeengine.Config{PromptTokensDetails: true}, Config{})
	for i, id := range []string{"r1", "r2"} {
		p := k.producer("_RESP.t." + id)
		a := k.acks(id)
		if st := k.dispatch(id, uint64(i+1), "_RESP.t."+id, wire.APIChatCompletions, streamBody("one two three", 6)); st != "" {
			t.Fatalf("refused: %s", st)
		}
		// The record, the end marker and the acknowledgement reach the test
		// on subscriptions of their own, in no defined order: wait for all.
		natstest.Eventually(t, wait, func() bool {
			_, rec := k.record(id)
			_, end := endMarker(p)
			return rec && end && len(a.Final()) > 0
		}, "%s's completion record, end marker and acknowledgement", id)
		e, ok := endMarker(p)
		if !ok || e.Status != wire.EndOK || e.Chunks != 7 || e.FinishReason != "length" || e.Usage == nil || e.Usage.CompletionTokens != 6 {
			t.Fatalf("%s: end marker %+v: want ok after 7 chunks (role + 6 tokens), length, 6 completion tokens", id, e)
		}
		if got := chunkSeqs(p); !slices.Equal(got, []int{1, 2, 3, 4, 5, 6, 7}) {
			t.Fatalf("%s: chunk numbers %v, want 1..7 in order", id, got)
		}
		for _, m := range p.Of(wire.MsgChunk) {
			if !strings.Contains(string(m.Data), `"chat.completion.chunk"`) || strings.Contains(string(m.Data), `"usage"`) {
				t.Fatalf("%s: chunk %s: want a chat.completion.chunk without usage", id, m.Data)
			}
		}
		if got := a.Final(); !slices.Equal(got, []string{"+ACK"}) {
			t.Fatalf("%s: acknowledgements %q, want +ACK", id, got)
		}
		c, _ := k.record(id)
		u := e.Usage
		if c.Status != wire.StatusOK || c.PrefillTokens != u.PromptTokens-u.CachedTokens || c.OutputTokens != 6 || c.CachedTokens != u.CachedTokens || c.FairnessKey != "tenant" {
			t.Fatalf("%s: record %+v for usage %+v", id, c, u)
		}
		if (i == 0) != (u.CachedTokens == 0) {
			t.Fatalf("%s: %d cached tokens: want none the first time, some the second", id, u.CachedTokens)
		}
	}
}

// TestWithoutResponse: a request that asked for no response is run all the
// same, acknowledged with a confirmed +ACK and settled.
func TestWithoutResponse(t *testing.T) {
	t.Parallel()
	k := newRig(t, fakeengine.Config{}, Config{})
	a := k.acks("r1")
	k.dispatch("r1", 1, "", wire.APICompletions, []byte(`{"model":"fake-model","prompt":"a b c","max_tokens":2}`))
	natstest.Eventually(t, wait, func() bool { _, ok := k.record("r1"); return ok && len(a.Final()) > 0 }, "the record and the acknowledgement")
	if c, _ := k.record("r1"); c.PrefillTokens != 4 || c.OutputTokens != 2 || !slices.Equal(a.Final(), []string{"+ACK"}) {
		t.Fatalf("record %+v, acks %q", c, a.Final())
	}
}

// TestRefusedByTheEngine: a request the engine refuses (4xx) ends failed
// and refused, with the engine's message, is acknowledged (not run again)
// and refunded.
func TestRefusedByTheEngine(t *testing.T) {
	t.Parallel()
	k := newRig(t, fakeengine.Config{}, Config{})
	p := k.producer("_RESP.t.r1")
	a := k.acks("r1")
	k.dispatch("r1", 1, "_RESP.t.r1", wire.APIChatCompletions, []byte(`{"model":"other","messages":[{"role":"user","content":"x"}]}`))
	natstest.Eventually(t, wait, func() bool { _, ok := k.record("r1"); return ok }, "the record")
	natstest.Eventually(t, wait, func() bool { _, ok := endMarker(p); return ok && len(a.Final()) > 0 }, "the end marker and the acknowledgement")
	e, _ := endMarker(p)
	c, _ := k.record("r1")
	if e.Status != wire.EndFailed || !e.Refused || !strings.Contains(e.Error, "does not exist") || c.Status != wire.StatusFailed || c.PrefillTokens != 0 || !slices.Equal(a.Final(), []string{"+ACK"}) {
		t.Fatalf("end %+v, record %+v, acks %q", e, c, a.Final())
	}
}

// TestCancelAbortsTheEngineRequest: a producer that answers cancel to a
// ping, and a cancellation from the dispatcher, both stop the request:
// the end marker says cancelled, +TERM, the engine's request is aborted
// (its HTTP stream closed) and the record says what was used.
func TestCancelAbortsTheEngineRequest(t *testing.T) {
	t.Parallel()
	k := newRig(t, fakeengine.Config{DecodePerToken: 20 * time.Millisecond}, Config{})
	for i, how := range []string{"ping", "dispatcher"} {
		id := "r" + how
		p := k.producer("_RESP.t." + id)
		a := k.acks(id)
		k.dispatch(id, uint64(i+1), "_RESP.t."+id, wire.APIChatCompletions, streamBody("a long answer", 100000))
		natstest.Eventually(t, wait, func() bool { return len(p.Of(wire.MsgChunk)) >= 3 }, "%s: chunks", id)
		if how == "ping" {
			p.SetAnswer(func(string) string { return wire.AnswerCancel })
		} else {
			b, _ := json.Marshal(wire.Cancel{RequestID: id, Seq: uint64(i + 1), Reason: "cancel"})
			if err := k.nc.Publish("dispatch.cancel.eng", b); err != nil {
				t.Fatal(err)
			}
		}
		natstest.Eventually(t, wait, func() bool { _, ok := k.record(id); return ok }, "%s: the record", id)
		natstest.Eventually(t, wait, func() bool { return k.e.Stats().Aborted == uint64(i+1) && k.e.Stats().Running == 0 },
			"%s: the engine aborts the request (stats %+v)", id, k.e.Stats())
		// The record, the end marker and the acknowledgement reach the test
		// on different subscriptions: wait for each, as their order is not defined.
		natstest.Eventually(t, wait, func() bool { _, ok := endMarker(p); return ok && len(a.Final()) > 0 }, "%s: the end marker and the acknowledgement", id)
		e, _ := endMarker(p)
		c, _ := k.record(id)
		if e.Status != wire.EndCancelled || c.Status != wire.StatusCancelled || c.OutputTokens == 0 || !slices.Equal(a.Final(), []string{"+TERM cancelled"}) {
			t.Fatalf("%s: end %+v, record %+v, acks %q", id, e, c, a.Final())
		}
	}
}

// TestNobodyListeningAbortsTheEngineRequest: a producer that goes away
// (unsubscribes) is found by the next ping: +TERM, no end marker, the
// engine's request aborted.
func TestNobodyListeningAbortsTheEngineRequest(t *testing.T) {
	t.Parallel()
	k := newRig(t, fakeengine.Config{DecodePerToken: 20 * time.Millisecond}, Config{})
	p := k.producer("_RESP.t.r1")
	a := k.acks("r1")
	k.dispatch("r1", 1, "_RESP.t.r1", wire.APIChatCompletions, streamBody("a long answer", 100000))
	natstest.Eventually(t, wait, func() bool { return len(p.Of(wire.MsgChunk)) >= 3 }, "chunks")
	if err := p.Sub.Unsubscribe(); err != nil {
		t.Fatal(err)
	}
	natstest.Eventually(t, wait, func() bool { return k.e.Stats().Aborted == 1 }, "the engine aborts the request")
	natstest.Eventually(t, wait, func() bool { return slices.Equal(a.Final(), []string{"+TERM"}) }, "+TERM (got %q)", a.Final())
	// The record and the +TERM reach the test on subscriptions of their own,
	// in either order: wait for the record too.
	natstest.Eventually(t, wait, func() bool { _, ok := k.record("r1"); return ok }, "r1's completion record")
	if c, _ := k.record("r1"); c.Status != wire.StatusCancelled {
		t.Fatalf("record %+v: want status cancelled", c)
	}
}

// TestHungEngine: the engine hangs with one request past its first chunk
// and one waiting in the engine (max_num_seqs 1) before it: after the
// health checks fail the worker reports draining, refuses what comes, the
// request with chunks ends failed (+ACK) and the other is handed back
// (-NAK) with nothing sent to its producer but the claim and pings. When
// the engine answers again the worker takes requests again.
func TestHungEngine(t *testing.T) {
	t.Parallel()
	k := newRig(t, fakeengine.Config{MaxNumSeqs: 1, DecodePerToken: 20 * time.Millisecond}, Config{})
	p1, p2 := k.producer("_RESP.t.r1"), k.producer("_RESP.t.r2")
	a1, a2 := k.acks("r1"), k.acks("r2")
	k.dispatch("r1", 1, "_RESP.t.r1", wire.APIChatCompletions, streamBody("first", 100000))
	natstest.Eventually(t, wait, func() bool { return len(p1.Of(wire.MsgChunk)) >= 2 }, "r1 streams")
	k.dispatch("r2", 2, "_RESP.t.r2", wire.APIChatCompletions, streamBody("second", 10))
	natstest.Eventually(t, wait, func() bool { return k.e.Stats().Waiting == 1 }, "r2 waits in the engine")
	k.e.Hang(true)
	natstest.Eventually(t, wait, func() bool { r, _ := k.lastReport(); return r.Draining }, "the worker reports draining")
	natstest.Eventually(t, wait, func() bool { return len(a1.Final()) > 0 && len(a2.Final()) > 0 }, "both requests finished")
	if e, _ := endMarker(p1); e.Status != wire.EndFailed || e.Refused || !slices.Equal(a1.Final(), []string{"+ACK"}) {
		t.Fatalf("r1 (past its first chunk): end %+v, acks %q: want failed and +ACK", e, a1.Final())
	}
	if !slices.Equal(a2.Final(), []string{"-NAK"}) || len(p2.Of(wire.MsgChunk)) != 0 || len(p2.Of(wire.MsgEnd)) != 0 {
		t.Fatalf("r2 (before its first chunk): acks %q, %d chunks, %d end markers: want -NAK and nothing sent",
			a2.Final(), len(p2.Of(wire.MsgChunk)), len(p2.Of(wire.MsgEnd)))
	}
	if st := k.dispatch("r3", 3, "", wire.APICompletions, []byte(`{"prompt":"x"}`)); st != wire.StatusBusy {
		t.Fatalf("a dispatch to the hung engine's worker: status %q, want %s", st, wire.StatusBusy)
	}
	// The worker counts a request after its acknowledgement is sent: wait
	// for the counters rather than read them at once.
	var s Stats
	natstest.Eventually(t, wait, func() bool {
		s = k.w.Stats()
		return s.HandedBack == 1 && s.Failed == 1 && s.Unhealthy == 1
	}, "want one handed back, one failed, one unhealthy spell (stats at the deadline: %+v)", &s)
	k.e.Hang(false)
	natstest.Eventually(t, wait, func() bool { r, _ := k.lastReport(); return !r.Draining }, "the worker takes requests again")
}

// TestUnhealthyBeforeTheClaimHandsBack: a request whose engine turns
// unhealthy while its claim waits for the producer's answer is handed back
// (-NAK: it runs elsewhere), not left held with nobody to run it. The test
// stops the job as the health loop does, while the producer leaves the
// claim unanswered.
func TestUnhealthyBeforeTheClaimHandsBack(t *testing.T) {
	t.Parallel()
	k := newRig(t, fakeengine.Config{}, Config{})
	p := natstest.NewProducer(t, k.nc, "_RESP.t.r1", func(string) string { return "" }) // answers nothing
	a := k.acks("r1")
	k.dispatch("r1", 1, "_RESP.t.r1", wire.APIChatCompletions, streamBody("first", 10))
	natstest.Eventually(t, wait, func() bool { return len(p.Of(wire.MsgClaim)) > 0 }, "the claim")
	k.w.mu.Lock()
	for _, j := range k.w.jobs {
		j.cancel(errUnhealthy)
	}
	k.w.mu.Unlock()
	natstest.Eventually(t, wait, func() bool { return len(a.Final()) > 0 }, "r1 finished")
	if got := a.Final(); !slices.Equal(got, []string{"-NAK"}) || k.e.Stats().Requests != 0 {
		t.Fatalf("acks %q, engine requests %d: want -NAK and nothing sent to the engine", got, k.e.Stats().Requests)
	}
	if s := k.w.Stats(); s.HandedBack != 1 {
		t.Errorf("stats %+v: want one handed back", s)
	}
}

// TestStopLetsRequestsFinish: when Run's context ends, a running request
// finishes within StopGrace; the worker then stops, once the request's
// acknowledgement is confirmed (a Run that returned before it had the
// confirmation fail on the connection its caller closed).
func TestStopLetsRequestsFinish(t *testing.T) {
	t.Parallel()
	k := newRig(t, fakeengine.Config{DecodePerToken: 20 * time.Millisecond}, Config{StopGrace: 20 * time.Second})
	p := k.producer("_RESP.t.r1")
	a := k.acks("r1") // JetStream's side of the confirmed acknowledgement
	k.dispatch("r1", 1, "_RESP.t.r1", wire.APIChatCompletions, streamBody("x", 20))
	natstest.Eventually(t, wait, func() bool { return len(p.Of(wire.MsgChunk)) >= 1 }, "r1 streams")
	k.stop()
	select {
	case err := <-k.done:
		k.done <- err // for the cleanup
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(wait):
		t.Fatal("Run did not return")
	}
	// Run returns after the request's acknowledgement, not before: the
	// caller may close the connection at once.
	if e, ok := endMarker(p); !ok || e.Status != wire.EndOK || e.Chunks != 21 || !slices.Equal(a.Final(), []string{"+ACK"}) {
		t.Fatalf("end %+v, acks %q: want ok after 21 chunks, and +ACK", e, a.Final())
	}
}

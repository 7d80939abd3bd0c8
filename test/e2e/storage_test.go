package e2e

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"fairdispatch/loadgen"
	"fairdispatch/mockworker"
	"fairdispatch/wire"
)

// TestStorageRequestStreamFull is issue 25's storage acceptance for the
// request stream at its own limit (docs/operations.md, When storage runs
// out): an operator caps DISPATCH_REQ at 16 KiB (`nats stream edit
// --max-bytes`, which keeps the discard policy the dispatcher set: new). With
// no worker live the requests wait in the stream until it is full, and the
// next publish is refused with JetStream's error code 10077 "maximum bytes
// exceeded" in its acknowledgement. A producer (loadgen) that keeps
// publishing is refused with that reason and retries with the same
// Nats-Msg-Id; once workers start, the dispatcher drains the stream, the
// retries are stored, and every acknowledged request completes: the ones
// that filled the stream and all 300 of the producer's. Afterwards the stream
// is empty and a publish is stored at once. Before the fix (discard old) the
// full stream made room by deleting its oldest requests: nothing was
// refused, and those requests were lost without a trace.
func TestStorageRequestStreamFull(t *testing.T) {
	t.Parallel() // no timing bound; see doc.go
	ns := startNATS(t)
	nc := connect(t, ns.URL())
	js := jsOf(t, nc)
	p := startDispatcher(t, ns.URL())
	tr := stoTrack(t, nc)
	stoSetLimits(t, js, "DISPATCH_REQ", func(c *jetstream.StreamConfig) { c.MaxBytes = 16 << 10 })

	hdr := map[string]string{wire.HeaderISLTokens: "512", wire.HeaderReplyTo: tr.inbox}
	fill, err := stoFill(t, js, "dispatch.req.default", "fill", hdr, []byte("body"), 1000)
	stoRefusal(t, err, wire.JSErrCodeStoreFailed, wire.RefusalMaxBytes)
	t.Logf("%d requests fill the stream", len(fill))

	// The producer publishes into the full stream; the workers start once it
	// has been refused.
	var refused atomic.Int64
	type result struct {
		res *loadgen.Result
		err error
	}
	done := make(chan result, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		res, err := loadgen.Run(ctx, nc, loadgen.Config{
			Classes: []loadgen.ClassCount{{Class: "default", Count: 300}}, ISL: 512, Window: 64,
			ProgressInterval: 20 * time.Millisecond, OnProgress: func(p loadgen.Progress) { refused.Store(int64(p.Refused)) },
		}, zerolog.Nop())
		done <- result{res, err}
	}()
	waitFor(t, 30*time.Second, "the producer's first refusal", func() bool { return refused.Load() > 0 })
	for i := range 2 {
		startMock(t, nc, mockworker.Config{ID: fmt.Sprint("w", i+1), MaxNumSeqs: 2})
	}
	r := <-done
	if r.err != nil {
		t.Fatalf("loadgen: %v (result %+v)", r.err, r.res)
	}
	res := r.res
	if !res.Complete || res.Published != 300 || len(res.Completions) != 300 || res.PublishFailed != 0 || len(res.Rejected) != 0 {
		t.Fatalf("producer: complete %v, published %d, completed %d, publish failures %d, rejected %d; want true, 300, 300, 0, 0",
			res.Complete, res.Published, len(res.Completions), res.PublishFailed, len(res.Rejected))
	}
	if res.Refused[wire.RefusalMaxBytes] == 0 || len(res.Refused) != 1 {
		t.Fatalf("producer's refusals %v, want only %q", res.Refused, wire.RefusalMaxBytes)
	}
	waitFor(t, 30*time.Second, "every request that filled the stream completed", func() bool { return len(tr.missing(fill)) == 0 })
	waitFor(t, 30*time.Second, "an empty request stream and nothing held", func() bool {
		return stoStreamInfo(t, js, "DISPATCH_REQ").Msgs == 0 && p.metric("fairdispatch_held_messages") == 0
	})
	if _, err := tryPublish(js, "dispatch.req.default", "after", hdr, []byte("body")); err != nil {
		t.Fatalf("publish after the drain: %v", err)
	}
	waitFor(t, 30*time.Second, "the request published after the drain completed", func() bool { return len(tr.missing([]string{"after"})) == 0 })
	t.Logf("producer refused %v times, retried; %d of the fill and %d of the producer's requests ran twice",
		res.Refused, tr.duplicates(fill), res.Duplicates)
}

// TestStorageDeadLetterStreamFull is the acceptance for the dead-letter
// stream at its limit: an operator caps DISPATCH_DLQ at 25 messages and it
// is full. 20 malformed requests (bad_request) cannot be dead-lettered: each
// dead letter is refused ("maximum messages exceeded"), and the request goes
// back to the request stream, redelivered after the ack wait, counted in
// fairdispatch_dead_letter_failures_total{action="returned"}: it is not lost,
// not acknowledged, and gets no rejected outcome. Meanwhile 100 good requests
// published after them complete: with --max-held 16, the returned requests
// do not take the dispatcher's held slots. Each comes back once per ack wait,
// never in a loop. Once the DLQ has room again (its older letters purged), every
// one of the 20 is dead-lettered exactly once, with one rejected outcome, and
// the request stream is empty. Before the fix the DLQ made room by evicting
// its oldest letters (discard old); with discard new, the dead letterer
// retried each letter for ever while its request stayed held, and the
// 20 malformed requests filled the 16 held slots: nothing else was pulled.
func TestStorageDeadLetterStreamFull(t *testing.T) {
	t.Parallel() // no timing bound; see doc.go
	const bad, good = 20, 100
	const ackWait = 4 * time.Second // dispatcherArgs
	ns := startNATS(t)
	nc := connect(t, ns.URL())
	js := jsOf(t, nc)
	p := startDispatcher(t, ns.URL(), "--max-held", "16")
	startMock(t, nc, mockworker.Config{ID: "w1", MaxNumSeqs: 4})
	waitLive(t, p, "w1")
	tr := stoTrack(t, nc)

	const limit = 25
	stoSetLimits(t, js, "DISPATCH_DLQ", func(c *jetstream.StreamConfig) { c.MaxMsgs = limit })
	_, err := stoFill(t, js, "dispatch.dlq.filler", "filler", nil, []byte("an old dead letter"), 2*limit)
	stoRefusal(t, err, wire.JSErrCodeStoreFailed, wire.RefusalMaxMsgs)

	var badIDs []string
	for i := range bad {
		id := fmt.Sprint("bad-", i)
		badIDs = append(badIDs, id)
		if _, err := tryPublish(js, "dispatch.req.default", id, map[string]string{wire.HeaderISLTokens: "lots", wire.HeaderReplyTo: tr.inbox}, []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := loadgen.Run(ctx, nc, loadgen.Config{Classes: []loadgen.ClassCount{{Class: "default", Count: good}}, ISL: 512}, zerolog.Nop())
	if err != nil || len(res.Completions) != good {
		t.Fatalf("good requests behind the undead-letterable ones: %v, %d of %d completed (the dispatcher stalled)", err, len(res.Completions), good)
	}

	returned := func() float64 { return p.metric("fairdispatch_dead_letter_failures_total", `action="returned"`) }
	waitFor(t, 30*time.Second, "every malformed request returned to the stream once", func() bool { return returned() >= bad })
	waitFor(t, 30*time.Second, "every malformed request returned again after the ack wait", func() bool { return returned() >= 2*bad })
	// Not spun on: once per ack wait each (plus the first), however slow the machine.
	if n, most := returned(), float64(bad)*(time.Since(start).Seconds()/ackWait.Seconds()+2); n > most {
		t.Fatalf("%v returns in %v, want at most %v: returned requests are retried at once", n, time.Since(start), most)
	}
	waitFor(t, 10*time.Second, fmt.Sprintf("the request stream holding the %d malformed requests and nothing else", bad), func() bool {
		return stoStreamInfo(t, js, "DISPATCH_REQ").Msgs == bad
	})
	if letters := stoLetters(t, js); len(letters) != limit {
		t.Fatalf("dead letters while the DLQ is full: %v, want only the %d fillers", letters, limit)
	}
	if r := tr.rejected(badIDs); len(r) != 0 {
		t.Fatalf("rejected outcomes before any dead letter was stored: %v", r)
	}

	ctx2, cancel2 := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel2()
	dlq, err := js.Stream(ctx2, "DISPATCH_DLQ")
	if err != nil {
		t.Fatal(err)
	}
	if err := dlq.Purge(ctx2, jetstream.WithPurgeSubject("dispatch.dlq.filler")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "every malformed request dead-lettered and the request stream empty", func() bool {
		return len(stoLetters(t, js)) == bad && stoStreamInfo(t, js, "DISPATCH_REQ").Msgs == 0
	})
	waitFor(t, 10*time.Second, "a rejected outcome for every malformed request", func() bool { return len(tr.rejected(badIDs)) == bad })
	for id, codes := range stoLetters(t, js) {
		if len(codes) != 1 || codes[0] != "bad_request" {
			t.Errorf("dead letters of %s: %v, want one bad_request", id, codes)
		}
	}
	for id, os := range tr.rejected(badIDs) {
		if len(os) != 1 || os[0].Error != "bad_request" {
			t.Errorf("rejected outcomes of %s: %+v, want one bad_request", id, os)
		}
	}
	if n := p.metric("fairdispatch_dead_letters_total"); n != bad {
		t.Errorf("fairdispatch_dead_letters_total %v, want %d", n, bad)
	}
	t.Logf("%v returns while the DLQ was full", returned())
}

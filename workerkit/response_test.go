package workerkit_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"fairdispatch/internal/natstest"
	"fairdispatch/wire"
	"fairdispatch/workerkit"
)

// streamer is an application that accepts everything and hands each request
// to run, on a goroutine of its own, and records the helper's cancellations.
type streamer struct {
	run func(r *workerkit.Request)

	mu        sync.Mutex
	cancelled map[string]error
}

func (s *streamer) Offer(r *workerkit.Request) bool {
	go s.run(r)
	return true
}

func (s *streamer) Cancelled(r *workerkit.Request, cause error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cancelled == nil {
		s.cancelled = map[string]error{}
	}
	s.cancelled[r.RequestID] = cause
}

func (s *streamer) cause(id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cancelled[id]
}

func startStreamer(t *testing.T, nc *nats.Conn, run func(r *workerkit.Request)) (*workerkit.Worker, *streamer) {
	t.Helper()
	s := &streamer{run: run}
	w, err := workerkit.New(nc, workerkit.Config{ID: "w1"}, s, zerolog.New(zerolog.NewTestWriter(t)))
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Close() })
	return w, s
}

// dispatchResponse dispatches request id, asking for a response on subject,
// with its acknowledgements on "ack.<id>", and checks it is accepted.
func dispatchResponse(t *testing.T, nc *nats.Conn, id string, seq uint64, subject string) {
	t.Helper()
	m := dispatchMsg(id, seq, 0, "ack."+id)
	m.Header.Set(wire.HeaderResponseTo, subject)
	resp, err := nc.RequestMsg(m, wait)
	if err != nil {
		t.Fatalf("dispatch %s: %v", id, err)
	}
	if s := resp.Header.Get("Dispatch-Status"); s != "" {
		t.Fatalf("dispatch %s: refused %q", id, s)
	}
}

// TestResponseStreamsInOrder: the helper claims, numbers the chunks, pings
// while the response is open with the chunks sent so far, ends it with the
// end marker numbered chunks+1, and then acknowledges with a confirmed +ACK.
func TestResponseStreamsInOrder(t *testing.T) {
	t.Parallel()
	_, nc := natstest.StartServer(t)
	prod := natstest.NewProducer(t, nc, "resp.r1", natstest.GoOK)
	ack := natstest.WatchAcks(t, nc, "ack.r1")
	release := make(chan struct{})
	errs := make(chan error, 1)
	startStreamer(t, nc, func(r *workerkit.Request) {
		p := r.Response()
		if p == nil {
			errs <- errors.New("no response")
			return
		}
		if err := p.Start(context.Background()); err != nil {
			errs <- err
			return
		}
		for i := range 3 {
			if err := p.Write([]byte("tok" + strconv.Itoa(i))); err != nil {
				errs <- err
				return
			}
		}
		<-release // a ping comes meanwhile
		errs <- p.End(context.Background(), wire.ResponseEnd{Status: wire.EndOK, FinishReason: "length",
			Usage: &wire.Usage{PromptTokens: 100, CompletionTokens: 3}})
	})
	dispatchResponse(t, nc, "r1", 1, "resp.r1")
	natstest.Eventually(t, wait, func() bool { return len(prod.Of(wire.MsgPing)) > 0 }, "a ping")
	close(release)
	if err := <-errs; err != nil {
		t.Fatalf("stream: %v", err)
	}
	natstest.Eventually(t, wait, func() bool { return ack.Has("+ACK") }, "the +ACK")

	kinds := prod.Kinds()
	if len(kinds) < 6 || kinds[0] != wire.MsgClaim || kinds[len(kinds)-1] != wire.MsgEnd {
		t.Fatalf("kinds: got %v, want claim, 3 chunks and pings, end", kinds)
	}
	exec := prod.Of(wire.MsgClaim)[0].Header.Get(wire.HeaderExecution)
	if exec == "" || len(exec) > wire.MaxExecutionLen {
		t.Errorf("execution %q", exec)
	}
	for i, m := range prod.Of(wire.MsgChunk) {
		if got := m.Header.Get(wire.HeaderResponseSeq); got != strconv.Itoa(i+1) || string(m.Data) != "tok"+strconv.Itoa(i) {
			t.Errorf("chunk %d: seq %q body %q", i, got, m.Data)
		}
	}
	for _, m := range prod.All() {
		if m.Header.Get(wire.HeaderExecution) != exec || m.Header.Get(wire.HeaderRequestID) != "r1" {
			t.Errorf("%s: execution %q request %q, want %q r1", m.Header.Get(wire.HeaderResponse),
				m.Header.Get(wire.HeaderExecution), m.Header.Get(wire.HeaderRequestID), exec)
		}
	}
	for _, m := range prod.Of(wire.MsgPing) {
		if got := m.Header.Get(wire.HeaderResponseSeq); got != "3" {
			t.Errorf("ping seq %q, want 3 (the chunks sent before it)", got)
		}
	}
	end := prod.Of(wire.MsgEnd)
	if len(end) != 1 {
		t.Fatalf("%d end markers, want 1", len(end))
	}
	if got := end[0].Header.Get(wire.HeaderResponseSeq); got != "4" {
		t.Errorf("end seq %q, want 4", got)
	}
	if got := end[0].Header.Get(wire.HeaderResponseStatus); got != wire.EndOK {
		t.Errorf("end status %q", got)
	}
	e, err := wire.ParseResponseEnd(end[0].Data)
	if err != nil || e.Chunks != 3 || e.FinishReason != "length" || e.Usage == nil || e.Usage.CompletionTokens != 3 {
		t.Errorf("end marker %s: %+v, %v", end[0].Data, e, err)
	}
	if got := ack.Final(); len(got) != 1 || got[0] != "+ACK" {
		t.Errorf("acknowledgements: got %v, want one +ACK", got)
	}
}

// TestResponseWriteWhole: a whole answer larger than the server's
// max_payload goes out as consecutive chunks, each within it, whose bodies
// concatenated are the answer; one that fits is one chunk.
func TestResponseWriteWhole(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t, func(o *server.Options) { o.MaxPayload = 2048 })
	nc := natstest.Connect(t, srv.Running())
	prod := natstest.NewProducer(t, nc, "resp.r1", natstest.GoOK)
	natstest.WatchAcks(t, nc, "ack.r1")
	answer := []byte(strings.Repeat("0123456789abcdef", 600)) // 9,600 bytes
	errs := make(chan error, 1)
	var limit int
	startStreamer(t, nc, func(r *workerkit.Request) {
		p := r.Response()
		if err := p.Start(context.Background()); err != nil {
			errs <- err
			return
		}
		if limit = p.MaxChunk(); limit <= 0 || limit >= 2048 {
			errs <- fmt.Errorf("MaxChunk %d, want within (0, 2048)", limit)
			return
		}
		if err := p.WriteWhole(answer); err != nil {
			errs <- err
			return
		}
		if err := p.WriteWhole([]byte("tail")); err != nil {
			errs <- err
			return
		}
		errs <- p.End(context.Background(), wire.ResponseEnd{Status: wire.EndOK})
	})
	dispatchResponse(t, nc, "r1", 1, "resp.r1")
	if err := <-errs; err != nil {
		t.Fatalf("stream: %v", err)
	}
	chunks := prod.Of(wire.MsgChunk)
	var got []byte
	for i, m := range chunks {
		if seq := m.Header.Get(wire.HeaderResponseSeq); seq != strconv.Itoa(i+1) {
			t.Errorf("chunk %d: seq %q", i, seq)
		}
		got = append(got, m.Data...)
	}
	parts := (len(answer) + limit - 1) / limit
	if want := string(answer) + "tail"; string(got) != want || len(chunks) != parts+1 || string(chunks[parts].Data) != "tail" {
		t.Errorf("%d chunks of %d bytes in all, want %d of the 9,600-byte answer (at most %d bytes each) and one of 4, concatenated in order",
			len(chunks), len(got), parts, limit)
	}
}

// TestResponseClaimAnswers: cancel drops the request (+TERM cancelled) and
// taken forgets it without a word to the ack subject; neither runs.
func TestResponseClaimAnswers(t *testing.T) {
	t.Parallel()
	_, nc := natstest.StartServer(t)
	starts := make(chan error, 2)
	_, app := startStreamer(t, nc, func(r *workerkit.Request) { starts <- r.Response().Start(context.Background()) })
	for _, c := range []struct {
		answer string
		want   error
		ack    []string
	}{
		{wire.AnswerCancel, workerkit.ErrCancelled, []string{"+TERM cancelled"}},
		{wire.AnswerTaken, workerkit.ErrTaken, nil},
	} {
		id := "r-" + c.answer
		prod := natstest.NewProducer(t, nc, "resp."+id, func(string) string { return c.answer })
		ack := natstest.WatchAcks(t, nc, "ack."+id)
		dispatchResponse(t, nc, id, 1, "resp."+id)
		if err := <-starts; !errors.Is(err, c.want) {
			t.Errorf("%s: Start returned %v, want %v", c.answer, err, c.want)
		}
		natstest.Eventually(t, wait, func() bool { return app.cause(id) != nil }, "%s: Cancelled", c.answer)
		flush(t, nc)
		if got := ack.Final(); len(got) != len(c.ack) || len(got) > 0 && got[0] != c.ack[0] {
			t.Errorf("%s: acknowledgements %v, want %v", c.answer, got, c.ack)
		}
		if got := prod.Kinds(); len(got) != 1 {
			t.Errorf("%s: messages %v, want the claim alone", c.answer, got)
		}
	}
}

// flush makes sure that what the worker's connection published has reached
// the test's subscriptions (they share nc).
func flush(t *testing.T, nc *nats.Conn) {
	t.Helper()
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
}

// TestResponseNobodyListening: a claim that finds no responders is tried
// again and then given up (+TERM, ErrNoListener); a response whose producer
// unsubscribes stops at the next ping, its context cancelled.
func TestResponseNobodyListening(t *testing.T) {
	t.Parallel()
	_, nc := natstest.StartServer(t)
	results := make(chan error, 2)
	var mu sync.Mutex
	ctxs := map[string]context.Context{}
	startStreamer(t, nc, func(r *workerkit.Request) {
		ctx := r.Context()
		mu.Lock()
		ctxs[r.RequestID] = ctx
		mu.Unlock()
		if err := r.Response().Start(ctx); err != nil {
			results <- err
			return
		}
		for i := 0; ; i++ {
			if err := r.Response().Write([]byte("t")); err != nil {
				results <- err
				return
			}
			select {
			case <-ctx.Done():
			case <-time.After(20 * time.Millisecond):
			}
		}
	})

	ack := natstest.WatchAcks(t, nc, "ack.none")
	dispatchResponse(t, nc, "none", 1, "resp.none")
	if err := <-results; !errors.Is(err, workerkit.ErrNoListener) {
		t.Errorf("claim with nobody subscribed: got %v, want ErrNoListener", err)
	}
	natstest.Eventually(t, wait, func() bool { return ack.Has("+TERM") }, "+TERM of the unclaimed request")

	prod := natstest.NewProducer(t, nc, "resp.gone", natstest.GoOK)
	ack = natstest.WatchAcks(t, nc, "ack.gone")
	dispatchResponse(t, nc, "gone", 2, "resp.gone")
	natstest.Eventually(t, wait, func() bool { return len(prod.Of(wire.MsgChunk)) > 0 }, "a chunk")
	if err := prod.Sub.Unsubscribe(); err != nil {
		t.Fatal(err)
	}
	gone := time.Now()
	err := <-results
	if !errors.Is(err, workerkit.ErrNoListener) || !errors.Is(err, workerkit.ErrFinished) {
		t.Errorf("write after the producer left: got %v, want ErrFinished and ErrNoListener", err)
	}
	t.Logf("stopped %v after the producer unsubscribed (bound: 1 s ping interval plus a round trip)", time.Since(gone))
	mu.Lock()
	ctx := ctxs["gone"]
	mu.Unlock()
	if cause := context.Cause(ctx); !errors.Is(cause, workerkit.ErrNoListener) {
		t.Errorf("context cause %v, want ErrNoListener", cause)
	}
	natstest.Eventually(t, wait, func() bool { return ack.Has("+TERM") }, "+TERM of the abandoned request")
}

// TestResponsePingAnswers: a ping answered cancel ends the response with
// status cancelled (+TERM cancelled); one answered taken stops it without a
// word, to the producer or the ack subject.
func TestResponsePingAnswers(t *testing.T) {
	t.Parallel()
	_, nc := natstest.StartServer(t)
	done := make(chan error, 2)
	startStreamer(t, nc, func(r *workerkit.Request) {
		if err := r.Response().Start(context.Background()); err != nil {
			done <- err
			return
		}
		if err := r.Response().Write([]byte("first")); err != nil {
			done <- err
			return
		}
		<-r.Context().Done()
		done <- context.Cause(r.Context())
	})
	for _, c := range []struct {
		answer string
		want   error
		ack    string
		end    bool
	}{
		{wire.AnswerCancel, workerkit.ErrCancelled, "+TERM cancelled", true},
		{wire.AnswerTaken, workerkit.ErrTaken, "", false},
	} {
		id := "p-" + c.answer
		prod := natstest.NewProducer(t, nc, "resp."+id, func(kind string) string {
			if kind == wire.MsgPing {
				return c.answer
			}
			return natstest.GoOK(kind)
		})
		ack := natstest.WatchAcks(t, nc, "ack."+id)
		dispatchResponse(t, nc, id, 1, "resp."+id)
		if err := <-done; !errors.Is(err, c.want) {
			t.Errorf("%s: cause %v, want %v", c.answer, err, c.want)
		}
		flush(t, nc)
		natstest.Eventually(t, wait, func() bool { return len(ack.Final()) > 0 || c.ack == "" }, "%s: acknowledgement", c.answer)
		flush(t, nc)
		if got := ack.Final(); c.ack == "" && len(got) != 0 || c.ack != "" && (len(got) != 1 || got[0] != c.ack) {
			t.Errorf("%s: acknowledgements %v, want %q", c.answer, got, c.ack)
		}
		ends := prod.Of(wire.MsgEnd)
		if c.end {
			ends = []*nats.Msg{prod.WaitEnd(t, wait, "%s: end marker", c.answer)}
			if got := ends[0].Header.Get(wire.HeaderResponseStatus); got != wire.EndCancelled {
				t.Errorf("%s: end status %q", c.answer, got)
			}
			if got := ends[0].Header.Get(wire.HeaderResponseSeq); got != "2" {
				t.Errorf("%s: end seq %q, want 2", c.answer, got)
			}
		} else if len(ends) != 0 {
			t.Errorf("%s: %d end markers, want none", c.answer, len(ends))
		}
	}
}

// TestCancelFromDispatcher: a cancellation on <prefix>.cancel.<id> stops a
// running request, with or without a response: its context is cancelled,
// the handler told, a claimed response ended with status cancelled, and the
// message dropped (+TERM cancelled). An id the worker does not run is ignored.
func TestCancelFromDispatcher(t *testing.T) {
	t.Parallel()
	_, nc := natstest.StartServer(t)
	causes := make(chan error, 2)
	_, app := startStreamer(t, nc, func(r *workerkit.Request) {
		if p := r.Response(); p != nil {
			if err := p.Start(context.Background()); err != nil {
				causes <- err
				return
			}
			_ = p.Write([]byte("x"))
		}
		<-r.Context().Done()
		causes <- context.Cause(r.Context())
		if err := r.Done(); !errors.Is(err, workerkit.ErrFinished) {
			causes <- err
		}
	})
	prod := natstest.NewProducer(t, nc, "resp.c1", natstest.GoOK)
	ackResp := natstest.WatchAcks(t, nc, "ack.c1")
	ackPlain := natstest.WatchAcks(t, nc, "ack.c2")
	dispatchResponse(t, nc, "c1", 1, "resp.c1")
	if _, err := nc.RequestMsg(dispatchMsg("c2", 2, 0, "ack.c2"), wait); err != nil {
		t.Fatal(err)
	}
	natstest.Eventually(t, wait, func() bool { return len(prod.Of(wire.MsgChunk)) == 1 }, "a chunk")
	for _, id := range []string{"unknown", "c1", "c2"} {
		b, _ := wire.MarshalCancel(wire.Cancel{RequestID: id, Seq: 1, Reason: wire.CancelReasonCancel})
		if err := nc.Publish("dispatch.cancel.w1", b); err != nil {
			t.Fatal(err)
		}
	}
	for range 2 {
		if err := <-causes; !errors.Is(err, workerkit.ErrCancelled) {
			t.Errorf("cause %v, want ErrCancelled", err)
		}
	}
	for _, a := range []*natstest.Acks{ackResp, ackPlain} {
		natstest.Eventually(t, wait, func() bool { return a.Has("+TERM cancelled") }, "+TERM cancelled")
	}
	if got := prod.WaitEnd(t, wait, "the end marker").Header.Get(wire.HeaderResponseStatus); got != wire.EndCancelled {
		t.Errorf("end status %q, want cancelled", got)
	}
	// Cancelled is called after the +TERM is sent: wait for it.
	for _, id := range []string{"c1", "c2"} {
		natstest.Eventually(t, wait, func() bool { return errors.Is(app.cause(id), workerkit.ErrCancelled) }, "%s: Cancelled with ErrCancelled", id)
	}
}

// TestStopEndsOrHandsBack: Stop's grace over, a response with no chunk yet
// is handed back (-NAK: it runs elsewhere, invisibly), one with a chunk is
// ended with status failed and dropped (+TERM: it must not run again).
func TestStopEndsOrHandsBack(t *testing.T) {
	t.Parallel()
	_, nc := natstest.StartServer(t)
	prodA := natstest.NewProducer(t, nc, "resp.a", natstest.GoOK)
	prodB := natstest.NewProducer(t, nc, "resp.b", natstest.GoOK)
	ackA, ackB := natstest.WatchAcks(t, nc, "ack.a"), natstest.WatchAcks(t, nc, "ack.b")
	w, _ := startStreamer(t, nc, func(r *workerkit.Request) {
		if err := r.Response().Start(context.Background()); err != nil {
			return
		}
		if r.RequestID == "b" {
			_ = r.Response().Write([]byte("x"))
		}
		<-r.Context().Done()
	})
	dispatchResponse(t, nc, "a", 1, "resp.a")
	dispatchResponse(t, nc, "b", 2, "resp.b")
	natstest.Eventually(t, wait, func() bool { return len(prodA.Of(wire.MsgClaim)) == 1 && len(prodB.Of(wire.MsgChunk)) == 1 },
		"a claimed, b streaming")
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := w.Stop(ctx); err == nil {
		t.Error("Stop: got nil, want the hand-back error")
	}
	natstest.Eventually(t, wait, func() bool { return ackA.Has("-NAK") && ackB.Has("+TERM") }, "-NAK of a, +TERM of b")
	if n := len(prodA.Of(wire.MsgEnd)); n != 0 {
		t.Errorf("a: %d end markers, want none", n)
	}
	if got := prodB.WaitEnd(t, wait, "b's end marker").Header.Get(wire.HeaderResponseStatus); got != wire.EndFailed {
		t.Errorf("b: end status %q, want failed", got)
	}
}

// TestResponseOldAPI: an application that knows nothing of responses still
// works: Done ends the response with status ok (and a confirmed +ACK); Nak
// before the first chunk hands it back silently, and after it is refused.
func TestResponseOldAPI(t *testing.T) {
	t.Parallel()
	_, nc := natstest.StartServer(t)
	reqs := make(chan *workerkit.Request, 2)
	startStreamer(t, nc, func(r *workerkit.Request) { reqs <- r })
	prod := natstest.NewProducer(t, nc, "resp.o1", natstest.GoOK)
	ack := natstest.WatchAcks(t, nc, "ack.o1")
	dispatchResponse(t, nc, "o1", 1, "resp.o1")
	r := <-reqs
	if err := r.Done(); err != nil {
		t.Fatal(err)
	}
	natstest.Eventually(t, wait, func() bool { return ack.Has("+ACK") }, "+ACK")
	if got := prod.Kinds(); len(got) < 2 || got[0] != wire.MsgClaim || got[len(got)-1] != wire.MsgEnd {
		t.Errorf("kinds %v, want claim ... end", got)
	}

	prod2 := natstest.NewProducer(t, nc, "resp.o2", natstest.GoOK)
	ack2 := natstest.WatchAcks(t, nc, "ack.o2")
	dispatchResponse(t, nc, "o2", 2, "resp.o2")
	r = <-reqs
	if err := r.Response().Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := r.Response().Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	if err := r.Nak(); !errors.Is(err, workerkit.ErrResponseStarted) {
		t.Errorf("Nak after a chunk: got %v, want ErrResponseStarted", err)
	}
	if err := r.Response().End(context.Background(), wire.ResponseEnd{Status: wire.EndFailed, Error: "engine died"}); err != nil {
		t.Fatal(err)
	}
	natstest.Eventually(t, wait, func() bool { return ack2.Has("+ACK") }, "+ACK")
	if got := ack2.Final(); len(got) != 1 {
		t.Errorf("acknowledgements %v, want one +ACK", got)
	}
	if e := prod2.Of(wire.MsgEnd); len(e) != 1 || e[0].Header.Get(wire.HeaderResponseStatus) != wire.EndFailed {
		t.Errorf("end markers %v", prod2.Kinds())
	}
}

// TestBadResponseSubject: a Dispatch-Response-To a worker may not respond to
// ($-subjects, the prefix's own, one over wire.MaxSubjectLen) is accepted
// and dropped without Offer.
func TestBadResponseSubject(t *testing.T) {
	t.Parallel()
	_, nc := natstest.StartServer(t)
	offered := make(chan string, 3)
	startStreamer(t, nc, func(r *workerkit.Request) { offered <- r.RequestID })
	for i, s := range []string{"dispatch.load.w2", "$JS.API.STREAM.DELETE.X", "_RESP." + strings.Repeat("x", 2000)} {
		id := "bad" + strconv.Itoa(i)
		ack := natstest.WatchAcks(t, nc, "ack."+id)
		spy, err := nc.SubscribeSync(s)
		if err != nil {
			t.Fatal(err)
		}
		dispatchResponse(t, nc, id, uint64(i+1), s)
		natstest.Eventually(t, wait, func() bool { return ack.Has("+TERM") }, "+TERM of %s", id)
		flush(t, nc)
		if n, _, _ := spy.Pending(); n != 0 {
			t.Errorf("%s: %d messages sent to %s", id, n, s)
		}
	}
	select {
	case id := <-offered:
		t.Errorf("%s was offered", id)
	default:
	}
}

// TestEndOutlivesItsContext: an End whose ctx ends while the end marker
// waits for the producer's answer (a slow producer: every attempt goes
// unanswered) still finishes the request: the marker's attempts run out, the
// message is acknowledged through the acker, and End says the
// acknowledgement was not confirmed within ctx. Before, End returned at once
// and the request stayed held, kept alive and never acknowledged.
func TestEndOutlivesItsContext(t *testing.T) {
	_, nc := natstest.StartServer(t)
	prod := natstest.NewProducer(t, nc, "resp.e1", func(kind string) string {
		if kind == wire.MsgEnd {
			return "" // never answered
		}
		return natstest.GoOK(kind)
	})
	acks := natstest.WatchAcks(t, nc, "ack.e1")
	ended := make(chan error, 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w, _ := startStreamer(t, nc, func(r *workerkit.Request) {
		p := r.Response()
		if err := p.Start(ctx); err != nil {
			ended <- err
			return
		}
		_ = p.Write([]byte("tok"))
		ended <- p.End(ctx, wire.ResponseEnd{Status: wire.EndOK})
	})
	dispatchResponse(t, nc, "e1", 1, "resp.e1")
	natstest.Eventually(t, wait, func() bool { return len(prod.Of(wire.MsgEnd)) > 0 }, "the end marker sent")
	cancel() // ctx ends while the marker waits for its answer
	if err := <-ended; !errors.Is(err, context.Canceled) {
		t.Fatalf("End: %v, want an error wrapping context.Canceled", err)
	}
	natstest.Eventually(t, wait, func() bool { return w.Held() == 0 && slices.Contains(acks.Final(), "+ACK") },
		"the request acknowledged and released")
	if n := len(prod.Of(wire.MsgEnd)); n != wire.EndAttempts {
		t.Errorf("%d end marker attempts, want %d", n, wire.EndAttempts)
	}
}

// startLogged starts worker w1 with handler s, logging at debug level to logs.
func startLogged(t *testing.T, nc *nats.Conn, s *streamer, logs *natstest.Buffer) {
	t.Helper()
	w, err := workerkit.New(nc, workerkit.Config{ID: "w1"}, s, zerolog.New(logs).Level(zerolog.DebugLevel))
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Close() })
}

// cancelHandled sends the dispatcher's cancellation of request id (seq 1) to
// w1 and waits until the helper has handled it, one way or the other, as its
// debug log says.
func cancelHandled(t *testing.T, nc *nats.Conn, logs *natstest.Buffer, id string) {
	t.Helper()
	b, _ := wire.MarshalCancel(wire.Cancel{RequestID: id, Seq: 1, Reason: wire.CancelReasonCancel})
	if err := nc.Publish("dispatch.cancel.w1", b); err != nil {
		t.Fatal(err)
	}
	natstest.Eventually(t, wait, func() bool {
		return strings.Contains(logs.String(), "response is ending: ignored") || strings.Contains(logs.String(), "request ended by the helper")
	}, "the cancellation handled")
}

// TestCancelWhileEnding: a cancellation that arrives while the end marker is
// on its way (its answer slow) leaves the request to finish: the producer was
// told ok, so the message is acknowledged +ACK, not +TERM cancelled, and End
// returns nil.
func TestCancelWhileEnding(t *testing.T) {
	_, nc := natstest.StartServer(t)
	endSeen, answer := make(chan struct{}), make(chan struct{})
	var once sync.Once
	prod := natstest.NewProducer(t, nc, "resp.e2", func(kind string) string {
		if kind == wire.MsgEnd {
			once.Do(func() { close(endSeen) })
			<-answer
		}
		return natstest.GoOK(kind)
	})
	acks := natstest.WatchAcks(t, nc, "ack.e2")
	logs := &natstest.Buffer{}
	ended := make(chan error, 1)
	s := &streamer{run: func(r *workerkit.Request) {
		p := r.Response()
		if err := p.Start(context.Background()); err != nil {
			ended <- err
			return
		}
		_ = p.Write([]byte("tok"))
		ended <- p.End(context.Background(), wire.ResponseEnd{Status: wire.EndOK})
	}}
	startLogged(t, nc, s, logs)
	dispatchResponse(t, nc, "e2", 1, "resp.e2")
	<-endSeen
	cancelHandled(t, nc, logs, "e2")
	close(answer)
	if err := <-ended; err != nil {
		t.Errorf("End: %v, want nil", err)
	}
	natstest.Eventually(t, wait, func() bool { return len(acks.Final()) > 0 }, "the acknowledgement")
	if got := acks.Final(); len(got) != 1 || got[0] != "+ACK" {
		t.Errorf("acknowledged %v, want +ACK alone: the producer was told ok", got)
	}
	if got := prod.Of(wire.MsgEnd)[0].Header.Get(wire.HeaderResponseStatus); got != wire.EndOK {
		t.Errorf("end status %q, want ok", got)
	}
}

// TestCancelAfterTheEndMarkersAnswer: between the end marker's answer and
// the acknowledgement that releases the request, a cancellation is ignored
// too: the producer was told ok, so the message is acknowledged +ACK.
func TestCancelAfterTheEndMarkersAnswer(t *testing.T) {
	_, nc := natstest.StartServer(t)
	natstest.NewProducer(t, nc, "resp.e3", natstest.GoOK)
	acks := natstest.WatchAcks(t, nc, "ack.e3")
	logs := &natstest.Buffer{}
	marked, proceed, done := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	s := &streamer{run: func(r *workerkit.Request) {
		p := r.Response()
		if err := p.Start(context.Background()); err != nil {
			done <- err
			return
		}
		_ = p.Write([]byte("tok"))
		if err := workerkit.EndMarkerForTest(p, context.Background(), wire.ResponseEnd{Status: wire.EndOK}); err != nil {
			done <- err
			return
		}
		close(marked)
		<-proceed
		done <- workerkit.AckAfterEndForTest(p, context.Background())
	}}
	startLogged(t, nc, s, logs)
	dispatchResponse(t, nc, "e3", 1, "resp.e3")
	<-marked
	cancelHandled(t, nc, logs, "e3")
	close(proceed)
	if err := <-done; err != nil {
		t.Errorf("the acknowledgement after the end marker: %v", err)
	}
	natstest.Eventually(t, wait, func() bool { return len(acks.Final()) > 0 }, "the acknowledgement")
	if got := acks.Final(); len(got) != 1 || got[0] != "+ACK" {
		t.Errorf("acknowledged %v, want +ACK alone: the producer was told ok", got)
	}
}

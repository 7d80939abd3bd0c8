package workerkit_test

import (
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"fairdispatch/internal/natstest"
	"fairdispatch/workerkit"
)

// TestFirstProgressOnlyForRequestsStillHeld: the first +WPI goes out
// FirstProgressDelay after acceptance, and only to a request still held; one
// finished sooner costs JetStream no progress acknowledgement. The delay
// (2 s) leaves r1's finish, right after its acceptance, ample time; the
// subscriber answers as JetStream does, so that no ack is sent again.
func TestFirstProgressOnlyForRequestsStillHeld(t *testing.T) {
	_, nc := natstest.StartServer(t)
	a := startWorker(t, nc, workerkit.Config{ID: "w1", FirstProgressDelay: 2 * time.Second})
	var mu sync.Mutex
	acks := map[string][]string{}
	sub, err := nc.Subscribe("acks.*", func(m *nats.Msg) {
		mu.Lock()
		acks[m.Subject] = append(acks[m.Subject], string(m.Data))
		mu.Unlock()
		if m.Reply != "" {
			_ = m.Respond(nil)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	for i, id := range []string{"r1", "r2"} {
		if _, err := nc.RequestMsg(dispatchMsg(id, uint64(i+1), 0, "acks."+id), 2*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	a.finish(t, 0, (*workerkit.Request).Done) // r1 finishes at once
	got := func(s string) []string { mu.Lock(); defer mu.Unlock(); return append([]string(nil), acks[s]...) }
	natstest.Eventually(t, 20*time.Second, func() bool { return len(got("acks.r2")) > 0 }, "r2's first +WPI")
	if r2 := got("acks.r2"); r2[0] != "+WPI" {
		t.Fatalf("r2 acks %v, want +WPI first", r2)
	}
	// r1 was due first: by now its +WPI would have been sent, had it been held.
	if r1 := got("acks.r1"); slices.Contains(r1, "+WPI") || !slices.Contains(r1, "+ACK") {
		t.Fatalf("r1 acks %v, want +ACK and no +WPI", r1)
	}
}

// TestFinishedInOfferNeedsNoFirstProgress: a request its handler finishes
// inside Offer is not waiting for a first +WPI, so the loop that sends them
// is not woken for it; one still held is. The worker's last debug line for a
// dispatch ("dispatch answered") marks when it is done with it.
func TestFinishedInOfferNeedsNoFirstProgress(t *testing.T) {
	_, nc := natstest.StartServer(t)
	h := workerkit.HandlerFunc(func(r *workerkit.Request) bool {
		if r.RequestID == "r1" {
			if err := r.Done(); err != nil {
				t.Errorf("done r1: %v", err)
			}
		}
		return true
	})
	answered := &lineCounter{want: `"message":"dispatch answered"`}
	log := zerolog.New(answered).Level(zerolog.DebugLevel)
	w, err := workerkit.New(nc, workerkit.Config{ID: "w1", AckWait: time.Hour, FirstProgressDelay: 20 * time.Minute}, h, log)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Close() })
	for i, id := range []string{"r1", "r2"} {
		if _, err := nc.RequestMsg(dispatchMsg(id, uint64(i+1), 0, "acks."+id), 2*time.Second); err != nil {
			t.Fatal(err)
		}
		natstest.Eventually(t, 20*time.Second, func() bool { return answered.count() == i+1 }, "the worker done with the dispatch")
		if n := workerkit.AwaitingFirstProgress(w); n != i {
			t.Fatalf("after %s: %d requests await a first +WPI, want %d", id, n, i)
		}
	}
}

// lineCounter counts the lines written to it that contain want.
type lineCounter struct {
	want string
	mu   sync.Mutex
	n    int
}

func (c *lineCounter) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n += strings.Count(string(p), c.want)
	return len(p), nil
}

func (c *lineCounter) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

// TestSeenOnlyReportsCoalesce: refused offers move only seen_seq; their
// reports wait for SeenOnlyInterval and go out together: at most one per
// interval of the time the offers took (plus the first), however slow the
// machine. The TTL is long, so no heartbeat report falls in between.
func TestSeenOnlyReportsCoalesce(t *testing.T) {
	const interval = 500 * time.Millisecond
	_, nc := natstest.StartServer(t)
	rs := subscribeReports(t, nc, "dispatch.load.w1")
	a := startWorker(t, nc, workerkit.Config{ID: "w1", SeenOnlyInterval: interval, TTL: workerkit.MaxTTL})
	natstest.Eventually(t, 20*time.Second, func() bool { _, _, ok := rs.last(); return ok }, "first report")
	a.setAccept(false)
	before := len(rs.all())
	start := time.Now()
	for i := uint64(1); i <= 10; i++ {
		if _, err := nc.RequestMsg(dispatchMsg("r", i, 0, "acks.x"), 2*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	natstest.Eventually(t, 20*time.Second, func() bool { r, _, _ := rs.last(); return r.SeenSeq == 10 }, "a report with seen_seq 10")
	most := 1 + int(time.Since(start)/interval)
	if n := len(rs.all()) - before; n > most {
		t.Fatalf("%d reports for 10 seen_seq-only changes in %v, want at most %d (one per %v)", n, time.Since(start), most, interval)
	}
}

// TestFreedCapacityReportsAtOnce: a report whose news is a rise in load waits
// out MinReportInterval, but one that frees capacity (fewer active requests
// or prefill tokens than last reported) goes at once, even in the middle of
// that wait. The interval is 200 s, so the fall's report arriving at all
// before the deadline shows it did not wait, however slow the machine.
func TestFreedCapacityReportsAtOnce(t *testing.T) {
	_, nc := natstest.StartServer(t)
	rs := subscribeReports(t, nc, "dispatch.load.w1")
	a := startWorker(t, nc, workerkit.Config{ID: "w1", TTL: workerkit.MaxTTL,
		MinReportInterval: workerkit.MaxTTL / 3, SeenOnlyInterval: workerkit.MaxTTL / 3})
	natstest.Eventually(t, 20*time.Second, func() bool { _, _, ok := rs.last(); return ok }, "first report")
	for _, step := range []struct {
		load workerkit.RankLoad
		want bool // reported before the interval ends
	}{
		{workerkit.RankLoad{ActivePrefillTokens: 512, ActiveRequests: 1}, false},
		{workerkit.RankLoad{ActivePrefillTokens: 1024, ActiveRequests: 2}, false},
		{workerkit.RankLoad{ActivePrefillTokens: 0, ActiveRequests: 1}, true},
	} {
		if err := a.w.SetLoad(0, step.load); err != nil {
			t.Fatal(err)
		}
		if step.want {
			natstest.Eventually(t, 60*time.Second, func() bool {
				r, _, _ := rs.last()
				return len(r.Ranks) == 1 && r.Ranks[0].ActiveRequests == 1 && r.Ranks[0].ActivePrefillTokens == 0
			}, "the report of the freed slot, long before MinReportInterval")
		}
	}
	// The two rises went out together with the fall, or not at all: no
	// report ever said 512 or 1024 tokens.
	for _, r := range rs.all() {
		if len(r.Ranks) == 1 && r.Ranks[0].ActivePrefillTokens != 0 {
			t.Fatalf("a rise was reported before MinReportInterval: %+v", r.Ranks[0])
		}
	}
}

// TestReportPutOffByAnOfferGoesWhenItEnds: a load change made while an Offer
// is in progress cannot be reported then (the report would miss the offer's
// seen_seq); the Offer's end must send it, even though a seen-only report is
// already scheduled SeenOnlyInterval (200 s) away. The worker's debug lines
// mark when the seen-only report is scheduled and when the report is put off.
func TestReportPutOffByAnOfferGoesWhenItEnds(t *testing.T) {
	_, nc := natstest.StartServer(t)
	rs := subscribeReports(t, nc, "dispatch.load.w1")
	scheduled := &lineCounter{want: `"message":"seen-only report scheduled"`}
	putOff := &lineCounter{want: `"message":"load report put off: an offer is in progress"`}
	log := zerolog.New(zerolog.MultiLevelWriter(scheduled, putOff)).Level(zerolog.DebugLevel)
	var w *workerkit.Worker
	h := workerkit.HandlerFunc(func(r *workerkit.Request) bool {
		if r.RequestID == "r2" {
			if err := w.SetLoad(0, workerkit.RankLoad{ActiveRequests: 1}); err != nil {
				t.Errorf("set load: %v", err)
			}
			deadline := time.Now().Add(20 * time.Second)
			for putOff.count() == 0 && time.Now().Before(deadline) {
				time.Sleep(5 * time.Millisecond)
			}
		}
		return true
	})
	w, err := workerkit.New(nc, workerkit.Config{ID: "w1", TTL: workerkit.MaxTTL, SeenOnlyInterval: workerkit.MaxTTL / 3}, h, log)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Close() })
	natstest.Eventually(t, 20*time.Second, func() bool { _, _, ok := rs.last(); return ok }, "first report")
	if _, err := nc.RequestMsg(dispatchMsg("r1", 1, 0, "acks.r1"), 2*time.Second); err != nil {
		t.Fatal(err)
	}
	natstest.Eventually(t, 20*time.Second, func() bool { return scheduled.count() == 1 }, "r1's seen-only report scheduled")
	if _, err := nc.RequestMsg(dispatchMsg("r2", 2, 0, "acks.r2"), 30*time.Second); err != nil {
		t.Fatal(err)
	}
	if putOff.count() == 0 {
		t.Fatal("the load change inside r2's Offer was not put off")
	}
	natstest.Eventually(t, 20*time.Second, func() bool {
		r, _, _ := rs.last()
		return r.SeenSeq == 2 && len(r.Ranks) == 1 && r.Ranks[0].ActiveRequests == 1
	}, "the put-off report, long before the scheduled seen-only one")
}

// TestKickWithoutNewsPublishesNothing: a load change undone before the
// worker could report it (MinReportInterval is 200 s) leaves nothing to say;
// the kick publishes no report, and the next one is the next real change.
// The first report is the one of 5: the load is set before Start.
func TestKickWithoutNewsPublishesNothing(t *testing.T) {
	_, nc := natstest.StartServer(t)
	rs := subscribeReports(t, nc, "dispatch.load.w1")
	noNews := &lineCounter{want: `"message":"no news since the last report: none sent"`}
	w, err := workerkit.New(nc, workerkit.Config{ID: "w1", TTL: workerkit.MaxTTL,
		MinReportInterval: workerkit.MaxTTL / 3, SeenOnlyInterval: workerkit.MaxTTL / 3},
		workerkit.HandlerFunc(func(*workerkit.Request) bool { return false }), zerolog.New(noNews).Level(zerolog.DebugLevel))
	if err != nil {
		t.Fatal(err)
	}
	if err := w.SetLoad(0, workerkit.RankLoad{ActiveRequests: 5}); err != nil {
		t.Fatal(err)
	}
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Close() })
	natstest.Eventually(t, 20*time.Second, func() bool {
		r, _, _ := rs.last()
		return len(r.Ranks) == 1 && r.Ranks[0].ActiveRequests == 5
	}, "a report of 5 active requests")
	before := len(rs.all())
	// A rise waits out MinReportInterval; its fall back to what was reported
	// frees capacity and ends the wait, with no news left (the worker's
	// debug line says so); then a real change.
	for _, n := range []uint64{10, 5} {
		if err := w.SetLoad(0, workerkit.RankLoad{ActiveRequests: n}); err != nil {
			t.Fatal(err)
		}
	}
	// (Start's own kick may find no news too, after the first report: at
	// least one line, then. Without the skip there is none.)
	natstest.Eventually(t, 20*time.Second, func() bool { return noNews.count() >= 1 }, "the kick found no news")
	if err := w.SetLoad(0, workerkit.RankLoad{ActiveRequests: 3}); err != nil {
		t.Fatal(err)
	}
	natstest.Eventually(t, 20*time.Second, func() bool {
		r, _, _ := rs.last()
		return len(r.Ranks) == 1 && r.Ranks[0].ActiveRequests == 3
	}, "a report of 3 active requests")
	// Reports of one connection arrive in order: any report of the undone
	// change came before the one of 3.
	if got := rs.all()[before:]; len(got) != 1 {
		t.Fatalf("%d reports after the one of 5, want only the one of 3: %+v", len(got), got)
	}
}

package e2e

import (
	"context"
	"encoding/json"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"fairdispatch/loadgen"
	"fairdispatch/mockworker"
	"fairdispatch/workerkit"
)

// Helpers of every e2e file that run the other side: mock workers, workers
// built on package workerkit, workers that are only their load reports, and
// the load generator.

// startMock starts an in-process mock worker on nc (with an ack wait of 4 s
// unless cfg sets one), stopped at the end of the test.
func startMock(t testing.TB, nc *nats.Conn, cfg mockworker.Config) *mockworker.Worker {
	t.Helper()
	return newMock(t, nc, cfg, false)
}

// startDrainingMock is startMock with the worker draining from its first
// report: live at the dispatcher but taking nothing, so that a backlog forms
// there, until w.Helper().SetDraining(false) releases it.
func startDrainingMock(t testing.TB, nc *nats.Conn, cfg mockworker.Config) *mockworker.Worker {
	t.Helper()
	return newMock(t, nc, cfg, true)
}

// release checks that the draining worker w accepted nothing, then stops its
// draining.
func release(t testing.TB, w *mockworker.Worker) {
	t.Helper()
	if got := w.Stats().Accepted; got != 0 {
		t.Fatalf("the draining worker %s accepted %d requests before the release, want 0", w.Helper().Config().ID, got)
	}
	w.Helper().SetDraining(false)
}

func newMock(t testing.TB, nc *nats.Conn, cfg mockworker.Config, draining bool) *mockworker.Worker {
	t.Helper()
	if cfg.AckWait == 0 {
		cfg.AckWait = 4 * time.Second
	}
	w, err := mockworker.New(nc, cfg, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	w.Helper().SetDraining(draining) // before the first report
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = w.Stop(ctx)
	})
	return w
}

// newWorker builds a worker on package workerkit with handler h, closed at
// the end of the test (handing back anything it still holds); the caller
// starts it.
func newWorker(t testing.TB, nc *nats.Conn, cfg workerkit.Config, h workerkit.Handler) *workerkit.Worker {
	t.Helper()
	w, err := workerkit.New(nc, cfg, h, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Close() })
	return w
}

// startWorker is newWorker, started.
func startWorker(t testing.TB, nc *nats.Conn, cfg workerkit.Config, h workerkit.Handler) *workerkit.Worker {
	t.Helper()
	w := newWorker(t, nc, cfg, h)
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	return w
}

// holder is a worker built on package workerkit that accepts every offer and
// finishes none, as a hung engine would. Its load report counts each request
// it holds in active_requests and, when it counts prefill, its input tokens in
// active_prefill_tokens.
type holder struct {
	t       testing.TB
	prefill bool
	w       *workerkit.Worker

	mu       sync.Mutex
	load     workerkit.RankLoad
	accepted []string
}

// startHolder starts a holder on nc.
func startHolder(t testing.TB, nc *nats.Conn, cfg workerkit.Config, prefill bool) *holder {
	t.Helper()
	h := &holder{t: t, prefill: prefill}
	h.w = newWorker(t, nc, cfg, h) // before the start: Offer reads it
	if err := h.w.Start(); err != nil {
		t.Fatal(err)
	}
	return h
}

// Offer accepts r, and never calls r.Done.
func (h *holder) Offer(r *workerkit.Request) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.accepted = append(h.accepted, r.RequestID)
	if h.prefill {
		h.load.ActivePrefillTokens += r.ISL
	}
	h.load.ActiveRequests++
	if err := h.w.SetLoad(r.DPRank, h.load); err != nil {
		h.t.Errorf("%s: %v", h.w.Config().ID, err)
	}
	return true
}

// held returns the ids of the requests accepted so far, in order.
func (h *holder) held() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.accepted)
}

// loadReport is a load report (docs/protocol.md, Load report) of worker id,
// instance <id>-r: one rank with the given active prefill tokens,
// max_num_batched_tokens 8192.
func loadReport(id string, prefill uint64, draining bool, ttl time.Duration) []byte {
	b, _ := json.Marshal(map[string]any{
		"worker_id": id, "data_parallel_size": 1, "max_num_batched_tokens": 8192, "ttl_ms": ttl.Milliseconds(),
		"draining": draining, "instance": id + "-r",
		"ranks": []map[string]any{{"dp_rank": 0, "active_prefill_tokens": prefill}},
	})
	return b
}

// reporter plays the load-reporting side of a worker that has nothing else:
// it publishes loadReport(id, prefill, false, ttl) at once and then every
// interval, until closed or the test ends. A dispatcher started at any time
// learns about the worker within its start-up grace.
type reporter struct {
	stop, done chan struct{}
	once       sync.Once
}

func startReporter(t testing.TB, nc *nats.Conn, id string, prefill uint64, ttl, interval time.Duration) *reporter {
	t.Helper()
	r := &reporter{stop: make(chan struct{}), done: make(chan struct{})}
	body := loadReport(id, prefill, false, ttl)
	go func() {
		defer close(r.done)
		tk := time.NewTicker(interval)
		defer tk.Stop()
		for {
			_ = nc.Publish("dispatch.load."+id, body)
			select {
			case <-r.stop:
				return
			case <-tk.C:
			}
		}
	}()
	t.Cleanup(r.close)
	return r
}

// close stops the reports: the worker expires at its ttl.
func (r *reporter) close() {
	r.once.Do(func() { close(r.stop) })
	<-r.done
}

// loadRun is a run of the load generator in the background.
type loadRun struct {
	res *loadgen.Result
	err error
	end chan struct{}
}

// startLoad runs the load generator with cfg on nc in the background; at the
// end of the test a run still going is cancelled and waited for.
func startLoad(t testing.TB, nc *nats.Conn, cfg loadgen.Config) *loadRun {
	ctx, cancel := context.WithCancel(context.Background())
	r := &loadRun{end: make(chan struct{})}
	go func() {
		defer close(r.end)
		r.res, r.err = loadgen.Run(ctx, nc, cfg, zerolog.Nop())
	}()
	t.Cleanup(func() { cancel(); <-r.end })
	return r
}

// wait waits at most timeout for the run to end and returns its result; it
// fails the test if the run did not end, or ended with an error.
func (r *loadRun) wait(t testing.TB, timeout time.Duration) *loadgen.Result {
	t.Helper()
	select {
	case <-r.end:
	case <-time.After(timeout):
		t.Fatalf("loadgen did not end within %v", timeout)
	}
	if r.res == nil {
		t.Fatalf("loadgen: %v", r.err)
	}
	if r.err != nil {
		t.Fatalf("loadgen: %v (published %d, completed %d, rejected %d: %v)",
			r.err, r.res.Published, len(r.res.Completions), len(r.res.Rejected), r.res.Rejected)
	}
	return r.res
}

// runLoad runs the load generator with cfg on nc to its end (cfg.Timeout
// bounds it) and returns its result, failing the test if it failed.
func runLoad(t testing.TB, nc *nats.Conn, cfg loadgen.Config) *loadgen.Result {
	t.Helper()
	return startLoad(t, nc, cfg).wait(t, cfg.Timeout+time.Minute)
}

// defaultLoad is n unpinned requests of 512 tokens in class default, with
// ids <runID>-<i>, that must all end within 40 s.
func defaultLoad(runID string, n int) loadgen.Config {
	return loadgen.Config{Classes: []loadgen.ClassCount{{Class: "default", Count: n}}, ISL: 512, RunID: runID, Timeout: 40 * time.Second}
}

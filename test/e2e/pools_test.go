package e2e

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"fairdispatch/loadgen"
	"fairdispatch/mockworker"
	"fairdispatch/wire"
)

// Issue 16, several pools on one NATS account: two dispatcher pairs (prefixes
// llama and qwen) share one nats-server without touching each other. Helpers
// of this file carry the prefix pool.

// pool is one deployment: a prefix, its dispatcher pair, its worker and its classes.
type pool struct {
	prefix, worker string
	classes        [2]string // first, second
	quanta         [2]int
	leader, spare  *proc
	w              *mockworker.Worker
	// done records every completion record seen on <prefix>.done.* as
	// "request id@worker id", with its arrival time.
	mu     sync.Mutex
	done   []string
	doneAt []time.Time
}

func (p *pool) follow(t *testing.T, nc *nats.Conn) {
	t.Helper()
	onCompletion(t, nc, p.prefix+".done.*", func(c wire.Completion) {
		p.mu.Lock()
		p.done = append(p.done, c.RequestID+"@"+c.WorkerID)
		p.doneAt = append(p.doneAt, time.Now())
		p.mu.Unlock()
	})
}

// doneBetween counts the completion records that arrived in (from, to).
func (p *pool) doneBetween(from, to time.Time) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, at := range p.doneAt {
		if at.After(from) && at.Before(to) {
			n++
		}
	}
	return n
}

// records returns a copy of the completion records.
func (p *pool) records() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.done)
}

// run runs loadgen on pool p in the background.
func (p *pool) run(t *testing.T, nc *nats.Conn, cfg loadgen.Config) *loadRun {
	cfg.Prefix = p.prefix
	return startLoad(t, nc, cfg)
}

// poolResult waits for a run of the pool tests and checks it completed.
func poolResult(t *testing.T, r *loadRun, what string) *loadgen.Result {
	t.Helper()
	res := r.wait(t, 120*time.Second)
	if !res.Complete {
		t.Fatalf("%s: loadgen: incomplete (result %+v)", what, res)
	}
	return res
}

// TestPoolsTwoPrefixesOneAccount: pools llama and qwen, each a leader and a
// standby dispatcher and one mock worker, on one nats-server.
//
//  1. Fairness: each pool queues a burst of its two classes behind its
//     draining worker, then both are released together. Every request is served
//     by its own pool's worker, and each split follows its own policy: llama
//     weights its first class 512:128, qwen its second 512:128 the other way round.
//  2. Isolation under failover: both pools carry steady traffic and llama's
//     leader is SIGKILLed. Llama's standby takes over and finishes llama's
//     run; qwen's requests keep completing while llama has no leader, qwen's
//     leader redelivers nothing and stays leader, qwen's standby stays standby.
//  3. Nothing mentions the other pool: metrics, dead letters (one bad request
//     each), leases, and the account holds exactly the two pools' streams and
//     buckets, none of the default prefix's.
func TestPoolsTwoPrefixesOneAccount(t *testing.T) {
	ns := startNATS(t)
	url := ns.URL()
	nc := connect(t, url)
	js := jsOf(t, nc)
	llama := &pool{prefix: "llama", worker: "llama-w1", classes: [2]string{"premium", "regular"}, quanta: [2]int{512, 128}}
	qwen := &pool{prefix: "qwen", worker: "qwen-w1", classes: [2]string{"gold", "bronze"}, quanta: [2]int{128, 512}}
	pools := []*pool{llama, qwen}

	for _, p := range pools {
		pol := policyFile(t, "two-classes", "first", p.classes[0], "second", p.classes[1], "first_quantum", p.quanta[0], "second_quantum", p.quanta[1])
		args := []string{"--subject-prefix", p.prefix, "--policy-config", pol}
		p.leader = startDispatcher(t, url, append(args, "--instance-id", p.prefix+"-1")...)
		p.spare = launch(t, url, append(args, "--instance-id", p.prefix+"-2")...)
		p.follow(t, nc)
	}
	for _, p := range pools {
		haWaitStandby(t, p.spare)
		p.w = startDrainingMock(t, connect(t, url), mockworker.Config{ID: p.worker, Prefix: p.prefix, MaxNumSeqs: 4, OutputTokens: 1,
			PrefillTokensPerSec: 200000, ConfirmAcks: true})
	}
	for _, p := range pools {
		waitFor(t, 10*time.Second, p.prefix+"'s leader to see its worker live and draining", func() bool {
			v, ok := p.leader.queues()
			w := v.worker(p.worker)
			return ok && w != nil && w.Draining && len(v.Workers) == 1
		})
	}

	// 1. Fairness, each pool by its own policy.
	const perClass = 200
	runs := map[*pool]*loadRun{}
	for _, p := range pools {
		runs[p] = p.run(t, connect(t, url), loadgen.Config{
			Classes: []loadgen.ClassCount{{Class: p.classes[0], Count: perClass}, {Class: p.classes[1], Count: perClass}},
			ISL:     512, Order: loadgen.OrderAlternating, Timeout: 90 * time.Second, RunID: p.prefix + "-burst",
		})
	}
	for _, p := range pools {
		waitQueued(t, p.leader, 2*perClass, 30*time.Second)
	}
	for _, p := range pools {
		release(t, p.w)
	}
	for _, p := range pools {
		res := poolResult(t, runs[p], p.prefix+" burst")
		for _, c := range res.Completions {
			if c.WorkerID != p.worker || !strings.HasPrefix(c.RequestID, p.prefix+"-burst-") {
				t.Errorf("%s: request %s completed by %s", p.prefix, c.RequestID, c.WorkerID)
			}
		}
		share := res.PrefixShare(perClass)
		first, second := share[p.classes[0]], share[p.classes[1]]
		t.Logf("%s (quanta %s %d : %s %d): first %d completions: %s %d, %s %d", p.prefix, p.classes[0], p.quanta[0],
			p.classes[1], p.quanta[1], perClass, p.classes[0], first, p.classes[1], second)
		// 512:128 gives the favoured class about 4/5 of a backlogged worker.
		favoured, other := first, second
		if p.quanta[1] > p.quanta[0] {
			favoured, other = second, first
		}
		if favoured < perClass*7/10 || other < perClass/10 {
			t.Errorf("%s: first %d completions split %d (favoured) : %d, want >= %d : >= %d",
				p.prefix, perClass, favoured, other, perClass*7/10, perClass/10)
		}
	}

	// 2. Steady traffic on both pools; llama's leader dies.
	const steady = 2000
	for _, p := range pools {
		runs[p] = p.run(t, connect(t, url), loadgen.Config{
			Classes: []loadgen.ClassCount{{Class: p.classes[0], Count: steady / 2}, {Class: p.classes[1], Count: steady / 2}},
			ISL:     256, Rate: 250, Order: loadgen.OrderAlternating, Timeout: 90 * time.Second, RunID: p.prefix + "-steady",
		})
	}
	waitFor(t, 30*time.Second, "300 steady completions in each pool", func() bool {
		return len(llama.records()) >= 2*perClass+300 && len(qwen.records()) >= 2*perClass+300
	})
	qwenRedelivered := qwen.leader.metric("fairdispatch_redelivered_messages_total")
	llama.leader.kill()
	killAt := time.Now()
	ledAt := haWaitLead(t, llama.spare, 20*time.Second)
	t.Logf("llama's standby leads %v after its leader's SIGKILL", ledAt.Sub(killAt).Round(time.Millisecond))
	// While llama had no leader, qwen's requests kept completing: at 250/s
	// over at least the lease's remaining time, hundreds of them.
	n := qwen.doneBetween(killAt, ledAt)
	t.Logf("qwen completed %d requests while llama had no leader", n)
	if n < 50 {
		t.Errorf("qwen completed %d requests while llama had no leader (%v), want >= 50", n, ledAt.Sub(killAt).Round(time.Millisecond))
	}
	for _, p := range pools {
		res := poolResult(t, runs[p], p.prefix+" steady")
		if p == qwen && res.Duplicates != 0 {
			t.Errorf("qwen: %d duplicate completions, want 0 (llama's failover must not touch qwen)", res.Duplicates)
		}
		for _, c := range res.Completions {
			if c.WorkerID != p.worker {
				t.Errorf("%s: request %s completed by %s", p.prefix, c.RequestID, c.WorkerID)
			}
		}
	}
	t.Logf("redelivered: llama's new leader %v, qwen's leader %v (before the kill %v)",
		llama.spare.metric("fairdispatch_redelivered_messages_total"), qwen.leader.metric("fairdispatch_redelivered_messages_total"), qwenRedelivered)
	if got := qwen.leader.metric("fairdispatch_redelivered_messages_total"); got != qwenRedelivered {
		t.Errorf("qwen's leader redelivered %v messages during llama's failover, want none", got-qwenRedelivered)
	}
	if ready, _, gauge := haRole(qwen.leader); !ready || gauge != 1 {
		t.Errorf("qwen's leader: ready %v, gauge %v; want it still leading", ready, gauge)
	}
	if _, standby, gauge := haRole(qwen.spare); !standby || gauge != 0 {
		t.Errorf("qwen's standby: standby %v, gauge %v; want it still standing by", standby, gauge)
	}

	// Every completion record on a pool's subjects is of its own requests and worker.
	for _, p := range pools {
		for _, r := range p.records() {
			if !strings.HasPrefix(r, p.prefix+"-") || !strings.HasSuffix(r, "@"+p.worker) {
				t.Errorf("%s: completion record %s", p.prefix, r)
			}
		}
	}

	// 3a. Dead letters: a bad request in each pool lands in its own DLQ only.
	for _, p := range pools {
		publish(t, js, p.prefix+".req."+p.classes[0], p.prefix+"-bad", map[string]string{"Dispatch-ISL-Tokens": "abc"}, nil)
	}
	live := map[*pool]*proc{llama: llama.spare, qwen: qwen.leader}
	for _, p := range pools {
		dlq := strings.ToUpper(p.prefix) + "_DLQ"
		waitFor(t, 15*time.Second, "the bad request in "+dlq, func() bool { return streamMsgs(t, js, dlq) == 1 })
		for _, d := range streamAll(t, js, dlq) {
			if id := d.Header.Get("Dispatch-Request-Id"); id != p.prefix+"-bad" || !strings.HasPrefix(d.Subject, p.prefix+".dlq.") {
				t.Errorf("%s holds %s on %s", dlq, id, d.Subject)
			}
		}
		// The request is acknowledged once its dead letter is stored, so the
		// stream empties a moment after the DLQ fills (seen: 7 ms).
		waitFor(t, 10*time.Second, strings.ToUpper(p.prefix)+"_REQ to empty", func() bool {
			return streamMsgs(t, js, strings.ToUpper(p.prefix)+"_REQ") == 0
		})
	}

	// 3b. Metrics: a pool's dispatchers name none of the other's classes,
	// workers or prefix, and count only their own requests.
	for _, p := range pools {
		other := qwen
		if p == qwen {
			other = llama
		}
		for _, d := range []*proc{p.spare, live[p]} {
			_, body := d.get("/metrics")
			for _, bad := range []string{other.prefix, `class="` + other.classes[0] + `"`, `class="` + other.classes[1] + `"`} {
				if strings.Contains(body, bad) {
					t.Errorf("%s's dispatcher's metrics mention %s", p.prefix, bad)
				}
			}
		}
		// The counter and the acknowledgement are not ordered: wait for it.
		var rejected float64
		waitFor(t, 10*time.Second, p.prefix+"'s leader to count its own bad request", func() bool {
			rejected = live[p].metric("fairdispatch_rejected_total", `reason="bad_request"`)
			return rejected >= 1
		})
		if rejected != 1 {
			t.Errorf("%s's leader rejected %v bad requests, want 1 (its own)", p.prefix, rejected)
		}
		v, ok := live[p].queues()
		if !ok || len(v.Workers) != 1 || v.Workers[0].ID != p.worker {
			t.Errorf("%s's leader knows workers %+v, want only %s", p.prefix, v.Workers, p.worker)
		}
	}
	// Counted when the worker's acceptance is handled, which need not come
	// before the completion records the test has seen: wait for it.
	waitFor(t, 10*time.Second, fmt.Sprintf("qwen's leader to count at least %d dispatched", 2*perClass+steady), func() bool {
		return qwen.leader.metric("fairdispatch_dispatched_total") >= float64(2*perClass+steady)
	})

	// 3c. Leases: each pool's in its own bucket, held by its own dispatcher.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, c := range []struct{ bucket, holder string }{
		{"fairdispatch_llama_leader", "llama-2"}, {"fairdispatch_qwen_leader", "qwen-1"},
	} {
		kv, err := js.KeyValue(ctx, c.bucket)
		if err != nil {
			t.Fatalf("bucket %s: %v", c.bucket, err)
		}
		e, err := kv.Get(ctx, "dispatcher")
		if err != nil || string(e.Value()) != c.holder {
			t.Errorf("lease in %s: %v %v, want held by %s", c.bucket, e, err, c.holder)
		}
	}
	if _, err := js.KeyValue(ctx, "fairdispatch_leader"); !errors.Is(err, jetstream.ErrBucketNotFound) {
		t.Errorf("the default prefix's lease bucket: got %v, want ErrBucketNotFound", err)
	}
	var streams []string
	for name := range js.StreamNames(ctx).Name() {
		streams = append(streams, name)
	}
	slices.Sort(streams)
	want := []string{"KV_fairdispatch_llama_leader", "KV_fairdispatch_llama_policy", "KV_fairdispatch_qwen_leader", "KV_fairdispatch_qwen_policy",
		"LLAMA_DLQ", "LLAMA_KV", "LLAMA_REQ", "QWEN_DLQ", "QWEN_KV", "QWEN_REQ"}
	if !slices.Equal(streams, want) {
		t.Errorf("streams of the account: got %v, want %v", streams, want)
	}
}

// TestPoolsInvalidPrefixRefused: a prefix that would make an invalid stream
// or bucket name stops the dispatcher at start, with an error naming it.
func TestPoolsInvalidPrefixRefused(t *testing.T) {
	ns := startNATS(t)
	for _, c := range []struct{ prefix, name string }{
		{"team/llama", "TEAM/LLAMA_REQ"},
		{"llama+qwen", "fairdispatch_llama+qwen_leader"},
		{"llama.*", "invalid subject prefix"},
	} {
		p := launch(t, ns.URL(), "--subject-prefix", c.prefix)
		if err := p.wait(20 * time.Second); err == nil {
			t.Errorf("prefix %q: the dispatcher exited 0, want a refusal", c.prefix)
		}
		if out := p.out.String(); !strings.Contains(out, "--subject-prefix") || !strings.Contains(out, c.prefix) || !strings.Contains(out, c.name) {
			t.Errorf("prefix %q: output does not name the prefix and %s:\n%s", c.prefix, c.name, out)
		}
	}
	// Nothing was created for them.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	js := jsOf(t, connect(t, ns.URL()))
	for name := range js.StreamNames(ctx).Name() {
		t.Errorf("stream %s created by a refused dispatcher", name)
	}
}

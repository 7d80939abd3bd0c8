package e2e

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"fairdispatch/mockworker"
)

// The shares of docs/design.md, Fairness keys and Cost settlement, end to end:
// a backlog of 512-token requests is queued at the dispatcher while the only
// worker drains, then released. The test listens on the worker's dispatch
// subject (core NATS: a second subscriber gets a copy of every dispatch) and
// measures, in dispatch order, the cost each group (class/key) got while every
// group stayed backlogged: up to the first dispatch that empties a group, not
// over a wall-clock time.

// dispatched is one dispatch seen on the worker's subject.
type dispatched struct {
	group string // class/key
	key   string
	cost  float64 // Dispatch-Cost: the estimate charged
}

// shareArm is one run: the policy, the worker's cost factors (the real cost of
// a key's request is its estimate times the factor), and a publisher that
// queues the backlog and returns how many requests each group got.
type shareArm struct {
	policy        string             // testdata/<policy>.yaml
	factors       map[string]float64 // fairness key -> real cost / estimate; absent: 1
	noCompletions bool               // the worker publishes no completion record: no settlement
	publish       func(t *testing.T, url string) map[string]int
}

// run runs the arm and returns the dispatches in order and the groups' sizes.
func (a shareArm) run(t *testing.T) ([]dispatched, map[string]int) {
	t.Helper()
	f := startFixture(t, "--policy-config", policyFile(t, a.policy))
	ns, p, nc := f.ns, f.p, f.nc

	var mu sync.Mutex
	var order []dispatched
	seen := map[string]bool{}
	subscribe(t, nc, "dispatch.work.w1", func(m *nats.Msg) {
		h := dispatchHeader(t, m) // the mock asks for the compact form
		id := h.Get("Dispatch-Request-Id")
		cost, _ := strconv.ParseFloat(h.Get("Dispatch-Cost"), 64)
		key := h.Get("Dispatch-Fairness-Key")
		if key == "" {
			key = "_"
		}
		mu.Lock()
		defer mu.Unlock()
		if !seen[id] { // a dispatch sent again after a refusal counts once
			seen[id] = true
			order = append(order, dispatched{group: h.Get("Dispatch-Class") + "/" + key, key: key, cost: cost})
		}
	})
	// The backlog forms before anything is taken.
	w := startDrainingMock(t, nc, mockworker.Config{ID: "w1", MaxNumSeqs: 4, OutputTokens: 1, PrefillTokensPerSec: 200000,
		KeyCostFactors: a.factors, NoCompletions: a.noCompletions})
	waitDraining(t, p, "w1")
	sizes := a.publish(t, ns.URL())
	total := 0
	for _, n := range sizes {
		total += n
	}
	waitQueued(t, p, total, 30*time.Second)
	w.Helper().SetDraining(false)
	waitFor(t, 90*time.Second, "every request dispatched", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(order) == total
	})
	mu.Lock()
	defer mu.Unlock()
	return append([]dispatched(nil), order...), sizes
}

// backloggedShares returns, over the dispatches made while every group still
// had a request queued (up to and including the one that empties the first
// group), each group's part of the real cost served: the charged estimate
// times the key's factor. n is the number of dispatches in that window.
func backloggedShares(order []dispatched, sizes map[string]int, factors map[string]float64) (shares map[string]float64, n int) {
	left := map[string]int{}
	for g, c := range sizes {
		left[g] = c
	}
	served := map[string]float64{}
	var sum float64
	for _, d := range order {
		f := factors[d.key]
		if f == 0 {
			f = 1
		}
		served[d.group] += d.cost * f
		sum += d.cost * f
		n++
		left[d.group]--
		if left[d.group] == 0 {
			break
		}
	}
	shares = map[string]float64{}
	for g, r := range served {
		shares[g] = r / sum
	}
	return shares, n
}

// publishGroups publishes, on one connection, n[g] requests of 512 tokens for
// each group g ("class/key"; key "_" sends no Dispatch-Fairness-Key), in a
// random interleaving.
func publishGroups(t *testing.T, url string, n map[string]int) map[string]int {
	t.Helper()
	nc := connect(t, url)
	var todo []string
	for _, g := range slices.Sorted(maps.Keys(n)) {
		for range n[g] {
			todo = append(todo, g)
		}
	}
	rng := rand.New(rand.NewPCG(3, 5))
	rng.Shuffle(len(todo), func(i, j int) { todo[i], todo[j] = todo[j], todo[i] })
	if err := publishSeq(t, nc, "p", todo); err != nil {
		t.Fatal(err)
	}
	return n
}

// publishSeq publishes one 512-token request per group in todo, in order, with
// message ids prefix-<i>. It may run on any goroutine.
func publishSeq(t *testing.T, nc *nats.Conn, prefix string, todo []string) error {
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	futures := make([]jetstream.PubAckFuture, 0, len(todo))
	for i, g := range todo {
		class, key, _ := cutGroup(g)
		m := nats.NewMsg("dispatch.req." + class)
		m.Header.Set(jetstream.MsgIDHeader, fmt.Sprintf("%s-%05d", prefix, i))
		m.Header.Set("Dispatch-ISL-Tokens", "512")
		if key != "_" {
			m.Header.Set("Dispatch-Fairness-Key", key)
		}
		f, err := js.PublishMsgAsync(m)
		if err != nil {
			return err
		}
		futures = append(futures, f)
	}
	for _, f := range futures {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			return err
		case <-time.After(30 * time.Second):
			return fmt.Errorf("%s: publication not acknowledged within 30 s", prefix)
		}
	}
	return nil
}

func cutGroup(g string) (class, key string, ok bool) {
	for i := range len(g) {
		if g[i] == '/' {
			return g[:i], g[i+1:], true
		}
	}
	return g, "_", false
}

// TestKeysWeightsOverNATS is acceptance 2 end to end: key weights 3:1 between
// two backlogged keys give 75/25 +- 2% of the cost served.
func TestKeysWeightsOverNATS(t *testing.T) {
	order, sizes := shareArm{
		policy: "shares-weights",
		publish: func(t *testing.T, url string) map[string]int {
			return publishGroups(t, url, map[string]int{"c/gold": 300, "c/bronze": 300})
		},
	}.run(t)
	checkShare(t, order, sizes, "c/gold", "c/bronze", 300, 0.73, 0.77)
}

// checkShare requires at least minN dispatches in order while both groups
// were backlogged, and group's part of their cost in [lo, hi].
func checkShare(t *testing.T, order []dispatched, sizes map[string]int, group, other string, minN int, lo, hi float64) {
	t.Helper()
	sh, n := backloggedShares(order, sizes, nil)
	t.Logf("over %d dispatches while both were backlogged: %s %.3f %s %.3f", n, group, sh[group], other, sh[other])
	if n < minN {
		t.Errorf("only %d dispatches while both were backlogged, want >= %d", n, minN)
	}
	if g := sh[group]; g < lo || g > hi {
		t.Errorf("%s got %.3f of the cost, want %.2f to %.2f", group, g, lo, hi)
	}
}

// settlement is a settlement test: the heavy group's requests really cost ten
// times the estimate (the mock worker's records say so, fairness key heavy),
// the light group's are exact. Without completion records heavy gets at least
// without of the real cost; with them, within with (its due +- 0.03).
type settlement struct {
	policy       string         // testdata/<policy>.yaml
	groups       map[string]int // heavy and light, and their sizes
	heavy, light string
	without      float64    // least share of heavy without settlement
	with         [2]float64 // heavy's share with settlement: at least, at most
}

func (s settlement) run(t *testing.T) {
	factors := map[string]float64{"heavy": 10}
	arm := func(noCompletions bool) (map[string]float64, int) {
		order, sizes := shareArm{
			policy: s.policy, factors: factors, noCompletions: noCompletions,
			publish: func(t *testing.T, url string) map[string]int { return publishGroups(t, url, s.groups) },
		}.run(t)
		return backloggedShares(order, sizes, factors)
	}
	without, n := arm(true)
	t.Logf("without settlement, over %d dispatches: %s %.3f of the real cost", n, s.heavy, without[s.heavy])
	if without[s.heavy] < s.without {
		t.Errorf("without settlement %s got %.3f of the real cost, want far more than its due (>= %.2f)", s.heavy, without[s.heavy], s.without)
	}
	with, n := arm(false)
	t.Logf("with settlement, over %d dispatches: %s %.3f %s %.3f of the real cost", n, s.heavy, with[s.heavy], s.light, with[s.light])
	if h := with[s.heavy]; h < s.with[0] || h > s.with[1] {
		t.Errorf("with settlement %s got %.3f of the real cost, want %.2f to %.2f", s.heavy, h, s.with[0], s.with[1])
	}
}

// TestKeysSettlementOverNATS is acceptance 4 end to end, one class: tenant
// heavy's requests really cost ten times the estimate, light's are exact.
// Without completion records heavy gets far more than half of the real cost;
// with them, half +- 3% each.
func TestKeysSettlementOverNATS(t *testing.T) {
	settlement{policy: "shares", groups: map[string]int{"c/heavy": 120, "c/light": 1400},
		heavy: "c/heavy", light: "c/light", without: 0.75, with: [2]float64{0.47, 0.53}}.run(t)
}

// TestClassesSettlementOverNATS is acceptance 4 end to end, two classes with
// quanta 512:128: premium's requests really cost ten times the estimate.
// Without records premium's real share is far above 4:1; with them the
// real-cost split returns to 4:1 +- 3% (premium 80%).
func TestClassesSettlementOverNATS(t *testing.T) {
	settlement{policy: "shares-classes", groups: map[string]int{"premium/heavy": 200, "regular/light": 900},
		heavy: "premium/heavy", light: "regular/light", without: 0.9, with: [2]float64{0.77, 0.83}}.run(t)
}

// TestIngressSkewOverNATS is acceptance 6: two producers on separate
// connections, one publishing 90% of the premium requests and 10% of the
// regular ones, the other the reverse, concurrently. One dispatcher sees every
// arrival, so the 4:1 split of quanta 512:128 holds within +- 3% (with routers
// that each see their own ingress, it would not).
func TestIngressSkewOverNATS(t *testing.T) {
	order, sizes := shareArm{
		policy: "shares-classes",
		publish: func(t *testing.T, url string) map[string]int {
			mix := func(premium, regular int, seed uint64) []string {
				var todo []string
				for range premium {
					todo = append(todo, "premium/_")
				}
				for range regular {
					todo = append(todo, "regular/_")
				}
				rng := rand.New(rand.NewPCG(seed, 1))
				rng.Shuffle(len(todo), func(i, j int) { todo[i], todo[j] = todo[j], todo[i] })
				return todo
			}
			a, b := connect(t, url), connect(t, url) // two producers, two connections
			var wg sync.WaitGroup
			for i, p := range []struct {
				nc   *nats.Conn
				todo []string
			}{{a, mix(450, 50, 1)}, {b, mix(50, 450, 2)}} {
				wg.Go(func() {
					if err := publishSeq(t, p.nc, fmt.Sprint("producer", i), p.todo); err != nil {
						t.Error(err)
					}
				})
			}
			wg.Wait()
			if t.Failed() {
				t.FailNow()
			}
			return map[string]int{"premium/_": 500, "regular/_": 500}
		},
	}.run(t)
	checkShare(t, order, sizes, "premium/_", "regular/_", 500, 0.77, 0.83)
}

// TestKeysDemo runs the keys demo (make run DEMO=keys) on the dispatcher
// binary and reads its summary: while all three tenants waited, the flooding
// tenant (60% of the requests) got its weight's due, 20% +- 4%, as the quiet
// one did, and vip (weight 3) 60% +- 4%.
func TestKeysDemo(t *testing.T) {
	ns := startNATS(t)
	p := launch(t, ns.URL(), "--policy-config", "../../configs/policy-keys.yaml", "--demo", "--demo-scenario", "keys")
	if err := p.wait(90 * time.Second); err != nil {
		t.Fatalf("demo: %v\n%s", err, p.out.String())
	}
	out := p.out.String()
	// A demo that ends on its own stops as cleanly as one told to.
	if strings.Contains(out, "policy watch failed") {
		t.Errorf("the demo's shutdown warned of the policy watch:\n%s", out)
	}
	want := map[string]float64{"flood": 20, "vip": 60, "quiet": 20}
	for key, due := range want {
		re := regexp.MustCompile(`(?m)^  ` + key + `\s+\d+ \(\s*([0-9.]+)%\)`)
		m := re.FindStringSubmatch(out)
		if m == nil {
			t.Fatalf("no summary line for %s in:\n%s", key, out)
		}
		got, _ := strconv.ParseFloat(m[1], 64)
		if got < due-4 || got > due+4 {
			t.Errorf("%s: got %.1f%% of the completions while all waited, want %.0f%% +- 4", key, got, due)
		}
	}
}

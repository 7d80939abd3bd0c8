package e2e

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"fairdispatch/mockworker"
)

// The soak test runs for -soak (default 20s: CI's short form). The long form,
// at least a minute:
//
//	go test -race -count=1 -run TestSoak ./test/e2e/ -soak 60s
//
// Faults are drawn from -soak-seed (default: the clock); the seed is logged,
// so a failing run replays with -soak-seed <seed> (the draws replay; the
// timing of the system under test does not).
var (
	soakFor  = flag.Duration("soak", 20*time.Second, "duration of TestSoak's fault injection (the long form: 60s or more)")
	soakSeed = flag.Uint64("soak-seed", 0, "seed of TestSoak's fault draws; 0: time-based")
)

const (
	soakLeaderKill    = "SIGKILL of the leader dispatcher"
	soakNATSRestart   = "restart of the NATS server"
	soakWorkerKill    = "a worker killed"
	soakWorkerRestart = "a worker restarted under the same id"
)

// TestSoak: a steady publisher (400 requests/s) throughout; two dispatchers
// (a leader and a standby, a fresh standby started after every leader kill),
// four mock workers; every 2 to 4 s one fault at random (the first four are
// the four kinds, in a random order): SIGKILL of the leader, restart of the
// NATS server on its storage, a worker killed (and a new one started under a
// new id), a worker restarted under the same id. At the end the faults stop,
// everything drains, and nothing is lost; duplicates only where a killed
// worker had accepted the request or a handshake timeout was logged.
func TestSoak(t *testing.T) {
	const rate = 400
	const ttl = 3 * time.Second // --lease-ttl default
	seed := *soakSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("soak %v, seed %d; replay with: go test -race -count=1 -run TestSoak ./test/e2e/ -soak %v -soak-seed %d",
		*soakFor, seed, *soakFor, seed)
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))

	ns := startNATS(t)
	url := ns.URL()
	rec := haRecord(t, haConnect(t, url))
	args := append(slices.Clone(haLog), "--queue-threshold", "0.05")
	nextDispatcher := 0
	launchStandby := func() *proc {
		nextDispatcher++
		p := launch(t, url, append(args, "--instance-id", fmt.Sprintf("d%d", nextDispatcher))...)
		haWaitStandby(t, p)
		return p
	}
	nextDispatcher++
	first := startDispatcher(t, url, append(args, "--instance-id", "d1")...)
	procs := []*proc{first, launchStandby()}

	var workers []*haMock
	nextWorker := 0
	addWorker := func() *haMock {
		nextWorker++
		w := haStartMock(t, rec, url, mockworker.Config{ID: fmt.Sprintf("w%d", nextWorker), PrefillTokensPerSec: 20000, TTL: 1500 * time.Millisecond})
		workers = append(workers, w)
		return w
	}
	for range 4 {
		addWorker()
	}
	waitLive(t, first, "w1", "w2", "w3", "w4")

	pub := &haPublisher{run: "soak", n: int(rate * soakFor.Seconds()), rate: rate}
	start := time.Now()
	pub.start(t, haConnect(t, url), 4)

	// leaderNow waits until exactly one live dispatcher leads and returns it.
	alive := func(p *proc) bool {
		select {
		case <-p.done:
			return false
		default:
			return true
		}
	}
	leaderNow := func() (lead *proc, standby *proc) {
		waitFor(t, 20*time.Second, "one dispatcher to lead", func() bool {
			lead, standby = nil, nil
			leaders := 0
			for _, p := range procs {
				if !alive(p) {
					continue
				}
				if p.metric("fairdispatch_leader") == 1 {
					leaders++
					lead = p
				} else {
					standby = p
				}
			}
			return leaders == 1 && standby != nil
		})
		return lead, standby
	}

	kinds := []string{soakLeaderKill, soakNATSRestart, soakWorkerKill, soakWorkerRestart}
	order := slices.Clone(kinds)
	rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
	var killed []haKilled
	var takeovers []time.Duration
	done := map[string]int{}
	for i := 0; ; i++ {
		wait := 2*time.Second + time.Duration(rng.Int64N(int64(2*time.Second)))
		// Every kind is injected once, in the shuffled order, however long the
		// first faults take on a loaded machine (a leader kill waits for the
		// takeover); then faults are drawn at random while the soak lasts.
		if i >= len(order) && time.Since(start)+wait > *soakFor {
			break
		}
		time.Sleep(wait)
		kind := kinds[rng.IntN(len(kinds))]
		if i < len(order) {
			kind = order[i]
		}
		at := time.Since(start).Round(time.Millisecond)
		switch kind {
		case soakLeaderKill:
			lead, standby := leaderNow()
			lead.kill()
			killAt := time.Now()
			ledAt := haWaitLead(t, standby, 20*time.Second)
			took := ledAt.Sub(killAt)
			takeovers = append(takeovers, took)
			t.Logf("fault %d at %v: %s; the standby leads after %v", i, at, kind, took.Round(time.Millisecond))
			if bound := haFailoverBound(ttl); took > bound {
				t.Errorf("fault %d: takeover took %v, over the documented bound %v", i, took, bound)
			}
			procs = append(procs, launchStandby())
		case soakNATSRestart:
			stopAt := time.Now()
			ns.Restart()
			t.Logf("fault %d at %v: %s at %s, back after %v (%d published, %d completed)", i, at, kind, stopAt.Format("15:04:05.000"),
				time.Since(stopAt).Round(time.Millisecond), pub.published.Load(), rec.completed())
		case soakWorkerKill:
			j := rng.IntN(len(workers))
			w := workers[j]
			killed = append(killed, haKilled{w.id, w.kill()})
			workers = slices.Delete(workers, j, j+1)
			nw := addWorker()
			t.Logf("fault %d at %v: %s: %s; %s started in its place", i, at, kind, w.id, nw.id)
		case soakWorkerRestart:
			w := workers[rng.IntN(len(workers))]
			w.restart(t)
			t.Logf("fault %d at %v: %s: %s", i, at, kind, w.id)
		}
		done[kind]++
	}
	t.Logf("faults injected over %v: %v; takeovers %v", time.Since(start).Round(time.Millisecond), done, takeovers)

	time.Sleep(time.Until(start.Add(*soakFor))) // the publisher runs the whole soak
	pub.halt()
	pub.wait(t, 60*time.Second)
	leaderNow()
	js := jsOf(t, haConnect(t, url))
	haCheck(t, js, rec, []*haPublisher{pub}, killed, 90*time.Second, procs...)
	t.Logf("soak ended %v after its start; %d published at %d/s; publisher retries %d", time.Since(start).Round(time.Millisecond),
		pub.published.Load(), rate, pub.retries.Load())
}

package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"sync"
	"syscall"
	"testing"
	"time"

	"fairdispatch/wire"
)

var (
	fairctlOnce sync.Once
	fairctlBin  string
	fairctlErr  error
)

// fairctl builds the fairctl binary once and returns its path.
func fairctl(t *testing.T) string {
	t.Helper()
	fairctlOnce.Do(func() {
		dir, err := os.MkdirTemp("", "fairdispatch-fairctl-")
		if err != nil {
			fairctlErr = err
			return
		}
		fairctlBin = filepath.Join(dir, "fairctl")
		out, err := exec.Command("go", "build", "-o", fairctlBin, "fairdispatch/cmd/fairctl").CombinedOutput()
		if err != nil {
			fairctlErr = fmt.Errorf("building fairctl: %v\n%s", err, out)
		}
	})
	if fairctlErr != nil {
		t.Fatal(fairctlErr)
	}
	return fairctlBin
}

// simJSON is the part of fairctl sim --json these tests read.
type simJSON struct {
	Arrivals int        `json:"arrivals"`
	Recorded *simStatsJ `json:"recorded"`
	Current  *simStatsJ `json:"current"`
	Proposed simStatsJ  `json:"proposed"`
}

type simStatsJ struct {
	Contended bool `json:"contended"`
	FirstN    int  `json:"first_n"`
	Classes   []struct {
		Name       string  `json:"name"`
		Weight     float64 `json:"weight"`
		Share      float64 `json:"share"`
		Dispatched int     `json:"dispatched"`
		FirstN     int     `json:"first_n"`
	} `json:"classes"`
}

func (s *simStatsJ) class(t *testing.T, name string) (share float64, firstN int) {
	t.Helper()
	for _, c := range s.Classes {
		if c.Name == name {
			return c.Share, c.FirstN
		}
	}
	t.Fatalf("class %s missing from %+v", name, s)
	return 0, 0
}

// runSim runs fairctl sim --json with args.
func runSim(t *testing.T, args ...string) simJSON {
	t.Helper()
	return runSimGlobal(t, nil, args...)
}

// runSimGlobal runs fairctl with global flags, then sim --json with args.
func runSimGlobal(t *testing.T, global []string, args ...string) simJSON {
	t.Helper()
	out, err := exec.Command(fairctl(t), append(append(global, "sim", "--json"), args...)...).Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("fairctl sim %q: %v\n%s", args, err, stderr)
	}
	var r simJSON
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("fairctl sim --json: %v\n%s", err, out)
	}
	return r
}

// recordedBurst runs the seed burst with the given quanta on a dispatcher
// recording to a trace file, stops the dispatcher (which closes the file) and
// returns the figures, the trace and the NATS server's URL.
func recordedBurst(t *testing.T, premium, regular int, extra ...string) (f frlFigures, trace, natsURL string) {
	t.Helper()
	dir := t.TempDir()
	trace = filepath.Join(dir, "trace.jsonl")
	f, p := frlFairnessRun(t, premium, regular, append([]string{"--record", trace}, extra...)...)
	for i, a := range p.cmd.Args {
		if a == "--nats-url" {
			natsURL = p.cmd.Args[i+1]
		}
	}
	p.signal(syscall.SIGTERM)
	if err := p.wait(30 * time.Second); err != nil {
		t.Fatalf("dispatcher exit: %v", err)
	}
	return f, trace, natsURL
}

// TestSimPredictsRealRuns is issue 12's acceptance 4: fairctl sim on a trace
// recorded from the seed burst at 512:128 reproduces the end-to-end split
// (premium 256 +- 6 of the first 320 completions), and its prediction for a
// proposed policy (128:512, and 512:512) is within 3 points of a real run under it.
//
// Share is defined the same way for prediction and reality: a class's part
// of the cost dispatched while both classes were backlogged (sim.Analyze,
// applied to the simulated dispatches and to the recorded ones); the first-320
// completion split is compared too (simulated completions against the load
// generator's).
func TestSimPredictsRealRuns(t *testing.T) {
	real, trace, url := recordedBurst(t, 512, 128, "--record-stream")
	t.Logf("real 512:128: %v", real)
	checkTrace(t, trace)
	// The trace stream holds the same trace as the file.
	fromFile := runSim(t, "--policy", writePolicy(t, fairPolicy(t, 512, 128)), "--trace", trace)
	fromStream := runSimGlobal(t, []string{"--server", url}, "--policy", writePolicy(t, fairPolicy(t, 512, 128)), "--trace-stream")
	if fromStream.Arrivals != 640 || fromStream.Recorded == nil || !reflect.DeepEqual(fromFile.Recorded, fromStream.Recorded) {
		t.Errorf("sim --trace-stream: %d arrivals, recorded %+v; want 640 and the file's %+v", fromStream.Arrivals, fromStream.Recorded, fromFile.Recorded)
	}

	for _, q := range [][2]int{{128, 512}, {512, 512}} {
		proposed := writePolicy(t, fairPolicy(t, q[0], q[1]))
		pred := runSim(t, "--policy", proposed, "--trace", trace, "--first", "320")
		if pred.Arrivals != 640 || pred.Current == nil || pred.Recorded == nil {
			t.Fatalf("sim: %d arrivals, current %v, recorded %v; want 640 and both", pred.Arrivals, pred.Current, pred.Recorded)
		}
		if q == [2]int{128, 512} {
			// The current policy (the trace header's) reproduces the real split.
			_, simFirst := pred.Current.class(t, "premium")
			t.Logf("simulated 512:128: premium %d of the first 320; real %d", simFirst, real.premiumFirst320)
			if simFirst < 250 || simFirst > 262 {
				t.Errorf("simulated premium in the first 320 at 512:128 = %d, want 256 +- 6", simFirst)
			}
			if d := simFirst - real.premiumFirst320; d < -10 || d > 10 {
				t.Errorf("simulated premium in the first 320 = %d, real %d: want within 10 (3 points)", simFirst, real.premiumFirst320)
			}
			for _, c := range []string{"premium", "regular"} {
				s, _ := pred.Current.class(t, c)
				r, _ := pred.Recorded.class(t, c)
				if math.Abs(s-r) > 0.03 {
					t.Errorf("512:128 class %s: simulated share %.3f, recorded %.3f: want within 0.03", c, s, r)
				}
			}
		}

		// A real run under the proposed policy.
		realNew, traceNew, _ := recordedBurst(t, q[0], q[1])
		t.Logf("real %d:%d: %v", q[0], q[1], realNew)
		observed := runSim(t, "--policy", proposed, "--trace", traceNew, "--baseline", proposed)
		for _, c := range []string{"premium", "regular"} {
			p, _ := pred.Proposed.class(t, c)
			o, _ := observed.Recorded.class(t, c)
			t.Logf("%d:%d class %s: predicted share %.3f, real %.3f", q[0], q[1], c, p, o)
			if math.Abs(p-o) > 0.03 {
				t.Errorf("%d:%d class %s: predicted share %.3f, real %.3f: want within 0.03", q[0], q[1], c, p, o)
			}
		}
		_, predFirst := pred.Proposed.class(t, "premium")
		t.Logf("%d:%d: predicted premium %d of the first 320, real %d", q[0], q[1], predFirst, realNew.premiumFirst320)
		if d := predFirst - realNew.premiumFirst320; d < -10 || d > 10 {
			t.Errorf("%d:%d: predicted premium in the first 320 = %d, real %d: want within 10 (3 points)", q[0], q[1], predFirst, realNew.premiumFirst320)
		}
	}
}

// checkTrace checks the trace file's shape: a header with the format and
// the policy, then one arrive and one accepted dispatch per request, with
// class, key and costs, and no body.
func checkTrace(t *testing.T, path string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	n := map[string]int{}
	for i := 0; sc.Scan(); i++ {
		var r wire.TraceRecord
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("trace line %d: %v", i+1, err)
		}
		if i == 0 {
			if err := wire.CheckTraceHeader(r); err != nil || r.Policy == "" {
				t.Fatalf("trace header %s: %v (policy %q)", sc.Bytes(), err, r.Policy)
			}
			continue
		}
		n[r.Event+"/"+r.Outcome]++
		switch r.Event {
		case wire.TraceArrive:
			if r.Class == "" || r.Key != "_" || r.ISL != 512 || r.Cost != 512 || r.Published == 0 || r.ID == "" {
				t.Fatalf("arrive record %s: want class, key _, isl and cost 512, published, id", sc.Bytes())
			}
		case wire.TraceDispatch:
			if r.Worker != "w1" || r.Rank == nil || r.Cost != 512 {
				t.Fatalf("dispatch record %s: want worker w1, rank, cost 512", sc.Bytes())
			}
		}
	}
	if n["arrive/"] != 640 || n["dispatch/accepted"] < 640 {
		t.Errorf("trace events %v: want 640 arrivals and 640 accepted dispatches", n)
	}
}

package dispatcher

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"fairdispatch/metrics"
)

func TestDropLimiterOncePerWorkerPerInterval(t *testing.T) {
	var d dropLimiter
	t0 := time.Unix(1_700_000_000, 0)
	type step struct {
		worker     string
		at         time.Duration
		ok         bool
		suppressed int
	}
	for i, s := range []step{
		{"w1", 0, true, 0},
		{"w1", time.Second, false, 0},
		{"w2", time.Second, true, 0}, // per worker
		{"w1", 2 * time.Second, false, 0},
		{"w1", dropLogEvery, true, 2},
		{"w1", dropLogEvery + time.Second, false, 0},
	} {
		ok, n := d.allow(s.worker, t0.Add(s.at))
		if ok != s.ok || n != s.suppressed {
			t.Errorf("step %d (%s at +%v): got (%v, %d), want (%v, %d)", i, s.worker, s.at, ok, n, s.ok, s.suppressed)
		}
	}
}

func TestDropLimiterBounded(t *testing.T) {
	var d dropLimiter
	t0 := time.Unix(1_700_000_000, 0)
	for i := range dropLogWorkers {
		if ok, _ := d.allow(fmt.Sprintf("w%d", i), t0); !ok {
			t.Fatalf("worker %d not logged", i)
		}
	}
	// Full of recent warnings: new workers share one slot.
	if ok, _ := d.allow("new1", t0.Add(time.Second)); !ok {
		t.Error("first new worker over the bound: not logged, want logged (shared slot)")
	}
	if ok, _ := d.allow("new2", t0.Add(2*time.Second)); ok {
		t.Error("second new worker over the bound within the interval: logged, want suppressed")
	}
	if len(d.last) > dropLogWorkers+1 {
		t.Errorf("limiter remembers %d workers, want at most %d", len(d.last), dropLogWorkers+1)
	}
	// Once the old warnings are an interval old they are forgotten.
	if ok, _ := d.allow("new3", t0.Add(dropLogEvery+time.Second)); !ok {
		t.Error("new worker after the interval: not logged")
	}
	if len(d.last) > dropLogWorkers+1 {
		t.Errorf("limiter remembers %d workers, want at most %d", len(d.last), dropLogWorkers+1)
	}
}

// TestActorDroppedLoadReportWarnsRateLimited: a dropped load report is logged
// at warn (not only at debug) with the worker id and reason, once per worker
// per interval.
func TestActorDroppedLoadReportWarnsRateLimited(t *testing.T) {
	f := newFixture(t, policy)
	var buf bytes.Buffer
	f.a.log = zerolog.New(&buf).Level(zerolog.InfoLevel)
	for range 3 {
		f.a.LoadReport("w1", []byte("not json"))
	}
	f.a.LoadReport("w2", []byte(`{"worker_id":"other"}`))
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("got %d log lines, want 2 (one per worker):\n%s", len(lines), buf.String())
	}
	for i, want := range []string{`"worker_id":"w1"`, `"worker_id":"w2"`} {
		if !strings.Contains(lines[i], `"level":"warn"`) || !strings.Contains(lines[i], want) || !strings.Contains(lines[i], `"reason":"`) {
			t.Errorf("line %d = %s, want a warning with %s and a reason", i, lines[i], want)
		}
	}
	f.now = f.now.Add(dropLogEvery)
	buf.Reset()
	f.a.LoadReport("w1", []byte("not json"))
	if !strings.Contains(buf.String(), `"suppressed":2`) {
		t.Errorf("after the interval: %s, want the 2 suppressed drops counted", buf.String())
	}
}

// TestActorUnknownClassTokenCountedAndLoggedOnce: a request on a subject token
// that names no class or family is counted every time and logged once per token.
func TestActorUnknownClassTokenCountedAndLoggedOnce(t *testing.T) {
	f := newFixture(t, policy)
	var buf bytes.Buffer
	f.a.log = zerolog.New(&buf).Level(zerolog.InfoLevel)
	reg := prometheus.NewRegistry()
	pol := f.a.d.Scheduler.Policy()
	f.a.d.Metrics = metrics.New(reg, classNames(pol))
	f.now = f.now.Add(time.Second)
	f.report("w1", 0)
	for i, tok := range []string{"nope", "premium", "nope", "other"} {
		f.deliver(uint64(i+1), tok, nats.Header{"Dispatch-ISL-Tokens": {"10"}})
	}
	if got := counterValue(t, reg, "fairdispatch_unknown_class_tokens_total"); got != 3 {
		t.Errorf("fairdispatch_unknown_class_tokens_total = %v, want 3", got)
	}
	if n := strings.Count(buf.String(), "unknown class token"); n != 2 {
		t.Errorf("logged %d unknown-token warnings, want 2 (nope, other):\n%s", n, buf.String())
	}
	if !strings.Contains(buf.String(), `"subject":"dispatch.req.nope"`) {
		t.Errorf("warning does not name the subject:\n%s", buf.String())
	}
}

func counterValue(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			var sum float64
			for _, m := range mf.GetMetric() {
				sum += m.GetCounter().GetValue()
			}
			return sum
		}
	}
	t.Fatalf("metric %s not registered", name)
	return 0
}

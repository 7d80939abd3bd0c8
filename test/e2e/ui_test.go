package e2e

import (
	"bytes"
	"context"
	"fmt"
	"html"
	"image/png"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"fairdispatch/internal/natstest"
	"fairdispatch/loadgen"
	"fairdispatch/mockworker"
)

// uiChromiumEnv names a Chromium binary for the status page tests; when it is
// empty, chromium (Debian's package, which .ci/run installs) is looked up on
// PATH.
const uiChromiumEnv = "FAIRDISPATCH_CHROMIUM"

// uiScreenshotEnv, when set, makes TestStatusPageScreenshot record a live
// dispatcher for a minute and write the page's screenshot there (docs/ui.png:
// `FAIRDISPATCH_UI_SCREENSHOT=$PWD/docs/ui.png go test ./test/e2e -run
// TestStatusPageScreenshot`).
const uiScreenshotEnv = "FAIRDISPATCH_UI_SCREENSHOT"

// uiChromium returns a headless Chromium. Without one the test fails under
// CI=true and is skipped otherwise, saying so.
func uiChromium(t *testing.T) string {
	t.Helper()
	return natstest.Program(t, uiChromiumEnv, "install one (apt-get install chromium) to run the status page tests",
		"chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
}

// uiChrome runs headless Chromium on url with extra arguments (--dump-dom or
// --screenshot=...) and returns its standard output. budget is the virtual
// time the page gets to run its timers, and fetches answered in between:
// the page polls once a virtual second.
func uiChrome(t *testing.T, bin, url string, budget time.Duration, extra ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	args := append([]string{"--headless=new", "--disable-gpu", "--no-sandbox", "--no-first-run",
		"--disable-dev-shm-usage", "--hide-scrollbars", "--user-data-dir=" + t.TempDir(),
		"--virtual-time-budget=" + strconv.FormatInt(budget.Milliseconds(), 10)}, extra...)
	cmd := exec.CommandContext(ctx, bin, append(args, url)...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	cmd.Dir = t.TempDir()
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s: %v\n%s", bin, err, tail(errb.String(), 30))
	}
	return out.String()
}

// uiReadQueues reads p's /debug/queues, failing the test if it cannot.
func uiReadQueues(t *testing.T, p *proc) queueView {
	t.Helper()
	v, ok := p.queues()
	if !ok {
		code, body := p.get("/debug/queues")
		t.Fatalf("GET /debug/queues: %d %s", code, body)
	}
	return v
}

// uiRevision is the policy revision the page should show for v: the live
// policy's policy.revision, else "static".
func uiRevision(v queueView) string {
	if v.Policy.Revision == 0 {
		return "static"
	}
	return strconv.FormatUint(v.Policy.Revision, 10)
}

// uiRow returns the cells of the table row with attribute attr="value" in
// dom, by their class attribute, unescaped.
func uiRow(t *testing.T, dom, attrs string) map[string]string {
	t.Helper()
	m := regexp.MustCompile(`<tr ` + regexp.QuoteMeta(attrs) + `>(.*?)</tr>`).FindStringSubmatch(dom)
	if m == nil {
		t.Fatalf("no row <tr %s> in the rendered page:\n%s", attrs, uiTables(dom))
	}
	cells := map[string]string{}
	for _, c := range regexp.MustCompile(`<td class="([^"]+)"[^>]*>(.*?)</td>`).FindAllStringSubmatch(m[1], -1) {
		cells[c[1]] = html.UnescapeString(c[2])
	}
	return cells
}

// uiTables is the rendered tables, for failure messages.
func uiTables(dom string) string {
	return strings.Join(regexp.MustCompile(`<tbody>.*?</tbody>`).FindAllString(dom, -1), "\n")
}

// uiID returns the text of the element with id in dom.
func uiID(t *testing.T, dom, id string) string {
	t.Helper()
	m := regexp.MustCompile(`id="` + id + `"[^>]*>([^<]*)<`).FindStringSubmatch(dom)
	if m == nil {
		t.Fatalf("no element #%s in the rendered page", id)
	}
	return html.UnescapeString(m[1])
}

// uiPolicy is fairPolicy with quanta 384:128: weight shares 75% and 25%.
func uiPolicy(t *testing.T) string {
	return policyFile(t, "two-classes", "first", "premium", "second", "regular", "first_quantum", 384, "second_quantum", 128)
}

// TestStatusPageInChromium loads /ui in a real headless Chromium against a
// running dispatcher with traffic: 20 requests per class served, then a
// backlog of 15 premium and 6 regular held by a draining worker, so that
// the numbers hold still while the page renders. The rendered numbers must
// match /debug/queues read before and after: backlog, oldest wait, quantum, weight share,
// requests and share of cost served, the policy revision, and a row per rank
// of the worker. A screenshot must come out as a PNG.
func TestStatusPageInChromium(t *testing.T) {
	bin := uiChromium(t)
	f := startFixture(t, "--policy-config", uiPolicy(t))
	p, nc := f.p, f.nc
	w := startMock(t, nc, mockworker.Config{ID: "w1", DPSize: 2, MaxNumSeqs: 4, OutputTokens: 1, PrefillTokensPerSec: 200000})

	res := runLoad(t, nc, loadgen.Config{
		Classes: []loadgen.ClassCount{{Class: "premium", Count: 20}, {Class: "regular", Count: 20}},
		ISL:     512, Timeout: 30 * time.Second, RunID: "served",
	})
	if len(res.Completions) != 40 {
		t.Fatalf("the first 40 requests: %d completed", len(res.Completions))
	}

	w.Helper().SetDraining(true)
	waitDraining(t, p, "w1")
	startLoad(t, nc, loadgen.Config{
		Classes: []loadgen.ClassCount{{Class: "premium", Count: 15}, {Class: "regular", Count: 6}},
		ISL:     256, Timeout: time.Minute, RunID: "backlog",
	})
	waitFor(t, 20*time.Second, "15 premium and 6 regular queued", func() bool {
		v, ok := p.queues()
		return ok && len(v.Classes) == 2 && v.Classes[0].Pending == 15 && v.Classes[1].Pending == 6
	})

	url := "http://" + p.httpAddr + "/ui"
	before := uiReadQueues(t, p)
	dom := uiChrome(t, bin, url, 5*time.Second, "--dump-dom")
	after := uiReadQueues(t, p)

	if got, want := uiID(t, dom, "policy-revision"), uiRevision(after); got != want {
		t.Errorf("policy revision: page %q, /debug/queues %q", got, want)
	}
	if got := uiID(t, dom, "live-workers"); got != "1" {
		t.Errorf("live workers: page %q, want 1", got)
	}
	if uiID(t, dom, "error") != "" {
		t.Errorf("the page shows an error: %q", uiID(t, dom, "error"))
	}
	var costSum uint64
	for _, c := range after.Classes {
		costSum += c.DispatchedCost
	}
	weights := map[string]string{"premium": "75.0%", "regular": "25.0%"}
	for i, c := range after.Classes {
		row := uiRow(t, dom, `data-class="`+c.Name+`"`)
		b := before.Classes[i]
		backlog, err := strconv.Atoi(row["backlog"])
		if err != nil || backlog < min(b.Pending, c.Pending) || backlog > max(b.Pending, c.Pending) {
			t.Errorf("%s backlog: page %q, /debug/queues %d then %d", c.Name, row["backlog"], b.Pending, c.Pending)
		}
		// The page shows seconds to a tenth under a minute ("2.3s").
		oldest, err := strconv.ParseFloat(strings.TrimSuffix(row["oldest"], "s"), 64)
		if err != nil || oldest < float64(b.OldestWaitMs)/1e3-0.05 || oldest > float64(c.OldestWaitMs)/1e3+0.05 || c.OldestWaitMs == 0 {
			t.Errorf("%s oldest wait: page %q, /debug/queues %d ms then %d ms", c.Name, row["oldest"], b.OldestWaitMs, c.OldestWaitMs)
		}
		if row["quantum"] != strconv.FormatUint(c.Quantum, 10) || row["weight-share"] != weights[c.Name] {
			t.Errorf("%s: page quantum %q weight share %q, want %d and %s", c.Name, row["quantum"], row["weight-share"], c.Quantum, weights[c.Name])
		}
		if d, err := strconv.ParseUint(row["dispatched"], 10, 64); err != nil || d < b.Dispatched || d > c.Dispatched || c.Dispatched != 20 {
			t.Errorf("%s dispatched: page %q, /debug/queues %d then %d (want 20)", c.Name, row["dispatched"], b.Dispatched, c.Dispatched)
		}
		if want := fmt.Sprintf("%.1f%%", 100*float64(c.DispatchedCost)/float64(costSum)); row["total-share"] != want || want != "50.0%" {
			t.Errorf("%s share since start: page %q, from /debug/queues %s (want 50.0%%: 20 of 512 tokens each)", c.Name, row["total-share"], want)
		}
	}
	if len(after.Workers) != 1 || len(after.Workers[0].Ranks) != 2 {
		t.Fatalf("/debug/queues workers: %+v, want w1 with 2 ranks", after.Workers)
	}
	for _, r := range after.Workers[0].Ranks {
		row := uiRow(t, dom, fmt.Sprintf(`data-worker="w1" data-rank="%d"`, r.Rank))
		if row["rank"] != strconv.Itoa(int(r.Rank)) || !strings.Contains(row["flags"], "draining") {
			t.Errorf("w1 rank %d: page row %v, want the rank and the draining flag", r.Rank, row)
		}
		if _, err := strconv.ParseUint(row["prefill"], 10, 64); err != nil {
			t.Errorf("w1 rank %d: active prefill %q is not a number", r.Rank, row["prefill"])
		}
	}
	// The backlog chart has a line per class; the share chart, whose lines
	// need two samples with service in between (none here: the backlog holds
	// still), has each class's weight share as a dashed line.
	if !regexp.MustCompile(`id="backlog-chart"[^>]*>.*?<polyline[^>]*data-series="premium"`).MatchString(dom) {
		t.Errorf("the backlog chart has no premium line")
	}
	if n := len(regexp.MustCompile(`<line[^>]*stroke-dasharray`).FindAllString(dom, -1)); n != 2 {
		t.Errorf("the share chart has %d dashed weight lines, want 2", n)
	}

	shot := filepath.Join(t.TempDir(), "ui.png")
	uiChrome(t, bin, url, 3*time.Second, "--screenshot="+shot, "--window-size=1280,900")
	uiCheckPNG(t, shot)
}

// uiCheckPNG checks that path is a PNG of the window's size.
func uiCheckPNG(t *testing.T, path string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	defer f.Close()
	cfg, err := png.DecodeConfig(f)
	if err != nil || cfg.Width != 1280 || cfg.Height != 900 {
		t.Fatalf("screenshot %s: %v, %dx%d; want a 1280x900 PNG", path, err, cfg.Width, cfg.Height)
	}
}

// TestStatusPageScreenshot makes docs/ui.png: it records /debug/queues of a
// dispatcher under real load (two workers of two ranks, more offered than
// they serve) for a minute, then shows the page in Chromium against a proxy
// that answers the page's polls with the recorded snapshots in order, so that
// its charts show that minute. It runs only when FAIRDISPATCH_UI_SCREENSHOT
// names the file to write: it is how the picture in the docs is made, not a
// check (TestStatusPageInChromium is).
func TestStatusPageScreenshot(t *testing.T) {
	out := os.Getenv(uiScreenshotEnv)
	if out == "" {
		t.Skip(uiScreenshotEnv + " unset: this only regenerates docs/ui.png")
	}
	bin := uiChromium(t)
	f := startFixture(t, "--policy-config", uiPolicy(t))
	p, nc := f.p, f.nc
	for _, id := range []string{"gpu-a", "gpu-b"} {
		startMock(t, nc, mockworker.Config{ID: id, DPSize: 2, MaxNumSeqs: 2, OutputTokens: 1, PrefillTokensPerSec: 3000})
	}
	startLoad(t, nc, loadgen.Config{
		Classes: []loadgen.ClassCount{{Class: "premium", Count: 20000}, {Class: "regular", Count: 20000}},
		ISL:     512, Rate: 70, Order: loadgen.OrderRandom, Seed: 1, Timeout: 5 * time.Minute,
	})

	var snaps [][]byte
	tick := time.NewTicker(time.Second) // one snapshot per view refresh, for a minute of real time
	defer tick.Stop()
	for len(snaps) < 60 {
		<-tick.C
		code, body := p.get("/debug/queues")
		if code == http.StatusOK {
			snaps = append(snaps, []byte(body))
		}
	}
	var mu sync.Mutex
	next := 0
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/queues", func(w http.ResponseWriter, _ *http.Request) {
		mu.Lock()
		b := snaps[min(next, len(snaps)-1)]
		next++
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(b)
	})
	_, page := p.get("/ui")
	mux.HandleFunc("/ui", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_, _ = w.Write([]byte(page))
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	uiChrome(t, bin, "http://"+ln.Addr().String()+"/ui", time.Duration(len(snaps)+2)*time.Second,
		"--screenshot="+out, "--window-size=1280,900")
	uiCheckPNG(t, out)
	st, _ := os.Stat(out)
	t.Logf("wrote %s (%d bytes) from %d snapshots", out, st.Size(), len(snaps))
}

// TestBuildInfoAndOldestQueued runs the real binary: --version prints its
// build, /metrics has fairdispatch_build_info 1 with the Go version, and
// fairdispatch_oldest_queued_seconds of a class whose requests wait behind a
// draining worker grows, while the other class's stays 0.
func TestBuildInfoAndOldestQueued(t *testing.T) {
	t.Parallel() // no timing bound; see doc.go
	out, err := exec.Command(dispatcherBin, "--version").CombinedOutput()
	if err != nil || !strings.HasPrefix(string(out), "dispatcher version ") {
		t.Fatalf("dispatcher --version: %v %q", err, out)
	}
	ns := startNATS(t)
	p := startDispatcher(t, ns.URL(), "--policy-config", uiPolicy(t))
	if got := p.metric("fairdispatch_build_info", `goversion="go`, `revision="`, `version="`); got != 1 {
		t.Fatalf("fairdispatch_build_info: got %v, want 1", got)
	}
	nc := connect(t, ns.URL())
	w := startMock(t, nc, mockworker.Config{ID: "w1", MaxNumSeqs: 4, OutputTokens: 1, PrefillTokensPerSec: 200000})
	w.Helper().SetDraining(true)
	waitDraining(t, p, "w1")
	startLoad(t, nc, loadgen.Config{Classes: []loadgen.ClassCount{{Class: "regular", Count: 3}},
		ISL: 128, Timeout: time.Minute, RunID: "old"})
	waitFor(t, 20*time.Second, "the oldest regular request over 1.5 s old in /metrics", func() bool {
		return p.metric("fairdispatch_oldest_queued_seconds", `class="regular"`) > 1.5
	})
	if got := p.metric("fairdispatch_oldest_queued_seconds", `class="premium"`); got != 0 {
		t.Fatalf("premium holds nothing: oldest queued %v, want 0", got)
	}
	v := uiReadQueues(t, p)
	if len(v.Classes) != 2 || v.Classes[1].Pending != 3 {
		t.Fatalf("/debug/queues: %+v, want 3 regular queued", v.Classes)
	}
}

package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"fairdispatch/workerkit"
)

// cpuPer100k is CPU seconds per 100,000 requests, split by process.
type cpuPer100k struct {
	Server float64 `json:"server"` // the nats-server process
	Middle float64 `json:"middle"` // the forwarder or dispatcher process (0 for the direct work queue)
	Bench  float64 `json:"bench"`  // this process: publisher and workers
	Total  float64 `json:"total"`
}

// sysResult is what was measured of one system.
type sysResult struct {
	System     string     `json:"system"`
	Throughput runStats   `json:"throughput"`
	CPU        cpuPer100k `json:"cpu_s_per_100k"`
	// LatencyTarget is the publication rate of the latency run: half the
	// throughput run's rate.
	LatencyTarget float64  `json:"latency_target_rate"`
	Latency       runStats `json:"latency"`
	// WorkerMsgsPerRequest counts messages the workers published per request
	// in the throughput run (answer, +ACK, and load reports where sent).
	WorkerMsgsPerRequest float64 `json:"worker_msgs_per_request,omitempty"`
	// ForeignCPU is the share of the machine's CPU capacity used by other
	// processes during the throughput run (0 on a quiet machine).
	ForeignCPU float64 `json:"foreign_cpu_share"`
	// LoadReportsPerSecond is the workers' load report rate during the
	// throughput run (fairdispatch only).
	LoadReportsPerSecond float64 `json:"load_reports_per_s,omitempty"`
	Error                string  `json:"error,omitempty"`
}

// runTimeout bounds one run of n requests.
func runTimeout(n int) time.Duration { return 30*time.Second + time.Duration(n)*time.Second/4000 }

// outMsgs sums the messages published on conns.
func outMsgs(conns []*nats.Conn) uint64 {
	var n uint64
	for _, nc := range conns {
		n += nc.Stats().OutMsgs
	}
	return n
}

// one publishes n requests (at rate, 0: as fast as acknowledgements allow)
// and waits until workers accepted every one.
func (b *bench) one(n int, rate float64, subjects []string, isl uint64, size int) (*tracker, error) {
	t := newTracker(n)
	errs0 := b.pub.errs.Load()
	ctx, cancel := context.WithTimeout(context.Background(), runTimeout(n))
	defer cancel()
	if os.Getenv("BENCH_DEBUG") != "" {
		go func() {
			for ctx.Err() == nil && t.count.Load() < int64(t.n) {
				time.Sleep(250 * time.Millisecond)
				b.logf("debug: accepted %d, window %d, published %d", t.count.Load(), len(b.pub.window), b.pub.sent.Load())
			}
		}()
	}
	if err := b.pub.run(ctx, t, subjects, isl, size, rate); err != nil {
		return t, err
	}
	err := t.wait(time.Until(deadlineOf(ctx)))
	if e := b.pub.errs.Load() - errs0; e > 0 {
		b.logf("%d publications failed and were retried", e)
	}
	return t, err
}

func deadlineOf(ctx context.Context) time.Time {
	d, _ := ctx.Deadline()
	return d
}

// measure runs the warm-up, the throughput run and the latency run on a
// system that is set up; conns are the workers' connections, for counting
// what they publish (nil: not counted).
func (b *bench) measure(name string, s *system, conns []*nats.Conn) sysResult {
	res := sysResult{System: name}
	subjects := make([]string, len(classes))
	for i, c := range classes {
		subjects[i] = b.opt.names.Req(c)
	}
	fail := func(what string, err error) sysResult {
		res.Error = fmt.Sprintf("%s: %v", what, err)
		b.logf("%s: %s", name, res.Error)
		return res
	}
	warm := min(max(b.opt.requests/20, 1000), 5000)
	if _, err := b.one(warm, 0, subjects, 512, b.opt.body); err != nil {
		return fail("warm-up", err)
	}

	b.logf("%s: throughput run, %d requests", name, b.opt.requests)
	m0 := outMsgs(conns)
	c0 := sampleCPU(b.server.pid(), s.middlePid())
	var profiled chan struct{} // closed once the profiles are saved; nil: none
	if strings.HasPrefix(name, sysFair) && b.opt.profileHop {
		stopBench := b.profileSelf("cpu-hop-bench.pprof") // the workers and the publisher
		profiled = b.dispatcherProfile(s, "cpu-hop.pprof", b.opt.profileSecs, func(bool) { stopBench() })
	}
	t, err := b.one(b.opt.requests, 0, subjects, 512, b.opt.body)
	c1 := sampleCPU(b.server.pid(), s.middlePid())
	m1 := outMsgs(conns)
	if profiled != nil {
		<-profiled
	}
	res.Throughput = t.stats()
	res.Throughput.PubErrors = b.pub.errs.Load()
	if err != nil {
		return fail("throughput run", err)
	}
	d := c1.sub(c0)
	res.ForeignCPU = d.foreign()
	per := func(x time.Duration) float64 { return x.Seconds() * 100000 / float64(b.opt.requests) }
	res.CPU = cpuPer100k{Server: per(d.server), Middle: per(d.middle), Bench: per(d.bench)}
	res.CPU.Total = res.CPU.Server + res.CPU.Middle + res.CPU.Bench
	if conns != nil {
		res.WorkerMsgsPerRequest = float64(m1-m0) / float64(b.opt.requests)
	}
	b.logf("%s: %.0f requests/s, %.2f CPU s per 100k, longest gap %.0f ms, other processes used %.0f%% of the CPUs",
		name, res.Throughput.Rate, res.CPU.Total, res.Throughput.MaxGapMs, 100*res.ForeignCPU)

	res.LatencyTarget = res.Throughput.Rate / 2
	latN := max(b.opt.requests/2, 1000)
	b.logf("%s: latency run, %d requests at %.0f/s", name, latN, res.LatencyTarget)
	t, err = b.one(latN, res.LatencyTarget, subjects, 512, b.opt.body)
	res.Latency = t.stats()
	if err != nil {
		return fail("latency run", err)
	}
	return res
}

// memResult is the dispatcher's memory while holding queued requests.
type memResult struct {
	Held       int     `json:"held"`
	BodyBytes  int     `json:"body_bytes"`
	RSSIdle    int64   `json:"rss_idle_bytes"`
	RSSHeld    int64   `json:"rss_held_bytes"`
	PerRequest float64 `json:"rss_bytes_per_request_beyond_body"`
	HeapIdle   float64 `json:"heap_inuse_idle_bytes"`
	HeapHeld   float64 `json:"heap_inuse_held_bytes"`
	HeapPerReq float64 `json:"heap_inuse_bytes_per_request_beyond_body"`
	// Live* are the Go heap in use right after a forced collection: what the
	// held requests themselves keep, without the garbage that RSS and the
	// heap in use carry until the next collection (GOGC: up to as much again).
	LiveIdle    float64 `json:"heap_live_idle_bytes"`
	LiveHeld    float64 `json:"heap_live_held_bytes"`
	LivePerReq  float64 `json:"heap_live_bytes_per_request_beyond_body"`
	FillSeconds float64 `json:"fill_seconds"`
	// StopSeconds is how long the dispatcher took to stop on SIGTERM while
	// holding them (15: it was killed).
	StopSeconds float64 `json:"stop_seconds"`
	// HeapProfile is the dispatcher's heap profile while holding, in the output directory.
	HeapProfile string `json:"heap_profile,omitempty"`
	Error       string `json:"error,omitempty"`
}

// memory measures the dispatcher's resident memory idle and while holding
// b.opt.hold queued requests of 1 KiB.
func (b *bench) memory() (res memResult) {
	res = memResult{Held: b.opt.hold, BodyBytes: 1024}
	fail := func(what string, err error) memResult {
		res.Error = fmt.Sprintf("%s: %v", what, err)
		b.logf("memory: %s", res.Error)
		return res
	}
	if err := b.resetStreams(); err != nil {
		return fail("reset streams", err)
	}
	s, err := b.startDispatcher("hold", holdPolicy, "--pprof", "--max-held", strconv.Itoa(max(100000, b.opt.hold)),
		"--max-in-worker", strconv.Itoa(max(400000, 2*b.opt.hold)))
	if err != nil {
		return fail("start dispatcher", err)
	}
	refuse := workerkit.HandlerFunc(func(*workerkit.Request) bool { return false })
	stopW, _, err := b.startWorkers(refuse, &workerkit.RankLoad{ActivePrefillTokens: 1 << 30}, workerkit.Config{})
	if err != nil {
		s.stop()
		return fail("start workers", err)
	}
	// The dispatcher goes first: with no live worker left, a queueing class is
	// no longer gated (docs/design.md, Gates) and every held request would be dead-lettered
	// as no_endpoints.
	defer func() {
		t0 := time.Now()
		s.stop()
		res.StopSeconds = time.Since(t0).Seconds()
		b.logf("memory: the dispatcher holding %d requests stopped (SIGTERM) in %.1f s", b.opt.hold, res.StopSeconds)
		stopW()
	}()
	if _, err := s.waitQueues(20*time.Second, "all workers live", func(q queues) bool { return len(q.Workers) == b.opt.workers }); err != nil {
		return fail("workers", err)
	}
	time.Sleep(time.Second)
	pid := s.middlePid()
	if res.RSSIdle, err = procRSS(pid); err != nil {
		return fail("rss", err)
	}
	res.HeapIdle, _ = metric(s.admin, "go_memstats_heap_inuse_bytes")
	if err := fetch("http://"+s.admin+"/debug/pprof/heap?gc=1", os.DevNull); err != nil { // a collection
		return fail("collect", err)
	}
	res.LiveIdle, _ = metric(s.admin, "go_memstats_heap_inuse_bytes")

	b.logf("memory: holding %d requests of 1 KiB", b.opt.hold)
	start := time.Now()
	t := newTracker(b.opt.hold)
	ctx, cancel := context.WithTimeout(context.Background(), runTimeout(b.opt.hold))
	defer cancel()
	if err := b.pub.run(ctx, t, []string{b.opt.names.Req("held")}, 512, 1024, 0); err != nil {
		return fail("publish", err)
	}
	if _, err := s.waitQueues(time.Until(deadlineOf(ctx)), "all requests held", func(q queues) bool { return q.Held >= b.opt.hold }); err != nil {
		return fail("hold", err)
	}
	res.FillSeconds = time.Since(start).Seconds()
	time.Sleep(time.Second)
	if res.RSSHeld, err = procRSS(pid); err != nil {
		return fail("rss", err)
	}
	res.HeapHeld, _ = metric(s.admin, "go_memstats_heap_inuse_bytes")
	// The heap profile while holding: where the bytes per held request go
	// (go tool pprof -sample_index=inuse_space -top <file>).
	if err := fetch("http://"+s.admin+"/debug/pprof/heap?gc=1", filepath.Join(b.opt.out, "heap-held.pprof")); err != nil {
		b.logf("memory: heap profile: %v", err)
	} else {
		res.HeapProfile = "heap-held.pprof"
	}
	res.LiveHeld, _ = metric(s.admin, "go_memstats_heap_inuse_bytes") // the profile collected first
	if a := t.count.Load(); a > 0 {
		return fail("hold", fmt.Errorf("%d requests were dispatched though every worker is busy", a))
	}
	n := float64(b.opt.hold)
	res.PerRequest = float64(res.RSSHeld-res.RSSIdle)/n - 1024
	res.HeapPerReq = (res.HeapHeld-res.HeapIdle)/n - 1024
	res.LivePerReq = (res.LiveHeld-res.LiveIdle)/n - 1024
	b.logf("memory: RSS %d -> %d bytes, %.0f bytes per held request beyond the body (live heap %.0f)",
		res.RSSIdle, res.RSSHeld, res.PerRequest, res.LivePerReq)
	return res
}

// profileSelf starts a CPU profile of the bench process into file in the
// output directory, and returns what stops it.
func (b *bench) profileSelf(file string) func() {
	f, err := os.Create(filepath.Join(b.opt.out, file))
	if err != nil {
		b.logf("profile: %v", err)
		return func() {}
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		b.logf("profile: %v", err)
		f.Close()
		return func() {}
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}
}

// fetch saves the body of an HTTP GET of url to file.
func fetch(url, file string) error {
	resp, err := http.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	return os.WriteFile(file, data, 0o644)
}

// metric reads one unlabelled value from the dispatcher's /metrics.
func metric(addr, name string) (float64, error) {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			return strconv.ParseFloat(strings.TrimSpace(v), 64)
		}
	}
	return 0, fmt.Errorf("metric %s not found", name)
}

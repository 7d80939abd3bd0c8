// Command gatewaybench measures what the OpenAI gateway adds to a request
// (issue 23, acceptance 5): the same closed-loop load, one-token streaming
// requests, run twice over one nats-server, one dispatcher (the binary, built
// from ./cmd/dispatcher) and mock workers that answer at once:
//
//   - direct: clients use package caller, as a Go producer talking to the
//     worker's stream on NATS would;
//   - gateway: clients send POST /v1/chat/completions with "stream": true to
//     the gateway (in this process, on loopback) and read the server-sent
//     events until data: [DONE].
//
// It reports, for each, requests per second and the time to the first chunk
// (p50, p99): from just before the request is sent to its first chunk
// arriving. Everything shares this machine's CPUs, so the two arms are run
// back to back in one invocation and compared with each other.
//
//	go run ./cmd/gatewaybench [--duration 10s] [--concurrency 64] [--json]
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"fairdispatch/caller"
	"fairdispatch/gateway"
	"fairdispatch/internal/cli"
	"fairdispatch/mockworker"
	"fairdispatch/wire"
)

type options struct {
	duration, warmup time.Duration
	concurrency      int
	workers          int
	asJSON           bool
	dispatcherBin    string
	cpuProfile       string
}

func main() {
	var o options
	flag.DurationVar(&o.duration, "duration", 10*time.Second, "measured time of each arm")
	flag.DurationVar(&o.warmup, "warmup", 2*time.Second, "unmeasured load before each arm")
	flag.IntVar(&o.concurrency, "concurrency", 64, "requests in flight at once (closed loop)")
	flag.IntVar(&o.workers, "workers", 2, "mock workers (256 sequences each, no decode time)")
	flag.BoolVar(&o.asJSON, "json", false, "print the result as JSON")
	flag.StringVar(&o.dispatcherBin, "dispatcher-bin", "", "the dispatcher binary; empty: go build ./cmd/dispatcher")
	flag.StringVar(&o.cpuProfile, "cpuprofile", "", "write a CPU profile of this process (clients, gateway, workers) during the gateway arm to this file")
	flag.Parse()
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "gatewaybench:", err)
		os.Exit(1)
	}
}

// result is one arm's figures.
type result struct {
	Arm        string  `json:"arm"`
	Requests   int     `json:"requests"`
	Failed     int     `json:"failed"`
	PerSecond  float64 `json:"requests_per_second"`
	TTFCp50ms  float64 `json:"ttfc_p50_ms"`
	TTFCp99ms  float64 `json:"ttfc_p99_ms"`
	Concurrent int     `json:"concurrency"`
}

const model = "mock"

func run(o options) error {
	tmp, err := os.MkdirTemp("", "gatewaybench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: filepath.Join(tmp, "js"), NoLog: true, NoSigs: true})
	if err != nil {
		return err
	}
	srv.Start()
	defer srv.Shutdown()
	if !srv.ReadyForConnections(10 * time.Second) {
		return errors.New("nats-server not ready")
	}
	url := srv.ClientURL()

	bin := o.dispatcherBin
	if bin == "" {
		bin = filepath.Join(tmp, "dispatcher")
		b := exec.Command("go", "build", "-o", bin, "./cmd/dispatcher")
		b.Stdout, b.Stderr = os.Stderr, os.Stderr
		if err := b.Run(); err != nil {
			return fmt.Errorf("go build ./cmd/dispatcher: %w", err)
		}
	}
	adminAddr, err := cli.FreeAddr()
	if err != nil {
		return err
	}
	disp := exec.Command(bin, "--nats-url", url, "--stream-storage", "memory", "--startup-grace", "200ms",
		"--log-level", "warn", "--http-addr", adminAddr, "--data-dir", filepath.Join(tmp, "data"))
	disp.Stderr = os.Stderr
	if err := disp.Start(); err != nil {
		return err
	}
	defer func() { _ = disp.Process.Kill(); _ = disp.Wait() }()

	for i := range o.workers {
		nc, err := nats.Connect(url)
		if err != nil {
			return err
		}
		defer nc.Close()
		w, err := mockworker.Start(nc, mockworker.Config{ID: fmt.Sprintf("mock-%d", i+1), MaxNumSeqs: 256,
			DecodePerToken: 0, PrefillTokensPerSec: 1e9, NoCompletions: true}, zerolog.Nop())
		if err != nil {
			return err
		}
		defer func() { _ = w.StopWithin(5 * time.Second) }()
	}
	if err := waitReady("http://" + adminAddr + "/readyz"); err != nil {
		return err
	}

	// The gateway's own connection, as cmd/gateway has one.
	gnc, gc, err := connectCaller(url)
	if err != nil {
		return err
	}
	defer gnc.Close()
	cfg, err := gateway.ParseConfig("bench", []byte(fmt.Sprintf("models: [{name: %s, prefix: dispatch}]\ntenants: [{name: bench, api_key_sha256: [%s], classes: [default], max_concurrent: 100000}]\n",
		model, gateway.HashKey("sk-bench"))))
	if err != nil {
		return err
	}
	gw, err := gateway.New(gateway.Options{Config: cfg, Callers: map[string]*caller.Caller{"dispatch": gc},
		Registerer: prometheus.NewRegistry(), Log: zerolog.Nop()})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	hs := gateway.NewHTTPServer(gw, gateway.HTTPLimits{ReadHeaderTimeout: 10 * time.Second, IdleTimeout: time.Minute})
	go func() { _ = hs.Serve(gateway.LimitListener(ln, 4096)) }()
	defer hs.Close()

	// The direct arm's producer connection.
	dnc, dc, err := connectCaller(url)
	if err != nil {
		return err
	}
	defer dnc.Close()
	body := []byte(`{"model":"` + model + `","max_tokens":1,"stream":true,"messages":[{"role":"user","content":"Hello there, how are you today?"}]}`)
	var seq atomic.Uint64
	direct := func(ctx context.Context) (time.Duration, error) {
		h := nats.Header{}
		h.Set(wire.HeaderAPI, wire.APIChatCompletions)
		h.Set(wire.HeaderISLTokens, "12")
		start := time.Now()
		call, err := dc.Start(ctx, caller.Request{ID: fmt.Sprintf("d%d-%d", os.Getpid(), seq.Add(1)), Class: "default", Header: h, Body: body})
		if err != nil {
			return 0, err
		}
		defer call.Close()
		var ttfc time.Duration
		for {
			ev, err := call.Recv(ctx)
			if err != nil {
				return 0, err
			}
			switch ev.Kind {
			case caller.EventChunk:
				if ttfc == 0 {
					ttfc = time.Since(start)
				}
			case caller.EventEnd:
				if ev.End.Status != wire.EndOK {
					return 0, errors.New(ev.End.Error)
				}
				return ttfc, nil
			}
		}
	}
	tr := &http.Transport{MaxIdleConnsPerHost: o.concurrency * 2, MaxConnsPerHost: o.concurrency * 2}
	hc := &http.Client{Transport: tr}
	target := "http://" + ln.Addr().String() + "/v1/chat/completions"
	viaGateway := func(ctx context.Context) (time.Duration, error) {
		req, _ := http.NewRequestWithContext(ctx, "POST", target, strings.NewReader(string(body)))
		req.Header.Set("Authorization", "Bearer sk-bench")
		req.Header.Set("Content-Type", "application/json")
		start := time.Now()
		resp, err := hc.Do(req)
		if err != nil {
			return 0, err
		}
		defer resp.Body.Close()
		if resp.StatusCode != 200 {
			b, _ := io.ReadAll(resp.Body)
			return 0, fmt.Errorf("%s: %s", resp.Status, b)
		}
		var ttfc time.Duration
		br := bufio.NewReader(resp.Body)
		for {
			line, err := br.ReadString('\n')
			if err != nil {
				return 0, fmt.Errorf("stream ended without [DONE]: %w", err)
			}
			if line == "data: [DONE]\n" {
				return ttfc, nil
			}
			if strings.HasPrefix(line, "data: ") && ttfc == 0 {
				ttfc = time.Since(start)
			}
		}
	}
	var results []result
	for _, arm := range []struct {
		name string
		f    func(context.Context) (time.Duration, error)
	}{{"direct (caller on NATS)", direct}, {"gateway (HTTP + SSE)", viaGateway}} {
		load(arm.f, o.concurrency, o.warmup)
		var prof *os.File
		if o.cpuProfile != "" && strings.HasPrefix(arm.name, "gateway") {
			if prof, err = os.Create(o.cpuProfile); err != nil {
				return err
			}
			_ = pprof.StartCPUProfile(prof)
		}
		r := load(arm.f, o.concurrency, o.duration)
		if prof != nil {
			pprof.StopCPUProfile()
			prof.Close()
		}
		r.Arm = arm.name
		results = append(results, r)
	}
	if o.asJSON {
		return json.NewEncoder(os.Stdout).Encode(results)
	}
	fmt.Printf("one-token streaming requests, %d in flight, %v each arm, %d mock workers, one dispatcher, one nats-server, on %d CPUs\n\n",
		o.concurrency, o.duration, o.workers, numCPU())
	fmt.Printf("%-26s %10s %8s %12s %12s\n", "arm", "req/s", "failed", "TTFC p50", "TTFC p99")
	for _, r := range results {
		fmt.Printf("%-26s %10.0f %8d %10.2fms %10.2fms\n", r.Arm, r.PerSecond, r.Failed, r.TTFCp50ms, r.TTFCp99ms)
	}
	d, g := results[0], results[1]
	fmt.Printf("\nthe gateway adds %.2f ms at p50 and %.2f ms at p99 to the time to first chunk; it serves %.0f%% of the direct rate\n",
		g.TTFCp50ms-d.TTFCp50ms, g.TTFCp99ms-d.TTFCp99ms, 100*g.PerSecond/d.PerSecond)
	return nil
}

// load runs f from conc goroutines in a closed loop for d.
func load(f func(context.Context) (time.Duration, error), conc int, d time.Duration) result {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var mu sync.Mutex
	var ttfcs []time.Duration
	var failed int
	var wg sync.WaitGroup
	start := time.Now()
	for range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine []time.Duration
			bad := 0
			for ctx.Err() == nil {
				t, err := f(context.Background())
				if err != nil {
					bad++
					continue
				}
				mine = append(mine, t)
			}
			mu.Lock()
			ttfcs = append(ttfcs, mine...)
			failed += bad
			mu.Unlock()
		}()
	}
	wg.Wait()
	el := time.Since(start)
	slices.Sort(ttfcs)
	q := func(p float64) float64 {
		if len(ttfcs) == 0 {
			return 0
		}
		return float64(ttfcs[min(len(ttfcs)-1, int(p*float64(len(ttfcs))))]) / 1e6
	}
	return result{Requests: len(ttfcs), Failed: failed, PerSecond: float64(len(ttfcs)) / el.Seconds(),
		TTFCp50ms: q(0.50), TTFCp99ms: q(0.99), Concurrent: conc}
}

func waitReady(url string) error {
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if resp, err := http.Get(url); err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return nil
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	return errors.New("the dispatcher did not become ready in 30 s")
}

// connectCaller is a producer (package caller) on a connection of its own to
// url.
func connectCaller(url string) (*nats.Conn, *caller.Caller, error) {
	nc, err := nats.Connect(url)
	if err != nil {
		return nil, nil, err
	}
	c, err := caller.New(nc, caller.Config{})
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	return nc, c, nil
}

func numCPU() int { return runtime.NumCPU() }

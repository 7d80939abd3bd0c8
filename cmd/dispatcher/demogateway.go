package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"fairdispatch/caller"
	"fairdispatch/gateway"
	"fairdispatch/mockworker"
)

// The gateway demo (--demo-scenario gateway, the default of `make run`): two
// mock workers of four sequences, the OpenAI gateway (package gateway, as
// cmd/gateway runs it) on --demo-gateway-addr with --demo-gateway-config,
// and two tenants' streaming clients through HTTP: acme with three times as
// many requests in flight as globex. Both use the class regular, so the
// dispatcher shares the fleet between them evenly, whatever they send. After
// the burst the stack keeps serving, for any OpenAI client, until stopped.

// demoGatewayKeys are the keys of configs/gateway-demo.yaml's tenants.
var demoGatewayKeys = map[string]string{"acme": "sk-acme-demo", "globex": "sk-globex-demo"}

func runGatewayDemo(ctx context.Context, nc *nats.Conn, s *settings, out io.Writer, log zerolog.Logger) error {
	quiet := log.Level(zerolog.WarnLevel)
	for i := range 2 {
		w, err := mockworker.Start(nc, mockworker.Config{ID: fmt.Sprintf("mock-%d", i+1), Prefix: s.prefix, MaxNumSeqs: 4,
			MaxActiveRequests: 4, AckWait: s.ackWait}, quiet)
		if err != nil {
			return err
		}
		defer func() { _ = w.StopWithin(5 * time.Second) }()
	}
	cfg, err := gateway.LoadConfig(s.demoGatewayConfig)
	if err != nil {
		return err
	}
	cl, err := caller.New(nc, caller.Config{Prefix: s.prefix})
	if err != nil {
		return err
	}
	callers := map[string]*caller.Caller{}
	for _, m := range cfg.Models {
		callers[m.Prefix] = cl
	}
	gw, err := gateway.New(gateway.Options{Config: cfg, Callers: callers, Registerer: prometheus.NewRegistry(), Log: quiet})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", s.demoGatewayAddr)
	if err != nil {
		return fmt.Errorf("--demo-gateway-addr: %w", err)
	}
	hs := gateway.NewHTTPServer(gw, gateway.HTTPLimits{ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second, IdleTimeout: time.Minute})
	go func() { _ = hs.Serve(gateway.LimitListener(ln, 4096)) }()
	defer hs.Close()
	base := "http://" + ln.Addr().String()
	model := cfg.Models[0].Name
	fmt.Fprintf(out, "\ndemo: the OpenAI gateway on %s/v1 (model %s), two mock workers of four sequences\n", base, model)
	fmt.Fprintf(out, "      tenant acme (key sk-acme-demo) keeps 48 streams open, globex (sk-globex-demo) 16, both in class regular\n\n")

	select { // requests wait out the start-up grace
	case <-ctx.Done():
		return nil
	case <-time.After(s.grace):
	}
	counts := gatewayBurst(ctx, base, model, map[string]int{"acme": 48, "globex": 16}, 1000, out)
	if ctx.Err() != nil {
		return nil
	}
	a, g := counts["acme"], counts["globex"]
	fmt.Fprintf(out, "\nOf the first %d completions, acme got %d and globex %d (%.2f : 1), though acme had three times as many\n", a+g, a, g, float64(a)/float64(max(g, 1)))
	fmt.Fprintf(out, "requests in flight: both are tenants (fairness keys) of equal weight in one class, so each gets half.\n\n")
	fmt.Fprintf(out, "The gateway keeps serving until you stop make (Ctrl-C). Try:\n\n")
	fmt.Fprintf(out, "  curl -N %s/v1/chat/completions -H 'Authorization: Bearer sk-acme-demo' -H 'Content-Type: application/json' \\\n", base)
	fmt.Fprintf(out, "    -d '{\"model\":\"%s\",\"max_tokens\":8,\"stream\":true,\"messages\":[{\"role\":\"user\",\"content\":\"Hello\"}]}'\n\n", model)
	fmt.Fprintf(out, "  OPENAI_BASE_URL=%s/v1 OPENAI_API_KEY=sk-globex-demo python3 -c 'import openai; print(openai.OpenAI().chat.completions.create(model=\"%s\", max_tokens=8, messages=[{\"role\":\"user\",\"content\":\"Hi\"}]).choices[0].message.content)'\n\n", base, model)
	<-ctx.Done()
	return nil
}

// gatewayBurst runs streams[tenant] streaming clients of each tenant in a
// closed loop until n completions, printing the counts about every second;
// it returns the counts of the first n.
func gatewayBurst(ctx context.Context, base, model string, streams map[string]int, n int, out io.Writer) map[string]int {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	tr := &http.Transport{MaxIdleConnsPerHost: 128}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr}
	body := `{"model":"` + model + `","max_tokens":8,"stream":true,"messages":[{"role":"user","content":"Tell me a story."}]}`
	var mu sync.Mutex
	counts := map[string]int{}
	total := 0
	var wg sync.WaitGroup
	for tenant, k := range streams {
		for range k {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for ctx.Err() == nil {
					if err := gateway.StreamChat(ctx, hc, base, demoGatewayKeys[tenant], body, nil); err != nil {
						if ctx.Err() == nil {
							time.Sleep(100 * time.Millisecond)
						}
						continue
					}
					mu.Lock()
					if total < n {
						counts[tenant]++
						total++
						if total == n {
							cancel()
						}
					}
					mu.Unlock()
				}
			}()
		}
	}
	start := time.Now()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for ctx.Err() == nil {
		select {
		case <-ctx.Done():
		case <-tick.C:
			mu.Lock()
			fmt.Fprintf(out, "%6.1fs  completed: acme %4d  globex %4d\n", time.Since(start).Seconds(), counts["acme"], counts["globex"])
			mu.Unlock()
		}
	}
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	return counts
}

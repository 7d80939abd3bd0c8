package e2e

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"fairdispatch/caller"
	"fairdispatch/gateway"
	"fairdispatch/mockworker"
)

// The gateway's end-to-end rig: a real nats-server, the dispatcher binary,
// mock workers that stream (in process), and the gateway (in process, built
// as cmd/gateway builds it: gateway.New behind gateway.NewHTTPServer and a
// LimitListener, with gateway.Health watching the dispatcher).

// gwModel is the model every rig serves.
const gwModel = "mock-llama"

// gwTenant is one tenant of a rig's file; its key is "sk-" + name.
type gwTenant struct {
	name, classes string // classes: a YAML flow list, e.g. "[premium, regular]"
	extra         string // more YAML fields, e.g. "max_concurrent: 100"
}

// gwRig is a running rig.
type gwRig struct {
	t    *testing.T
	ns   *natsServer
	disp *proc
	url  string // the gateway's base URL, http://127.0.0.1:port
	reg  *prometheus.Registry
	ws   []*mockworker.Worker
}

// stopWorkers stops every mock worker of the rig.
func (r *gwRig) stopWorkers() {
	for _, w := range r.ws {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = w.Stop(ctx)
		cancel()
	}
}

// gwOptions configures a rig.
type gwOptions struct {
	policy     string   // policy YAML
	dispArgs   []string // more dispatcher flags
	workers    int      // mock workers (default 2)
	worker     mockworker.Config
	tenants    []gwTenant
	modelExtra string // more YAML fields of the model
	maxTokens  int    // the model's max_tokens bound (default 4096)
	mod        func(*gateway.Options)
}

func gwConfig(o gwOptions) string {
	var b strings.Builder
	fmt.Fprintf(&b, "models:\n  - name: %s\n    prefix: dispatch\n    max_tokens: %d\n%s", gwModel, cmp.Or(o.maxTokens, 4096), o.modelExtra)
	b.WriteString("tenants:\n")
	for _, tn := range o.tenants {
		fmt.Fprintf(&b, "  - name: %s\n    api_key_sha256: [%s]\n    classes: %s\n", tn.name, gateway.HashKey("sk-"+tn.name), tn.classes)
		if tn.extra != "" {
			fmt.Fprintf(&b, "    %s\n", strings.ReplaceAll(tn.extra, "\n", "\n    "))
		}
	}
	return b.String()
}

func startGatewayRig(t *testing.T, o gwOptions) *gwRig {
	t.Helper()
	ns := startNATS(t)
	args := append([]string{"--policy-config", writePolicy(t, o.policy)}, o.dispArgs...)
	disp := startDispatcher(t, ns.URL(), args...)
	if o.workers == 0 {
		o.workers = 2
	}
	r := &gwRig{t: t, ns: ns, disp: disp, reg: prometheus.NewRegistry()}
	for i := range o.workers {
		cfg := o.worker
		cfg.ID = fmt.Sprintf("mock-%d", i+1)
		r.ws = append(r.ws, startMock(t, connect(t, ns.URL()), cfg))
	}
	r.url = startGatewayOn(t, ns.URL(), gwConfig(o), r.reg, o.mod)
	waitFor(t, 20*time.Second, "the dispatcher ready with its workers", func() bool {
		code, _ := disp.get("/readyz")
		return code == http.StatusOK
	})
	return r
}

// startGatewayOn starts a gateway on the NATS server at url with the file
// text cfg and returns its base URL; it stops at the end of the test.
func startGatewayOn(t *testing.T, url, cfg string, reg *prometheus.Registry, mod func(*gateway.Options)) string {
	t.Helper()
	return startGateway(t, url, cfg, reg, mod).url
}

// gwProcess is a gateway started by startGateway.
type gwProcess struct {
	url  string
	kill func() // the gateway dies: its NATS connection and its HTTP server close at once
}

// startGateway is startGatewayOn, with a kill switch: kill closes the
// gateway's NATS connection and every HTTP connection without a word, which
// is how the NATS server and the workers see a gateway process that dies
// (its sockets close with it).
func startGateway(t *testing.T, url, cfg string, reg *prometheus.Registry, mod func(*gateway.Options)) *gwProcess {
	t.Helper()
	path := filepath.Join(t.TempDir(), "gateway.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := gateway.LoadConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	nc := connect(t, url)
	cl, err := caller.New(nc, caller.Config{})
	if err != nil {
		t.Fatal(err)
	}
	health, err := gateway.NewHealth(nc, []string{"dispatch"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go health.Run(ctx, 200*time.Millisecond)
	opt := gateway.Options{Config: c, Callers: map[string]*caller.Caller{"dispatch": cl}, Health: health.Check,
		Registerer: reg, Log: zerolog.Nop(), AttachWait: 2 * time.Second}
	if mod != nil {
		mod(&opt)
	}
	srv, err := gateway.New(opt)
	if err != nil {
		t.Fatal(err)
	}
	hs := gateway.NewHTTPServer(srv, gateway.HTTPLimits{ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second, IdleTimeout: time.Minute})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = hs.Serve(gateway.LimitListener(ln, 4096)) }()
	t.Cleanup(func() { _ = hs.Close() })
	base := "http://" + ln.Addr().String()
	waitFor(t, 10*time.Second, "the gateway to see the dispatcher", func() bool { return health.Ready() == nil })
	return &gwProcess{url: base, kill: func() {
		cancel()
		nc.Close()
		_ = hs.Close()
	}}
}

// post sends a request to the rig's gateway and returns the status and body.
func (r *gwRig) post(path, key, body string, hdr ...string) (*http.Response, string) {
	r.t.Helper()
	return gwPost(r.t, r.url, path, key, body, hdr...)
}

// gwPost sends a request to the gateway at base with the API key and
// headers hdr (name, value, ...), and returns the response and its body.
func gwPost(t testing.TB, base, path, key, body string, hdr ...string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest("POST", base+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// postWithin is post with a time limit: 0 and "" when it passes.
func (r *gwRig) postWithin(d time.Duration, path, key, body string) (int, string) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "POST", r.url+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// mockworker0 is one mock worker of four sequences at 2 ms a token.
func mockworker0() mockworker.Config {
	return mockworker.Config{MaxNumSeqs: 4, DecodePerToken: 2 * time.Millisecond}
}

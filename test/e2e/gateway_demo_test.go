package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestGatewayDemo runs the gateway demo (what `make run` runs) on the
// dispatcher binary: its summary shows the two tenants sharing the fleet
// evenly although one keeps three times the streams open, and afterwards the
// gateway still serves the README's request.
func TestGatewayDemo(t *testing.T) {
	ns := startNATS(t)
	addr := freeAddr(t)
	p := launch(t, ns.URL(), "--policy-config", "../../configs/policy-classes.yaml", "--demo", "--demo-scenario", "gateway",
		"--demo-gateway-config", "../../configs/gateway-demo.yaml", "--demo-gateway-addr", addr)
	re := regexp.MustCompile(`Of the first 1000 completions, acme got (\d+) and globex (\d+)`)
	var m []string
	waitFor(t, 90*time.Second, "the demo's summary", func() bool {
		m = re.FindStringSubmatch(p.out.String())
		return m != nil
	})
	acme, _ := strconv.Atoi(m[1])
	t.Logf("of the first 1000 completions: acme %s, globex %s", m[1], m[2])
	if acme < 450 || acme > 550 {
		t.Errorf("acme got %d of 1000, want 500 +- 50", acme)
	}
	r := &gwRig{t: t, url: "http://" + addr}
	resp, body := r.post("/v1/chat/completions", "sk-acme-demo", `{"model":"mock-llama","max_tokens":3,"stream":true,"messages":[{"role":"user","content":"Hello"}]}`)
	if resp.StatusCode != 200 || !strings.Contains(body, `"content":" lorem"`) || !strings.HasSuffix(body, "data: [DONE]\n\n") {
		t.Fatalf("the README's request: %d %s", resp.StatusCode, body)
	}
	// The README's Node example, as written, against the demo.
	if _, err := exec.LookPath("node"); err == nil {
		if _, err := os.Stat(filepath.Join(nodeClientDir, "node_modules", "openai")); err == nil {
			cmd := exec.Command("node", "example.mjs")
			cmd.Dir = nodeClientDir
			cmd.Env = append(os.Environ(), "OPENAI_BASE_URL=http://"+addr+"/v1")
			out, err := cmd.CombinedOutput()
			if want := " lorem ipsum dolor sit amet consectetur adipiscing elit\n"; err != nil || string(out) != want {
				t.Errorf("example.mjs: %v, printed %q, want %q", err, out, want)
			}
		} else if os.Getenv("CI") == "true" {
			t.Error("test/openai-node/node_modules is missing under CI")
		}
	}
	p.signal(syscall.SIGTERM)
	if err := p.wait(30 * time.Second); err != nil {
		t.Fatalf("the demo did not stop on SIGTERM: %v", err)
	}
}

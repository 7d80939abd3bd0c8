package e2e

import (
	"bytes"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"
)

// docBlock is one pasted command and its output in docs/operations.md: a
// ```console block whose first line is "$ fairctl ...".
type docBlock struct {
	args []string // after "fairctl"
	want string
}

// docBlocks returns the console blocks of section (its heading's text) of
// docs/operations.md, in order.
func docBlocks(t *testing.T, section string) []docBlock {
	t.Helper()
	b, err := os.ReadFile("../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	i := strings.Index(doc, "\n## "+section+"\n")
	if i < 0 {
		t.Fatalf("docs/operations.md has no section %q", section)
	}
	body := doc[i+len(section)+5:]
	if j := strings.Index(body, "\n## "); j >= 0 {
		body = body[:j]
	}
	var blocks []docBlock
	for {
		s := strings.Index(body, "```console\n")
		if s < 0 {
			break
		}
		body = body[s+len("```console\n"):]
		e := strings.Index(body, "```\n")
		if e < 0 {
			t.Fatalf("section %q: unterminated console block", section)
		}
		text := body[:e]
		body = body[e+4:]
		first, rest, _ := strings.Cut(text, "\n")
		cmd, ok := strings.CutPrefix(first, "$ fairctl ")
		if !ok {
			continue
		}
		blocks = append(blocks, docBlock{args: strings.Fields(cmd), want: rest})
	}
	if len(blocks) == 0 {
		t.Fatalf("section %q: no console blocks", section)
	}
	return blocks
}

var (
	docTimeRe  = regexp.MustCompile(`\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z`)
	docClockRe = regexp.MustCompile(`\b\d\d:\d\d:\d\d\b`)
	docDurRe   = regexp.MustCompile(`\b\d+(\.\d)?(ms|s|m|h)\b`)
	docAddrRe  = regexp.MustCompile(`127\.0\.0\.1:\d+`)
)

// docNormal is s with what changes from run to run (times, waits, ports)
// replaced and each line's runs of spaces collapsed (column widths follow
// the contents).
func docNormal(s string) string {
	s = docTimeRe.ReplaceAllString(s, "<time>")
	s = docClockRe.ReplaceAllString(s, "<clock>")
	s = docDurRe.ReplaceAllString(s, "<wait>")
	s = docAddrRe.ReplaceAllString(s, "127.0.0.1:PORT")
	var lines []string
	for _, l := range strings.Split(s, "\n") {
		lines = append(lines, strings.Join(strings.Fields(l), " "))
	}
	return strings.TrimRight(strings.Join(lines, "\n"), "\n")
}

// checkDocBlock runs b's command with the global flags of the test's
// deployment and checks its output matches the pasted one.
func checkDocBlock(t *testing.T, b docBlock, global ...string) {
	t.Helper()
	var out, errb bytes.Buffer
	cmd := exec.Command(fairctl(t), append(global, b.args...)...)
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("fairctl %s: %v: %s", strings.Join(b.args, " "), err, errb.String())
	}
	if got, want := docNormal(out.String()), docNormal(b.want); got != want {
		t.Errorf("docs/operations.md: fairctl %s: the pasted output is stale; now it prints:\n%s\n(normalized: %q, pasted normalized: %q)",
			strings.Join(b.args, " "), out.String(), got, want)
	}
}

// TestOperationsDocDeadLetters runs the commands of docs/operations.md, Dead
// letters, on the scenario it describes: three requests rejected queue_full
// by a zero limit, the dispatcher then stopped to raise it.
func TestOperationsDocDeadLetters(t *testing.T) {
	t.Parallel() // no timing bound; see doc.go
	f, _ := startBusy(t, "dlq-zero")
	ns, js, p := f.ns, f.js, f.p
	for i, id := range []string{"order-17", "order-18", "order-19"} {
		publish(t, js, "dispatch.req.limited", id, map[string]string{"Dispatch-ISL-Tokens": "120", "X-Tenant": "acme"},
			[]byte(`{"prompt":"summarise ticket `+string(rune('1'+i))+`"}`))
		// One at a time, so that the stream sequences follow the ids.
		waitFor(t, 10*time.Second, "dead letter "+id, func() bool { return streamMsgs(t, js, "DISPATCH_DLQ") == uint64(i+1) })
	}
	p.kill()
	for _, b := range docBlocks(t, "Dead letters") {
		checkDocBlock(t, b, "--server", ns.URL())
	}
}

// TestOperationsDocQueues runs the commands of docs/operations.md, Queues,
// workers and fairctl top (but top, checked under tmux by
// TestFairctlTopUnderTmux) on the scenario it describes.
func TestOperationsDocQueues(t *testing.T) {
	_, p, _ := topScenario(t)
	for _, b := range docBlocks(t, "Queues, workers and `fairctl top`") {
		if len(b.args) > 0 && b.args[len(b.args)-1] == "top" {
			continue
		}
		checkDocBlock(t, b, "--admin", "http://"+p.httpAddr)
	}
}

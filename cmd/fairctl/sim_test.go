package main

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"fairdispatch/internal/natstest"
	"fairdispatch/naming"
	"fairdispatch/recorder"
	"fairdispatch/wire"
)

// trimLines drops trailing blanks of every line and trailing empty lines.
func trimLines(s string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	for i, l := range lines {
		lines[i] = strings.TrimRight(l, " \t")
	}
	return strings.Join(lines, "\n")
}

// TestOperationsSimOutput keeps docs/operations.md, Recording traffic and
// fairctl sim, true: every console block there that runs fairctl sim is run
// on testdata/ and must print what the block shows.
func TestOperationsSimOutput(t *testing.T) {
	sec := opsSection(t, "Recording traffic and `fairctl sim`")
	t.Chdir("testdata")
	blocks := 0
	for _, block := range consoleBlocks(sec) {
		cmdLine, want, _ := strings.Cut(block, "\n")
		if !strings.HasPrefix(cmdLine, "$ fairctl sim ") {
			continue
		}
		blocks++
		var out, errb bytes.Buffer
		args := strings.Fields(strings.TrimPrefix(cmdLine, "$ fairctl "))
		if code := run(context.Background(), args, &out, &errb); code != 0 {
			t.Fatalf("%s: exit %d: %s", cmdLine, code, errb.String())
		}
		if got := trimLines(out.String()); got != trimLines(want) {
			t.Errorf("%s prints\n%s\nbut docs/operations.md shows\n%s", cmdLine, got, trimLines(want))
		}
	}
	if blocks < 2 {
		t.Errorf("%d fairctl sim examples in the section, want 2 (trace and generated)", blocks)
	}
}

// TestSimChartAndJSON: --chart writes a PNG, and --json (global or the
// command's) prints the figures.
func TestSimChartAndJSON(t *testing.T) {
	png := filepath.Join(t.TempDir(), "c.png")
	for _, args := range [][]string{
		{"--json", "sim", "--policy", "testdata/flip.yaml", "--trace", "testdata/seed-burst.jsonl.gz", "--chart", png},
		{"sim", "--json", "--policy", "testdata/flip.yaml", "--trace", "testdata/seed-burst.jsonl.gz"},
	} {
		var out, errb bytes.Buffer
		if code := run(context.Background(), args, &out, &errb); code != 0 {
			t.Fatalf("%q: exit %d: %s", args, code, errb.String())
		}
		for _, want := range []string{`"proposed": {`, `"current": {`, `"recorded": {`, `"name": "premium"`, `"wait_p99_ms"`} {
			if !strings.Contains(out.String(), want) {
				t.Errorf("%q: output lacks %s:\n%s", args, want, out.String())
			}
		}
	}
	b, err := os.ReadFile(png)
	if err != nil || !bytes.HasPrefix(b, []byte("\x89PNG\r\n\x1a\n")) {
		t.Errorf("--chart: %v, %d bytes, want a PNG", err, len(b))
	}
}

func TestSimUsageErrors(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"sim", "--trace", "testdata/seed-burst.jsonl.gz"}, "--policy is required"},
		{[]string{"sim", "--policy", "testdata/flip.yaml"}, "exactly one of --trace and --generate"},
		{[]string{"sim", "--policy", "testdata/flip.yaml", "--generate", "poisson"}, "--generate needs --workers"},
		{[]string{"sim", "--policy", "testdata/flip.yaml", "--generate", "steady", "--workers", "1"}, "want poisson or bursty"},
		{[]string{"sim", "--policy", "testdata/flip.yaml", "--generate", "poisson", "--workers", "1", "--mix", "premium"}, "--mix"},
		// A token no class takes would go to the default family unseen.
		{[]string{"sim", "--policy", "testdata/flip.yaml", "--generate", "poisson", "--workers", "1", "--mix", "premum:1"},
			`"premum" names no class or family of the policy (premium, regular)`},
		// Each bad workload value is named.
		{[]string{"sim", "--policy", "testdata/flip.yaml", "--generate", "poisson", "--workers", "1", "--rate", "-1"}, "rate -1: want a finite number > 0"},
		{[]string{"sim", "--policy", "testdata/flip.yaml", "--generate", "poisson", "--workers", "1", "--zipf", "-1"}, "zipf -1: want a finite number >= 0"},
		{[]string{"sim", "--policy", "testdata/flip.yaml", "--generate", "poisson", "--workers", "1", "--keys", "-2"}, "keys -2: want >= 0"},
		{[]string{"sim", "--policy", "testdata/flip.yaml", "--generate", "poisson", "--workers", "1", "--ranks", "0"}, "--ranks 0: want >= 1"},
		{[]string{"sim", "--policy", "testdata/flip.yaml", "--generate", "poisson", "--workers", "1", "--service-rate", "0"}, "--service-rate 0: want > 0"},
		{[]string{"sim", "--policy", "testdata/flip.yaml", "--generate", "poisson", "--workers", "1", "--first", "-3"}, "--first -3: want >= 0"},
	} {
		checkRun(t, c.args, 2, c.want)
	}
}

// TestSimWithoutBaseline: a trace without a header policy is simulated under
// the proposal alone, and the table says why there is no comparison.
func TestSimWithoutBaseline(t *testing.T) {
	trace := filepath.Join(t.TempDir(), "t.jsonl")
	body := `{"ev":"header","t":1,"format":"fairdispatch-trace","version":1}
{"ev":"arrive","t":10,"id":"a","token":"premium","class":"default","published":10,"isl":512,"cost":512}
{"ev":"dispatch","t":20,"id":"a","class":"default","cost":512,"worker":"w1","rank":0,"outcome":"accepted"}
`
	if err := os.WriteFile(trace, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"sim", "--policy", "testdata/flip.yaml", "--trace", trace}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	for _, want := range []string{"proposed weight", "give --baseline FILE", "no two classes were ever backlogged"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), "current weight") {
		t.Errorf("a current column without a current policy:\n%s", out.String())
	}
}

// TestSimRecordedIsUnderTheHeadersPolicy: the recorded column measures the
// run under the policy it ran (the trace header's, 512:128), not under
// --baseline: the seed burst's recorded premium weight stays 0.8 with a
// flipped baseline.
func TestSimRecordedIsUnderTheHeadersPolicy(t *testing.T) {
	var out, errb bytes.Buffer
	args := []string{"--json", "sim", "--policy", "testdata/flip.yaml", "--trace", "testdata/seed-burst.jsonl.gz", "--baseline", "testdata/flip.yaml"}
	if code := run(context.Background(), args, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	var rep struct {
		Recorded struct {
			Jain    float64 `json:"jain"`
			Classes []struct {
				Name   string  `json:"name"`
				Weight float64 `json:"weight"`
			} `json:"classes"`
		} `json:"recorded"`
	}
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatal(err)
	}
	for _, c := range rep.Recorded.Classes {
		if c.Name == "premium" && math.Abs(c.Weight-0.8) > 0.01 {
			t.Errorf("recorded premium weight %.3f, want 0.800 (the header's 512:128)", c.Weight)
		}
	}
	if rep.Recorded.Jain < 0.99 {
		t.Errorf("recorded Jain %.3f, want about 1", rep.Recorded.Jain)
	}
}

// TestSimStreamReadsFromTheLastPolicy: a trace stream that spans a live
// policy revision is read from the revision's header, the records before it
// skipped and said so, rather than refused with advice to split what a
// stream cannot be split as.
func TestSimStreamReadsFromTheLastPolicy(t *testing.T) {
	srv, nc := natstest.StartServer(t)
	js, _ := jetstream.New(nc)
	names, _ := naming.New("")
	if err := recorder.EnsureStream(context.Background(), js, names.TraceStream(), names.Trace(), 1<<20, 1, jetstream.MemoryStorage); err != nil {
		t.Fatal(err)
	}
	before, _ := os.ReadFile("testdata/policy-classes.yaml")
	after, _ := os.ReadFile("testdata/flip.yaml")
	for _, rec := range []wire.TraceRecord{
		{Event: wire.TraceHeader, T: 1, Format: wire.TraceFormat, Version: wire.TraceVersion, Policy: string(before)},
		{Event: wire.TraceArrive, T: 2, ID: "old", Token: "premium", Class: "premium", Key: "_", Published: 2, ISL: 512, Cost: 512},
		{Event: wire.TraceHeader, T: 3, Format: wire.TraceFormat, Version: wire.TraceVersion, Policy: string(after)},
		{Event: wire.TraceArrive, T: 4, ID: "new", Token: "premium", Class: "premium", Key: "_", Published: 4, ISL: 512, Cost: 512},
		{Event: wire.TraceDispatch, T: 5, ID: "new", Class: "premium", Key: "_", Cost: 512, Worker: "w1", Outcome: "accepted"},
	} {
		b, _ := wire.Marshal(rec)
		if _, err := js.Publish(context.Background(), names.Trace(), b); err != nil {
			t.Fatal(err)
		}
	}
	var out, errb bytes.Buffer
	code := run(context.Background(), []string{"--server", srv.ClientURL(), "--json", "sim", "--policy", "testdata/flip.yaml", "--trace-stream"}, &out, &errb)
	var rep struct {
		Arrivals int `json:"arrivals"`
	}
	if code != 0 || json.Unmarshal(out.Bytes(), &rep) != nil || rep.Arrivals != 1 || !strings.Contains(errb.String(), "the policy changed at sequence 3") {
		t.Fatalf("exit %d, %s\nstderr %s\nwant the one arrival after the change, and the skip said", code, out.String(), errb.String())
	}
}

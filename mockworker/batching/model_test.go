package batching

import (
	"fmt"
	"math"
	"strings"
	"testing"
	"time"
)

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// The fitted model reproduces the published NIM points it was fitted to
// (doc.go, The constants and their source), within the residuals stated there.
func TestLlama70BH100ReproducesThePublishedBenchmark(t *testing.T) {
	m := Llama70BH100
	if err := m.Validate(); err != nil {
		t.Fatal(err)
	}
	within := func(what string, got, want, tol float64) {
		t.Helper()
		if math.Abs(got-want)/want > tol {
			t.Errorf("%s: got %.2f ms, want %.2f ms within %.0f%%", what, got, want, 100*tol)
		}
	}
	// A lone sequence: one decode step at 5000 tokens of context, and the
	// 5000-token prefill in one step.
	within("ITL at concurrency 1", ms(m.StepTime(0, 5000)), 18.58, 0.01)
	within("TTFT of 5000 tokens at concurrency 1", ms(m.StepTime(m.PrefillWork(0, 5000), 0)), 406.77, 0.01)
	within("TTFT of 500 tokens at concurrency 1", ms(m.StepTime(m.PrefillWork(0, 500), 0)), 47.77, 0.18)
	// Closed loops: the average step's prompt tokens (at an average position
	// of 2500) and decoding context, derived from the table in doc.go.
	for _, p := range []struct {
		c            int
		prompt, ctx  float64
		itl, percent float64
	}{
		{5, 47.7, 24996, 21.83, 0.04},
		{25, 241.9, 126736, 38.75, 0.01},
		{50, 487.4, 255351, 59.73, 0.01},
	} {
		work := p.prompt * (1 + 2500/m.AttentionTokens)
		within(fmt.Sprintf("ITL at concurrency %d", p.c), ms(m.StepTime(work, int(p.ctx))), p.itl, p.percent)
	}
	// Saturation: 85.5 sequences of 5000 + 500 tokens fill the pool.
	if got := m.KVBlocks * m.BlockSize; got < 85*5500 || got > 86*5500 {
		t.Errorf("pool: got %d tokens, want 85.5 x 5500", got)
	}
}

func TestPrefillWorkIsTheSumOverTokens(t *testing.T) {
	m := Model{AttentionTokens: 1000}
	for _, c := range []struct{ from, n int }{{0, 0}, {0, 1}, {0, 7}, {100, 50}, {4096, 8192}} {
		want := 0.0
		for i := c.from; i < c.from+c.n; i++ {
			want += 1 + float64(i)/1000
		}
		if got := m.PrefillWork(c.from, c.n); math.Abs(got-want) > 1e-6*max(1, want) {
			t.Errorf("PrefillWork(%d, %d): got %v, want %v", c.from, c.n, got, want)
		}
	}
	if got := (Model{}).PrefillWork(5, 10); got != 10 {
		t.Errorf("without attention: got %v, want 10", got)
	}
}

func TestScaledDividesEveryDuration(t *testing.T) {
	m := Llama70BH100.Scaled(50)
	for _, c := range []struct{ work, ctx int }{{0, 0}, {8192, 0}, {0, 300000}, {4000, 100000}} {
		base := Llama70BH100.StepTime(float64(c.work), c.ctx)
		if got, want := m.StepTime(float64(c.work), c.ctx), base/50; got < want-1 || got > want+1 {
			t.Errorf("StepTime(%d, %d) at 50x: got %v, want %v", c.work, c.ctx, got, want)
		}
	}
}

func TestValidateReportsEveryProblem(t *testing.T) {
	err := Model{AttentionTokens: math.NaN(), Speedup: -1}.Validate()
	if err == nil {
		t.Fatal("got nil, want errors")
	}
	for _, want := range []string{"step floor", "attention", "max batched tokens", "speedup"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
}

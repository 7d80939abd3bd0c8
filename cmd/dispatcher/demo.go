package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"fairdispatch/loadgen"
	"fairdispatch/mockworker"
)

// runDemo runs the seed's premium/regular regression on this dispatcher: one
// mock worker running four sequences, and a burst of 512-token, one-output-token
// requests per class released together. It prints completions per class as
// they happen and a summary at the end.
func runDemo(ctx context.Context, nc *nats.Conn, s *settings, out io.Writer, log zerolog.Logger) error {
	n := s.demoPerClass
	fmt.Fprintf(out, "\ndemo: one mock worker (4 sequences), %d premium + %d regular requests of 512 tokens released together\n", n, n)
	fmt.Fprintf(out, "      policy %s; requests wait out the %v start-up grace first\n\n", s.policy, s.grace)
	res, err := runDemoLoad(ctx, nc, s, loadgen.Config{
		Classes: []loadgen.ClassCount{{Class: "premium", Count: n}, {Class: "regular", Count: n}},
		Order:   loadgen.OrderAlternating,
	}, out, log, func(b *strings.Builder, p loadgen.Progress) {
		for _, c := range []string{"premium", "regular"} {
			fmt.Fprintf(b, "  %s completed %4d", c, p.Completed[c])
		}
		if p.Rejected > 0 {
			fmt.Fprintf(b, "  rejected %d", p.Rejected)
		}
	})
	if res == nil {
		return err
	}
	sum := res.Summarize(n)
	fmt.Fprintln(out, sum.String())
	p, r := sum.PrefixShare["premium"], sum.PrefixShare["regular"]
	fmt.Fprintf(out, "Of the first %d completions, %d were premium and %d regular (%.1f : 1).\n", n, p, r, float64(p)/float64(max(r, 1)))
	fmt.Fprintln(out, "With quanta 512:128 DRR gives premium four times regular's share while both queues are")
	fmt.Fprintf(out, "backlogged (ideal %d:%d); regular still progresses. With equal quanta the split is even.\n", n*4/5, n/5)
	return err
}

// runDemoLoad runs a demo's workload on one mock worker, mock-1 (four
// sequences), started for it and stopped after: cfg's requests, of 512
// tokens and within two minutes, under the dispatcher's prefix, with a
// progress line whose columns are the demo's. It returns loadgen's result.
func runDemoLoad(ctx context.Context, nc *nats.Conn, s *settings, cfg loadgen.Config, out io.Writer, log zerolog.Logger,
	columns func(*strings.Builder, loadgen.Progress)) (*loadgen.Result, error) {
	quiet := log.Level(zerolog.WarnLevel)
	w, err := mockworker.New(nc, mockworker.Config{ID: "mock-1", Prefix: s.prefix, MaxNumSeqs: 4, AckWait: s.ackWait}, quiet)
	if err != nil {
		return nil, err
	}
	if err := w.Start(); err != nil {
		return nil, err
	}
	defer func() {
		stop, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = w.Stop(stop)
	}()
	cfg.Prefix, cfg.ISL, cfg.Timeout, cfg.OnProgress = s.prefix, 512, 2*time.Minute, progress(out, columns)
	res, err := loadgen.Run(ctx, nc, cfg, quiet)
	fmt.Fprintln(out)
	return res, err
}

// progress returns a demo's progress printer: one line overwritten in place
// on a terminal, a new line about every second otherwise (make run | tee, CI);
// columns writes the demo's own counts after the published count.
func progress(out io.Writer, columns func(*strings.Builder, loadgen.Progress)) func(loadgen.Progress) {
	tty := false
	if f, ok := out.(*os.File); ok {
		if st, err := f.Stat(); err == nil {
			tty = st.Mode()&os.ModeCharDevice != 0
		}
	}
	var last time.Duration = -time.Second
	return func(p loadgen.Progress) {
		if !tty && p.Elapsed-last < time.Second && p.Published < p.Requests {
			return
		}
		last = p.Elapsed
		var b strings.Builder
		if tty {
			b.WriteString("\r")
		}
		fmt.Fprintf(&b, "%6.1fs  published %d/%d", p.Elapsed.Seconds(), p.Published, p.Requests)
		columns(&b, p)
		if !tty {
			b.WriteString("\n")
		}
		fmt.Fprint(out, b.String())
	}
}

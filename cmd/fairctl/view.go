package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"text/tabwriter"
	"time"

	"fairdispatch/wire"
)

func init() {
	commands["queues"] = command{summary: "a table per class: backlog, oldest wait, deficit, dispatch rate, keys", run: runQueues}
	commands["workers"] = command{summary: "a table of load per worker rank", run: runWorkers}
	commands["top"] = command{summary: "a live view of queues and workers, redrawn every second (q or Ctrl-C quits)", run: runTop}
}

// queuesView is the admin API's GET /debug/queues (wire.QueueView), with the
// classes and workers also as received, for --json: a newer dispatcher's
// fields are printed although this fairctl does not know them.
type queuesView struct {
	wire.QueueView
	RawClasses json.RawMessage
	RawWorkers json.RawMessage
}

// fetchQueues gets GET /debug/queues from the admin API.
func (g *globals) fetchQueues(ctx context.Context) (*queuesView, error) {
	ctx, cancel := context.WithTimeout(ctx, g.timeout)
	defer cancel()
	url := strings.TrimRight(g.admin, "/") + "/debug/queues"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, fmt.Errorf("--admin %q: %w", g.admin, err)
	}
	if g.adminToken != "" {
		req.Header.Set("Authorization", "Bearer "+g.adminToken)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("admin API: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, fmt.Errorf("admin API: GET %s: %w", url, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("admin API: GET %s: %s: %s", url, resp.Status, bytes.TrimSpace(body))
	}
	var v queuesView
	var raw struct {
		Classes json.RawMessage `json:"classes"`
		Workers json.RawMessage `json:"workers"`
	}
	if err := json.Unmarshal(body, &v.QueueView); err != nil {
		return nil, fmt.Errorf("admin API: GET %s: %w", url, err)
	}
	if err := json.Unmarshal(body, &raw); err != nil {
		return nil, fmt.Errorf("admin API: GET %s: %w", url, err)
	}
	v.RawClasses, v.RawWorkers = raw.Classes, raw.Workers
	return &v, nil
}

func noArgs(name string, g *globals, args []string) error {
	fs := g.flagSet(name)
	if err := g.parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageError("%s: unexpected argument %q", name, fs.Arg(0))
	}
	return nil
}

// writeRaw writes raw JSON indented, or [] when absent.
func writeRaw(w io.Writer, raw json.RawMessage) error {
	if len(raw) == 0 || string(raw) == "null" {
		raw = json.RawMessage("[]")
	}
	var b bytes.Buffer
	if err := json.Indent(&b, raw, "", "  "); err != nil {
		return err
	}
	b.WriteByte('\n')
	_, err := w.Write(b.Bytes())
	return err
}

// viewCommand is a command that shows one part of /debug/queues: as raw
// returns it (the JSON as served) with --json, as render writes it otherwise.
func viewCommand(name string, raw func(*queuesView) json.RawMessage, render func(io.Writer, *queuesView) error) func(context.Context, *globals, []string) error {
	return func(ctx context.Context, g *globals, args []string) error {
		if err := noArgs(name, g, args); err != nil {
			return err
		}
		v, err := g.fetchQueues(ctx)
		if err != nil {
			return err
		}
		if g.json {
			return writeRaw(g.stdout, raw(v))
		}
		return render(g.stdout, v)
	}
}

var (
	runQueues  = viewCommand("queues", func(v *queuesView) json.RawMessage { return v.RawClasses }, renderQueues)
	runWorkers = viewCommand("workers", func(v *queuesView) json.RawMessage { return v.RawWorkers }, renderWorkers)
)

// renderClasses writes the queues table.
func renderClasses(w io.Writer, v *queuesView) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "CLASS\tBACKLOG\tISL TOKENS\tOLDEST WAIT\tDEFICIT\tDISPATCH/S\tDISPATCHED\tKEYS\t")
	for _, c := range v.Classes {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%d\t%.1f\t%d\t%d\t\n", c.Name, c.Pending, c.ISLTokens,
			waitString(c.OldestWaitMs), c.Deficit, c.DispatchRate, c.Dispatched, c.Keys)
	}
	return tw.Flush()
}

// renderQueues writes the queues table, then the extensions table.
func renderQueues(w io.Writer, v *queuesView) error {
	if err := renderClasses(w, v); err != nil {
		return err
	}
	return renderExtensions(w, v)
}

// renderExtensions writes, only when some class has them, the classes'
// token budgets, drain rates and preemptions (docs/design.md, Token budgets,
// Shedding, Preemption), then a row per top key with a budget: its rate,
// burst, level and whether it waits for its budget.
func renderExtensions(w io.Writer, v *queuesView) error {
	var classes []int
	var keys bool
	for i, c := range v.Classes {
		if c.ThrottledKeys != nil || c.DrainRate != nil || c.Preempted != nil {
			classes = append(classes, i)
		}
		for _, k := range c.TopKeys {
			keys = keys || k.Budget != nil
		}
	}
	if len(classes) == 0 && !keys {
		return nil
	}
	dash := func(p *int) string {
		if p == nil {
			return "-"
		}
		return fmt.Sprint(*p)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	if len(classes) > 0 {
		fmt.Fprintln(w)
		fmt.Fprintln(tw, "CLASS\tTHROTTLED KEYS\tBUDGET CHARGED\tDRAIN TOKENS/S\tPREEMPTED\t")
		for _, i := range classes {
			c := v.Classes[i]
			charged, drain, pre := "-", "-", "-"
			if c.BudgetCharged != nil {
				charged = fmt.Sprintf("%.0f", *c.BudgetCharged)
			}
			if c.DrainRate != nil {
				drain = fmt.Sprintf("%.0f", *c.DrainRate)
			}
			if c.Preempted != nil {
				pre = fmt.Sprint(*c.Preempted)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t\n", c.Name, dash(c.ThrottledKeys), charged, drain, pre)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if !keys {
		return nil
	}
	fmt.Fprintln(w)
	fmt.Fprintln(tw, "CLASS\tKEY\tQUEUED\tTOKENS/S\tBURST\tLEVEL\tSTATE\t")
	for _, c := range v.Classes {
		for _, k := range c.TopKeys {
			if b := k.Budget; b != nil {
				st := "ok"
				if b.Throttled {
					st = "throttled"
				}
				fmt.Fprintf(tw, "%s\t%s\t%d\t%.0f\t%d\t%.0f\t%s\t\n", c.Name, k.Key, k.Queued, b.TokensPerSecond, b.Burst, b.Level, st)
			}
		}
	}
	return tw.Flush()
}

// renderWorkers writes the workers table: a row per rank.
func renderWorkers(w io.Writer, v *queuesView) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "WORKER\tRANK\tPREFILL\tREPORTED\tBOOKED\tDECODE BLOCKS\tKV USED\tACTIVE\tSTATE\t")
	for _, wk := range v.Workers {
		var state []string
		for _, s := range []struct {
			on   bool
			name string
		}{{wk.Overloaded, "overloaded"}, {wk.Draining, "draining"}, {wk.Excluded, "excluded"}} {
			if s.on {
				state = append(state, s.name)
			}
		}
		st := strings.Join(state, ",")
		if st == "" {
			st = "ok"
		}
		for _, r := range wk.Ranks {
			fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%s\t\n", wk.ID, r.Rank, r.Prefill, r.ReportedPrefill,
				r.BookedPrefill, r.DecodeBlocks, r.KVUsedBlocks, r.ActiveRequests, st)
		}
	}
	return tw.Flush()
}

// waitString formats a wait in milliseconds: "-" for none, else with one
// decimal of the largest fitting unit.
func waitString(ms int64) string {
	switch {
	case ms <= 0:
		return "-"
	case ms < 1000:
		return fmt.Sprintf("%dms", ms)
	case ms < 60_000:
		return fmt.Sprintf("%.1fs", float64(ms)/1000)
	case ms < 3_600_000:
		return fmt.Sprintf("%.1fm", float64(ms)/60_000)
	}
	return fmt.Sprintf("%.1fh", float64(ms)/3_600_000)
}

// ANSI sequences of top: plain VT100, which every terminal and tmux knows.
const (
	ansiHome       = "\033[H"
	ansiClear      = "\033[2J"
	ansiHideCursor = "\033[?25l"
	ansiShowCursor = "\033[?25h"
)

func runTop(ctx context.Context, g *globals, args []string) error {
	fs := g.flagSet("top")
	interval := fs.Duration("interval", time.Second, "how often to redraw")
	if err := g.parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageError("top: unexpected argument %q", fs.Arg(0))
	}
	if *interval < 100*time.Millisecond {
		return usageError("top: --interval %v: want >= 100ms", *interval)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// Keys: q quits. On a terminal, stty takes it out of line mode (keeping
	// Ctrl-C's signal) so that q needs no Enter; the mode is restored on exit.
	if restore := keysMode(); restore != nil {
		defer restore()
	}
	go func() {
		r := bufio.NewReader(os.Stdin)
		for {
			b, err := r.ReadByte()
			if err != nil {
				return // no keys (stdin closed or not a terminal): Ctrl-C still quits
			}
			if b == 'q' || b == 'Q' {
				cancel()
				return
			}
		}
	}()
	fmt.Fprint(g.stdout, ansiHideCursor)
	defer fmt.Fprint(g.stdout, ansiShowCursor)
	t := time.NewTicker(*interval)
	defer t.Stop()
	for {
		var b bytes.Buffer
		b.WriteString(ansiHome + ansiClear)
		renderTop(ctx, g, &b)
		if _, err := g.stdout.Write(b.Bytes()); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			fmt.Fprintln(g.stdout)
			return nil
		case <-t.C:
		}
	}
}

// renderTop writes one frame of top (without the clearing sequence).
func renderTop(ctx context.Context, g *globals, w io.Writer) {
	fmt.Fprintf(w, "fairctl top  %s  %s  (q or Ctrl-C quits)\n\n", g.admin, time.Now().UTC().Format(time.TimeOnly))
	v, err := g.fetchQueues(ctx)
	if err != nil {
		if !errors.Is(err, context.Canceled) {
			fmt.Fprintf(w, "error: %v\n(retrying every interval)\n", err)
		}
		return
	}
	var state []string
	if v.Standby {
		state = append(state, "standby (not the leader: these are not the pool's queues)")
	}
	if !v.Connected {
		state = append(state, "NATS DISCONNECTED")
	}
	if v.Grace {
		state = append(state, "start-up grace")
	}
	if v.NoLiveWorkers {
		state = append(state, "NO LIVE WORKERS")
	}
	st := strings.Join(state, ", ")
	if st == "" {
		st = "ok"
	}
	fmt.Fprintf(w, "held %d  in flight %d  state %s  view at %s\n\n", v.Held, v.InFlight, st, v.At.UTC().Format(time.TimeOnly))
	_ = renderQueues(w, v)
	fmt.Fprintln(w)
	_ = renderWorkers(w, v)
}

// keysMode puts the terminal on stdin in character mode without echo, with
// stty, and returns the function that restores it; nil when stdin is not a
// terminal or stty is missing.
func keysMode() func() {
	st, err := os.Stdin.Stat()
	if err != nil || st.Mode()&os.ModeCharDevice == 0 {
		return nil
	}
	stty := func(args ...string) (string, error) {
		cmd := exec.Command("stty", args...)
		cmd.Stdin = os.Stdin
		out, err := cmd.Output()
		return strings.TrimSpace(string(out)), err
	}
	saved, err := stty("-g")
	if err != nil {
		return nil
	}
	if _, err := stty("-icanon", "-echo", "min", "1"); err != nil {
		return nil
	}
	return func() { _, _ = stty(saved) }
}

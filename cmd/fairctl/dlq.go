package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"fairdispatch/bus"
	"fairdispatch/naming"
	"fairdispatch/wire"
)

func init() {
	commands["dlq"] = command{
		summary: "list, show, replay and purge dead letters (ls | show SEQ | replay | purge)",
		run:     runDLQ,
	}
}

// dlqFetchBatch is how many dead letters one scan fetch asks for.
const dlqFetchBatch = 256

// dlqPreview is how many bytes of a body dlq show prints.
const dlqPreview = 256

// replayIDPrefix starts the Nats-Msg-Id of a replayed dead letter:
// "replay:<DLQ stream seq>:<original request id>" (docs/operations.md, Dead letters).
const replayIDPrefix = "replay:"

func runDLQ(ctx context.Context, g *globals, args []string) error {
	args = g.subcommandFirst(args)
	if len(args) == 0 {
		return usageError("dlq: want a subcommand: ls, show SEQ, replay, purge")
	}
	switch args[0] {
	case "ls":
		return dlqLs(ctx, g, args[1:])
	case "show":
		return dlqShow(ctx, g, args[1:])
	case "replay":
		return dlqReplay(ctx, g, args[1:])
	case "purge":
		return dlqPurge(ctx, g, args[1:])
	}
	return usageError("dlq: unknown subcommand %q (want ls, show, replay, purge)", args[0])
}

// letterFilter selects dead letters.
type letterFilter struct {
	class, code string
	since       time.Time
}

// filterFlags is the flag set of a dlq subcommand that selects letters
// (ls, replay, purge): the filter flags, plus whatever the subcommand adds.
type filterFlags struct {
	*flag.FlagSet
	g     *globals
	f     letterFilter
	since string
}

// newFilterFlags returns the flag set of subcommand name with the filter flags.
func newFilterFlags(g *globals, name string) *filterFlags {
	ff := &filterFlags{FlagSet: g.flagSet(name), g: g}
	ff.f.flags(ff.FlagSet, &ff.since)
	return ff
}

// parse parses args, which take no positional argument, and resolves the filter.
func (ff *filterFlags) parse(args []string) (letterFilter, error) {
	if err := ff.g.parse(ff.FlagSet, args); err != nil {
		return letterFilter{}, err
	}
	if ff.NArg() > 0 {
		return letterFilter{}, usageError("%s: unexpected argument %q", ff.Name(), ff.Arg(0))
	}
	if err := ff.f.resolve(ff.since, time.Now()); err != nil {
		return letterFilter{}, err
	}
	return ff.f, nil
}

// open parses args, as parse does, and connects to the DLQ; the caller
// closes d.nc.
func (ff *filterFlags) open(ctx context.Context, g *globals, args []string) (f letterFilter, d *dlqConn, err error) {
	if f, err = ff.parse(args); err != nil {
		return f, nil, err
	}
	d, err = g.dlq(ctx)
	return f, d, err
}

// flags adds the filter flags to fs; parse with resolve after fs.Parse.
func (f *letterFilter) flags(fs *flag.FlagSet, since *string) {
	fs.StringVar(&f.class, "class", "", "only dead letters of this class (the last token of the DLQ subject)")
	fs.StringVar(&f.code, "error", "", "only dead letters with this error code (e.g. queue_full)")
	fs.StringVar(since, "since", "", "only dead letters stored since T: a duration back from now (1h) or an RFC 3339 time")
}

func (f *letterFilter) resolve(since string, now time.Time) error {
	if f.class != "" && (!naming.ValidSubject(f.class) || strings.Contains(f.class, ".")) {
		return usageError("--class %q: want one subject token", f.class)
	}
	if since == "" {
		return nil
	}
	if d, err := time.ParseDuration(since); err == nil {
		if d < 0 {
			return usageError("--since %q: want a positive duration", since)
		}
		f.since = now.Add(-d)
		return nil
	}
	t, err := time.Parse(time.RFC3339, since)
	if err != nil {
		return usageError("--since %q: want a duration (1h) or an RFC 3339 time (2026-01-02T15:04:05Z)", since)
	}
	f.since = t
	return nil
}

// dlqConn is a connection to the DLQ stream.
type dlqConn struct {
	nc     *nats.Conn
	js     jetstream.JetStream
	stream jetstream.Stream
}

func (g *globals) dlq(ctx context.Context) (*dlqConn, error) {
	nc, js, err := g.jetstream(ctx)
	if err != nil {
		return nil, err
	}
	tctx, cancel := context.WithTimeout(ctx, g.timeout)
	defer cancel()
	s, err := js.Stream(tctx, g.names.DLQStream())
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("stream %s: %w", g.names.DLQStream(), err)
	}
	return &dlqConn{nc: nc, js: js, stream: s}, nil
}

// remove deletes dead letter seq and counts it in sum: in Done, or in Gone
// when it was deleted meanwhile (by another run, or an operator).
func (d *dlqConn) remove(ctx context.Context, g *globals, seq uint64, sum *replaySummary) error {
	dctx, cancel := context.WithTimeout(ctx, g.timeout)
	defer cancel()
	if err := d.stream.DeleteMsg(dctx, seq); err != nil {
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			sum.Gone++
			return nil
		}
		return err
	}
	sum.Done++
	return nil
}

// scan calls fn for every dead letter that f selects, in stream order, up to
// the last one stored when the scan starts. With headersOnly the messages
// carry no body (the size comes from Nats-Msg-Size). Each fetch asks for
// batchSize letters. prog, if not nil, is told the number of letters the
// scan reads (before the --error filter) and each one it reads; fn may be
// called for fewer when some are deleted meanwhile.
func (d *dlqConn) scan(ctx context.Context, g *globals, f letterFilter, headersOnly bool, batchSize int,
	prog *progress, fn func(l bus.Letter, m jetstream.Msg) error) error {
	tctx, cancel := context.WithTimeout(ctx, g.timeout)
	defer cancel()
	info, err := d.stream.Info(tctx)
	if err != nil {
		return fmt.Errorf("stream %s: %w", g.names.DLQStream(), err)
	}
	last := info.State.LastSeq
	if info.State.Msgs == 0 {
		return nil
	}
	cfg := jetstream.ConsumerConfig{
		AckPolicy: jetstream.AckNonePolicy, HeadersOnly: headersOnly, MemoryStorage: true,
		InactiveThreshold: time.Minute, FilterSubject: g.names.DLQAll(),
	}
	if f.class != "" {
		cfg.FilterSubject = g.names.DLQ(f.class)
	}
	if !f.since.IsZero() {
		cfg.DeliverPolicy, cfg.OptStartTime = jetstream.DeliverByStartTimePolicy, &f.since
	}
	cons, err := d.stream.CreateConsumer(tctx, cfg)
	if err != nil {
		return fmt.Errorf("consumer on %s: %w", g.names.DLQStream(), err)
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), g.timeout)
		defer cancel()
		_ = d.stream.DeleteConsumer(dctx, cons.CachedInfo().Name)
	}()
	total := cons.CachedInfo().NumPending
	if prog != nil {
		prog.setTotal(total)
	}
	var seen uint64
	for seen < total {
		if err := ctx.Err(); err != nil {
			return err
		}
		batch, err := cons.Fetch(batchSize, jetstream.FetchMaxWait(time.Second))
		if err != nil {
			return fmt.Errorf("fetch from %s: %w", g.names.DLQStream(), err)
		}
		n := 0
		for m := range batch.Messages() {
			n++
			md, err := m.Metadata()
			if err != nil {
				return fmt.Errorf("dead letter metadata: %w", err)
			}
			if md.Sequence.Stream > last {
				return nil // stored after the scan began
			}
			seen++
			if prog != nil {
				prog.read()
			}
			size := len(m.Data())
			if headersOnly {
				size, _ = strconv.Atoi(m.Headers().Get("Nats-Msg-Size"))
			}
			l := bus.ReadLetter(md.Sequence.Stream, md.Timestamp, m.Subject(), m.Headers(), size)
			if f.code != "" && l.Error != f.code {
				continue
			}
			if err := fn(l, m); err != nil {
				return err
			}
		}
		if err := batch.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) {
			return fmt.Errorf("fetch from %s: %w", g.names.DLQStream(), err)
		}
		if n == 0 {
			return nil // the rest were deleted meanwhile
		}
	}
	return nil
}

func dlqLs(ctx context.Context, g *globals, args []string) error {
	f, d, err := newFilterFlags(g, "dlq ls").open(ctx, g, args)
	if err != nil {
		return err
	}
	defer d.nc.Close()
	var ls []bus.Letter
	if err := d.scan(ctx, g, f, true, dlqFetchBatch, nil, func(l bus.Letter, _ jetstream.Msg) error {
		ls = append(ls, l)
		return nil
	}); err != nil {
		return err
	}
	if g.json {
		if ls == nil {
			ls = []bus.Letter{}
		}
		return writeJSON(g.stdout, ls)
	}
	tw := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SEQ\tTIME\tCLASS\tERROR\tREQUEST ID\tMESSAGE")
	for _, l := range ls {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\n", l.Seq, l.Time.Format(time.RFC3339), l.Class, l.Error, l.RequestID, clip(l.Message, 72))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err = fmt.Fprintf(g.stdout, "%d dead letters\n", len(ls))
	return err
}

// shown is dlq show's JSON.
type shown struct {
	bus.Letter
	DLQSubject  string              `json:"dlq_subject"`
	Header      map[string][]string `json:"headers"`
	BodyPreview string              `json:"body_preview"`
}

func dlqShow(ctx context.Context, g *globals, args []string) error {
	fs := g.flagSet("dlq show")
	if err := g.parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return usageError("dlq show: want one argument, the dead letter's stream sequence (from dlq ls)")
	}
	seq, err := strconv.ParseUint(fs.Arg(0), 10, 64)
	if err != nil || seq == 0 {
		return usageError("dlq show: %q is not a stream sequence", fs.Arg(0))
	}
	d, err := g.dlq(ctx)
	if err != nil {
		return err
	}
	defer d.nc.Close()
	tctx, cancel := context.WithTimeout(ctx, g.timeout)
	defer cancel()
	m, err := d.stream.GetMsg(tctx, seq)
	if err != nil {
		return fmt.Errorf("dead letter %d: %w", seq, err)
	}
	s := shown{Letter: bus.ReadLetter(m.Sequence, m.Time, m.Subject, m.Header, len(m.Data)), DLQSubject: m.Subject, Header: m.Header}
	body := m.Data
	if len(body) > dlqPreview {
		body = body[:dlqPreview]
	}
	s.BodyPreview = string(body)
	if !utf8.Valid(body) {
		s.BodyPreview = strconv.Quote(string(body))
	}
	if g.json {
		return writeJSON(g.stdout, s)
	}
	w := g.stdout
	fmt.Fprintf(w, "stream seq  %d\nstored      %s\nsubject     %s\n", s.Seq, s.Time.Format(time.RFC3339Nano), s.DLQSubject)
	fmt.Fprintln(w, "headers:")
	keys := make([]string, 0, len(m.Header))
	for k := range m.Header {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		for _, v := range m.Header[k] {
			fmt.Fprintf(w, "  %s: %s\n", k, v)
		}
	}
	switch {
	case s.BodyDropped:
		_, err = fmt.Fprintf(w, "body: dropped (%d bytes)\n", s.Size)
	case len(m.Data) > dlqPreview:
		_, err = fmt.Fprintf(w, "body: %d bytes, the first %d:\n%s\n", s.Size, dlqPreview, s.BodyPreview)
	default:
		_, err = fmt.Fprintf(w, "body: %d bytes\n%s\n", s.Size, s.BodyPreview)
	}
	return err
}

// replayable returns the subject to republish l to, or why it cannot be
// replayed.
func replayable(names naming.Names, l bus.Letter) (string, string) {
	if l.BodyDropped {
		return "", "body dropped"
	}
	if l.HeadersDropped != "" {
		return "", "headers dropped"
	}
	if l.RequestID == "" {
		return "", "no request id"
	}
	subj := l.Subject
	if subj == "" {
		subj = names.Req(l.Class) // a letter from before Dispatch-Subject
	}
	tok, ok := strings.CutPrefix(subj, names.Prefix()+".req.")
	if !ok || tok == "" || strings.ContainsAny(tok, ".*> \t") {
		return "", fmt.Sprintf("subject %q is not a request subject of prefix %q", subj, names.Prefix())
	}
	return subj, ""
}

// replayID is the Nats-Msg-Id of dead letter seq's republished request:
// fixed per dead letter, so that a replay run again after an interruption is
// deduplicated by the request stream. A request id that is itself a replay id
// is unwrapped first, so that a request dead-lettered again does not grow it.
func replayID(seq uint64, requestID string) string {
	orig := requestID
	if rest, ok := strings.CutPrefix(orig, replayIDPrefix); ok {
		if i := strings.IndexByte(rest, ':'); i > 0 {
			if _, err := strconv.ParseUint(rest[:i], 10, 64); err == nil {
				orig = rest[i+1:]
			}
		}
	}
	return replayIDPrefix + strconv.FormatUint(seq, 10) + ":" + orig
}

// replayHeader is the header of dead letter h's republished request: the
// request's own headers (bus.RequestHeader), with Nats-Msg-Id set to id.
func replayHeader(h nats.Header, id string) nats.Header {
	out := bus.RequestHeader(h)
	out.Set(wire.HeaderMsgID, id)
	return out
}

// replaySummary is what dlq replay and dlq purge print at the end.
type replaySummary struct {
	DryRun  bool `json:"dry_run"`
	Matched int  `json:"matched"`
	Done    int  `json:"done"`       // replayed (or purged)
	Skipped int  `json:"skipped"`    // not replayable
	Gone    int  `json:"gone"`       // deleted by someone else meanwhile
	Dupes   int  `json:"duplicates"` // republishes JetStream deduplicated (an earlier run's)
}

func dlqReplay(ctx context.Context, g *globals, args []string) error {
	fs := newFilterFlags(g, "dlq replay")
	yes := fs.Bool("yes", false, "act: without it, only print what would be replayed")
	rate := fs.Float64("rate", 0, "at most this many dead letters replayed per second (0: no limit)")
	f, err := fs.parse(args)
	if err != nil {
		return err
	}
	if *rate < 0 {
		return usageError("dlq replay: --rate %v: want >= 0", *rate)
	}
	d, err := g.dlq(ctx)
	if err != nil {
		return err
	}
	defer d.nc.Close()
	sum := replaySummary{DryRun: !*yes}
	var tw *tabwriter.Writer
	if !*yes && !g.json {
		tw = tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "SEQ\tREQUEST ID\tSUBJECT\tREPLAY AS\tNOTE")
	}
	var dry []map[string]any
	prog := newProgress(g.stderr, "replayed", !*yes)
	defer prog.stop()
	var pace pacer
	batch := dlqFetchBatch
	if *rate > 0 {
		pace.every = time.Duration(float64(time.Second) / *rate)
		batch = max(1, min(batch, int(*rate))) // a batch lasts about a second: the consumer stays active
	}
	err = d.scan(ctx, g, f, !*yes, batch, prog, func(l bus.Letter, m jetstream.Msg) error {
		sum.Matched++
		subj, why := replayable(g.names, l)
		id := replayID(l.Seq, l.RequestID)
		if !*yes {
			if why != "" {
				sum.Skipped++
			}
			if g.json {
				dry = append(dry, map[string]any{"stream_seq": l.Seq, "request_id": l.RequestID, "subject": subj, "replay_id": id, "skip": why})
			} else {
				if why != "" {
					subj, id = "-", "-"
				}
				fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\n", l.Seq, l.RequestID, subj, id, why)
			}
			return nil
		}
		if why != "" {
			sum.Skipped++
			fmt.Fprintf(g.stderr, "fairctl dlq replay: skipping dead letter %d (%s): %s\n", l.Seq, l.RequestID, why)
			return nil
		}
		if err := pace.wait(ctx); err != nil {
			return err
		}
		out := &nats.Msg{Subject: subj, Header: replayHeader(m.Headers(), id), Data: m.Data()}
		pctx, cancel := context.WithTimeout(ctx, g.timeout)
		defer cancel()
		ack, err := d.js.PublishMsg(pctx, out, jetstream.WithExpectStream(g.names.ReqStream()))
		if err != nil {
			return fmt.Errorf("republish dead letter %d (%s) to %s: %w", l.Seq, l.RequestID, subj, err)
		}
		if ack.Duplicate {
			sum.Dupes++
		}
		// Only now, the republish stored: a run killed before this line
		// republishes the same id again, which the request stream drops.
		if err := d.remove(ctx, g, l.Seq, &sum); err != nil {
			return fmt.Errorf("delete dead letter %d after its replay: %w", l.Seq, err)
		}
		prog.add(1)
		return nil
	})
	prog.stop()
	if tw != nil {
		if ferr := tw.Flush(); ferr != nil && err == nil {
			err = ferr
		}
	}
	if err != nil && *yes {
		// What was done stays done (each letter deleted once its copy was
		// stored): say how far the run got, so that a rerun is understood.
		if g.json {
			_ = writeJSON(g.stdout, map[string]any{"summary": sum, "error": err.Error()})
		} else {
			fmt.Fprintf(g.stdout, "stopped after replaying %d dead letters (%d already republished by an earlier run), %d skipped, %d gone meanwhile; "+
				"those replayed are deleted from the DLQ: run the command again to go on\n", sum.Done, sum.Dupes, sum.Skipped, sum.Gone)
		}
	}
	if err != nil {
		return err
	}
	if g.json {
		if !*yes {
			if dry == nil {
				dry = []map[string]any{}
			}
			return writeJSON(g.stdout, map[string]any{"summary": sum, "letters": dry})
		}
		return writeJSON(g.stdout, sum)
	}
	if !*yes {
		_, err = fmt.Fprintf(g.stdout, "dry run: %d dead letters would be replayed, %d skipped; run again with --yes to replay them\n",
			sum.Matched-sum.Skipped, sum.Skipped)
		return err
	}
	_, err = fmt.Fprintf(g.stdout, "replayed %d dead letters (%d already republished by an earlier run), %d skipped, %d gone meanwhile\n",
		sum.Done, sum.Dupes, sum.Skipped, sum.Gone)
	return err
}

func dlqPurge(ctx context.Context, g *globals, args []string) error {
	fs := newFilterFlags(g, "dlq purge")
	yes := fs.Bool("yes", false, "act: without it, only count what would be deleted")
	f, d, err := fs.open(ctx, g, args)
	if err != nil {
		return err
	}
	defer d.nc.Close()
	sum := replaySummary{DryRun: !*yes}
	prog := newProgress(g.stderr, "purged", !*yes)
	defer prog.stop()
	err = d.scan(ctx, g, f, true, dlqFetchBatch, prog, func(l bus.Letter, _ jetstream.Msg) error {
		sum.Matched++
		if !*yes {
			return nil
		}
		done := sum.Done
		if err := d.remove(ctx, g, l.Seq, &sum); err != nil {
			return fmt.Errorf("delete dead letter %d: %w", l.Seq, err)
		}
		prog.add(sum.Done - done) // 0 for a letter gone meanwhile, as the summary counts it
		return nil
	})
	prog.stop()
	if err != nil {
		return err
	}
	if g.json {
		return writeJSON(g.stdout, sum)
	}
	if !*yes {
		_, err = fmt.Fprintf(g.stdout, "dry run: %d dead letters would be deleted; run again with --yes to delete them\n", sum.Matched)
		return err
	}
	_, err = fmt.Fprintf(g.stdout, "deleted %d dead letters, %d gone meanwhile\n", sum.Done, sum.Gone)
	return err
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// clip shortens s to at most n runes, marking a cut with "...".
func clip(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-3]) + "..."
}

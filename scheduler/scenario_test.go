package scheduler

// The scenario files of docs/design.md, Scenario files: testdata/*.txt are
// stories told to a Scheduler, one command at a time, each followed by what
// the scheduler did and, on print, its whole state (Scheduler.Describe).
// testdata/README.md lists the commands and how to read a file.
//
// To run one file:   go test ./scheduler/ -run 'TestScenarios/drr_seed_burst'
// To regenerate the expectations after a deliberate change of behaviour or
// of the dump, rewrite the files and read the diff before committing it:
//
//	go test ./scheduler/ -run TestScenarios -rewrite
//
// (the flag is github.com/cockroachdb/datadriven's).

import (
	"cmp"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"

	"fairdispatch/configs"
	"fairdispatch/filters"
	"fairdispatch/request"
	"fairdispatch/workers"
)

func TestScenarios(t *testing.T) {
	files, err := filepath.Glob("testdata/*.txt")
	if err != nil || len(files) == 0 {
		t.Fatalf("no scenario files (%v)", err)
	}
	for _, path := range files {
		t.Run(strings.TrimSuffix(filepath.Base(path), ".txt"), func(t *testing.T) {
			h := &scenario{now: t0}
			datadriven.RunTest(t, path, func(t *testing.T, td *datadriven.TestData) string {
				return h.run(t, td)
			})
		})
	}
}

// scenario is the state of one scenario file: the scheduler, the virtual
// clock and the requests it has named.
type scenario struct {
	s    *Scheduler
	now  int64
	n    int                          // arrivals so far, for default ids
	reqs map[string]*request.Snapshot // by id, every request that arrived
	// inFlight holds the dispatches not yet answered, by request id; last
	// the last dispatch of each request, for settle.
	inFlight map[string]Decision
	last     map[string]Decision
}

func (h *scenario) run(t *testing.T, td *datadriven.TestData) string {
	t.Helper()
	if h.s == nil && td.Cmd != "policy" {
		td.Fatalf(t, "the first command must be policy")
	}
	a := &args{t: t, td: td}
	var out string
	switch td.Cmd {
	case "policy":
		out = h.policy(a)
	case "report":
		out = h.report(a)
	case "arrive":
		out = h.arrive(a)
	case "next":
		out = h.next(a)
	case "dispatch":
		out = h.dispatch(a)
	case "answer":
		out = h.answer(a)
	case "settle", "complete":
		out = h.settle(a)
	case "serve":
		out = h.serve(a)
	case "tick":
		out = h.tick(a)
	case "advance-time":
		h.now += a.duration()
		out = "now +" + ms(h.now-t0)
	case "thresholds":
		out = h.thresholds(a)
	case "recheck":
		h.s.RecheckAll()
		out = "ok"
	case "remove":
		r := h.req(a, a.pos(0))
		if r.Index < 0 {
			out = r.ID + " is not queued: left alone"
		} else {
			out = r.ID + " removed from " + h.s.Policy().Classes[r.Class].Name
		}
		h.s.Remove(r)
	case "pause":
		h.s.Pause()
		out = "paused"
	case "resume":
		h.s.Resume(h.now)
		out = "resumed"
	case "stats":
		out = h.stats(a)
	case "print":
		var sections []string
		for i, arg := range td.CmdArgs {
			a.mark(i)
			sections = append(sections, arg.Key)
		}
		if out = h.s.Describe(h.now, sections...); out == "" {
			out = "(nothing to print)"
		}
	default:
		td.Fatalf(t, "unknown command %q", td.Cmd)
	}
	a.done()
	return strings.TrimRight(out, "\n") + "\n"
}

// policy builds the scheduler from the YAML in the input block or a file
// (file=configs/...), with grace, no-workers-timeout, max-workers, max-keys,
// settle-window, max-unsettled and seed; a later policy command is a live
// swap (SetPolicy), after which every dispatch in flight is reclassed, as
// the actor does.
func (h *scenario) policy(a *args) string {
	yaml := a.td.Input
	name := "scenario.yaml"
	if f, ok := a.str("file"); ok {
		data, err := os.ReadFile(filepath.Join("..", f))
		if err != nil {
			a.td.Fatalf(a.t, "%v", err)
		}
		yaml, name = string(data), f
	}
	pol, err := configs.Parse(name, []byte(yaml))
	if err != nil && h.s == nil {
		a.td.Fatalf(a.t, "%v", err)
	}
	if err != nil {
		return "invalid policy: " + err.Error()
	}
	if h.s != nil {
		old := h.s.Policy()
		ch := h.s.SetPolicy(h.now, pol)
		ids := slices.Sorted(maps.Keys(h.inFlight))
		var moved []string
		for _, id := range ids {
			r := h.inFlight[id].Req
			was := old.Classes[r.Class].Name
			h.s.Reclass(r, ch)
			if now := pol.Classes[r.Class].Name; now != was {
				moved = append(moved, fmt.Sprintf("in flight %s: %s -> %s", id, was, now))
			}
		}
		var b strings.Builder
		for i, k := range ch.To {
			if k >= 0 {
				fmt.Fprintf(&b, "kept %s (%d -> %d)\n", pol.Classes[k].Name, i, k)
			}
		}
		fmt.Fprintf(&b, "added [%s], removed [%s], moved %d, reordered %d", strings.Join(ch.Added, " "), strings.Join(ch.Removed, " "), ch.Moved, ch.Reordered)
		for _, m := range moved {
			b.WriteString("\n" + m)
		}
		return b.String()
	}
	seed := a.uint("seed", 7)
	cfg := Config{
		Policy: pol, Scoring: filters.DefaultScoring(), Rand: rand.New(rand.NewPCG(seed, seed)),
		Grace: a.dur("grace", 0), NoWorkersTimeout: a.dur("no-workers-timeout", 0),
		MaxWorkers: int(a.uint("max-workers", 0)), MaxKeysPerClass: int(a.uint("max-keys", 0)),
		SettleWindow: a.dur("settle-window", 0), MaxUnsettled: int(a.uint("max-unsettled", 0)),
	}
	h.s = New(cfg, h.now)
	h.reqs, h.inFlight, h.last = map[string]*request.Snapshot{}, map[string]Decision{}, map[string]Decision{}
	names := make([]string, len(pol.Classes))
	for i, c := range pol.Classes {
		names[i] = c.Name
	}
	return "classes " + strings.Join(names, ", ")
}

// report applies a load report: report <worker> [ranks=N] [start=S]
// [prefill=N|(per rank)] [requests=..] [decode=..] [kv=..] [ttl=3000ms]
// [seen=N] [max_active=N] [batched=N] [total_kv=N] [taints=(..)] [draining]
// [instance=..]. Without seen the report counts every booking.
func (h *scenario) report(a *args) string {
	id := a.pos(0)
	n := a.uint("ranks", 1)
	start := a.uint("start", 0)
	rep := workers.Report{
		WorkerID: id, DPStart: uint32(start), DPSize: uint32(n), TTLms: uint64(a.dur("ttl", 3e9) / 1e6),
		Instance: a.strOr("instance", "i-"+id), MaxActive: a.uint("max_active", 0), MaxBatched: a.uint("batched", 0),
		TotalKV: a.uint("total_kv", 0), Draining: a.flag("draining"), Taints: a.list("taints"),
	}
	if _, ok := a.str("seen"); ok {
		rep.SeenSeq, rep.HasSeenSeq = a.uint("seen", 0), true
	}
	prefill, requests, decode, kv := a.perRank("prefill", n), a.perRank("requests", n), a.perRank("decode", n), a.perRank("kv", n)
	for i := range n {
		rep.Ranks = append(rep.Ranks, workers.RankLoad{Rank: uint32(start + i), ActivePrefillTokens: prefill[i],
			ActiveRequests: requests[i], ActiveDecodeBlocks: decode[i], KVUsedBlocks: kv[i]})
	}
	ch, ok := h.s.ApplyReport(h.now, rep)
	switch {
	case !ok:
		return id + ": refused, the registry is full"
	case ch.Rival:
		return fmt.Sprintf("%s: dropped, instance %s holds the id (conflict %v)", id, ch.Owner, ch.Conflict)
	}
	var parts []string
	if ch.New {
		parts = append(parts, "new worker")
	}
	if ch.Dropped > 0 {
		parts = append(parts, fmt.Sprintf("bookings released: %d", ch.Dropped))
	}
	if ch.Conflict {
		parts = append(parts, "two instances live")
	}
	if parts == nil {
		parts = append(parts, "ok")
	}
	return id + ": " + strings.Join(parts, ", ")
}

// arrive admits requests: arrive <token> [isl=N] [cached=N] [key=K]
// [pin=w1|w1/0] [strict=N] [jump=S] [deadline=500ms] [age=1s]
// [allow=(..)] [require=(..)] [prefer=(gpu:1.5,..)] [overlap=(w1:300,..)]
// [id=..] [n=N]. Requests are named r1, r2, ... in arrival order unless id
// is given. Each is published at now (minus age); equal scores keep arrival
// order (by seq).
func (h *scenario) arrive(a *args) string {
	token := a.pos(0)
	count := int(a.uint("n", 1))
	id, named := a.str("id")
	if named && count > 1 {
		a.td.Fatalf(a.t, "id names one request")
	}
	base := request.Arrival{
		Token: token, ISL: a.uint("isl", 1), Cached: a.uint("cached", 0), Key: a.strOr("key", ""),
		Strict: uint32(a.uint("strict", 0)), Jump: a.float("jump", 0),
		Allowed: a.list("allow"), Required: a.list("require"),
	}
	if p, ok := a.str("pin"); ok {
		base.Pin = pinTarget(a, p)
	}
	if d, ok := a.str("deadline"); ok {
		base.HasDeadline, base.DeadlineMs = true, uint64(parseDur(a, d)/1e6)
	}
	for _, p := range a.list("prefer") {
		name, w, _ := strings.Cut(p, ":")
		base.Preferred = append(base.Preferred, request.Taint{Name: name, Weight: parseFloat(a, w)})
	}
	for _, o := range a.list("overlap") {
		w, n, _ := strings.Cut(o, ":")
		base.Overlap = append(base.Overlap, request.Overlap{Worker: w, Tokens: parseUint(a, n)})
	}
	age := a.dur("age", 0)
	var lines []string
	for range count {
		h.n++
		arr := base
		arr.ID = id
		if !named {
			arr.ID = "r" + strconv.Itoa(h.n)
		}
		if _, dup := h.reqs[arr.ID]; dup {
			a.td.Fatalf(a.t, "request %s arrived before", arr.ID)
		}
		arr.Ref = uint64(h.n)
		arr.Published = h.now - age
		d := h.s.Arrive(h.now, &arr)
		h.reqs[arr.ID] = d.Req
		lines = append(lines, h.decision(d))
	}
	return compress(lines)
}

// next calls Next n times (n=1 unless given): each decision, and the
// arbiter's state after it.
func (h *scenario) next(a *args) string {
	var b strings.Builder
	for range int(a.uint("n", 1)) {
		d := h.s.Next(h.now)
		b.WriteString(h.decision(d))
		b.WriteString("\n  ")
		b.WriteString(h.deficits())
		b.WriteString("\n")
	}
	return b.String()
}

// dispatch calls Next until it returns nothing (or max=N decisions) and
// lists the decisions; with summary, only how many went to each class and
// key, and the classes of the first show dispatches (20 unless given).
func (h *scenario) dispatch(a *args) string {
	limit := int(a.uint("max", 100000))
	summary := a.flag("summary")
	show := int(a.uint("show", 20))
	var lines, order []string
	perClass, perKey := map[string]int{}, map[string]int{}
	n := 0
	for ; n < limit; n++ {
		d := h.s.Next(h.now)
		if d.Kind == None {
			break
		}
		lines = append(lines, h.decision(d))
		name := h.s.Policy().Classes[d.Req.Class].Name
		if d.Kind == Dispatch {
			perClass[name]++
			perKey[name+"/"+d.Req.Key]++
			order = append(order, name)
		}
	}
	if n == limit && limit == 100000 {
		a.td.Fatalf(a.t, "dispatch did not end")
	}
	if !summary {
		if n < limit {
			lines = append(lines, "none")
		}
		return strings.Join(lines, "\n")
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d decisions, %d dispatches\n", n, len(order))
	for _, c := range slices.Sorted(maps.Keys(perClass)) {
		fmt.Fprintf(&b, "class %s: %d\n", c, perClass[c])
	}
	if len(perKey) > len(perClass) {
		for _, k := range slices.Sorted(maps.Keys(perKey)) {
			fmt.Fprintf(&b, "key %s: %d\n", k, perKey[k])
		}
	}
	fmt.Fprintf(&b, "first %d: %s\n", min(show, len(order)), runs(order[:min(show, len(order))]))
	b.WriteString(h.deficits())
	return b.String()
}

// answer carries out the answer to a dispatch in flight: answer <id>
// accept|refuse|timeout|unsent|unsendable|handback. refuse and timeout hand
// the request back to its lane (Return); unsent does so without blaming the
// worker (Unsent, requeued); unsendable drops it (Unsent, not requeued: the
// caller dead-letters it); handback records a refusal and lets the request
// leave (Refused: the dispatcher no longer leads).
func (h *scenario) answer(a *args) string {
	id := a.pos(0)
	d, ok := h.inFlight[id]
	if !ok {
		a.td.Fatalf(a.t, "%s is not in flight", id)
	}
	delete(h.inFlight, id)
	how := a.pos(1)
	switch how {
	case "accept":
		h.s.Accepted(d.Worker)
	case "refuse", "timeout":
		h.s.Return(h.now, d.Req, d.Worker, d.Seq)
	case "unsent":
		h.s.Unsent(d.Req, d.Worker, d.Seq, true)
	case "unsendable":
		h.s.Unsent(d.Req, d.Worker, d.Seq, false)
	case "handback":
		h.s.Refused(h.now, d.Worker, d.Seq)
	default:
		a.td.Fatalf(a.t, "unknown answer %q", how)
	}
	out := fmt.Sprintf("%s %s by %s", id, how, d.Worker)
	if d.Req.Index >= 0 {
		out += fmt.Sprintf("; back in %s", h.s.Policy().Classes[d.Req.Class].Name)
	}
	if w := h.s.Workers().Get(d.Worker); w != nil {
		switch {
		case w.Excluded && w.ExcludedUntil == 1<<63-1:
			out += fmt.Sprintf("; %s excluded until its probe is answered", w.ID)
		case w.Excluded:
			out += fmt.Sprintf("; %s excluded for %s (refused %d in a row)", w.ID, ms(w.ExcludedUntil-h.now), w.Refusals())
		}
	}
	return out
}

// settle applies a completion record: settle <id> [prefill=N] [output=N]
// settles the request's last dispatch; settle <worker> seq=N [id=..] names
// the dispatch (a forged or stray record).
func (h *scenario) settle(a *args) string {
	first := a.pos(0)
	c := Completion{PrefillTokens: a.uint("prefill", 0), OutputTokens: a.uint("output", 0)}
	worker := first
	if d, ok := h.last[first]; ok {
		worker, c.Seq, c.RequestID = d.Worker, d.Seq, first
	}
	if _, ok := a.str("seq"); ok {
		c.Seq = a.uint("seq", 0)
	}
	c.RequestID = a.strOr("id", c.RequestID)
	res := h.s.Settle(worker, c)
	if res.Outcome != Settled {
		return res.Outcome.String()
	}
	class := "a removed class"
	if res.Class >= 0 {
		class = h.s.Policy().Classes[res.Class].Name
	}
	return fmt.Sprintf("settled: correction %+d to %s, key %s", res.Correction, class, res.Key)
}

// serve runs a worker that completes its requests one at a time, oldest
// first: serve <worker> completions=N [show=M]. Every dispatch to it in
// flight is accepted and runs; each completion is followed by a report
// (seen_seq its last dispatch, prefill the cost of what still runs, one
// active request per running one, ttl 1h) and Next until nothing is
// dispatchable, whose dispatches to the worker start running in turn. It
// prints how many completions each class had, the classes of the first show
// completions (20 unless given), and the arbiter's state.
func (h *scenario) serve(a *args) string {
	id := a.pos(0)
	n := int(a.uint("completions", 1))
	show := int(a.uint("show", 20))
	var running []Decision
	start := func() {
		for _, rid := range slices.Sorted(maps.Keys(h.inFlight)) {
			d := h.inFlight[rid]
			if d.Worker != id {
				continue
			}
			delete(h.inFlight, rid)
			h.s.Accepted(id)
			running = append(running, d)
		}
		slices.SortFunc(running, func(x, y Decision) int { return cmp.Compare(x.Seq, y.Seq) })
	}
	start()
	var order []string
	done := map[string]int{}
	for len(order) < n {
		if len(running) == 0 {
			a.td.Fatalf(a.t, "%s runs nothing after %d completions", id, len(order))
		}
		fin := running[0]
		running = running[1:]
		name := h.s.Policy().Classes[fin.Req.Class].Name
		order = append(order, name)
		done[name]++
		var seen, prefill uint64
		for _, d := range h.last {
			if d.Worker == id {
				seen = max(seen, d.Seq)
			}
		}
		for _, d := range running {
			prefill += d.Req.Cost
		}
		h.s.Report(h.now, workers.Report{WorkerID: id, DPSize: 1, TTLms: 3600000, Instance: "i-" + id, SeenSeq: seen, HasSeenSeq: true,
			Ranks: []workers.RankLoad{{ActivePrefillTokens: prefill, ActiveRequests: uint64(len(running))}}})
		for d := h.s.Next(h.now); d.Kind != None; d = h.s.Next(h.now) {
			if line := h.decision(d); d.Kind != Dispatch || d.Worker != id {
				a.td.Fatalf(a.t, "serve: %s", line)
			}
		}
		start()
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d completions:", n)
	for _, c := range slices.Sorted(maps.Keys(done)) {
		fmt.Fprintf(&b, " %s %d", c, done[c])
	}
	fmt.Fprintf(&b, "\nfirst %d: %s\n", min(show, n), runs(order[:min(show, n)]))
	b.WriteString(h.deficits())
	return b.String()
}

// tick advances the clock (tick +30ms) and ticks: workers whose TTL ran out,
// and the rejections Tick returns.
func (h *scenario) tick(a *args) string {
	if len(a.td.CmdArgs) > 0 {
		h.now += a.duration()
	}
	before := workerIDs(h.s.Workers())
	decs := h.s.Tick(h.now, nil)
	var lines []string
	for _, id := range before {
		if h.s.Workers().Get(id) == nil {
			lines = append(lines, id+" expired")
		}
	}
	// The requests failed at the no-workers timeout come in no particular
	// order within a class (Scheduler.Tick): sort them by class and seq.
	slices.SortStableFunc(decs, func(x, y Decision) int {
		if x.Err.Code != request.NoEndpoints || y.Err.Code != request.NoEndpoints {
			return 0
		}
		return cmp.Or(cmp.Compare(x.Req.Class, y.Req.Class), cmp.Compare(x.Req.Seq, y.Req.Seq))
	})
	for _, d := range decs {
		lines = append(lines, h.decision(d))
	}
	if lines == nil {
		return "nothing"
	}
	return compress(lines)
}

// thresholds sets the busy thresholds: thresholds [prefill=N]
// [prefill_frac=F] [decode_blocks=F]; none clears them.
func (h *scenario) thresholds(a *args) string {
	var t filters.Thresholds
	if _, ok := a.str("prefill"); ok {
		v := a.uint("prefill", 0)
		t.PrefillTokens = &v
	}
	if _, ok := a.str("prefill_frac"); ok {
		v := a.float("prefill_frac", 0)
		t.PrefillFrac = &v
	}
	if _, ok := a.str("decode_blocks"); ok {
		v := a.float("decode_blocks", 0)
		t.DecodeBlocks = &v
	}
	h.s.SetThresholds(t)
	for _, line := range strings.Split(h.s.Describe(h.now, "time"), "\n") {
		if strings.HasPrefix(line, "thresholds: ") {
			return line
		}
	}
	return "thresholds: none"
}

// stats prints what Stats gives the metrics and /debug/queues.
func (h *scenario) stats(_ *args) string {
	var b strings.Builder
	for _, c := range h.s.Stats(nil) {
		fmt.Fprintf(&b, "%s: pending %d, isl %d, cached %d, deficit %d, keys %d, pinned lanes %d, blocked %d, free ranks %d\n",
			c.Name, c.Pending, c.ISLTokens, c.CachedTokens, c.Deficit, c.Keys, c.PinnedLanes, c.BlockedLanes, c.FreeRanks)
		for _, k := range c.TopKeys {
			fmt.Fprintf(&b, "  top key %s: queued %d, weight %s, lead %s\n", k.Key, k.Queued, num(k.Weight), num(k.Lead))
		}
	}
	return b.String()
}

// decision describes d in one line, and tracks what is in flight.
func (h *scenario) decision(d Decision) string {
	switch d.Kind {
	case None:
		return "none"
	case Queued:
		return fmt.Sprintf("%s: queued in %s (key %s, cost %d)", d.Req.ID, h.s.Policy().Classes[d.Req.Class].Name, d.Req.Key, d.Req.Cost)
	case Dispatch:
		h.inFlight[d.Req.ID], h.last[d.Req.ID] = d, d
		return fmt.Sprintf("%s: dispatch to %s/%d seq %d (%s, key %s, cost %d)", d.Req.ID, d.Worker, d.Rank, d.Seq,
			h.s.Policy().Classes[d.Req.Class].Name, d.Req.Key, d.Req.Cost)
	default:
		return fmt.Sprintf("%s: reject %s: %s", d.Req.ID, d.Err.Code, d.Err.Message)
	}
}

// deficits is the arbiter's state in one line.
func (h *scenario) deficits() string {
	parts := make([]string, len(h.s.Policy().Classes))
	for k, c := range h.s.Policy().Classes {
		parts[k] = fmt.Sprintf("%s %d", c.Name, h.s.arb.Deficit(k))
	}
	return "deficits " + strings.Join(parts, ", ") + "; " + strings.TrimSpace(h.s.Describe(h.now, "drr"))
}

func (h *scenario) req(a *args, id string) *request.Snapshot {
	r := h.reqs[id]
	if r == nil {
		a.td.Fatalf(a.t, "no request %s", id)
	}
	return r
}

func workerIDs(reg *workers.Registry) []string {
	var ids []string
	for _, w := range reg.All() {
		ids = append(ids, w.ID)
	}
	return ids
}

// compress folds consecutive lines that differ only in the request id
// (r5: queued ..., r6: queued ...) into one (r5..r6: queued ...; or
// r5, r9: ... when the ids do not follow each other).
func compress(lines []string) string {
	var out []string
	for i := 0; i < len(lines); {
		_, rest, ok := strings.Cut(lines[i], ": ")
		if !ok {
			out = append(out, lines[i])
			i++
			continue
		}
		var ids []string
		j := i
		for ; j < len(lines); j++ {
			id, r, _ := strings.Cut(lines[j], ": ")
			if r != rest {
				break
			}
			ids = append(ids, id)
		}
		out = append(out, idRange(ids)+": "+rest)
		i = j
	}
	return strings.Join(out, "\n")
}

// idRange writes r1..r4 for r1 r2 r3 r4, and lists ids that do not follow
// each other.
func idRange(ids []string) string {
	num := func(id string) (int, bool) {
		n, err := strconv.Atoi(strings.TrimPrefix(id, "r"))
		return n, err == nil && strings.HasPrefix(id, "r")
	}
	first, ok := num(ids[0])
	for i, id := range ids {
		if n, isNum := num(id); !ok || !isNum || n != first+i {
			return strings.Join(ids, ", ")
		}
	}
	if len(ids) == 1 {
		return ids[0]
	}
	return ids[0] + ".." + ids[len(ids)-1]
}

// runs writes a sequence run-length encoded: a a a b -> "a x3, b".
func runs(seq []string) string {
	var parts []string
	for i := 0; i < len(seq); {
		j := i
		for j < len(seq) && seq[j] == seq[i] {
			j++
		}
		if j-i > 1 {
			parts = append(parts, fmt.Sprintf("%s x%d", seq[i], j-i))
		} else {
			parts = append(parts, seq[i])
		}
		i = j
	}
	return strings.Join(parts, ", ")
}

// args reads a command's arguments: positional ones (a key without a value)
// in order, and key=value ones by name. done fails the test on an argument
// no reader asked for, so that a misspelt one is never silently ignored.
type args struct {
	t    *testing.T
	td   *datadriven.TestData
	used map[int]bool
}

func (a *args) mark(i int) {
	if a.used == nil {
		a.used = map[int]bool{}
	}
	a.used[i] = true
}

func (a *args) done() {
	for i, arg := range a.td.CmdArgs {
		if !a.used[i] {
			a.td.Fatalf(a.t, "unknown argument %q of %s", arg.Key, a.td.Cmd)
		}
	}
}

// pos returns the i-th positional argument.
func (a *args) pos(i int) string {
	n := 0
	for j, arg := range a.td.CmdArgs {
		if len(arg.Vals) == 0 && !slices.Contains(flags, arg.Key) {
			if n == i {
				a.mark(j)
				return arg.Key
			}
			n++
		}
	}
	a.td.Fatalf(a.t, "%s needs %d positional arguments", a.td.Cmd, i+1)
	return ""
}

// flags are the valueless arguments that are not positional.
var flags = []string{"draining", "summary"}

func (a *args) flag(name string) bool {
	for j, arg := range a.td.CmdArgs {
		if arg.Key == name && len(arg.Vals) == 0 {
			a.mark(j)
			return true
		}
	}
	return false
}

func (a *args) vals(name string) ([]string, bool) {
	for j, arg := range a.td.CmdArgs {
		if arg.Key == name && len(arg.Vals) > 0 {
			a.mark(j)
			return arg.Vals, true
		}
	}
	return nil, false
}

func (a *args) str(name string) (string, bool) {
	v, ok := a.vals(name)
	if !ok {
		return "", false
	}
	if len(v) != 1 {
		a.td.Fatalf(a.t, "%s takes one value", name)
	}
	return v[0], true
}

func (a *args) strOr(name, def string) string {
	if v, ok := a.str(name); ok {
		return v
	}
	return def
}

// list returns a list argument's values, nil when absent.
func (a *args) list(name string) []string {
	v, _ := a.vals(name)
	return v
}

func (a *args) uint(name string, def uint64) uint64 {
	v, ok := a.str(name)
	if !ok {
		return def
	}
	return parseUint(a, v)
}

func (a *args) float(name string, def float64) float64 {
	v, ok := a.str(name)
	if !ok {
		return def
	}
	return parseFloat(a, v)
}

// dur reads a duration argument (1s, 500ms) in nanoseconds.
func (a *args) dur(name string, def int64) int64 {
	v, ok := a.str(name)
	if !ok {
		return def
	}
	return parseDur(a, v)
}

// duration reads the positional duration of tick and advance-time (+30ms),
// or millis=N as in CockroachDB's advance-time.
func (a *args) duration() int64 {
	if _, ok := a.str("millis"); ok {
		return int64(a.uint("millis", 0)) * 1e6
	}
	return parseDur(a, a.pos(0))
}

// perRank reads a per-rank value: one value for every rank, or one per rank.
func (a *args) perRank(name string, n uint64) []uint64 {
	out := make([]uint64, n)
	v, ok := a.vals(name)
	switch {
	case !ok:
	case len(v) == 1:
		for i := range out {
			out[i] = parseUint(a, v[0])
		}
	case uint64(len(v)) == n:
		for i := range out {
			out[i] = parseUint(a, v[i])
		}
	default:
		a.td.Fatalf(a.t, "%s: %d values for %d ranks", name, len(v), n)
	}
	return out
}

func pinTarget(a *args, p string) request.Target {
	w, rank, ok := strings.Cut(p, "/")
	if !ok || rank == "any" {
		return request.Target{Worker: w, Rank: request.AnyRank}
	}
	return request.Target{Worker: w, Rank: int32(parseUint(a, rank))}
}

func parseUint(a *args, s string) uint64 {
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		a.td.Fatalf(a.t, "%v", err)
	}
	return v
}

func parseFloat(a *args, s string) float64 {
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		a.td.Fatalf(a.t, "%v", err)
	}
	return v
}

func parseDur(a *args, s string) int64 {
	d, err := time.ParseDuration(strings.TrimPrefix(s, "+"))
	if err != nil {
		a.td.Fatalf(a.t, "%v", err)
	}
	return int64(d)
}

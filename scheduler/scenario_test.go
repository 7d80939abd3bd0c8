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
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"fairdispatch/configs"
	"fairdispatch/filters"
	"fairdispatch/internal/scenario"
	"fairdispatch/request"
	"fairdispatch/workers"
)

func TestScenarios(t *testing.T) { scenario.Run(t, "testdata", newStory) }

// newStory returns the command handler of a new file.
func newStory() scenario.Handler { return (&story{now: t0}).run }

// story is the state of one scenario file: the scheduler, the virtual clock
// and the requests it has named.
type story struct {
	s    *Scheduler
	now  int64
	n    int                          // arrivals so far, for default ids
	reqs map[string]*request.Snapshot // by id, every request that arrived
	// inFlight holds the dispatches not yet answered, by request id; last
	// the last dispatch of each request, for settle.
	inFlight map[string]Decision
	last     map[string]Decision
}

func (h *story) run(t *testing.T, td *scenario.TestData) string {
	t.Helper()
	out := scenario.Do(t, td, h.s != nil, "policy", h.commands(), "draining", "summary", "preempt", "again", "cancelled")
	return strings.TrimRight(out, "\n") + "\n"
}

// commands are the commands of testdata/README.md.
func (h *story) commands() map[string]func(*scenario.Args) string {
	return map[string]func(*scenario.Args) string{
		"policy": h.policy, "report": h.report, "arrive": h.arrive, "next": h.next, "dispatch": h.dispatch,
		"answer": h.answer, "settle": h.settle, "complete": h.settle, "serve": h.serve, "tick": h.tick,
		"advance-time": h.advance, "thresholds": h.thresholds, "recheck": h.recheck, "remove": h.remove,
		"pause": h.pause, "resume": h.resume, "stats": h.stats, "print": h.print, "preempt": h.preempt,
	}
}

func (h *story) advance(a *scenario.Args) string {
	h.now += int64(a.Duration())
	return "now +" + ms(h.now-t0)
}

func (h *story) recheck(*scenario.Args) string {
	h.s.RecheckAll()
	return "ok"
}

func (h *story) remove(a *scenario.Args) string {
	r := h.req(a, a.Pos(0))
	out := r.ID + " removed from " + h.s.Policy().Classes[r.Class].Name
	if r.Index < 0 {
		out = r.ID + " is not queued: left alone"
	}
	h.s.Remove(r)
	return out
}

func (h *story) pause(*scenario.Args) string {
	h.s.Pause()
	return "paused"
}

func (h *story) resume(*scenario.Args) string {
	h.s.Resume(h.now)
	return "resumed"
}

func (h *story) print(a *scenario.Args) string {
	if out := h.s.Describe(h.now, a.Keys()...); out != "" {
		return out
	}
	return "(nothing to print)"
}

// policy builds the scheduler from the YAML in the input block or a file
// (file=configs/...), with grace, no-workers-timeout, max-workers, max-keys,
// settle-window, max-unsettled and seed; a later policy command is a live
// swap (SetPolicy), after which every dispatch in flight is reclassed, as
// the actor does.
func (h *story) policy(a *scenario.Args) string {
	yaml := a.TD.Input
	name := "scenario.yaml"
	if f, ok := a.Str("file"); ok {
		data, err := os.ReadFile("../" + f) // f is relative to the module root
		if err != nil {
			a.Fatalf("%v", err)
		}
		yaml, name = string(data), f
	}
	pol, err := configs.Parse(name, []byte(yaml))
	if err != nil && h.s == nil {
		a.Fatalf("%v", err)
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
	seed := a.Uint("seed", 7)
	cfg := Config{
		Policy: pol, Scoring: filters.DefaultScoring(), Rand: rand.New(rand.NewPCG(seed, seed)),
		Grace: int64(a.Dur("grace", 0)), NoWorkersTimeout: int64(a.Dur("no-workers-timeout", 0)),
		MaxWorkers: int(a.Uint("max-workers", 0)), MaxKeysPerClass: int(a.Uint("max-keys", 0)),
		SettleWindow: int64(a.Dur("settle-window", 0)), MaxUnsettled: int(a.Uint("max-unsettled", 0)),
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
func (h *story) report(a *scenario.Args) string {
	id := a.Pos(0)
	n := a.Uint("ranks", 1)
	start := a.Uint("start", 0)
	rep := workers.Report{
		WorkerID: id, DPStart: uint32(start), DPSize: uint32(n), TTLms: uint64(a.Dur("ttl", 3*time.Second).Milliseconds()),
		Instance: a.StrOr("instance", "i-"+id), MaxActive: a.Uint("max_active", 0), MaxBatched: a.Uint("batched", 0),
		TotalKV: a.Uint("total_kv", 0), Draining: a.Flag("draining"), Taints: a.List("taints"),
		Preempt: a.Flag("preempt"),
	}
	if _, ok := a.Str("seen"); ok {
		rep.SeenSeq, rep.HasSeenSeq = a.Uint("seen", 0), true
	}
	prefill, requests, decode, kv := perRank(a, "prefill", n), perRank(a, "requests", n), perRank(a, "decode", n), perRank(a, "kv", n)
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
func (h *story) arrive(a *scenario.Args) string {
	token := a.Pos(0)
	count := int(a.Uint("n", 1))
	id, named := a.Str("id")
	again := a.Flag("again")
	if named && count > 1 {
		a.Fatalf("id names one request")
	}
	base := request.Arrival{
		Token: token, ISL: a.Uint("isl", 1), Cached: a.Uint("cached", 0), Key: a.StrOr("key", ""),
		Strict: uint32(a.Uint("strict", 0)), Jump: a.Float("jump", 0),
		Allowed: a.List("allow"), Required: a.List("require"),
	}
	if p, ok := a.Str("pin"); ok {
		base.Pin = pinTarget(a, p)
	}
	if d, ok := a.Str("deadline"); ok {
		base.HasDeadline, base.DeadlineMs = true, uint64(a.ParseDur(d).Milliseconds())
	}
	for _, p := range a.List("prefer") {
		name, w, _ := strings.Cut(p, ":")
		base.Preferred = append(base.Preferred, request.Taint{Name: name, Weight: a.ParseFloat(w)})
	}
	for _, o := range a.List("overlap") {
		w, n, _ := strings.Cut(o, ":")
		base.Overlap = append(base.Overlap, request.Overlap{Worker: w, Tokens: a.ParseUint(n)})
	}
	age := int64(a.Dur("age", 0))
	var lines []string
	for range count {
		h.n++
		arr := base
		arr.ID = id
		if !named {
			arr.ID = "r" + strconv.Itoa(h.n)
		}
		if _, dup := h.reqs[arr.ID]; dup && !again {
			a.Fatalf("request %s arrived before", arr.ID)
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
func (h *story) next(a *scenario.Args) string {
	var b strings.Builder
	for range int(a.Uint("n", 1)) {
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
func (h *story) dispatch(a *scenario.Args) string {
	limit := int(a.Uint("max", 100000))
	summary := a.Flag("summary")
	show := int(a.Uint("show", 20))
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
		a.Fatalf("dispatch did not end")
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
func (h *story) answer(a *scenario.Args) string {
	id := a.Pos(0)
	d, ok := h.inFlight[id]
	if !ok {
		a.Fatalf("%s is not in flight", id)
	}
	delete(h.inFlight, id)
	how := a.Pos(1)
	switch how {
	case "accept":
		h.s.Accepted(d.Worker)
		h.s.Started(h.now, d.Req, d.Worker, d.Rank, d.Seq)
	case "refuse", "timeout":
		h.s.Return(h.now, d.Req, d.Worker, d.Seq)
	case "unsent":
		h.s.Unsent(d.Req, d.Worker, d.Seq, true)
	case "unsendable":
		h.s.Unsent(d.Req, d.Worker, d.Seq, false)
	case "handback":
		h.s.Refused(h.now, d.Worker, d.Seq)
	default:
		a.Fatalf("unknown answer %q", how)
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
func (h *story) settle(a *scenario.Args) string {
	first := a.Pos(0)
	c := Completion{PrefillTokens: a.Uint("prefill", 0), OutputTokens: a.Uint("output", 0), Cancelled: a.Flag("cancelled")}
	worker := first
	if d, ok := h.last[first]; ok {
		worker, c.Seq, c.RequestID = d.Worker, d.Seq, first
	}
	if _, ok := a.Str("seq"); ok {
		c.Seq = a.Uint("seq", 0)
	}
	c.RequestID = a.StrOr("id", c.RequestID)
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
func (h *story) serve(a *scenario.Args) string {
	id := a.Pos(0)
	n := int(a.Uint("completions", 1))
	show := int(a.Uint("show", 20))
	var running []Decision
	start := func() {
		for _, rid := range slices.Sorted(maps.Keys(h.inFlight)) {
			d := h.inFlight[rid]
			if d.Worker != id {
				continue
			}
			delete(h.inFlight, rid)
			h.s.Accepted(id)
			h.s.Started(h.now, d.Req, id, d.Rank, d.Seq)
			running = append(running, d)
		}
		slices.SortFunc(running, func(x, y Decision) int { return cmp.Compare(x.Seq, y.Seq) })
	}
	start()
	var order []string
	done := map[string]int{}
	for len(order) < n {
		if len(running) == 0 {
			a.Fatalf("%s runs nothing after %d completions", id, len(order))
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
				a.Fatalf("serve: %s", line)
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

// preempt calls Preempt: each preemption asked, and whether sheddable
// classes hold back.
func (h *story) preempt(*scenario.Args) string {
	var lines []string
	for _, p := range h.s.Preempt(h.now, nil) {
		lines = append(lines, fmt.Sprintf("ask %s to preempt %s seq %d (%s) for %s, waited %s", p.Worker, p.RequestID, p.Seq,
			h.s.Policy().Classes[p.Class].Name, h.s.Policy().Classes[p.For].Name, ms(p.Waited)))
	}
	if len(lines) == 0 {
		lines = append(lines, "no preemption")
	}
	if h.s.pre.yield {
		lines = append(lines, "sheddable classes hold back")
	}
	return strings.Join(lines, "\n")
}

// tick advances the clock (tick +30ms) and ticks: workers whose TTL ran out,
// and the rejections Tick returns.
func (h *story) tick(a *scenario.Args) string {
	if len(a.TD.CmdArgs) > 0 {
		h.now += int64(a.Duration())
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
func (h *story) thresholds(a *scenario.Args) string {
	var t filters.Thresholds
	if _, ok := a.Str("prefill"); ok {
		v := a.Uint("prefill", 0)
		t.PrefillTokens = &v
	}
	if _, ok := a.Str("prefill_frac"); ok {
		v := a.Float("prefill_frac", 0)
		t.PrefillFrac = &v
	}
	if _, ok := a.Str("decode_blocks"); ok {
		v := a.Float("decode_blocks", 0)
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
func (h *story) stats(_ *scenario.Args) string {
	var b strings.Builder
	for _, c := range h.s.Stats(nil) {
		fmt.Fprintf(&b, "%s: pending %d, isl %d, cached %d, deficit %d, keys %d, pinned lanes %d, blocked %d, free ranks %d\n",
			c.Name, c.Pending, c.ISLTokens, c.CachedTokens, c.Deficit, c.Keys, c.PinnedLanes, c.BlockedLanes, c.FreeRanks)
		if c.ThrottledKeys != nil {
			fmt.Fprintf(&b, "  budgets: %d keys throttled, %s charged\n", *c.ThrottledKeys, num(*c.BudgetCharged))
		}
		if c.DrainRate != nil {
			fmt.Fprintf(&b, "  drain rate %s per second\n", num(math.Round(*c.DrainRate)))
		}
		if c.Preempted != nil {
			fmt.Fprintf(&b, "  preempted %d\n", *c.Preempted)
		}
		for _, k := range c.TopKeys {
			fmt.Fprintf(&b, "  top key %s: queued %d, weight %s, lead %s\n", k.Key, k.Queued, num(k.Weight), num(k.Lead))
			if bu := k.Budget; bu != nil {
				fmt.Fprintf(&b, "    budget %s/s, burst %d, level %s, throttled %v\n", num(bu.TokensPerSecond), bu.Burst, num(math.Round(bu.Level)), bu.Throttled)
			}
		}
	}
	return b.String()
}

// decision describes d in one line, and tracks what is in flight.
func (h *story) decision(d Decision) string {
	switch d.Kind {
	case None:
		return "none"
	case Queued:
		out := fmt.Sprintf("%s: queued in %s (key %s, cost %d)", d.Req.ID, h.s.Policy().Classes[d.Req.Class].Name, d.Req.Key, d.Req.Cost)
		if d.Projected >= 0 && h.s.shed[d.Req.Class] != nil {
			out += fmt.Sprintf(", projected wait %s", time.Duration(d.Projected).Round(time.Millisecond))
		}
		return out
	case Dispatch:
		h.inFlight[d.Req.ID], h.last[d.Req.ID] = d, d
		out := fmt.Sprintf("%s: dispatch to %s/%d seq %d (%s, key %s, cost %d)", d.Req.ID, d.Worker, d.Rank, d.Seq,
			h.s.Policy().Classes[d.Req.Class].Name, d.Req.Key, d.Req.Cost)
		if d.Prefill != d.Req.Cost {
			out += fmt.Sprintf(", books %d prefill tokens", d.Prefill)
		}
		return out
	default:
		return fmt.Sprintf("%s: reject %s: %s", d.Req.ID, d.Err.Code, d.Err.Message)
	}
}

// deficits is the arbiter's state in one line.
func (h *story) deficits() string {
	parts := make([]string, len(h.s.Policy().Classes))
	for k, c := range h.s.Policy().Classes {
		parts[k] = fmt.Sprintf("%s %d", c.Name, h.s.arb.Deficit(k))
	}
	return "deficits " + strings.Join(parts, ", ") + "; " + strings.TrimSpace(h.s.Describe(h.now, "drr"))
}

func (h *story) req(a *scenario.Args, id string) *request.Snapshot {
	r := h.reqs[id]
	if r == nil {
		a.Fatalf("no request %s", id)
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

// perRank reads a per-rank value: one value for every rank, or one per rank.
func perRank(a *scenario.Args, name string, n uint64) []uint64 {
	out := make([]uint64, n)
	switch v := a.List(name); {
	case v == nil:
	case len(v) == 1:
		for i := range out {
			out[i] = a.ParseUint(v[0])
		}
	case uint64(len(v)) == n:
		for i := range out {
			out[i] = a.ParseUint(v[i])
		}
	default:
		a.Fatalf("%s: %d values for %d ranks", name, len(v), n)
	}
	return out
}

func pinTarget(a *scenario.Args, p string) request.Target {
	w, rank, ok := strings.Cut(p, "/")
	if !ok || rank == "any" {
		return request.Target{Worker: w, Rank: request.AnyRank}
	}
	return request.Target{Worker: w, Rank: int32(a.ParseUint(rank))}
}

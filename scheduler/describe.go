package scheduler

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"fairdispatch/request"
	"fairdispatch/workers"
)

// Describe returns a deterministic text dump of the scheduler's state at now,
// for the scenario files (docs/design.md, Scenario files) and for debugging:
// the start-up grace or fleet outage, the thresholds, the arbiter's cursor and
// carry, every class (quantum, deficit, queue totals, gate) with its keys
// (weight, normalized service, debts) and lanes (shared and pinned, head
// first, the blocked ones marked), every live worker with its ranks' loads and
// bookings, the dispatches awaiting settlement and the queued deadlines. Times
// are relative to now; every list is sorted, so the same state always gives the
// same text. Requests are named by their id and shown as id:cost, with "*"
// for one already charged (handed back after a refusal). sections, if any,
// picks the parts: "time", "drr", "classes", "workers", "settlements",
// "deadlines". It builds a string and does nothing else; it is not meant for
// the dispatch path: O(requests log requests + workers + dispatches).
func (s *Scheduler) Describe(now int64, sections ...string) string {
	want := func(name string) bool { return len(sections) == 0 || slices.Contains(sections, name) }
	var b strings.Builder
	if want("time") {
		s.describeTime(&b, now)
	}
	if want("drr") {
		s.describeDRR(&b)
	}
	if want("classes") {
		for k := range s.classes {
			s.describeClass(&b, k)
		}
	}
	if want("workers") {
		s.describeWorkers(&b, now)
	}
	if want("settlements") {
		s.describeSettlements(&b, now)
	}
	if want("deadlines") {
		s.describeDeadlines(&b, now)
	}
	return b.String()
}

func (s *Scheduler) describeTime(b *strings.Builder, now int64) {
	live := s.reg.Len()
	switch since, out := s.Outage(now); {
	case s.InGrace(now):
		fmt.Fprintf(b, "time: start-up grace, %s left; %d live workers\n", ms(s.graceEnd-now), live)
	case out && s.outTimeout > 0:
		fmt.Fprintf(b, "time: fleet outage for %s (no-workers timeout %s)\n", ms(now-since), ms(s.outTimeout))
	case out:
		fmt.Fprintf(b, "time: fleet outage for %s (no no-workers timeout)\n", ms(now-since))
	default:
		fmt.Fprintf(b, "time: %d live workers\n", live)
	}
	t := s.Thresholds()
	var parts []string
	if t.PrefillTokens != nil {
		parts = append(parts, "prefill "+strconv.FormatUint(*t.PrefillTokens, 10))
	}
	if t.PrefillFrac != nil {
		parts = append(parts, "prefill_frac "+num(*t.PrefillFrac))
	}
	if t.DecodeBlocks != nil {
		parts = append(parts, "decode_blocks "+num(*t.DecodeBlocks))
	}
	if parts != nil {
		fmt.Fprintf(b, "thresholds: %s\n", strings.Join(parts, ", "))
	}
}

func (s *Scheduler) describeDRR(b *strings.Builder) {
	name := func(k int) string {
		if k < 0 || k >= len(s.pol.Classes) {
			return "none"
		}
		return s.pol.Classes[k].Name
	}
	fmt.Fprintf(b, "drr: cursor %s, carry %s\n", name(s.arb.Cursor()), name(s.arb.Carry()))
}

func (s *Scheduler) describeClass(b *strings.Builder, k int) {
	c, cls := s.Class(k), &s.Policy().Classes[k]
	fmt.Fprintf(b, "class %s: quantum %d, deficit %d, ", cls.Name, cls.Quantum, s.arb.Deficit(k))
	if c.Empty() {
		b.WriteString("empty")
	} else {
		isl, cached := c.Tokens()
		fmt.Fprintf(b, "queued %d (isl %d, cached %d)", c.Len(), isl, cached)
	}
	ranks := 0
	for _, w := range s.reg.All() {
		ranks += len(w.Ranks)
	}
	switch {
	case !cls.Queues():
		fmt.Fprintf(b, ", never queues (%d of %d ranks free)\n", s.gates.Free(k), ranks)
	case s.gates.Gated(k):
		fmt.Fprintf(b, ", gated (%d of %d ranks free)\n", s.gates.Free(k), ranks)
	default:
		fmt.Fprintf(b, ", open (%d of %d ranks free)\n", s.gates.Free(k), ranks)
	}
	keys := c.Inspect()
	if len(keys) == 0 {
		return
	}
	fmt.Fprintf(b, "  vtime %s\n", num(c.VirtualTime()))
	for _, ks := range keys {
		state := "idle"
		switch {
		case ks.Ready:
			state = "ready"
		case ks.Queued > 0:
			state = "set aside"
		}
		fmt.Fprintf(b, "  key %s: weight %s, service %s, queued %d, owed %d, %s\n",
			ks.Name, num(ks.Weight), num(ks.Service), ks.Queued, ks.Owed, state)
		if len(ks.Shared) > 0 {
			held := ""
			if ks.SharedHeld != "" {
				held = " (" + ks.SharedHeld + ")"
			}
			fmt.Fprintf(b, "    shared%s: %s\n", held, reqList(ks.Shared))
		}
		for _, l := range ks.Pinned {
			held := ""
			if l.Blocked {
				held = " (blocked)"
			}
			fmt.Fprintf(b, "    pinned %s%s: %s\n", target(l.Target), held, reqList(l.Requests))
		}
	}
}

func (s *Scheduler) describeWorkers(b *strings.Builder, now int64) {
	var bks []workers.Booking
	for _, w := range s.Workers().All() {
		fmt.Fprintf(b, "worker %s: ranks %d..%d, ttl %s, reported %s ago", w.ID, w.Start, int(w.Start)+len(w.Ranks)-1, ms(w.TTL), ms(now-w.LastReport))
		if w.Draining {
			b.WriteString(", draining")
		}
		if w.MaxActive > 0 {
			fmt.Fprintf(b, ", max_active %d", w.MaxActive)
		}
		if w.MaxBatched > 0 {
			fmt.Fprintf(b, ", max_batched %d", w.MaxBatched)
		}
		if w.TotalKV > 0 {
			fmt.Fprintf(b, ", total_kv %d", w.TotalKV)
		}
		if len(w.Taints) > 0 {
			fmt.Fprintf(b, ", taints %s", strings.Join(w.Taints, ","))
		}
		switch {
		case w.Excluded && w.ExcludedUntil == math.MaxInt64:
			fmt.Fprintf(b, ", excluded until its probe is answered")
		case w.Excluded:
			fmt.Fprintf(b, ", excluded for %s more", ms(w.ExcludedUntil-now))
		}
		if n := w.Refusals(); n > 0 {
			fmt.Fprintf(b, ", refused %d in a row", n)
		}
		if s.Overloaded(w) {
			b.WriteString(", overloaded")
		}
		b.WriteString("\n")
		for i := range w.Ranks {
			rk := &w.Ranks[i]
			r := rk.Reported
			fmt.Fprintf(b, "  rank %d: prefill %d", int(w.Start)+i, r.ActivePrefillTokens)
			if rk.Booked > 0 || rk.BookedRequests > 0 {
				fmt.Fprintf(b, " + %d booked", rk.Booked)
			}
			fmt.Fprintf(b, ", requests %d", r.ActiveRequests)
			if rk.BookedRequests > 0 {
				fmt.Fprintf(b, " + %d booked", rk.BookedRequests)
			}
			if r.ActiveDecodeBlocks > 0 || r.KVUsedBlocks > 0 {
				fmt.Fprintf(b, ", decode %d, kv %d", r.ActiveDecodeBlocks, r.KVUsedBlocks)
			}
			if rk.Latch {
				b.WriteString(", decode latch")
			}
			if w.Full(rk) {
				b.WriteString(", full")
			}
			b.WriteString("\n")
		}
		bks = w.AppendBookings(bks[:0])
		for i, bk := range bks {
			if i == maxListed {
				fmt.Fprintf(b, "  (%d more bookings)\n", len(bks)-maxListed)
				break
			}
			fmt.Fprintf(b, "  booking seq %d: rank %d, cost %d, %s ago\n", bk.Seq, bk.Rank, bk.Cost, ms(now-bk.At))
		}
	}
}

// maxListed bounds the requests or dispatches one line of Describe lists.
const maxListed = 10

func (s *Scheduler) describeSettlements(b *strings.Builder, now int64) {
	ids := make([]string, 0, len(s.settle.logs))
	for id := range s.settle.logs {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		l := s.settle.logs[id]
		n := 0
		for i := range l.recs.Len() {
			rec := l.recs.At(i)
			if rec.dropped {
				continue
			}
			if n++; n > maxListed {
				continue
			}
			class := "removed class"
			if rec.class >= 0 && rec.class < len(s.pol.Classes) {
				class = s.pol.Classes[rec.class].Name
			}
			state := "not arbitrated"
			switch {
			case rec.settled:
				state = "settled"
			case rec.owes:
				state = "owed"
			}
			fmt.Fprintf(b, "settlement %s seq %d: %s (%s, key %s, charged %d, %s, %s ago)\n",
				id, rec.seq, rec.id, class, rec.key, rec.charged, state, ms(now-rec.at))
		}
		if n > maxListed {
			fmt.Fprintf(b, "(%d more settlements of %s)\n", n-maxListed, id)
		}
	}
}

func (s *Scheduler) describeDeadlines(b *strings.Builder, now int64) {
	if s.NextDeadline() == 0 {
		return
	}
	rs := slices.Clone([]*request.Snapshot(s.dl))
	slices.SortFunc(rs, func(a, b *request.Snapshot) int {
		return cmp.Or(cmp.Compare(a.Deadline, b.Deadline), cmp.Compare(a.ID, b.ID))
	})
	var parts []string
	for i, r := range rs {
		if i == maxListed {
			parts = append(parts, fmt.Sprintf("(%d more)", len(rs)-maxListed))
			break
		}
		parts = append(parts, fmt.Sprintf("%s in %s", r.ID, ms(r.Deadline-now)))
	}
	fmt.Fprintf(b, "deadlines: %s (next in %s)\n", strings.Join(parts, ", "), ms(s.NextDeadline()-now))
}

// reqList names requests as id:cost, "*" marking one already charged.
func reqList(rs []*request.Snapshot) string {
	var b strings.Builder
	for i, r := range rs {
		if i == maxListed {
			fmt.Fprintf(&b, " (%d more)", len(rs)-maxListed)
			break
		}
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%s:%d", r.ID, r.Cost)
		if r.Charged {
			b.WriteByte('*')
		}
	}
	return b.String()
}

// target names a pin target worker/rank, or worker/any.
func target(t request.Target) string {
	if t.Rank == request.AnyRank {
		return t.Worker + "/any"
	}
	return t.Worker + "/" + strconv.Itoa(int(t.Rank))
}

// ms formats nanoseconds as a duration (1.5s, 30ms, 1h0m0s).
func ms(ns int64) string { return time.Duration(ns).String() }

// num formats a number with at most three decimals, trailing zeros dropped, so
// that a float's last bits never reach a golden file.
func num(v float64) string {
	s := strconv.FormatFloat(math.Round(v*1000)/1000, 'f', -1, 64)
	if s == "-0" {
		return "0"
	}
	return s
}

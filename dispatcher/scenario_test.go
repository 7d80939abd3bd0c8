package dispatcher

// The actor's scenario files (docs/design.md, Scenario files):
// testdata/*.txt drive an Actor through the fixture of actor_test.go (a fake
// bus, fake JetStream messages, a virtual clock), one event at a time, as
// Run's loop would: each command is an event, followed by drain. After each
// command the file shows what the actor did because of it: dispatches sent,
// what was done to each message (+WPI, -NAK, +ACK), dead letters, outcomes,
// the consumer released, the pull gate. testdata/README.md lists the
// commands.
//
// Run:        go test ./dispatcher/ -run TestActorScenarios
// Regenerate: go test ./dispatcher/ -run TestActorScenarios -rewrite
// (then read the diff: every expectation must still match the prose above it).

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"fairdispatch/bus"
	"fairdispatch/configs"
	"fairdispatch/internal/scenario"
	"fairdispatch/wire"
	"fairdispatch/workers"
)

func TestActorScenarios(t *testing.T) { scenario.Run(t, "testdata", newActorStory) }

// newActorStory returns the command handler of a new file.
func newActorStory() scenario.Handler { return (&actorStory{msgs: map[uint64][]*fakeMsg{}}).run }

// actorStory is the state of one file: the fixture, every message
// delivered (by stream sequence, a redelivery after the first), and how much
// of each fake's record the file has already shown.
type actorStory struct {
	f     *fixture
	start time.Time
	msgs  map[uint64][]*fakeMsg
	// failed lists the sends the fake bus failed since the last command.
	failed []string
	seen   struct {
		sent, letters, outcomes, released int
		acks                              map[*fakeMsg]int
		gate                              bool
	}
}

func (h *actorStory) run(t *testing.T, td *scenario.TestData) string {
	t.Helper()
	out := scenario.Do(t, td, h.f != nil, "policy", h.commands(), "draining", "gate")
	if td.Cmd != "print" {
		h.f.a.drain() // as Run does after every event
		out = strings.TrimSpace(out + "\n" + h.effects())
	}
	if out == "" {
		out = "nothing"
	}
	return out + "\n"
}

// commands are the commands of testdata/README.md.
func (h *actorStory) commands() map[string]func(*scenario.Args) string {
	return map[string]func(*scenario.Args) string{
		"policy": h.policy, "deliver": h.deliver, "report": h.report, "answer": h.answer, "dlq": h.dlq,
		"send-fails": h.sendFails, "settle": h.settle, "print": h.print,
		"tick": func(a *scenario.Args) string {
			h.f.now = h.f.now.Add(a.Duration())
			h.f.a.tick(h.f.now)
			return ""
		},
		"advance-time": func(a *scenario.Args) string {
			h.f.now = h.f.now.Add(a.Duration())
			return "now +" + h.f.now.Sub(h.start).String()
		},
		"recheck": func(*scenario.Args) string { h.f.a.d.Scheduler.RecheckAll(); return "" },
		"lose-lead": func(*scenario.Args) string {
			h.f.a.SetLeader(false)
			return fmt.Sprintf("handed back %d", h.f.a.handBackQueued()+h.f.a.retire(h.f.a.cur))
		},
		"gain-lead":  func(*scenario.Args) string { h.f.a.SetLeader(true); return "" },
		"disconnect": func(*scenario.Args) string { h.f.a.connection(false); return "" },
		"connect":    func(*scenario.Args) string { h.f.a.connection(true); return "" },
	}
}

// policy builds the actor from the YAML of its input block (grace=,
// no-workers-timeout=, gate to give it a pull gate); a later policy command
// applies a new revision (rev=N), as the policy follower does.
func (h *actorStory) policy(a *scenario.Args) string {
	pol, err := configs.Parse("scenario.yaml", []byte(a.TD.Input))
	if err != nil {
		a.Fatalf("%v", err)
	}
	if h.f != nil {
		h.f.a.applyPolicy(policyReq{rev: a.Uint("rev", 0), p: pol})
		v := h.f.a.Policy()
		return fmt.Sprintf("revision %d from %s: %s", v.Revision, v.Source, strings.Join(v.Classes, ", "))
	}
	h.f = newFixtureWith(a.T, a.TD.Input, fixtureConfig{grace: a.Dur("grace", 0), noWorkersTimeout: a.Dur("no-workers-timeout", 0), gate: a.Flag("gate")})
	h.start = h.f.now
	h.seen.acks = map[*fakeMsg]int{}
	return "classes " + strings.Join(classNames(pol), ", ")
}

// deliver hands the actor a JetStream delivery: deliver <stream seq>
// [token=premium] [nd=N] [age=1s] [Header-Name=value ...]
// [header=(Name:value, ...)]. Arguments spelt like headers
// (Dispatch-ISL-Tokens=100, Nats-Msg-Id=r1) are the message's headers, as a
// producer sets them (docs/protocol.md, Request headers); header= gives any
// other.
func (h *actorStory) deliver(a *scenario.Args) string {
	seq := a.ParseUint(a.Pos(0))
	hdr := nats.Header{}
	for i, arg := range a.TD.CmdArgs {
		switch {
		case isHeaderName(arg.Key):
			a.Mark(i)
			hdr[arg.Key] = []string{strings.Join(arg.Vals, ",")}
		case arg.Key == "header":
			a.Mark(i)
			for _, v := range arg.Vals {
				name, val, _ := strings.Cut(v, ":")
				hdr[name] = append(hdr[name], val)
			}
		}
	}
	m := &fakeMsg{hdr: hdr, data: []byte("body"), stream: seq, nd: a.Uint("nd", 1)}
	h.msgs[seq] = append(h.msgs[seq], m)
	d := m.delivery(a.StrOr("token", "premium"), h.f.now.Add(-a.Dur("age", 0)))
	h.f.a.admit(h.f.now, &d)
	if hd := h.f.a.held[seq]; hd != nil && hd.snap != nil && hd.snap.Index >= 0 {
		return fmt.Sprintf("%d: queued in %s", seq, h.f.a.className(hd.snap.Class))
	}
	return ""
}

func isHeaderName(k string) bool {
	return strings.HasPrefix(k, "Dispatch-") || strings.HasPrefix(k, "Nats-") || strings.HasPrefix(k, "X-")
}

// report applies a worker's load report: report <worker> [prefill=N]
// [requests=N] [seen=N] [ttl=60s] [max_active=N] [draining].
func (h *actorStory) report(a *scenario.Args) string {
	id := a.Pos(0)
	rep := workers.Report{WorkerID: id, DPSize: 1, TTLms: uint64(a.Dur("ttl", time.Minute).Milliseconds()), Instance: "i-" + id,
		MaxActive: a.Uint("max_active", 0), Draining: a.Flag("draining"),
		Ranks: []workers.RankLoad{{ActivePrefillTokens: a.Uint("prefill", 0), ActiveRequests: a.Uint("requests", 0)}}}
	if _, ok := a.Str("seen"); ok {
		rep.SeenSeq, rep.HasSeenSeq = a.Uint("seen", 0), true
	}
	h.f.a.report(rep)
	return ""
}

// answer delivers a worker's answer to the dispatch of a held message:
// answer <stream seq> accept|refuse|timeout|noresponders.
func (h *actorStory) answer(a *scenario.Args) string {
	seq := a.ParseUint(a.Pos(0))
	outcome := map[string]bus.Outcome{"accept": bus.Accepted, "refuse": bus.Refused, "timeout": bus.Timeout, "noresponders": bus.NoResponders}[a.Pos(1)]
	if outcome == 0 {
		a.Fatalf("unknown answer %q", a.Pos(1))
	}
	worker := ""
	if hd := h.f.a.held[seq]; hd != nil {
		worker = hd.worker
	}
	h.f.a.answer(bus.Result{Token: seq, Worker: worker, Outcome: outcome})
	return ""
}

// dlq delivers the dead-letter stream's answer to the letter of a held
// message: dlq <stream seq> stored|refused|full|closed|down. refused is the
// letter's own fault (too large), full JetStream's refusal for want of room
// (the DLQ at its limit, the store full), closed the bus shutting down, down
// any other failure (the DLQ cannot take it).
func (h *actorStory) dlq(a *scenario.Args) string {
	seq := a.ParseUint(a.Pos(0))
	err, ok := map[string]error{
		"stored":  nil,
		"refused": fmt.Errorf("bus: dead letter: %w: %w", bus.ErrRequestFault, nats.ErrMaxPayload),
		"full": fmt.Errorf("bus: dead letter: %w: %w: %w", bus.ErrConnectionFault, bus.ErrStoreFull,
			&jetstream.APIError{Code: 503, ErrorCode: wire.JSErrCodeStoreFailed, Description: wire.RefusalMaxMsgs}),
		"closed": bus.ErrClosed,
		"down":   fmt.Errorf("bus: dead letter: %w", bus.ErrConnectionFault),
	}[a.Pos(1)]
	if !ok {
		a.Fatalf("unknown dlq answer %q", a.Pos(1))
	}
	h.f.a.deadLettered(dlqDone{seq: seq, err: err})
	return ""
}

// sendFails makes the fake bus fail the sends of a message: send-fails
// <stream seq> request|header|worker|connection|none (request: over
// max_payload; header: a header NATS cannot send; none: sends succeed
// again). Each failed attempt shows among the effects.
func (h *actorStory) sendFails(a *scenario.Args) string {
	seq := a.ParseUint(a.Pos(0))
	err, ok := map[string]error{
		"request":    &bus.RequestFault{Reason: "the request is over the server's max_payload", Err: nats.ErrMaxPayload},
		"header":     &bus.RequestFault{Reason: `header name "X/Y" cannot be sent over NATS`, Err: nats.ErrBadHeaderMsg},
		"worker":     fmt.Errorf("%w: %w: worker id", bus.ErrWorkerFault, bus.ErrInvalidSubject),
		"connection": bus.ErrNotConnected,
		"none":       nil,
	}[a.Pos(1)]
	switch {
	case !ok:
		a.Fatalf("unknown send failure %q", a.Pos(1))
	case err == nil:
		h.f.b.sendErr = nil
		return ""
	}
	h.f.b.sendErr = func(token uint64) error {
		if token != seq {
			return nil
		}
		h.failed = append(h.failed, fmt.Sprintf("send %d failed: %v", token, err))
		return err
	}
	return ""
}

// settle delivers a completion record: settle <worker>, with the record's
// JSON in the input block (docs/protocol.md, Completion records). It says
// how many records were taken in (0: it did not parse); print scheduler
// shows what they changed.
func (h *actorStory) settle(a *scenario.Args) string {
	h.f.a.CompletionRecord(a.Pos(0), []byte(a.TD.Input))
	n := 0
	for _, d := range h.f.a.done.take() {
		h.f.a.settle(d)
		n++
	}
	return fmt.Sprintf("records taken in: %d", n)
}

// effects describes what the fakes recorded since the last command.
func (h *actorStory) effects() string {
	f := h.f
	var b strings.Builder
	for _, fl := range h.failed {
		b.WriteString(fl + "\n")
	}
	h.failed = h.failed[:0]
	for _, s := range f.b.sent[h.seen.sent:] {
		form := ""
		if s.compact {
			form = ", compact"
		}
		fmt.Fprintf(&b, "send %d to %s: %s %s rank %s seq %s cost %s queued %sms%s\n", s.token, s.worker,
			s.hdr.Get("Dispatch-Request-Id"), s.hdr.Get("Dispatch-Class"), s.hdr.Get("Dispatch-DP-Rank"),
			s.hdr.Get("Dispatch-Seq"), s.hdr.Get("Dispatch-Cost"), s.hdr.Get("Dispatch-Queued-Ms"), form)
	}
	h.seen.sent = len(f.b.sent)
	for _, seq := range slices.Sorted(maps.Keys(h.msgs)) {
		for i, m := range h.msgs[seq] {
			acks := m.log()
			for _, ack := range acks[h.seen.acks[m]:] {
				fmt.Fprintf(&b, "msg %d%s: %s\n", seq, delivery(i), ack)
			}
			h.seen.acks[m] = len(acks)
		}
	}
	for _, l := range f.b.letters[h.seen.letters:] {
		form := ", full copy"
		switch {
		case l.Bare:
			form = ", without body and headers"
		case l.DropBody:
			form = ", without body"
		}
		fmt.Fprintf(&b, "dead letter %s in %s: %s: %s%s\n", l.RequestID, l.Class, l.Code, l.Message, form)
	}
	h.seen.letters = len(f.b.letters)
	for i, o := range f.outcomes[h.seen.outcomes:] {
		b.WriteString("outcome to " + f.subjects[h.seen.outcomes+i] + ": " + outcome(o) + "\n")
	}
	h.seen.outcomes = len(f.outcomes)
	if n := f.rel.released - h.seen.released; n > 0 {
		fmt.Fprintf(&b, "released %d to the consumer\n", n)
	}
	h.seen.released = f.rel.released
	if f.gate != nil && f.gate.Closed() != h.seen.gate {
		h.seen.gate = f.gate.Closed()
		fmt.Fprintf(&b, "pull gate %s\n", map[bool]string{true: "closed", false: "opened"}[h.seen.gate])
	}
	return b.String()
}

func delivery(i int) string {
	if i == 0 {
		return ""
	}
	return fmt.Sprintf(" (delivery %d)", i+1)
}

func outcome(o wire.Outcome) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s", o.Status, o.RequestID)
	if o.PolicyClass != "" {
		b.WriteString(" in " + o.PolicyClass)
	}
	if o.Status == wire.StatusDispatched {
		fmt.Fprintf(&b, " to %s/%d after %dms", o.WorkerID, *o.DPRank, *o.QueuedMs)
	} else {
		fmt.Fprintf(&b, ": %s: %s", o.Error, o.Message)
		if o.Details != nil {
			fmt.Fprintf(&b, " %v", o.Details)
		}
	}
	fmt.Fprintf(&b, ", attempt %d", o.Attempt)
	if o.PolicyRevision > 0 {
		fmt.Fprintf(&b, ", revision %d", o.PolicyRevision)
	}
	return b.String()
}

// print shows the actor's state: actor (role, connection, outage, counts),
// held (every message delivered and what became of it), sent (every dispatch
// with its headers) and scheduler (Scheduler.Describe; workers: only its
// workers); all but workers unless sections are named.
func (h *actorStory) print(args *scenario.Args) string {
	sections := args.Keys()
	want := func(s string) bool { return len(sections) == 0 || slices.Contains(sections, s) }
	f, a := h.f, h.f.a
	var b strings.Builder
	if want("actor") {
		gate := "none"
		if f.gate != nil {
			gate = map[bool]string{true: "closed", false: "open"}[f.gate.Closed()]
		}
		fmt.Fprintf(&b, "actor: leader %v, connected %v, grace %v, no live workers %v, pull gate %s, held %d, in flight %d, kept alive %d\n",
			a.leading.Load(), a.connected, a.d.Scheduler.InGrace(f.now.UnixNano()), a.out, gate, len(a.held), a.inFlight, a.d.Keeper.Len())
	}
	if want("held") {
		for _, seq := range slices.Sorted(maps.Keys(h.msgs)) {
			ms := h.msgs[seq]
			fmt.Fprintf(&b, "msg %d: %s", seq, h.state(seq))
			for i, m := range ms {
				if acks := m.log(); len(acks) > 0 {
					fmt.Fprintf(&b, "; acks%s %s", delivery(i), strings.Join(acks, " "))
				}
			}
			b.WriteString("\n")
		}
	}
	if want("sent") {
		for _, sn := range f.b.sent {
			fmt.Fprintf(&b, "sent %d to %s:", sn.token, sn.worker)
			for _, k := range slices.Sorted(maps.Keys(sn.hdr)) {
				fmt.Fprintf(&b, " %s=%s", k, strings.Join(sn.hdr[k], ","))
			}
			b.WriteString("\n")
		}
	}
	if want("scheduler") {
		b.WriteString(a.d.Scheduler.Describe(f.now.UnixNano()))
	} else if slices.Contains(sections, "workers") {
		b.WriteString(a.d.Scheduler.Describe(f.now.UnixNano(), "workers"))
	}
	if b.Len() == 0 {
		return "(nothing to print)"
	}
	return strings.TrimRight(b.String(), "\n")
}

func (h *actorStory) state(seq uint64) string {
	hd := h.f.a.held[seq]
	switch {
	case hd == nil:
		return "not held"
	case hd.dead:
		return fmt.Sprintf("%s being dead-lettered (%s)", hd.snap.ID, hd.err.Code)
	case hd.inFlight:
		return fmt.Sprintf("%s in flight to %s/%d seq %d", hd.snap.ID, hd.worker, hd.rank, hd.seq)
	case hd.snap != nil && hd.snap.Index >= 0:
		return fmt.Sprintf("%s queued in %s", hd.snap.ID, h.f.a.className(hd.snap.Class))
	}
	if slices.Contains(h.f.a.parked, hd) {
		return fmt.Sprintf("%s held until the grace ends (%s)", hd.snap.ID, hd.err.Code)
	}
	return fmt.Sprintf("%s held", hd.snap.ID)
}

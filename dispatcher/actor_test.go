package dispatcher

import (
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"fairdispatch/bus"
	"fairdispatch/configs"
	"fairdispatch/filters"
	"fairdispatch/ingest"
	"fairdispatch/internal/natstest"
	"fairdispatch/metrics"
	"fairdispatch/scheduler"
	"fairdispatch/wire"
	"fairdispatch/workers"
)

// fakeMsg is the Acker of one JetStream message: it records what was done to it.
type fakeMsg struct {
	mu     sync.Mutex
	hdr    nats.Header
	data   []byte
	acks   []string
	stream uint64
	nd     uint64 // NumDelivered; 0 reads as 1
}

// delivery returns m's delivery on subject dispatch.req.<token>, decoded as
// the consumer decodes one.
func (m *fakeMsg) delivery(token string, published time.Time) ingest.Delivery {
	d := ingest.Delivery{
		Msg:       ingest.NewMsg("dispatch.req."+token, "$JS.ACK.test", m.hdr, m.data, m),
		StreamSeq: m.stream, NumDelivered: max(m.nd, 1), Published: published,
	}
	d.Headers, d.Err = d.Msg.Decode()
	return d
}

func (m *fakeMsg) Ack(string) error                         { return m.did("+ACK") }
func (m *fakeMsg) Nak(string) error                         { return m.did("-NAK") }
func (m *fakeMsg) NakWithDelay(string, time.Duration) error { return m.did("-NAK delay") }
func (m *fakeMsg) Term(_, reason string) error              { return m.did("+TERM " + reason) }
func (m *fakeMsg) InProgress(string) error                  { return m.did("+WPI") }
func (m *fakeMsg) did(a string) error {
	m.mu.Lock()
	m.acks = append(m.acks, a)
	m.mu.Unlock()
	return nil
}
func (m *fakeMsg) log() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]string(nil), m.acks...)
}

// fakeBus records sends and dead letters; the test answers them.
type fakeBus struct {
	mu      sync.Mutex
	sent    []sent
	letters []bus.DeadLetter
	done    []func(error)
	sendErr func(token uint64) error // nil: every send succeeds
	pubErr  error                    // returned by every Publish
}

type sent struct {
	worker string
	hdr    nats.Header // in the compact form, the headers the header form would have sent
	token  uint64
	body   []byte
	// compact: the dispatch was sent in the compact form; err is its frame's
	// decoding error.
	compact bool
	err     error
}

func (b *fakeBus) Send(worker string, hdr nats.Header, body []byte, token uint64) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.sendErr != nil {
		if err := b.sendErr(token); err != nil {
			return err
		}
	}
	s := sent{worker: worker, hdr: cloneHeader(hdr), token: token, body: slices.Clone(body)} // Send may not keep hdr nor body
	if hdr == nil {
		s.compact = true
		s.hdr, s.body, s.err = natstest.DispatchHeader(&nats.Msg{Data: s.body})
	}
	b.sent = append(b.sent, s)
	return nil
}

func (b *fakeBus) Publish(dl bus.DeadLetter, done func(error)) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.letters = append(b.letters, dl)
	if b.pubErr != nil {
		return b.pubErr
	}
	b.done = append(b.done, done)
	return nil
}

func cloneHeader(h nats.Header) nats.Header {
	c := make(nats.Header, len(h))
	for k, v := range h {
		c[k] = append([]string(nil), v...)
	}
	return c
}

type countingReleaser struct{ released int }

func (c *countingReleaser) Release(n int) { c.released += n }
func (c *countingReleaser) Stop()         {}

// fixture drives an Actor's handlers directly, on the test goroutine, as
// Run's loop would: no goroutines, no NATS.
type fixture struct {
	a        *Actor
	b        *fakeBus
	rel      *countingReleaser
	outcomes []wire.Outcome
	now      time.Time
}

func newFixture(t testing.TB, policy string) *fixture {
	t.Helper()
	pol, err := configs.Parse("t.yaml", []byte(policy))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1_700_000_000, 0)
	f := &fixture{b: &fakeBus{}, rel: &countingReleaser{}, now: now}
	s := scheduler.New(scheduler.Config{Policy: pol, Scoring: filters.DefaultScoring(), Rand: rand.New(rand.NewPCG(1, 1))}, now.UnixNano())
	f.a = New(Config{Stream: "DISPATCH_REQ", Prefix: "dispatch", AckWait: 30 * time.Second, DispatchTimeout: 2 * time.Second,
		Now: func() time.Time { return f.now }}, Deps{
		Scheduler: s, Handshaker: f.b, DeadLetters: f.b, Consumer: f.rel,
		Keeper:  ingest.NewKeeper(30*time.Second, zerolog.Nop()),
		Outcome: func(_ string, o wire.Outcome) error { f.outcomes = append(f.outcomes, o); return nil },
		Metrics: metrics.New(nil, classNames(pol)), Log: zerolog.Nop(),
	})
	f.a.SetLeader(true)
	return f
}

func classNames(p *configs.Policy) []string {
	var n []string
	for _, c := range p.Classes {
		n = append(n, c.Name)
	}
	return n
}

func (f *fixture) report(id string, prefill uint64) {
	f.a.report(workers.Report{WorkerID: id, DPSize: 1, TTLms: 60000, Instance: "i",
		Ranks: []workers.RankLoad{{ActivePrefillTokens: prefill}}})
	f.a.drain()
}

func (f *fixture) deliver(seq uint64, token string, hdr nats.Header) *fakeMsg {
	m := &fakeMsg{hdr: hdr, data: []byte("body"), stream: seq}
	d := m.delivery(token, f.now)
	f.a.admit(f.now, &d)
	f.a.drain()
	return m
}

const policy = `default_policy_family: premium
uncached_isl_buckets: [{min_tokens: 0, bucket: all}]
policy_classes:
  - {name: premium, policy_family: premium, cache_bucket: all, quantum: 512, prefill_busy_threshold: 1000}
`

func TestActorDispatchesAcceptsAndReleases(t *testing.T) {
	f := newFixture(t, policy)
	f.now = f.now.Add(time.Second)
	f.report("w1", 0)
	m := f.deliver(1, "premium", nats.Header{"Dispatch-ISL-Tokens": {"100"}, "Dispatch-Reply-To": {"out.1"}, "Nats-Msg-Id": {"r1"}})
	if len(f.b.sent) != 1 {
		t.Fatalf("sent %d, want 1", len(f.b.sent))
	}
	h := f.b.sent[0].hdr
	for k, want := range map[string]string{"Dispatch-Request-Id": "r1", "Dispatch-Class": "premium", "Dispatch-DP-Rank": "0",
		"Dispatch-Seq": "1", "Dispatch-Cost": "100", "Dispatch-Ack": "$JS.ACK.test", "Dispatch-ISL-Tokens": "100"} {
		if got := h.Get(k); got != want {
			t.Errorf("header %s = %q, want %q", k, got, want)
		}
	}
	f.a.answer(bus.Result{Token: 1, Worker: "w1", Outcome: bus.Accepted})
	if f.rel.released != 1 || len(f.a.held) != 0 || len(m.log()) != 0 {
		t.Fatalf("after accept: released %d held %d acks %v; want 1, 0, none (the worker owns the message)", f.rel.released, len(f.a.held), m.log())
	}
	if len(f.outcomes) != 1 || f.outcomes[0].Status != wire.StatusDispatched || f.outcomes[0].WorkerID != "w1" {
		t.Fatalf("outcomes %+v, want one dispatched to w1", f.outcomes)
	}
}

func TestActorRefusalRequeuesAndKeepsAlive(t *testing.T) {
	f := newFixture(t, policy)
	f.now = f.now.Add(time.Second)
	f.report("w1", 0)
	m := f.deliver(7, "premium", nats.Header{"Dispatch-ISL-Tokens": {"100"}})
	f.a.answer(bus.Result{Token: 7, Worker: "w1", Outcome: bus.Refused})
	if got := m.log(); len(got) != 1 || got[0] != "+WPI" {
		t.Fatalf("acks after refusal %v, want one +WPI (the ack wait restarts with the hand-back)", got)
	}
	if len(f.b.sent) != 1 || f.a.d.Scheduler.Queued(0) != 1 {
		t.Fatalf("sent %d queued %d, want 1 and 1: the refusing worker waits for its next report", len(f.b.sent), f.a.d.Scheduler.Queued(0))
	}
	f.report("w1", 0)
	if len(f.b.sent) != 1 {
		t.Fatalf("after a report within the exclusion: sent %d, want 1 (excluded for 10 ms whatever it reports)", len(f.b.sent))
	}
	f.now = f.now.Add(time.Duration(workers.MinExclusion))
	f.report("w1", 0)
	if len(f.b.sent) != 2 || f.b.sent[1].hdr.Get("Dispatch-Seq") != "2" {
		t.Fatalf("after the exclusion: sent %d, want the request sent again with seq 2", len(f.b.sent))
	}
	if got := f.b.sent[1].hdr["Dispatch-Ack-Wait-Ms"]; len(got) != 1 || got[0] != strconv.FormatInt(f.a.cfg.AckWait.Milliseconds(), 10) {
		t.Fatalf("Dispatch-Ack-Wait-Ms = %q, want the ack wait %v in ms, with exactly that casing", got, f.a.cfg.AckWait)
	}
}

func TestActorDeadLetterThenAckThenOutcome(t *testing.T) {
	f := newFixture(t, policy)
	f.now = f.now.Add(time.Second)
	m := f.deliver(3, "premium", nats.Header{"Dispatch-ISL-Tokens": {"abc"}, "Dispatch-Reply-To": {"out.3"}})
	if len(f.b.letters) != 1 || f.b.letters[0].Code != "bad_request" || f.b.letters[0].Class != "premium" {
		t.Fatalf("letters %+v, want one bad_request for token premium", f.b.letters)
	}
	if len(m.log()) != 0 || len(f.outcomes) != 0 {
		t.Fatalf("before the DLQ ack: acks %v outcomes %d, want none", m.log(), len(f.outcomes))
	}
	f.a.deadLettered(dlqDone{seq: 3})
	if got := m.log(); len(got) != 1 || got[0] != "+ACK" || len(f.outcomes) != 1 || f.outcomes[0].Error != "bad_request" {
		t.Fatalf("after the DLQ ack: acks %v outcomes %+v, want +ACK and one bad_request outcome", got, f.outcomes)
	}
}

func TestActorRedeliveryOfHeldRequestIsNotQueuedTwice(t *testing.T) {
	f := newFixture(t, policy)
	f.now = f.now.Add(time.Second)
	f.report("w1", 5000) // busy: requests queue
	f.deliver(9, "premium", nats.Header{"Dispatch-ISL-Tokens": {"100"}})
	f.deliver(9, "premium", nats.Header{"Dispatch-ISL-Tokens": {"100"}})
	if q := f.a.d.Scheduler.Queued(0); q != 1 || f.rel.released != 1 {
		t.Fatalf("queued %d released %d, want 1 queued and the duplicate released", q, f.rel.released)
	}
}

func TestActorLosingLeadHandsBack(t *testing.T) {
	f := newFixture(t, policy)
	f.now = f.now.Add(time.Second)
	f.report("w1", 5000)
	m := f.deliver(4, "premium", nats.Header{"Dispatch-ISL-Tokens": {"100"}})
	f.a.SetLeader(false)
	if n := f.a.handBackQueued(); n != 1 || f.a.d.Scheduler.Queued(0) != 0 {
		t.Fatalf("handed back %d, queued %d; want 1 and 0", n, f.a.d.Scheduler.Queued(0))
	}
	if got := m.log(); len(got) != 1 || got[0] != "-NAK" {
		t.Fatalf("acks %v, want -NAK", got)
	}
	f.report("w1", 0)
	if len(f.b.sent) != 0 {
		t.Fatal("a standby dispatched")
	}
}

// lastSend is a Handshaker that remembers only its last call, as cheaply as
// the real one retains nothing.
type lastSend struct {
	worker string
	token  uint64
}

func (l *lastSend) Send(worker string, _ nats.Header, _ []byte, token uint64) error {
	l.worker, l.token = worker, token
	return nil
}

// BenchmarkAdmitDispatchAccept is the actor's per-request path without NATS:
// admit a delivery, dispatch it to one of 64 idle workers, take the acceptance.
func BenchmarkAdmitDispatchAccept(b *testing.B) {
	// The workers ask for the header form (encoded by nats.go, after Send:
	// not measured here) or the compact one (the frame is built by the actor).
	b.Run("form=headers", func(b *testing.B) { benchAdmitDispatchAccept(b, 0) })
	b.Run("form=compact", func(b *testing.B) { benchAdmitDispatchAccept(b, 1) })
}

func benchAdmitDispatchAccept(b *testing.B, compact uint8) {
	f := newFixture(b, `default_policy_family: a
uncached_isl_buckets: [{min_tokens: 0, bucket: all}]
policy_classes:
  - {name: a, policy_family: a, cache_bucket: all, quantum: 512}
`)
	f.now = f.now.Add(time.Second)
	for i := range 64 {
		f.reportCompact("w"+string(rune('A'+i)), compact)
	}
	hdr := nats.Header{"Dispatch-ISL-Tokens": {"512"}, "Nats-Msg-Id": {"req-0000000001"}}
	m := &fakeMsg{hdr: hdr, data: make([]byte, 128)}
	base := m.delivery("a", f.now)
	last := &lastSend{}
	f.a.d.Handshaker = last
	if benchTracer != nil {
		f.a.d.Trace = benchTracer
	}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		seq := uint64(i + 1)
		d := base
		d.StreamSeq = seq
		d.Headers, _ = d.Msg.Decode()
		f.a.admit(f.now, &d)
		f.a.answer(bus.Result{Token: last.token, Worker: last.worker, Outcome: bus.Accepted})
		if i%256 == 255 { // the workers report (without seen_seq: counting every dispatch so far)
			for k := range 64 {
				f.a.report(workers.Report{WorkerID: "w" + string(rune('A'+k)), DPSize: 1, TTLms: 60000, Instance: "i", Compact: compact})
			}
		}
	}
}

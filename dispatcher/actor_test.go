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
	gate     *ingest.Gate
	outcomes []wire.Outcome
	subjects []string // the subject of each outcome
	now      time.Time
}

// fixtureConfig is what differs between fixtures: the scheduler's start-up
// grace and no-workers timeout, and whether the actor has a pull gate.
type fixtureConfig struct {
	grace, noWorkersTimeout time.Duration
	gate                    bool
}

func newFixture(t testing.TB, policy string) *fixture {
	t.Helper()
	return newFixtureWith(t, policy, fixtureConfig{})
}

func newFixtureWith(t testing.TB, policy string, fc fixtureConfig) *fixture {
	t.Helper()
	pol, err := configs.Parse("t.yaml", []byte(policy))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1_700_000_000, 0)
	f := &fixture{b: &fakeBus{}, rel: &countingReleaser{}, now: now}
	s := scheduler.New(scheduler.Config{Policy: pol, Scoring: filters.DefaultScoring(), Grace: int64(fc.grace),
		NoWorkersTimeout: int64(fc.noWorkersTimeout), Rand: rand.New(rand.NewPCG(1, 1))}, now.UnixNano())
	deps := Deps{
		Scheduler: s, Handshaker: f.b, DeadLetters: f.b, Consumer: f.rel,
		Keeper: ingest.NewKeeper(30*time.Second, zerolog.Nop()),
		Outcome: func(subject string, o wire.Outcome) error {
			f.outcomes, f.subjects = append(f.outcomes, o), append(f.subjects, subject)
			return nil
		},
		Metrics: metrics.New(nil, classNames(pol)), Log: zerolog.Nop(),
	}
	if fc.gate {
		f.gate = &ingest.Gate{}
		deps.Gate = f.gate
	}
	f.a = New(Config{Stream: "DISPATCH_REQ", Prefix: "dispatch", AckWait: 30 * time.Second, DispatchTimeout: 2 * time.Second,
		Now: func() time.Time { return f.now }}, deps)
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
	b.Run("form=headers", func(b *testing.B) { benchAdmitDispatchAccept(b, 0, false) })
	b.Run("form=compact", func(b *testing.B) { benchAdmitDispatchAccept(b, 1, false) })
	// Each request its own id, as in a stream: the running memory (for
	// cancellation) then grows to its bound instead of rewriting one entry.
	b.Run("form=compact/ids=fresh", func(b *testing.B) { benchAdmitDispatchAccept(b, 1, true) })
}

func benchAdmitDispatchAccept(b *testing.B, compact uint8, freshIDs bool) {
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
	ids := hdr["Nats-Msg-Id"]
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		seq := uint64(i + 1)
		if freshIDs {
			ids[0] = "req-" + strconv.FormatUint(seq, 10)
		}
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

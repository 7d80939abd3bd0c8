package ingest

import (
	"errors"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

// fakeMsg is the Acker of one message: it counts the acknowledgements sent
// for it; log, if set, records NAK order.
type fakeMsg struct {
	seq      uint64
	progress int
	naks     int
	fail     bool
	log      *[]uint64
	m        Msg
}

var _ Acker = (*fakeMsg)(nil)

// msg returns the message f acknowledges (the same one each time).
func (m *fakeMsg) msg() *Msg {
	m.m.acks = m
	return &m.m
}

func (m *fakeMsg) Ack(string) error                         { return nil }
func (m *fakeMsg) NakWithDelay(string, time.Duration) error { return nil }
func (m *fakeMsg) Term(string, string) error                { return nil }
func (m *fakeMsg) Nak(string) error {
	if m.fail {
		return errors.New("fake failure")
	}
	m.naks++
	if m.log != nil {
		*m.log = append(*m.log, m.seq)
	}
	return nil
}
func (m *fakeMsg) InProgress(string) error {
	if m.fail {
		return errors.New("fake failure")
	}
	m.progress++
	return nil
}

var t0 = time.Unix(1_700_000_000, 0)

func at(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }

func TestKeeperTick(t *testing.T) {
	k := NewKeeper(10*time.Second, zerolog.Nop()) // half: 5 s
	a, b, c := &fakeMsg{seq: 1}, &fakeMsg{seq: 2}, &fakeMsg{seq: 3}
	k.Hold(1, a.msg(), at(0))
	k.Hold(2, b.msg(), at(1000))
	k.Hold(3, c.msg(), at(4000))

	steps := []struct {
		now      int // ms
		wantSent int
		want     [3]int // progress counts of a, b, c after the tick
	}{
		{now: 0, wantSent: 0, want: [3]int{0, 0, 0}},
		{now: 4999, wantSent: 0, want: [3]int{0, 0, 0}},
		{now: 5000, wantSent: 1, want: [3]int{1, 0, 0}}, // exactly half the ack wait
		{now: 6000, wantSent: 1, want: [3]int{1, 1, 0}},
		{now: 8999, wantSent: 0, want: [3]int{1, 1, 0}},
		{now: 9500, wantSent: 1, want: [3]int{1, 1, 1}},
		{now: 10500, wantSent: 1, want: [3]int{2, 1, 1}}, // a: touched at 5000
		{now: 60000, wantSent: 3, want: [3]int{3, 2, 2}}, // a long pause: one each
	}
	for _, s := range steps {
		if got := k.Tick(at(s.now)); got != s.wantSent {
			t.Fatalf("at %d ms: got %d sent, want %d", s.now, got, s.wantSent)
		}
		if got := [3]int{a.progress, b.progress, c.progress}; got != s.want {
			t.Fatalf("at %d ms: got progress %v, want %v", s.now, got, s.want)
		}
	}
}

func TestKeeperDropReplaceRehold(t *testing.T) {
	k := NewKeeper(10*time.Second, zerolog.Nop())
	a, a2, b := &fakeMsg{seq: 1}, &fakeMsg{seq: 1}, &fakeMsg{seq: 2}
	held := a.msg()
	k.Hold(1, held, at(0))
	k.Hold(2, b.msg(), at(0))

	// A redelivery replaces the message in its holder's place: the Keeper
	// keeps a pointer to it and acknowledges the new one.
	*held = *a2.msg()
	if m, ok := k.Msg(1); !ok || m != held || m.acks != a2 {
		t.Fatalf("got Msg(1) %v %v, want the replacement", m, ok)
	}
	if m, ok := k.Drop(2); !ok || m != b.msg() {
		t.Fatalf("got Drop(2) %v %v, want b", m, ok)
	}
	if _, ok := k.Drop(2); ok {
		t.Fatalf("got a second Drop(2) ok, want not held")
	}
	if got := k.Tick(at(5000)); got != 1 || a2.progress != 1 || a.progress != 0 || b.progress != 0 {
		t.Fatalf("got %d sent (a %d, a2 %d, b %d), want only the replacement kept", got, a.progress, a2.progress, b.progress)
	}

	// Dropped and held again later (handed back and redelivered): the old stamp
	// must not trigger an early acknowledgement.
	c := &fakeMsg{seq: 2}
	k.Hold(2, c.msg(), at(7000))
	if got := k.Tick(at(9999)); got != 0 || c.progress != 0 {
		t.Fatalf("got %d sent, c %d, want nothing before 12000", got, c.progress)
	}
	if got := k.Tick(at(12000)); got != 2 || c.progress != 1 || a2.progress != 2 {
		t.Fatalf("got %d sent, c %d, a2 %d, want both acknowledged at 12000", got, c.progress, a2.progress)
	}
	if k.Len() != 2 {
		t.Fatalf("got Len %d, want 2", k.Len())
	}
}

func TestKeeperNakAll(t *testing.T) {
	k := NewKeeper(10*time.Second, zerolog.Nop())
	var order []uint64
	ms := map[uint64]*fakeMsg{}
	for _, seq := range []uint64{5, 3, 9, 1} {
		ms[seq] = &fakeMsg{seq: seq, log: &order}
		k.Hold(seq, ms[seq].msg(), at(int(seq)))
	}
	k.Drop(9)
	if got := k.NakAll(); got != 3 {
		t.Fatalf("got %d NAKs, want 3", got)
	}
	if want := []uint64{5, 3, 1}; len(order) != 3 || order[0] != want[0] || order[1] != want[1] || order[2] != want[2] {
		t.Fatalf("got NAK order %v, want %v (hold order)", order, want)
	}
	if ms[9].naks != 0 {
		t.Fatalf("got a NAK for a dropped message")
	}
	if k.Len() != 0 || k.Tick(at(100000)) != 0 || k.NakAll() != 0 {
		t.Fatalf("got a non-empty keeper after NakAll")
	}
}

func TestKeeperFailedAcksNotCounted(t *testing.T) {
	k := NewKeeper(time.Second, zerolog.Nop())
	k.Hold(1, (&fakeMsg{fail: true}).msg(), at(0))
	k.Hold(2, (&fakeMsg{}).msg(), at(0))
	if got := k.Tick(at(500)); got != 1 {
		t.Fatalf("got %d sent, want 1", got)
	}
	if got := k.NakAll(); got != 1 {
		t.Fatalf("got %d NAKs, want 1", got)
	}
}

// TestKeeperBoundedMemory churns holds and drops behind a message that stays held
// and checks that the FIFO stays proportional to what is held.
func TestKeeperBoundedMemory(t *testing.T) {
	k := NewKeeper(time.Hour, zerolog.Nop())
	k.Hold(0, (&fakeMsg{}).msg(), at(0))
	m := &fakeMsg{}
	for i := uint64(1); i <= 100_000; i++ {
		k.Hold(i, m.msg(), at(1))
		k.Hold(i, m.msg(), at(1)) // re-held: one stale stamp more
		k.Drop(i)
		k.Tick(at(2))
	}
	if q := len(k.fifo) - k.head; q > 3*k.Len()+1024 {
		t.Fatalf("got %d stamps for %d held, want at most %d", q, k.Len(), 3*k.Len()+1024)
	}
	if cap(k.fifo) > 8192 {
		t.Fatalf("got FIFO capacity %d, want it bounded", cap(k.fifo))
	}
}

// BenchmarkKeeper holds 10,000 messages for four ack waits each (one hold, one
// drop and one tick an operation, a microsecond apart), so each is acknowledged
// about 7 times: the cost per operation is the amortised one.
func BenchmarkKeeper(b *testing.B) {
	k := NewKeeper(2500*time.Microsecond, zerolog.Nop())
	m := &fakeMsg{}
	b.ReportAllocs()
	var i uint64
	for b.Loop() {
		i++
		now := t0.Add(time.Duration(i) * time.Microsecond)
		k.Hold(i, m.msg(), now)
		if i > 10_000 {
			k.Drop(i - 10_000)
		}
		k.Tick(now)
	}
}

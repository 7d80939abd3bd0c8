package bus

import (
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// TestConsumeKVReplaysFromStart: a consumer sees the stream's messages in
// order with their subject token and sequence, and a second consumer (a
// restarted dispatcher) replays them all from the first, then follows new ones.
func TestConsumeKVReplaysFromStart(t *testing.T) {
	ts := startServer(t, nil)
	nc := connect(t, ts)
	js := newJS(t, nc)
	ctx := ctxT(t)
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "DISPATCH_KV", Subjects: []string{"dispatch.kv.*"}}); err != nil {
		t.Fatal(err)
	}
	publish := func(worker string, id int) {
		t.Helper()
		body := fmt.Sprintf(`{"instance":"i","event_id":%d}`, id)
		if _, err := js.Publish(ctx, "dispatch.kv."+worker, []byte(body)); err != nil {
			t.Fatal(err)
		}
	}
	type got struct {
		mu   sync.Mutex
		msgs []KVMessage
	}
	consume := func() (*got, func()) {
		g := &got{}
		stop, err := ConsumeKV(ctx, js, "DISPATCH_KV", "dispatch.kv.*", func(m KVMessage) {
			g.mu.Lock()
			g.msgs = append(g.msgs, m)
			g.mu.Unlock()
		})
		if err != nil {
			t.Fatal(err)
		}
		return g, stop
	}
	count := func(g *got) int { g.mu.Lock(); defer g.mu.Unlock(); return len(g.msgs) }
	check := func(g *got, n int) {
		t.Helper()
		g.mu.Lock()
		defer g.mu.Unlock()
		for i, m := range g.msgs[:n] {
			var ev struct {
				EventID int `json:"event_id"`
			}
			if err := json.Unmarshal(m.Data, &ev); err != nil || ev.EventID != i+1 || m.Seq != uint64(i+1) ||
				m.Token != fmt.Sprint("w", i%2) || m.Published.IsZero() {
				t.Fatalf("message %d: %+v (%s), want event %d seq %d from w%d", i, m, m.Data, i+1, i+1, i%2)
			}
		}
	}
	for i := range 3 {
		publish(fmt.Sprint("w", i%2), i+1)
	}
	g1, stop1 := consume()
	waitFor(t, "three messages", func() bool { return count(g1) == 3 })
	check(g1, 3)
	stop1()
	publish("w1", 4)
	publish("w0", 5)
	g2, stop2 := consume()
	defer stop2()
	waitFor(t, "five messages replayed", func() bool { return count(g2) == 5 })
	publish("w1", 6)
	waitFor(t, "the sixth", func() bool { return count(g2) == 6 })
	check(g2, 6)
	if n := count(g1); n != 3 {
		t.Fatalf("the stopped consumer got %d messages, want 3", n)
	}
}

func TestRequestKVResync(t *testing.T) {
	ts := startServer(t, nil)
	nc := connect(t, ts)
	sub, err := nc.SubscribeSync("dispatch.kvsync.w1")
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := RequestKVResync(nc, "dispatch.kvsync.w1", 3); err != nil {
		t.Fatal(err)
	}
	m, err := sub.NextMsg(10 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if string(m.Data) != `{"dp_rank":3}` {
		t.Fatalf("body %s, want {\"dp_rank\":3}", m.Data)
	}
}

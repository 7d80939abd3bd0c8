package worker_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"fairdispatch/completion"
	"fairdispatch/worker"
	"fairdispatch/worker/internal/natstest"
)

// TestCompletePublishesRecord: Complete publishes the completion record of
// docs/protocol.md, Completion records on <prefix>.done.<worker_id>, carrying
// the dispatch's seq, class and the producer's fairness key.
func TestCompletePublishesRecord(t *testing.T) {
	_, nc := natstest.StartServer(t)
	recs := make(chan *nats.Msg, 4)
	sub, err := nc.ChanSubscribe("dispatch.done.*", recs)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	a := startWorker(t, nc, worker.Config{ID: "w1"})
	m := dispatchMsg("r7", 42, 0, "")
	m.Header.Set("Dispatch-Fairness-Key", " tenant-a ")
	if _, err := nc.RequestMsg(m, wait); err != nil {
		t.Fatal(err)
	}
	natstest.Eventually(t, wait, func() bool { return a.count() == 1 }, "request accepted")
	a.finish(t, 0, func(r *worker.Request) error {
		if err := r.Done(); err != nil {
			return err
		}
		return r.Complete(900, 7, true)
	})
	select {
	case msg := <-recs:
		if msg.Subject != "dispatch.done.w1" {
			t.Errorf("got subject %s, want dispatch.done.w1", msg.Subject)
		}
		var got completion.Record
		if err := json.Unmarshal(msg.Data, &got); err != nil {
			t.Fatal(err)
		}
		want := completion.Record{RequestID: "r7", Seq: 42, Class: "premium", FairnessKey: "tenant-a",
			PrefillTokens: 900, OutputTokens: 7, Status: completion.Failed}
		if got != want {
			t.Errorf("got record %+v, want %+v", got, want)
		}
		if _, err := completion.Parse(msg.Data); err != nil {
			t.Errorf("the dispatcher would refuse it: %v", err)
		}
	case <-time.After(wait):
		t.Fatal("no completion record published")
	}
}

package workerkit_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"fairdispatch/internal/natstest"
	"fairdispatch/wire"
	"fairdispatch/workerkit"
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
	a := startWorker(t, nc, workerkit.Config{ID: "w1"})
	m := dispatchMsg("r7", 42, 0, "")
	m.Header.Set("Dispatch-Fairness-Key", " tenant-a ")
	if _, err := nc.RequestMsg(m, wait); err != nil {
		t.Fatal(err)
	}
	natstest.Eventually(t, wait, func() bool { return a.count() == 1 }, "request accepted")
	a.finish(t, 0, func(r *workerkit.Request) error {
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
		var got wire.Completion
		if err := json.Unmarshal(msg.Data, &got); err != nil {
			t.Fatal(err)
		}
		if got.RequestID != "r7" || got.Seq != 42 || got.Class != "premium" || got.WorkerID != "w1" ||
			got.FairnessKey != "tenant-a" || got.PrefillTokens != 900 || got.OutputTokens != 7 || got.Status != wire.StatusFailed {
			t.Errorf("got record %+v, want r7, seq 42, premium, w1, tenant-a, 900 prefill, 7 output, failed", got)
		}
		if got.FinishedAt.Before(got.ReceivedAt) {
			t.Errorf("finished %v before received %v", got.FinishedAt, got.ReceivedAt)
		}
	case <-time.After(wait):
		t.Fatal("no completion record published")
	}
}

package leader

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
)

// leaderlessJS answers no responders to its first n bucket lookups, as
// JetStream does while a replicated bucket's stream elects its leader.
type leaderlessJS struct {
	jetstream.JetStream
	n int
}

func (j *leaderlessJS) KeyValue(ctx context.Context, bucket string) (jetstream.KeyValue, error) {
	if j.n > 0 {
		j.n--
		return nil, nats.ErrNoResponders
	}
	return j.JetStream.KeyValue(ctx, bucket)
}

// TestNewWaitsForTheBucketsLeader: a dispatcher starting while the lease
// bucket's stream elects a leader (a 3-node cluster just started) waits for
// it and then leads; past LeaderWait the error stands, naming the bucket.
func TestNewWaitsForTheBucketsLeader(t *testing.T) {
	nc, err := nats.Connect(startServer(t).ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, _ := jetstream.New(nc)

	flaky := &leaderlessJS{JetStream: js, n: 5}
	e, err := New(context.Background(), flaky, Config{ID: "a", MayHaveLed: never}, zerolog.Nop())
	if err != nil || flaky.n != 0 {
		t.Fatalf("New after 5 leaderless answers: err %v, %d answers left; want the bucket bound", err, flaky.n)
	}
	if e.kv.Bucket() != DefaultBucket {
		t.Fatalf("bound to %q, want %q", e.kv.Bucket(), DefaultBucket)
	}

	dead := &leaderlessJS{JetStream: js, n: 1 << 30}
	_, err = New(context.Background(), dead, Config{ID: "b", LeaderWait: 300 * time.Millisecond}, zerolog.Nop())
	if !errors.Is(err, nats.ErrNoResponders) || dead.n == 1<<30-1 {
		t.Fatalf("New with no leader past the wait: %v after %d lookups; want no responders after several", err, 1<<30-dead.n)
	}
}

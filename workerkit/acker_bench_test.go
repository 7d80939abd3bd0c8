//go:build unix

package workerkit_test

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"fairdispatch/internal/natstest"
	"fairdispatch/workerkit"
)

// BenchmarkAck measures the acknowledgement of a finished request against
// a real JetStream work-queue stream (file storage, the dispatcher's) in an
// embedded server: b.N messages are published and pulled first, held by a
// worker as accepted requests, then finished one after the other:
//
//   - plain: Done with Config.PlainAcks, a plain +ACK publish;
//   - confirmed: Done, the default: +ACK as a request, confirmed by the
//     helper's background retrier;
//   - sync: DoneConfirmed, which waits for JetStream's answer;
//   - plain-paced, confirmed-paced: the same at 2,000 requests per second (a
//     tenth of what the server takes here), for the caller's time without
//     the server's backpressure (in a burst the client's writes wait for the
//     server) and the time to JetStream's answer without a queue of
//     acknowledgements before it.
//
// ns/op is the wall time per request until every message is removed (and,
// confirmed, every answer taken); caller-ns/op the time the finishing call
// takes on the caller's goroutine; cpu-ns/op the CPU of the whole process
// (server, client, helper) per request; confirm-p50-us and confirm-p99-us
// the time from the call to JetStream's answer (sync and confirmed-paced;
// the burst of confirmed measures the queue). Run it with a fixed count, so
// that the set-up is made once:
//
//	go test -run '^$' -bench BenchmarkAck -benchtime 20000x ./workerkit/
func BenchmarkAck(b *testing.B) {
	for _, mode := range []string{"plain", "confirmed", "sync", "plain-paced", "confirmed-paced"} {
		b.Run(mode, func(b *testing.B) { benchAck(b, mode) })
	}
}

func benchAck(b *testing.B, mode string) {
	srv, nc := natstest.StartServer(b)
	js, err := jetstream.New(nc)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	st, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "DISPATCH_REQ", Subjects: []string{"dispatch.req.*"},
		Retention: jetstream.WorkQueuePolicy, Storage: jetstream.FileStorage})
	if err != nil {
		b.Fatal(err)
	}
	c, err := st.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{Durable: "dispatcher",
		AckPolicy: jetstream.AckExplicitPolicy, AckWait: 5 * time.Minute, MaxAckPending: -1})
	if err != nil {
		b.Fatal(err)
	}
	wnc := natstest.Connect(b, srv)
	paced := strings.HasSuffix(mode, "-paced")
	w, err := workerkit.New(wnc, workerkit.Config{ID: "w1", PlainAcks: strings.HasPrefix(mode, "plain")},
		workerkit.HandlerFunc(func(*workerkit.Request) bool { return false }), zerolog.Nop())
	if err != nil {
		b.Fatal(err)
	}
	if err := w.Start(); err != nil {
		b.Fatal(err)
	}
	defer w.Close()
	var mu sync.Mutex
	var lat []time.Duration
	confirmed := mode == "confirmed" || mode == "confirmed-paced"
	if mode == "confirmed-paced" {
		workerkit.ObserveAcks(w, func(d time.Duration) { lat = append(lat, d) }) // under the acker's lock
	}

	// Set-up: b.N messages published and pulled, each held as a request.
	for i := range b.N {
		if _, err := js.PublishAsync("dispatch.req.c", []byte(strconv.Itoa(i))); err != nil {
			b.Fatal(err)
		}
		if i%500 == 499 || i == b.N-1 {
			select {
			case <-js.PublishAsyncComplete():
			case <-time.After(time.Minute):
				b.Fatal("publishing timed out")
			}
		}
	}
	reqs := make([]*workerkit.Request, 0, b.N)
	for len(reqs) < b.N {
		batch, err := c.Fetch(min(b.N-len(reqs), 1000), jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			b.Fatal(err)
		}
		for m := range batch.Messages() {
			reqs = append(reqs, workerkit.HoldForTest(w, "r"+strconv.Itoa(len(reqs)), m.Reply(), 5*time.Minute))
		}
		if err := batch.Error(); err != nil {
			b.Fatal(err)
		}
	}

	b.ResetTimer()
	cpu0 := cpuTime(b)
	var caller time.Duration
	start := time.Now()
	for i, r := range reqs {
		if paced {
			if d := time.Until(start.Add(time.Duration(i) * time.Second / 2000)); d > 0 {
				time.Sleep(d)
			}
		}
		t0 := time.Now()
		switch mode {
		case "sync":
			err = r.DoneConfirmed(ctx)
			mu.Lock()
			lat = append(lat, time.Since(t0))
			mu.Unlock()
		default:
			err = r.Done()
		}
		caller += time.Since(t0)
		if err != nil {
			b.Fatal(err)
		}
	}
	deadline := time.Now().Add(time.Minute)
	for {
		info, err := st.Info(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if info.State.Msgs == 0 && (!confirmed || w.Stats().AcksPending == 0) {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("%d messages left, stats %+v", info.State.Msgs, w.Stats())
		}
		time.Sleep(2 * time.Millisecond)
	}
	cpu := cpuTime(b) - cpu0
	b.StopTimer()

	b.ReportMetric(float64(caller.Nanoseconds())/float64(b.N), "caller-ns/op")
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
	if len(lat) > 0 {
		slices.Sort(lat)
		b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "confirm-p50-us")
		b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "confirm-p99-us")
	}
	if s := w.Stats(); confirmed && (s.AcksConfirmed != uint64(b.N) || s.AckRetries != 0) {
		b.Logf("stats %+v", s)
	}
}

// cpuTime is the process's user and system CPU time so far.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"fairdispatch/wire"
)

// Helpers of the storage tests (storage_test.go) carry the prefix sto.

// stoTracker follows what becomes of requests: the workers' completion
// records on dispatch.done.* and the outcomes published to its inbox (the
// Dispatch-Reply-To of the requests it publishes).
type stoTracker struct {
	inbox     string
	mu        sync.Mutex
	completed map[string]int          // request id -> completion records
	outcomes  map[string][]ecsOutcome // request id -> outcomes, in arrival order
}

func stoTrack(t *testing.T, nc *nats.Conn) *stoTracker {
	t.Helper()
	k := &stoTracker{inbox: nc.NewRespInbox(), completed: map[string]int{}, outcomes: map[string][]ecsOutcome{}}
	onCompletion(t, nc, "dispatch.done.*", func(c wire.Completion) {
		k.mu.Lock()
		k.completed[c.RequestID]++
		k.mu.Unlock()
	})
	subscribe(t, nc, k.inbox, func(m *nats.Msg) {
		var o ecsOutcome
		if json.Unmarshal(m.Data, &o) == nil {
			k.mu.Lock()
			k.outcomes[o.RequestID] = append(k.outcomes[o.RequestID], o)
			k.mu.Unlock()
		}
	})
	return k
}

// missing returns the ids of ids with no completion record yet.
func (k *stoTracker) missing(ids []string) []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	var out []string
	for _, id := range ids {
		if k.completed[id] == 0 {
			out = append(out, id)
		}
	}
	return out
}

// duplicates returns how many of ids completed more than once.
func (k *stoTracker) duplicates(ids []string) int {
	k.mu.Lock()
	defer k.mu.Unlock()
	n := 0
	for _, id := range ids {
		if k.completed[id] > 1 {
			n++
		}
	}
	return n
}

// rejected returns, for each of ids, its rejected outcomes so far.
func (k *stoTracker) rejected(ids []string) map[string][]ecsOutcome {
	k.mu.Lock()
	defer k.mu.Unlock()
	out := map[string][]ecsOutcome{}
	for _, id := range ids {
		for _, o := range k.outcomes[id] {
			if o.Status == wire.StatusRejected {
				out[id] = append(out[id], o)
			}
		}
	}
	return out
}

// stoFill publishes messages <idPrefix>-0, -1, ... to subject until JetStream
// refuses one, and returns the ids it stored and the refusal. It fails the
// test when an error is not a refusal for want of room, or when max
// messages are all stored.
func stoFill(t *testing.T, js jetstream.JetStream, subject, idPrefix string, hdr map[string]string, body []byte, max int) ([]string, error) {
	t.Helper()
	var ids []string
	for i := range max {
		id := fmt.Sprintf("%s-%d", idPrefix, i)
		_, err := tryPublish(js, subject, id, hdr, body)
		if err == nil {
			ids = append(ids, id)
			continue
		}
		var apiErr *jetstream.APIError
		if !errors.As(err, &apiErr) {
			t.Fatalf("publish %s to %s: %v, want JetStream's refusal", id, subject, err)
		}
		return ids, err
	}
	t.Fatalf("%d publishes to %s stored, none refused: the stream made room by discarding older messages (discard old), or has no limit", max, subject)
	return nil, nil
}

// stoRefusal checks that err is JetStream's API error code with the
// description want, as a producer receives it in its publish acknowledgement.
func stoRefusal(t *testing.T, err error, code int, want string) {
	t.Helper()
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) || int(apiErr.ErrorCode) != code || apiErr.Description != want {
		t.Fatalf("publish refused with %v (%#v), want JetStream error code %d %q", err, apiErr, code, want)
	}
	t.Logf("publish refused: err_code %d, code %d, description %q (%v)", apiErr.ErrorCode, apiErr.Code, apiErr.Description, err)
}

// stoSetLimits changes a stream's configuration as an operator would with
// `nats stream edit`: the other settings (its discard policy among them) stay.
func stoSetLimits(t *testing.T, js jetstream.JetStream, stream string, edit func(*jetstream.StreamConfig)) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, stream)
	if err != nil {
		t.Fatal(err)
	}
	cfg := s.CachedInfo().Config
	edit(&cfg)
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		t.Fatalf("update stream %s: %v", stream, err)
	}
}

// stoLetters returns the dead letters in DISPATCH_DLQ: for each request id,
// the Dispatch-Error of each letter of it.
func stoLetters(t *testing.T, js jetstream.JetStream) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for _, m := range streamAll(t, js, "DISPATCH_DLQ") {
		id := m.Header.Get(wire.HeaderRequestID)
		if id == "" {
			id = m.Header.Get(jetstream.MsgIDHeader)
		}
		out[id] = append(out[id], m.Header.Get(wire.HeaderError))
	}
	return out
}

// stoStreamInfo returns a stream's state.
func stoStreamInfo(t *testing.T, js jetstream.JetStream, name string) jetstream.StreamState {
	t.Helper()
	_, info := stream(t, js, name)
	return info.State
}

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"fairdispatch/bus"
	"fairdispatch/internal/natstest"
	"fairdispatch/naming"
	"fairdispatch/wire"
)

func TestReplayID(t *testing.T) {
	tests := []struct {
		seq  uint64
		id   string
		want string
	}{
		{7, "r-1", "replay:7:r-1"},
		{9, "replay:7:r-1", "replay:9:r-1"},                // dead-lettered again: not nested
		{9, "replay:x:r-1", "replay:9:replay:x:r-1"},       // not a replay id
		{3, "DISPATCH_REQ:12", "replay:3:DISPATCH_REQ:12"}, // an id the dispatcher made
		{4, "replay:5:replay:6:r", "replay:4:replay:6:r"},  // one level unwrapped
	}
	for _, tt := range tests {
		if got := replayID(tt.seq, tt.id); got != tt.want {
			t.Errorf("replayID(%d, %q) = %q, want %q", tt.seq, tt.id, got, tt.want)
		}
	}
}

func TestReplayHeaderDropsTheDispatchers(t *testing.T) {
	h := nats.Header{
		"Dispatch-Error": {"queue_full"}, "Dispatch-Error-Message": {"m"}, "Dispatch-Request-Id": {"r-1"},
		"Dispatch-Class": {"c"}, "Dispatch-Subject": {"dispatch.req.c"}, "Dispatch-Body-Dropped": {"9"},
		"Dispatch-Headers-Dropped": {"all"}, "Nats-Msg-Id": {"r-1"}, "Nats-Sequence": {"4"},
		"Dispatch-ISL-Tokens": {"10"}, "X-Multi": {"a", "b"},
	}
	got := replayHeader(h, "replay:4:r-1")
	want := nats.Header{"Dispatch-ISL-Tokens": {"10"}, "X-Multi": {"a", "b"}, "Nats-Msg-Id": {"replay:4:r-1"}}
	if len(got) != len(want) {
		t.Fatalf("replayHeader = %v, want %v", got, want)
	}
	for k, v := range want {
		if !slices.Equal(got[k], v) {
			t.Errorf("header %s = %q, want %q", k, got[k], v)
		}
	}
	if h.Get("Nats-Msg-Id") != "r-1" {
		t.Error("replayHeader modified its argument")
	}
}

func TestReplayable(t *testing.T) {
	names, err := naming.New("llama")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		l        bus.Letter
		subj, no string
	}{
		{bus.Letter{RequestID: "r", Class: "premium", Subject: "llama.req.gold"}, "llama.req.gold", ""},
		{bus.Letter{RequestID: "r", Class: "premium"}, "llama.req.premium", ""}, // before Dispatch-Subject
		{bus.Letter{RequestID: "r", Class: "p", Subject: "other.req.gold"}, "", `subject "other.req.gold" is not a request subject of prefix "llama"`},
		{bus.Letter{RequestID: "r", Class: "p", BodyDropped: true}, "", "body dropped"},
		{bus.Letter{RequestID: "r", Class: "p", HeadersDropped: "all"}, "", "headers dropped"},
		{bus.Letter{Class: "p"}, "", "no request id"},
	}
	for _, tt := range tests {
		subj, why := replayable(names, tt.l)
		if subj != tt.subj || why != tt.no {
			t.Errorf("replayable(%+v) = %q, %q; want %q, %q", tt.l, subj, why, tt.subj, tt.no)
		}
	}
}

func TestLetterFilterSince(t *testing.T) {
	now := time.Date(2026, 1, 2, 15, 0, 0, 0, time.UTC)
	var f letterFilter
	if err := f.resolve("90m", now); err != nil || !f.since.Equal(now.Add(-90*time.Minute)) {
		t.Errorf("--since 90m: %v, %v", f.since, err)
	}
	if err := f.resolve("2026-01-01T00:00:00Z", now); err != nil || !f.since.Equal(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)) {
		t.Errorf("--since RFC 3339: %v, %v", f.since, err)
	}
	for _, bad := range []string{"yesterday", "-1h"} {
		if err := f.resolve(bad, now); err == nil {
			t.Errorf("--since %q accepted", bad)
		}
	}
	f = letterFilter{class: "a.b"}
	if err := f.resolve("", now); err == nil {
		t.Error("--class a.b accepted")
	}
}

func TestProgressLine(t *testing.T) {
	var w natstest.Buffer
	p := startProgress(&w, "replayed", time.Millisecond) // not a terminal: a line every 10 ticks
	p.setTotal(10)
	for range 5 {
		p.read()
	}
	p.add(3) // two of the five read did not match the filter
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(w.String(), "read 5/10 dead letters (") || !strings.Contains(w.String(), "/s), replayed 3\n") {
		if time.Now().After(deadline) {
			t.Fatalf("no progress line: %q", w.String())
		}
		time.Sleep(time.Millisecond) // poll
	}
	for range 5 {
		p.read()
	}
	p.add(4)
	p.stop()
	p.stop() // idempotent
	lines := strings.Split(strings.TrimSpace(w.String()), "\n")
	if last := lines[len(lines)-1]; !strings.HasPrefix(last, "read 10/10 dead letters (") || !strings.HasSuffix(last, ", replayed 7") || strings.Contains(w.String(), "\r") {
		t.Errorf("last line %q, want the final count, and no carriage return off a terminal", last)
	}

	var quiet natstest.Buffer
	q := startProgress(&quiet, "purged", time.Hour)
	q.add(1)
	q.stop()
	if quiet.String() != "" {
		t.Errorf("a run shorter than a tick printed %q", quiet.String())
	}
}

// dlqServer starts a server with the pool's streams.
func dlqServer(t *testing.T) (*server.Server, jetstream.JetStream) {
	t.Helper()
	srv, nc := natstest.StartServer(t)
	js, _ := jetstream.New(nc)
	if err := bus.EnsureStreams(context.Background(), js, bus.StreamConfig{Storage: jetstream.MemoryStorage}); err != nil {
		t.Fatal(err)
	}
	return srv, js
}

// putLetter stores dead letter order-i of class limited with error code.
func putLetter(t *testing.T, js jetstream.JetStream, i int, code string) {
	t.Helper()
	id := fmt.Sprintf("order-%d", i)
	h := nats.Header{}
	for k, v := range map[string]string{wire.HeaderError: code, wire.HeaderErrorMessage: "full", wire.HeaderRequestID: id,
		wire.HeaderClass: "limited", wire.HeaderSubject: "dispatch.req.limited", "Nats-Msg-Id": id} {
		h.Set(k, v)
	}
	if _, err := js.PublishMsg(context.Background(), &nats.Msg{Subject: "dispatch.dlq.limited", Header: h, Data: []byte("body")}); err != nil {
		t.Fatal(err)
	}
}

// TestScanProgressCountsWhatItReads: under --error, the progress line's
// count and total are the letters the scan reads, all of them, so that it
// ends at its total; what the command did is counted apart.
func TestScanProgressCountsWhatItReads(t *testing.T) {
	srv, js := dlqServer(t)
	ctx := context.Background()
	for i := 1; i <= 5; i++ {
		code := "timeout"
		if i%2 == 0 {
			code = "queue_full"
		}
		putLetter(t, js, i, code)
	}
	g := &globals{server: srv.ClientURL(), timeout: 5 * time.Second, stdout: io.Discard, stderr: io.Discard}
	if err := g.resolve(); err != nil {
		t.Fatal(err)
	}
	d, err := g.dlq(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer d.nc.Close()
	p := startProgress(io.Discard, "replayed", time.Hour)
	defer p.stop()
	matched := 0
	err = d.scan(ctx, g, letterFilter{code: "queue_full"}, true, 2, p, func(bus.Letter, jetstream.Msg) error {
		matched++
		p.add(1)
		return nil
	})
	if err != nil || matched != 2 || p.n.Load() != 5 || p.total.Load() != 5 || !strings.HasSuffix(p.line(), ", replayed 2") {
		t.Errorf("scan: %v, %d matched, progress %q; want 2 matched and read 5/5, replayed 2", err, matched, p.line())
	}
}

// TestReplayStoppedSaysHowFar: a replay that fails partway (the request
// stream full after two) says how many letters it replayed before the
// error, in text and in --json, and exits 1; a rerun goes on from there.
func TestReplayStoppedSaysHowFar(t *testing.T) {
	srv, js := dlqServer(t)
	ctx := context.Background()
	for i := 1; i <= 5; i++ {
		putLetter(t, js, i, "queue_full")
	}
	st, err := js.Stream(ctx, "DISPATCH_REQ")
	if err != nil {
		t.Fatal(err)
	}
	cfg := st.CachedInfo().Config
	cfg.MaxMsgs = 2
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	fairctl := func(args ...string) (int, string, string) {
		var out, errb bytes.Buffer
		code := run(ctx, append([]string{"--server", srv.ClientURL()}, args...), &out, &errb)
		return code, out.String(), errb.String()
	}
	code, out, errs := fairctl("dlq", "replay", "--yes")
	if code != 1 || !strings.Contains(out, "stopped after replaying 2 dead letters") || !strings.Contains(errs, "republish dead letter 3") {
		t.Fatalf("exit %d\nstdout %s\nstderr %s\nwant 1, naming the 2 replayed and the letter that failed", code, out, errs)
	}
	code, out, _ = fairctl("--json", "dlq", "replay", "--yes")
	var rep struct {
		Summary replaySummary `json:"summary"`
		Error   string        `json:"error"`
	}
	if code != 1 || json.Unmarshal([]byte(out), &rep) != nil || rep.Error == "" || rep.Summary.Done != 0 {
		t.Fatalf("--json: exit %d, %q; want 1 and a summary of nothing replayed (the stream is still full) with the error", code, out)
	}
}

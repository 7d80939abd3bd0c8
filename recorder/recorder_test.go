package recorder

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"fairdispatch/internal/natstest"
	"fairdispatch/wire"
)

type counts struct{ recorded, dropped atomic.Int64 }

func (c *counts) TraceRecorded() { c.recorded.Add(1) }
func (c *counts) TraceDropped()  { c.dropped.Add(1) }

// blockingSink blocks every write after the header until release is closed.
type blockingSink struct {
	lines   [][]byte
	release chan struct{}
	header  bool
}

func (s *blockingSink) Write(line []byte) error {
	if s.header {
		<-s.release
	}
	s.header = true
	s.lines = append(s.lines, append([]byte(nil), line...))
	return nil
}
func (s *blockingSink) Flush() error { return nil }
func (s *blockingSink) Close() error { return nil }

// TestRecordNeverBlocks: with the writer stuck, Record returns at once and
// the records beyond the buffer are dropped and counted; the buffered ones
// are written once the writer moves again.
func TestRecordNeverBlocks(t *testing.T) {
	var c counts
	sink := &blockingSink{release: make(chan struct{})}
	r, err := New("", 1, 4, &c, zerolog.Nop(), sink)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range 100 {
			r.Record(wire.TraceRecord{Event: wire.TraceArrive, T: int64(i), ID: "r"})
		}
	}()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("Record blocked on a stuck writer")
	}
	// The writer holds one record, the buffer four: at least 95 dropped.
	if d := c.dropped.Load(); d < 95 || d > 96 {
		t.Errorf("dropped %d of 100 with a buffer of 4, want 95 or 96", d)
	}
	close(sink.release)
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if got := int64(len(sink.lines) - 1); got != c.recorded.Load() || got+c.dropped.Load() != 100 {
		t.Errorf("written %d, recorded %d, dropped %d: want written = recorded and written + dropped = 100", got, c.recorded.Load(), c.dropped.Load())
	}
}

// TestFileSink: the file has the header (format, version, policy) and then
// every record as one JSON line, complete once Close returns.
func TestFileSink(t *testing.T) {
	path := filepath.Join(t.TempDir(), "t.jsonl")
	f, err := OpenFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var c counts
	r, err := New("policy_classes: []\n", 42, 0, &c, zerolog.Nop(), f)
	if err != nil {
		t.Fatal(err)
	}
	rank := 0
	for i := range 1000 {
		r.Record(wire.TraceRecord{Event: wire.TraceDispatch, T: int64(i), ID: "r", Class: "premium", Key: "_", Cost: 512, Worker: "w1", Rank: &rank, Outcome: "accepted"})
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	file, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	sc := bufio.NewScanner(file)
	n := 0
	for sc.Scan() {
		var rec wire.TraceRecord
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			t.Fatalf("line %d: %v", n+1, err)
		}
		if n == 0 {
			if err := wire.CheckTraceHeader(rec); err != nil || rec.Policy != "policy_classes: []\n" || rec.T != 42 {
				t.Fatalf("header %s: %v", sc.Bytes(), err)
			}
		} else if rec.T != int64(n-1) || rec.Worker != "w1" || rec.Rank == nil {
			t.Fatalf("line %d: %s", n+1, sc.Bytes())
		}
		n++
	}
	if n != 1001 || c.recorded.Load() != 1000 || c.dropped.Load() != 0 {
		t.Errorf("%d lines, recorded %d, dropped %d; want 1001, 1000, 0", n, c.recorded.Load(), c.dropped.Load())
	}
	// A restart appends a header and its records; it loses nothing.
	f, err = OpenFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if r, err = New("policy_classes: []\n", 43, 0, &c, zerolog.Nop(), f); err != nil {
		t.Fatal(err)
	}
	r.Record(wire.TraceRecord{Event: wire.TraceArrive, T: 5000, ID: "after"})
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	if len(lines) != 1003 || !strings.Contains(lines[1001], `"ev":"header"`) || !strings.Contains(lines[1002], `"id":"after"`) {
		t.Errorf("after a restart: %d lines, want 1003 ending with a header and the new record", len(lines))
	}
}

// TestStreamSink: with the trace stream ensured (size-limited, discarding
// the oldest), the header and every record land in it, one message each.
func TestStreamSink(t *testing.T) {
	_, nc := natstest.StartServer(t)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := EnsureStream(ctx, js, "DISPATCH_TRACE", "dispatch.trace", 1<<20, 1, jetstream.MemoryStorage); err != nil {
		t.Fatal(err)
	}
	if err := EnsureStream(ctx, js, "DISPATCH_TRACE", "dispatch.trace", 0, 1, jetstream.MemoryStorage); err != nil {
		t.Fatalf("second EnsureStream: %v", err)
	}
	var c counts
	r, err := New("", 1, 0, &c, zerolog.Nop(), StreamSink{P: nc, Subject: "dispatch.trace"})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 50 {
		r.Record(wire.TraceRecord{Event: wire.TraceArrive, T: int64(i), ID: "r"})
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	st, err := js.Stream(ctx, "DISPATCH_TRACE")
	if err != nil {
		t.Fatal(err)
	}
	natstest.Eventually(t, 10*time.Second, func() bool {
		info, err := st.Info(ctx)
		return err == nil && info.State.Msgs == 51
	}, "51 messages (header + 50) in DISPATCH_TRACE")
	info, _ := st.Info(ctx)
	if info.Config.MaxBytes != 1<<20 || info.Config.Discard != jetstream.DiscardOld {
		t.Errorf("stream limits %d %v, want 1 MiB, discard old", info.Config.MaxBytes, info.Config.Discard)
	}
}

// TestOpenFileCutsAPartialLine: a trace whose writer was killed mid-line is
// cut back to its last whole line before a restarted dispatcher appends,
// so the file stays a sequence of whole JSON lines; a whole file is kept.
func TestOpenFileCutsAPartialLine(t *testing.T) {
	dir := t.TempDir()
	whole := `{"ev":"header","t":1,"format":"fairdispatch-trace","version":1}` + "\n" + `{"ev":"arrive","t":2,"id":"a"}` + "\n"
	for _, c := range []struct{ name, before, kept string }{
		{"partial", whole + `{"ev":"arrive","t":3,"i`, whole},
		{"whole", whole, whole},
		{"no whole line", `{"ev":"hea`, ""},
		{"long partial", whole + strings.Repeat("x", 100<<10), whole},
	} {
		path := filepath.Join(dir, c.name+".jsonl")
		if err := os.WriteFile(path, []byte(c.before), 0o644); err != nil {
			t.Fatal(err)
		}
		f, err := OpenFile(path)
		if err != nil {
			t.Fatal(err)
		}
		r, err := New("", 9, 0, &counts{}, zerolog.Nop(), f)
		if err != nil {
			t.Fatal(err)
		}
		if err := r.Close(); err != nil {
			t.Fatal(err)
		}
		got, _ := os.ReadFile(path)
		if !strings.HasPrefix(string(got), c.kept) || strings.Count(string(got[len(c.kept):]), "\n") != 1 ||
			!strings.HasPrefix(string(got[len(c.kept):]), `{"ev":"header","t":9`) {
			t.Errorf("%s: the file after a restart is %q; want %q and the new header", c.name, got, c.kept)
		}
	}
}

// failingSink fails every write while fail is set.
type failingSink struct {
	fail  atomic.Bool
	lines atomic.Int64
}

func (s *failingSink) Write([]byte) error {
	if s.fail.Load() {
		return os.ErrClosed
	}
	s.lines.Add(1)
	return nil
}
func (s *failingSink) Flush() error { return nil }
func (s *failingSink) Close() error { return nil }

// TestAFailedWriteIsDropped: a record no sink took counts as dropped, not
// recorded, and a sink that recovers takes the records after.
func TestAFailedWriteIsDropped(t *testing.T) {
	var c counts
	s := &failingSink{}
	r, err := New("", 1, 0, &c, zerolog.Nop(), s)
	if err != nil {
		t.Fatal(err)
	}
	s.fail.Store(true)
	for range 10 {
		r.Record(wire.TraceRecord{Event: wire.TraceArrive, ID: "a"})
	}
	natstest.Eventually(t, 10*time.Second, func() bool { return c.dropped.Load() == 10 }, "ten records dropped")
	s.fail.Store(false)
	r.Record(wire.TraceRecord{Event: wire.TraceArrive, ID: "b"})
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if c.recorded.Load() != 1 || c.dropped.Load() != 10 || s.lines.Load() != 2 {
		t.Errorf("recorded %d, dropped %d, lines %d; want 1, 10 and 2 (the header and b)", c.recorded.Load(), c.dropped.Load(), s.lines.Load())
	}
}

// TestHeaderWaitsForRoom: a header (a live policy revision's) offered while
// the buffer is full waits for the writer to make room rather than being
// dropped like an event: the records after it ran under its policy.
func TestHeaderWaitsForRoom(t *testing.T) {
	var c counts
	sink := &blockingSink{release: make(chan struct{})}
	r, err := New("", 1, 1, &c, zerolog.Nop(), sink)
	if err != nil {
		t.Fatal(err)
	}
	r.Record(wire.TraceRecord{Event: wire.TraceArrive, ID: "a"}) // taken by the writer, which blocks on it
	natstest.Eventually(t, 10*time.Second, func() bool { return len(r.ch) == 0 }, "the writer holding a")
	r.Record(wire.TraceRecord{Event: wire.TraceArrive, ID: "b"}) // fills the buffer
	released := false
	headerWaiting = func() { close(sink.release); released = true } // the writer moves while the header waits
	defer func() { headerWaiting = func() {} }()
	r.Record(wire.TraceRecord{Event: wire.TraceHeader, T: 2, Format: wire.TraceFormat, Version: wire.TraceVersion, Policy: "next"})
	if !released {
		close(sink.release)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if c.dropped.Load() != 0 || len(sink.lines) != 4 || !strings.Contains(string(sink.lines[3]), `"policy":"next"`) {
		t.Errorf("dropped %d, %d lines (last %q); want none dropped and the header written last", c.dropped.Load(), len(sink.lines), sink.lines[len(sink.lines)-1])
	}
}

// tearingWriter writes its first call whole, then half of the second and
// fails it (a disk that filled mid-write), then recovers.
type tearingWriter struct {
	w     io.Writer
	calls int
}

func (t *tearingWriter) Write(p []byte) (int, error) {
	t.calls++
	if t.calls == 2 {
		n, _ := t.w.Write(p[:len(p)/2])
		return n, syscall.ENOSPC
	}
	return t.w.Write(p)
}

// TestFileSinkStaysFailed: after a write that failed part-way, a trace file
// takes nothing more, even once the disk has room again: what it appended
// would follow a torn line and tear a record in the middle of the file.
func TestFileSinkStaysFailed(t *testing.T) {
	path := filepath.Join(t.TempDir(), "trace.jsonl")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	s := &FileSink{f: f, w: bufio.NewWriterSize(&tearingWriter{w: f}, 64)}
	line := []byte(strings.Repeat("x", 40))
	failedAt := -1
	for i := range 10 {
		if err := s.Write(line); err != nil && failedAt < 0 {
			failedAt = i
		}
	}
	flushErr := s.Flush()
	_ = s.Close()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if failedAt < 0 || flushErr == nil {
		t.Fatalf("no write failed (flush: %v)", flushErr)
	}
	// What reached the file is the lines written before the failure and a
	// torn part of the next: a prefix of the lines, ending within a line.
	all := bytes.Repeat(append(line, '\n'), 10)
	if !bytes.HasPrefix(all, data) || len(data) == 0 || data[len(data)-1] == '\n' || len(data) > failedAt*(len(line)+1) {
		t.Errorf("the file after the failure is %q: want the lines before write %d and only a torn part of one after", data, failedAt)
	}
}

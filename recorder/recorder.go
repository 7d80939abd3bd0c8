// Package recorder writes the dispatcher's traffic trace (docs/protocol.md,
// Trace records): the queue actor hands it records without ever blocking,
// and one writer goroutine encodes them as JSON lines to a file and/or
// publishes them, one message each, to the trace stream.
//
// The queue actor appends to a bounded buffer; when the writer falls behind
// and the buffer is full, the record is dropped and counted
// (fairdispatch_trace_records_dropped_total), never waited for.
package recorder

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"fairdispatch/wire"
)

// DefaultBuffer is the default capacity of the buffer between the queue actor
// and the writer, in records.
const DefaultBuffer = 65536

// Sink receives encoded records, one JSON line each (without the newline),
// from the writer goroutine only.
type Sink interface {
	Write(line []byte) error
	// Flush is called when the buffer is empty, and Close at the end.
	Flush() error
	Close() error
}

// Counters are told about every record: written or dropped.
type Counters interface {
	TraceRecorded()
	TraceDropped()
}

// Recorder buffers records and writes them to its sinks. Record is safe for
// concurrent use and never blocks.
type Recorder struct {
	ch    chan wire.TraceRecord
	sinks []Sink
	cnt   Counters
	log   zerolog.Logger
	done  chan struct{}
	once  sync.Once
	err   error // of Close
}

// New writes the header (format, version and the policy's YAML text, "" for
// a policy built from flags) to every sink, then starts the writer. buf is
// the buffer's capacity in records (<= 0: DefaultBuffer). The caller closes
// the recorder with Close, after the queue actor has stopped.
func New(policyYAML string, now int64, buf int, cnt Counters, log zerolog.Logger, sinks ...Sink) (*Recorder, error) {
	if buf <= 0 {
		buf = DefaultBuffer
	}
	r := &Recorder{ch: make(chan wire.TraceRecord, buf), sinks: sinks, cnt: cnt,
		log: log.With().Str("component", "recorder").Logger(), done: make(chan struct{})}
	hdr := wire.TraceRecord{Event: wire.TraceHeader, T: now, Format: wire.TraceFormat, Version: wire.TraceVersion, Policy: policyYAML}
	line, err := encode(hdr)
	if err != nil {
		return nil, fmt.Errorf("recorder: header: %w", err)
	}
	for _, s := range sinks {
		if err := s.Write(line); err != nil {
			return nil, fmt.Errorf("recorder: header: %w", err)
		}
		if err := s.Flush(); err != nil {
			return nil, fmt.Errorf("recorder: header: %w", err)
		}
	}
	go r.run()
	return r, nil
}

// headerWait bounds how long Record waits for room for a header (a live
// policy revision's): the records after it ran under its policy, so losing
// it would misfile them all, where a lost event loses one.
const headerWait = 100 * time.Millisecond

// headerWaiting is called when a header has to wait for room (a seam for a
// test, which then lets the writer move).
var headerWaiting = func() {}

// Record queues rec for writing, or drops and counts it if the buffer is full;
// a header waits up to headerWait for room first. A nil Recorder records
// nothing.
func (r *Recorder) Record(rec wire.TraceRecord) {
	if r == nil {
		return
	}
	select {
	case r.ch <- rec:
		return
	default:
	}
	if rec.Event == wire.TraceHeader {
		headerWaiting()
		t := time.NewTimer(headerWait)
		defer t.Stop()
		select {
		case r.ch <- rec:
			return
		case <-t.C:
			r.log.Error().Msg("trace header dropped: the trace writer is stuck; the records after it are misfiled under the policy before")
		}
	}
	r.cnt.TraceDropped()
}

// Close writes what is buffered, closes the sinks and returns the errors of
// closing them. Record must not be called after Close; Close may be called
// again, and then returns the same.
func (r *Recorder) Close() error {
	if r == nil {
		return nil
	}
	r.once.Do(func() {
		close(r.ch)
		<-r.done
		var errs []error
		for _, s := range r.sinks {
			errs = append(errs, s.Close())
		}
		r.err = errors.Join(errs...)
	})
	return r.err
}

func (r *Recorder) run() {
	defer close(r.done)
	failed := make([]bool, len(r.sinks)) // log a sink's failure once, not per record
	for rec := range r.ch {
		line, err := encode(rec)
		if err != nil {
			r.cnt.TraceDropped()
			continue
		}
		written := false
		for i, s := range r.sinks {
			if err := s.Write(line); err != nil {
				if !failed[i] {
					failed[i] = true
					r.log.Error().Err(err).Msg("trace sink failed: its records are lost until it recovers (a trace file's, until the dispatcher restarts)")
				}
				continue
			}
			written = true
			if failed[i] {
				failed[i] = false
				r.log.Info().Msg("trace sink recovered")
			}
		}
		// A record no sink took is dropped, not recorded.
		if written {
			r.cnt.TraceRecorded()
		} else {
			r.cnt.TraceDropped()
		}
		if len(r.ch) == 0 {
			for _, s := range r.sinks {
				_ = s.Flush()
			}
		}
	}
}

func encode(rec wire.TraceRecord) ([]byte, error) { return wire.Marshal(rec) }

// FileSink writes JSON lines to a file, buffered.
type FileSink struct {
	f *os.File
	w *bufio.Writer
}

// OpenFile opens the trace file at path for appending, creating it if
// needed: a restarted dispatcher adds a header and its records after the
// earlier ones rather than losing them. A file that ends within a line (the
// dispatcher that wrote it was killed mid-write) is cut back to its last
// whole line first, so that the trace stays readable as a whole.
func OpenFile(path string) (*FileSink, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("recorder: %w", err)
	}
	if err := cutPartialLine(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("recorder: %s: %w", path, err)
	}
	return &FileSink{f: f, w: bufio.NewWriterSize(f, 1<<16)}, nil
}

// cutPartialLine truncates f after its last newline when it does not end
// with one.
func cutPartialLine(f *os.File) error {
	st, err := f.Stat()
	if err != nil || st.Size() == 0 {
		return err
	}
	buf := make([]byte, 64<<10)
	for end := st.Size(); end > 0; {
		start := max(0, end-int64(len(buf)))
		n, err := f.ReadAt(buf[:end-start], start)
		if err != nil && n < int(end-start) {
			return err
		}
		if end == st.Size() && buf[n-1] == '\n' {
			return nil // ends with a whole line
		}
		if i := bytes.LastIndexByte(buf[:n], '\n'); i >= 0 {
			return f.Truncate(start + int64(i) + 1)
		}
		end = start
	}
	return f.Truncate(0) // not one whole line
}

// Write implements Sink. After a failed write (a full disk) every later one
// fails too, until the dispatcher restarts: a write that failed may have
// left part of a line, and appending after it would tear a record in the
// middle of the file, where OpenFile's cut of a partial last line cannot
// mend it.
func (s *FileSink) Write(line []byte) error {
	if _, err := s.w.Write(line); err != nil {
		return err
	}
	return s.w.WriteByte('\n')
}

// Flush implements Sink.
func (s *FileSink) Flush() error { return s.w.Flush() }

// Close implements Sink.
func (s *FileSink) Close() error {
	err := s.w.Flush()
	return errors.Join(err, s.f.Close())
}

// Publisher publishes one message (nats.Conn.Publish).
type Publisher interface {
	Publish(subject string, data []byte) error
}

// StreamSink publishes each record as one core NATS message on the trace
// stream's subject: no acknowledgement is awaited, so a slow or full stream
// never holds the writer up (the stream's limits discard the oldest).
type StreamSink struct {
	P       Publisher
	Subject string
}

// Write implements Sink.
func (s StreamSink) Write(line []byte) error { return s.P.Publish(s.Subject, line) }

// Flush implements Sink.
func (s StreamSink) Flush() error { return nil }

// Close implements Sink.
func (s StreamSink) Close() error { return nil }

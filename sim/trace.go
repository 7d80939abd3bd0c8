package sim

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"

	"fairdispatch/wire"
)

// Arrival is one request entering the dispatcher.
type Arrival struct {
	T         int64  // when the dispatcher took it in, Unix ns (virtual time)
	ID        string // request id
	Token     string // subject class token: a policy resolves the class from it
	Class     string // the class the recording policy resolved ("" for generated arrivals)
	Key       string // fairness key, "_" for none
	Published int64  // Unix ns
	ISL       uint64
	Cached    uint64
}

// Dispatch is one request accepted by a worker.
type Dispatch struct {
	T      int64
	ID     string
	Class  string
	Key    string
	Cost   uint64
	Worker string
	Rank   int
}

// Reject is one request rejected (dead-lettered).
type Reject struct {
	T     int64
	ID    string
	Class string
	Key   string
	Code  string
}

// Trace is a recorded trace: its header's policy and its events in order.
type Trace struct {
	Version int
	Started int64  // the header's time, Unix ns
	Policy  string // the recording policy's YAML, "" if built from flags
	// Restarts are the times of the headers after the first that a start
	// wrote (Revision 0): a dispatcher started again and appended to the
	// trace. A live policy revision's header with the same policy text (an
	// operator put the same policy again) is neither a restart nor a change.
	Restarts []int64
	// Redelivered counts arrivals left out: a request arriving again
	// while its first arrival was still waiting (a restarted dispatcher,
	// or a new leader, took in what the old one held). The request is
	// one request, and its first arrival stands for it.
	Redelivered int
	Arrivals    []Arrival
	Dispatches  []Dispatch // accepted only
	Rejects     []Reject
}

// ReadTrace reads a trace of JSON lines: a header (wire.CheckTraceHeader),
// then events. A later header (the dispatcher restarted and appended to the
// trace stream) must carry the same policy; events of unknown kinds are
// skipped, so that later minor versions can add some.
func ReadTrace(r io.Reader) (*Trace, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
	t := &Trace{}
	waiting := map[string]bool{} // ids arrived, neither dispatched nor rejected
	line := 0
	for sc.Scan() {
		line++
		if len(sc.Bytes()) == 0 {
			continue
		}
		var rec wire.TraceRecord
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			return nil, fmt.Errorf("trace line %d: %w", line, err)
		}
		if t.Version == 0 {
			if err := wire.CheckTraceHeader(rec); err != nil {
				return nil, fmt.Errorf("trace line %d: %w", line, err)
			}
			t.Version, t.Started, t.Policy = rec.Version, rec.T, rec.Policy
			continue
		}
		key := rec.Key
		if key == "" {
			key = "_"
		}
		switch rec.Event {
		case wire.TraceHeader:
			if err := wire.CheckTraceHeader(rec); err != nil {
				return nil, fmt.Errorf("trace line %d: %w", line, err)
			}
			if rec.Policy != t.Policy {
				return nil, fmt.Errorf("trace line %d: the policy changed within the trace; split it at this line", line)
			}
			if rec.Revision == 0 {
				t.Restarts = append(t.Restarts, rec.T)
			}
		case wire.TraceArrive:
			if waiting[rec.ID] {
				t.Redelivered++
				continue
			}
			waiting[rec.ID] = true
			t.Arrivals = append(t.Arrivals, Arrival{T: rec.T, ID: rec.ID, Token: rec.Token, Class: rec.Class, Key: key,
				Published: rec.Published, ISL: rec.ISL, Cached: rec.Cached})
		case wire.TraceDispatch:
			if rec.Outcome != "accepted" {
				continue
			}
			delete(waiting, rec.ID)
			rank := 0
			if rec.Rank != nil {
				rank = *rec.Rank
			}
			t.Dispatches = append(t.Dispatches, Dispatch{T: rec.T, ID: rec.ID, Class: rec.Class, Key: key, Cost: rec.Cost,
				Worker: rec.Worker, Rank: rank})
		case wire.TraceReject:
			delete(waiting, rec.ID)
			t.Rejects = append(t.Rejects, Reject{T: rec.T, ID: rec.ID, Class: rec.Class, Key: key, Code: rec.Outcome})
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("trace: %w", err)
	}
	if t.Version == 0 {
		return nil, fmt.Errorf("trace: empty (no header)")
	}
	return t, nil
}

// Recorded returns the run the trace recorded, to be analysed like a
// simulated one (completions are not recorded).
func (t *Trace) Recorded() *Run {
	return &Run{Arrivals: t.Arrivals, Dispatches: t.Dispatches, Rejects: t.Rejects}
}

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"fairdispatch/sim"
	"fairdispatch/wire"
)

// readTraceStream reads the trace stream <Q>_TRACE (the dispatcher's
// --record-stream) as it is now, from its first header on: records older
// than the first header still in the stream (its start was discarded by the
// size limit) are skipped, since the policy they ran under is unknown. A
// later header with another policy (a live revision, a restart under another
// policy) starts the trace again there, the records before it skipped and
// said so on stderr: a stream cannot be split as a file can, and the sim
// replays one policy's traffic.
func readTraceStream(ctx context.Context, g *globals) (*sim.Trace, error) {
	nc, js, err := g.jetstream(ctx)
	if err != nil {
		return nil, err
	}
	defer nc.Close()
	name := g.names.TraceStream()
	tctx, cancel := context.WithTimeout(ctx, g.timeout)
	defer cancel()
	st, err := js.Stream(tctx, name)
	if err != nil {
		return nil, fmt.Errorf("trace stream %s: %w", name, err)
	}
	info, err := st.Info(tctx)
	if err != nil {
		return nil, fmt.Errorf("trace stream %s: %w", name, err)
	}
	last := info.State.LastSeq
	if info.State.Msgs == 0 {
		return nil, fmt.Errorf("trace stream %s is empty", name)
	}
	cons, err := st.OrderedConsumer(tctx, jetstream.OrderedConsumerConfig{})
	if err != nil {
		return nil, fmt.Errorf("trace stream %s: %w", name, err)
	}
	var buf bytes.Buffer
	header := false
	policy, kept, skipped := "", 0, 0
	for {
		batch, err := cons.Fetch(512, jetstream.FetchMaxWait(g.timeout))
		if err != nil {
			return nil, fmt.Errorf("trace stream %s: %w", name, err)
		}
		n := 0
		for m := range batch.Messages() {
			n++
			md, err := m.Metadata()
			if err != nil {
				return nil, err
			}
			data := m.Data()
			if bytes.Contains(data, []byte(`"ev":"`+wire.TraceHeader+`"`)) {
				var rec wire.TraceRecord
				if json.Unmarshal(data, &rec) == nil && rec.Event == wire.TraceHeader {
					if header && rec.Policy != policy {
						buf.Reset()
						skipped += kept
						kept = 0
						fmt.Fprintf(g.stderr, "fairctl sim: the policy changed at sequence %d of %s: the trace is read from there (%d earlier records skipped)\n",
							md.Sequence.Stream, name, skipped)
					}
					header, policy = true, rec.Policy
				}
			}
			if header {
				buf.Write(data)
				buf.WriteByte('\n')
				kept++
			}
			if md.Sequence.Stream >= last {
				if !header {
					return nil, fmt.Errorf("trace stream %s holds no header: its start was discarded and no dispatcher has started recording since", name)
				}
				return sim.ReadTrace(&buf)
			}
		}
		if err := batch.Error(); err != nil && !errors.Is(err, jetstream.ErrNoMessages) {
			return nil, fmt.Errorf("trace stream %s: %w", name, err)
		}
		if n == 0 {
			return nil, fmt.Errorf("trace stream %s: no message within %v before sequence %d", name, g.timeout, last)
		}
	}
}

package engineworker

// The engine's ZMQ KV event stream, one subscriber per data-parallel rank,
// as vllm/distributed/kv_events.py ZmqEventPublisher publishes it: a PUB
// socket at the endpoint's port plus the rank (offset_endpoint_port), frames
// (topic, seq, payload) with seq an 8-byte big-endian counter from 0 per
// engine process, and an optional ROUTER replay socket (its port shifted the
// same way) that answers a start seq with every buffered batch from it and
// an end marker seq -1, as (seq, payload) or, newer, (topic, seq, payload).

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/go-zeromq/zmq4"
)

// OffsetEndpoint shifts the port of a ZMQ tcp endpoint by rank, as vLLM's
// and SGLang's offset_endpoint_port do (rank 0 and port 0 unchanged; an
// inproc endpoint gets _dp<rank>). A bind address ("*") is read as loopback.
func OffsetEndpoint(endpoint string, rank int) (string, error) {
	if endpoint == "" {
		return "", nil
	}
	endpoint = strings.Replace(endpoint, "://*:", "://127.0.0.1:", 1)
	if rank == 0 {
		return endpoint, nil
	}
	if strings.HasPrefix(endpoint, "inproc") {
		return fmt.Sprintf("%s_dp%d", endpoint, rank), nil
	}
	u, err := url.Parse(endpoint)
	if err != nil || u.Scheme != "tcp" {
		return "", fmt.Errorf("engineworker: endpoint %q: want tcp://host:port", endpoint)
	}
	port, err := strconv.Atoi(u.Port())
	if err != nil {
		return "", fmt.Errorf("engineworker: endpoint %q: %w", endpoint, err)
	}
	if port == 0 {
		return endpoint, nil
	}
	return fmt.Sprintf("tcp://%s:%d", u.Hostname(), port+rank), nil
}

// zmqMsg is one batch from the engine: live or replayed.
type zmqMsg struct {
	seq     int64
	payload []byte
}

// parseSeq reads a seq frame: 8 bytes big-endian, or 24 with the stream id
// of a publisher with a snapshot endpoint (vMaroon/vllm@08ee3e5).
func parseSeq(b []byte) (int64, error) {
	if len(b) != 8 && len(b) != 24 {
		return 0, fmt.Errorf("%w: seq frame of %d bytes (want 8)", ErrLayout, len(b))
	}
	return int64(binary.BigEndian.Uint64(b[:8])), nil
}

// seqConnected is the seq of the message subscribe sends when it has
// (re)connected: what the engine published meanwhile is lost to the
// subscription (a PUB drops what no subscriber takes), so the loop asks the
// replay socket for it.
const seqConnected = -2

// subscribe receives the engine's live batches until ctx ends, reconnecting
// as ZMQ does. Messages go to out, after a seqConnected one on each
// connection; a malformed one is reported on errs.
func subscribe(ctx context.Context, endpoint, topic string, out chan<- zmqMsg, errs func(error)) {
	for ctx.Err() == nil {
		sub := zmq4.NewSub(ctx, zmq4.WithAutomaticReconnect(true), zmq4.WithDialerRetry(200*time.Millisecond))
		err := sub.Dial(endpoint)
		if err == nil {
			err = sub.SetOption(zmq4.OptionSubscribe, topic)
		}
		if err == nil {
			select {
			case out <- zmqMsg{seq: seqConnected}:
			case <-ctx.Done():
			}
		}
		for err == nil {
			var m zmq4.Msg
			if m, err = sub.Recv(); err != nil {
				break
			}
			if len(m.Frames) != 3 {
				errs(fmt.Errorf("%w: message of %d frames (want topic, seq, payload)", ErrLayout, len(m.Frames)))
				continue
			}
			seq, perr := parseSeq(m.Frames[1])
			if perr != nil {
				errs(perr)
				continue
			}
			select {
			case out <- zmqMsg{seq, m.Frames[2]}:
			case <-ctx.Done():
			}
		}
		sub.Close()
		if ctx.Err() == nil {
			errs(fmt.Errorf("engineworker: zmq %s: %w", endpoint, err))
			select {
			case <-time.After(500 * time.Millisecond):
			case <-ctx.Done():
			}
		}
	}
}

// errReplay is returned by replay when the engine could not replay the range.
var errReplay = errors.New("engineworker: replay incomplete")

// replay asks the replay socket for every batch from start up to and
// including last, within timeout. It returns them in order; errReplay when
// the first batch returned is not start or the range ends early (the
// engine's buffer no longer holds it, or it restarted). With last < 0 it
// returns whatever the engine holds from start on, a gap included.
func replay(ctx context.Context, endpoint string, start, last int64, timeout time.Duration) ([]zmqMsg, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	d := zmq4.NewDealer(ctx, zmq4.WithTimeout(timeout))
	defer d.Close()
	if err := d.Dial(endpoint); err != nil {
		return nil, fmt.Errorf("engineworker: replay %s: %w", endpoint, err)
	}
	var s [8]byte
	binary.BigEndian.PutUint64(s[:], uint64(start))
	// A DEALER sends the empty delimiter a REQ socket would: the ROUTER then
	// sees (identity, "", start), the three frames it expects.
	if err := d.SendMulti(zmq4.NewMsgFrom(nil, s[:])); err != nil {
		return nil, fmt.Errorf("engineworker: replay %s: %w", endpoint, err)
	}
	var got []zmqMsg
	want := start
	for {
		m, err := d.Recv()
		if err != nil {
			return got, fmt.Errorf("%w: %v", errReplay, err)
		}
		f := m.Frames
		if len(f) > 0 && len(f[0]) == 0 {
			f = f[1:] // the delimiter
		}
		if len(f) == 3 {
			f = f[1:] // the topic (newer vLLM)
		}
		if len(f) != 2 {
			return got, fmt.Errorf("%w: replay message of %d frames", ErrLayout, len(m.Frames))
		}
		seq, err := parseSeq(f[0])
		if err != nil {
			return got, err
		}
		if seq == -1 {
			if last >= 0 && want <= last {
				return got, errReplay
			}
			return got, nil
		}
		if seq < want {
			continue
		}
		if last < 0 {
			got, want = append(got, zmqMsg{seq, f[1]}), seq+1
			continue
		}
		if seq > want {
			return got, errReplay
		}
		if seq <= last {
			got = append(got, zmqMsg{seq, f[1]})
		}
		want++
		if want > last {
			return got, nil
		}
	}
}

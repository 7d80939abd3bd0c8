package ingest

import (
	"reflect"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/nats-io/nats.go"
	"pgregory.net/rapid"

	"fairdispatch/wire"
)

// genHeader draws a nats.Header as a producer could send it: names of any
// case (Dispatch-* among them, so that Decode has work), none to several
// values each, values empty or long enough for a multi-byte length.
func genHeader(t *rapid.T) nats.Header {
	names := rapid.SampledFrom([]string{"Nats-Msg-Id", wire.HeaderISLTokens, strings.ToLower(wire.HeaderISLTokens), wire.HeaderReplyTo,
		wire.HeaderFairnessKey, wire.HeaderAllowedWorkers, wire.HeaderDPRank, wire.HeaderWorker, "X-Trace", "x"})
	value := rapid.OneOf(rapid.SampledFrom([]string{"", "1", "512", "w1", "out.r1", "a,b"}),
		rapid.StringMatching(`[ -~]{0,300}`))
	h := rapid.MapOfN(names, rapid.SliceOfN(value, 0, 3), 0, 10).Draw(t, "h")
	return nats.Header(h)
}

// TestMsgHeadersRoundTrip: the packed headers give back the map they were
// packed from, Decode decodes them as it decodes the map, and CopyHeaders
// copies exactly the names it is not told to skip, using HeaderValues slots.
func TestMsgHeadersRoundTrip(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		h := genHeader(t)
		m := NewMsg("dispatch.req.c", "$JS.ACK.x", h, nil, nil)
		got := m.Header()
		if len(h) == 0 {
			if got != nil {
				t.Fatalf("got %v from no headers, want nil", got)
			}
		} else if !reflect.DeepEqual(got, h) {
			t.Fatalf("got %v, want %v", got, h)
		}

		wantD, wantErr := Decode(h)
		gotD, gotErr := m.Decode()
		if !reflect.DeepEqual(gotD, wantD) || !reflect.DeepEqual(gotErr, wantErr) {
			t.Fatalf("Decode of the packed form: got %+v, %v; of the map: %+v, %v", gotD, gotErr, wantD, wantErr)
		}

		n := 0
		for _, vs := range h {
			n += len(vs)
		}
		if m.HeaderValues() != n {
			t.Fatalf("got %d values, want %d", m.HeaderValues(), n)
		}
		skip := func(k string) bool { return strings.HasPrefix(k, "Dispatch-") }
		dst := nats.Header{}
		vals := make([]string, n+2)
		rest := m.CopyHeaders(dst, skip, vals)
		want := nats.Header{}
		used := 0
		for k, vs := range h {
			if !skip(k) {
				want[k] = vs
				used += len(vs)
			}
		}
		if len(rest) != n+2-used {
			t.Fatalf("got %d values left, want %d", len(rest), n+2-used)
		}
		var d wire.Dispatch
		frame := append(wire.EndHeaders(m.AppendHeaders(wire.AppendDispatchFields(nil, &d), skip)), 'b')
		fh, body, err := wire.DecodeDispatch(frame, &d)
		if err != nil || string(body) != "b" || len(fh) != len(want) || len(want) > 0 && !reflect.DeepEqual(nats.Header(fh), want) {
			t.Fatalf("AppendHeaders: the frame holds %v, body %q, error %v; want %v, \"b\"", fh, body, err, want)
		}
		if len(want) == 0 && len(dst) == 0 {
			return
		}
		if !reflect.DeepEqual(dst, want) {
			t.Fatalf("CopyHeaders: got %v, want %v", dst, want)
		}
	})
}

// TestMsgDecodeCases: every case of the decoder's table decodes the same from
// the packed form as from the map.
func TestMsgDecodeCases(t *testing.T) {
	for _, tc := range decodeCases {
		m := NewMsg("dispatch.req.c", "", tc.h, nil, nil)
		gotD, gotErr := m.Decode()
		wantD, wantErr := Decode(tc.h)
		if !reflect.DeepEqual(gotD, wantD) || !reflect.DeepEqual(gotErr, wantErr) {
			t.Errorf("%s: packed %+v, %v; map %+v, %v", tc.name, gotD, gotErr, wantD, wantErr)
		}
	}
}

// TestMsgWithoutAcker: a Msg without an Acker fails its acknowledgements
// with ErrNoAcker instead of panicking.
func TestMsgWithoutAcker(t *testing.T) {
	var m Msg
	for _, err := range []error{m.Ack(), m.Nak(), m.InProgress(), m.NakWithDelay(time.Second)} {
		if err != ErrNoAcker {
			t.Fatalf("got %v, want ErrNoAcker", err)
		}
	}
}

// TestMsgAcknowledgementsOnTheWire: the consumer's deliveries acknowledge
// with JetStream's bytes (docs/protocol.md, After accepting), on their own reply
// subjects, and the server acts on them: the acknowledged request leaves the
// work-queue stream.
func TestMsgAcknowledgementsOnTheWire(t *testing.T) {
	e := newEnv(t)
	for range 4 {
		e.publish(t, "c", nats.Header{wire.HeaderISLTokens: {"1"}})
	}
	seen := make(chan *nats.Msg, 8)
	sub, err := e.js.Conn().ChanSubscribe("$JS.ACK.DISPATCH_REQ.>", seen)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := e.js.Conn().Flush(); err != nil {
		t.Fatal(err)
	}
	r := start(t, e, testConfig())
	ds := r.take(t, 4)
	acts := []struct {
		do   func(m *Msg) error
		want string
	}{
		{(*Msg).Ack, "+ACK"},
		{(*Msg).InProgress, "+WPI"},
		{(*Msg).Nak, "-NAK"}, // no HandBacks in testConfig: a plain NAK
		{func(m *Msg) error { return m.NakWithDelay(90 * time.Second) }, `-NAK {"delay": 90000000000}`},
	}
	for i, a := range acts {
		if err := a.do(&ds[i].Msg); err != nil {
			t.Fatalf("%s: %v", a.want, err)
		}
		select {
		case got := <-seen:
			if got.Subject != ds[i].Msg.Reply() || string(got.Data) != a.want {
				t.Fatalf("got %q on %s, want %q on %s", got.Data, got.Subject, a.want, ds[i].Msg.Reply())
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: nothing published", a.want)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		info, err := e.stream.Info(ctx(t))
		if err != nil {
			t.Fatal(err)
		}
		if info.State.Msgs == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("stream holds %d messages, want 3 once the first is acknowledged", info.State.Msgs)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestMsgOwnBody: a body up to maxCopiedBody moves to an allocation of its
// own (the receive buffer around it can go), a larger one stays where it is.
func TestMsgOwnBody(t *testing.T) {
	buf := make([]byte, 100+maxCopiedBody+1)
	for i := range buf {
		buf[i] = byte(i)
	}
	small := Msg{data: buf[100:200]}
	small.OwnBody()
	if &small.data[0] == &buf[100] || cap(small.data) != 100 || string(small.data) != string(buf[100:200]) {
		t.Fatalf("small body: same array %v, cap %d, equal %v; want a copy of its own",
			&small.data[0] == &buf[100], cap(small.data), string(small.data) == string(buf[100:200]))
	}
	large := Msg{data: buf[100:]}
	large.OwnBody()
	if &large.data[0] != &buf[100] {
		t.Fatal("a body over maxCopiedBody was copied")
	}
	var empty Msg
	empty.OwnBody()
	if empty.data != nil {
		t.Fatal("an empty body grew an allocation")
	}
}

// TestMsgDecodeCopiesWhatOutlivesTheRequest: the request id and the fairness
// key, which the scheduler keeps after the request is gone, do not point into
// the packed headers (they would keep them alive, block hashes and all); the
// rest of the decoded headers do.
func TestMsgDecodeCopiesWhatOutlivesTheRequest(t *testing.T) {
	m := NewMsg("dispatch.req.c", "", nats.Header{"Nats-Msg-Id": {"r1"}, wire.HeaderFairnessKey: {"tenant-a"},
		wire.HeaderReplyTo: {"out.r1"}, wire.HeaderBlockHashes: {strings.Repeat("0123456789abcdef", 64)}}, nil, nil)
	d, err := m.Decode()
	if err != nil {
		t.Fatal(err)
	}
	within := func(s string) bool {
		return s != "" && strings.Contains(m.hdr, s) &&
			uintptr(unsafe.Pointer(unsafe.StringData(s))) >= uintptr(unsafe.Pointer(unsafe.StringData(m.hdr))) &&
			uintptr(unsafe.Pointer(unsafe.StringData(s))) < uintptr(unsafe.Pointer(unsafe.StringData(m.hdr)))+uintptr(len(m.hdr))
	}
	if d.MsgID != "r1" || within(d.MsgID) {
		t.Errorf("MsgID %q: points into the packed headers %v, want a copy", d.MsgID, within(d.MsgID))
	}
	if d.Key != "tenant-a" || within(d.Key) {
		t.Errorf("Key %q: points into the packed headers %v, want a copy", d.Key, within(d.Key))
	}
	if !within(d.ReplyTo) {
		t.Errorf("ReplyTo %q was copied; it lives no longer than the request", d.ReplyTo)
	}
}

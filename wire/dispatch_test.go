package wire_test

import (
	"bytes"
	"encoding/hex"
	"errors"
	"reflect"
	"strings"
	"testing"

	"pgregory.net/rapid"

	"fairdispatch/wire"
)

// frame encodes d, the headers in names' order, and body.
func frame(d *wire.Dispatch, names []string, h map[string][]string, body []byte) []byte {
	b := wire.AppendDispatchFields(nil, d)
	for _, k := range names {
		b = wire.AppendHeaderEntry(b, k, h[k])
	}
	return append(wire.EndHeaders(b), body...)
}

// TestDispatchFrameExample pins the frame of docs/protocol.md, Compact
// dispatch form, byte for byte, so that the documented example is what the
// code writes and reads.
func TestDispatchFrameExample(t *testing.T) {
	d := wire.Dispatch{RequestID: "r1", Class: "premium", DPRank: 1, Seq: 300, Cost: 512, QueuedMs: 4,
		Ack: "$JS.ACK.x", AckWaitMs: 30000}
	h := map[string][]string{"Dispatch-Fairness-Key": {"acme"}}
	got := frame(&d, []string{"Dispatch-Fairness-Key"}, h, []byte("hello"))
	want := "01" + "027231" + "077072656d69756d" + "01" + "ac02" + "8004" + "04" +
		"09244a532e41434b2e78" + "b0ea01" +
		"15" + hex.EncodeToString([]byte("Dispatch-Fairness-Key")) + "01" + "0461636d65" +
		"00" + hex.EncodeToString([]byte("hello"))
	if hex.EncodeToString(got) != want {
		t.Fatalf("frame:\ngot  %x\nwant %s", got, want)
	}
	var back wire.Dispatch
	hdr, body, err := wire.DecodeDispatch(got, &back)
	if err != nil || back != d || !reflect.DeepEqual(hdr, h) || string(body) != "hello" {
		t.Fatalf("decode: %+v %v %q %v", back, hdr, body, err)
	}
}

// TestDispatchFrameRoundTrip: whatever the fields, headers (names repeated
// too) and body, the decoder gives back what was encoded, and every
// truncation short of the body is an error, not a shorter request.
func TestDispatchFrameRoundTrip(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		d := wire.Dispatch{
			RequestID: rapid.String().Draw(t, "id"),
			Class:     rapid.StringMatching(`[a-z]{0,12}`).Draw(t, "class"),
			DPRank:    rapid.Uint32Range(0, 65535).Draw(t, "rank"),
			Seq:       rapid.Uint64().Draw(t, "seq"),
			Cost:      rapid.Uint64().Draw(t, "cost"),
			QueuedMs:  rapid.Uint64().Draw(t, "queued"),
			Ack:       rapid.String().Draw(t, "ack"),
			AckWaitMs: rapid.Uint64().Draw(t, "ackwait"),
		}
		names := rapid.SliceOfN(rapid.StringMatching(`[A-Za-z-]{1,20}`), 0, 6).Draw(t, "names")
		want := map[string][]string{}
		b := wire.AppendDispatchFields(nil, &d)
		for _, k := range names {
			vs := rapid.SliceOfN(rapid.String(), 0, 3).Draw(t, "values")
			b = wire.AppendHeaderEntry(b, k, vs)
			want[k] = append(want[k], vs...)
		}
		bodyStart := len(b) + 1
		body := rapid.SliceOfN(rapid.Byte(), 0, 64).Draw(t, "body")
		b = append(wire.EndHeaders(b), body...)

		var got wire.Dispatch
		hdr, gotBody, err := wire.DecodeDispatch(b, &got)
		if err != nil {
			t.Fatalf("decode: %v", err)
		}
		if got != d {
			t.Fatalf("fields: got %+v, want %+v", got, d)
		}
		if len(names) == 0 {
			want = nil
		}
		if len(hdr) != len(want) {
			t.Fatalf("headers: got %q, want %q", hdr, want)
		}
		for k, vs := range want {
			if g := hdr[k]; len(g) != len(vs) || (len(vs) > 0 && !reflect.DeepEqual(g, vs)) {
				t.Fatalf("header %q: got %q, want %q", k, g, vs)
			}
		}
		if !bytes.Equal(gotBody, body) {
			t.Fatalf("body: got %x, want %x", gotBody, body)
		}
		cut := rapid.IntRange(0, bodyStart-1).Draw(t, "cut")
		if _, _, err := wire.DecodeDispatch(b[:cut], &got); err == nil {
			t.Fatalf("a frame cut at byte %d of %d (body at %d) decoded", cut, len(b), bodyStart)
		}
	})
}

// TestDispatchFrameErrors: each malformed frame is refused with the field
// that does not fit.
func TestDispatchFrameErrors(t *testing.T) {
	ok := frame(&wire.Dispatch{RequestID: "r1"}, nil, nil, nil)
	for _, c := range []struct {
		name string
		data []byte
		want string
	}{
		{"empty", nil, "not a compact"},
		{"other version", append([]byte{2}, ok[1:]...), "not a compact"},
		{"header form body", []byte("hello"), "not a compact"},
		{"id longer than the frame", []byte{1, 9, 'r'}, "request id: 9 bytes, 1 left"},
		{"rank above 65535", append([]byte{1, 0, 0}, wire.AppendUvarint(nil, 65536)...), "dp rank 65536"},
		{"overlong varint", []byte{1, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x02}, "request id length: truncated or overlong"},
		{"value count beyond the frame", append(ok[:len(ok)-1:len(ok)-1], 1, 'k', 50), "header value count 50"},
		{"no end of headers", ok[:len(ok)-1], "header name length: truncated"},
	} {
		_, _, err := wire.DecodeDispatch(c.data, new(wire.Dispatch))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s (%x): error %v, want one containing %q", c.name, c.data, err, c.want)
		}
	}
	if _, _, err := wire.DecodeDispatch([]byte("x"), new(wire.Dispatch)); !errors.Is(err, wire.ErrNotCompact) {
		t.Errorf("a header-form body: %v, want ErrNotCompact", err)
	}
}

// FuzzDecodeDispatch: no input panics the decoder, and what it accepts
// encodes back to a frame it decodes to the same request.
func FuzzDecodeDispatch(f *testing.F) {
	f.Add(frame(&wire.Dispatch{RequestID: "r1", Class: "c", Seq: 9, Ack: "a"}, []string{"K"},
		map[string][]string{"K": {"v", ""}}, []byte("body")))
	f.Add([]byte{1, 0, 0, 0, 0, 0, 0, 0, 0, 1, 'k', 0, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		var d wire.Dispatch
		h, body, err := wire.DecodeDispatch(data, &d)
		if err != nil {
			return
		}
		names := make([]string, 0, len(h))
		for k := range h {
			names = append(names, k)
		}
		again := frame(&d, names, h, body)
		var d2 wire.Dispatch
		h2, body2, err := wire.DecodeDispatch(again, &d2)
		if err != nil || d2 != d || !reflect.DeepEqual(h2, h) || !bytes.Equal(body2, body) {
			t.Fatalf("re-encoded frame %x decodes to %+v %q %q %v; first %+v %q %q", again, d2, h2, body2, err, d, h, body)
		}
	})
}

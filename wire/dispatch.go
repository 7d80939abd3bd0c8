package wire

import (
	"errors"
	"fmt"
)

// CompactDispatch is the version of the compact dispatch form this module
// writes and reads (docs/protocol.md, Compact dispatch form). A worker asks
// for it with compact_dispatch in its load reports; the dispatcher then sends
// it a header-less message whose body is a frame: this version byte, the
// dispatch fields, the producer's headers and the request body.
const CompactDispatch = 1

// Dispatch holds the dispatch fields of docs/protocol.md, Dispatch handshake:
// the values of the eight Dispatch-* headers of the header form.
type Dispatch struct {
	RequestID string
	Class     string
	DPRank    uint32
	Seq       uint64
	Cost      uint64
	QueuedMs  uint64
	Ack       string
	AckWaitMs uint64
}

// AppendDispatchFields appends the start of a compact frame to dst: the
// version byte and d's fields. The producer's headers follow, each written by
// AppendHeaderEntry, then EndHeaders, then the body.
func AppendDispatchFields(dst []byte, d *Dispatch) []byte {
	dst = append(dst, CompactDispatch)
	dst = AppendString(dst, d.RequestID)
	dst = AppendString(dst, d.Class)
	dst = AppendUvarint(dst, uint64(d.DPRank))
	dst = AppendUvarint(dst, d.Seq)
	dst = AppendUvarint(dst, d.Cost)
	dst = AppendUvarint(dst, d.QueuedMs)
	dst = AppendString(dst, d.Ack)
	return AppendUvarint(dst, d.AckWaitMs)
}

// AppendHeaderEntry appends one header of the frame: its name (not empty),
// the number of its values, and each value.
func AppendHeaderEntry(dst []byte, name string, values []string) []byte {
	dst = AppendString(dst, name)
	dst = AppendUvarint(dst, uint64(len(values)))
	for _, v := range values {
		dst = AppendString(dst, v)
	}
	return dst
}

// EndHeaders appends the end of the frame's headers (an empty name); the body
// follows it.
func EndHeaders(dst []byte) []byte { return append(dst, 0) }

// AppendString appends s as the frame writes strings: its length as a
// uvarint, then its bytes.
func AppendString(dst []byte, s string) []byte {
	return append(AppendUvarint(dst, uint64(len(s))), s...)
}

// AppendUvarint appends x as an unsigned LEB128 varint (as
// encoding/binary.AppendUvarint and protocol buffers write it).
func AppendUvarint(dst []byte, x uint64) []byte {
	for x >= 0x80 {
		dst = append(dst, byte(x)|0x80)
		x >>= 7
	}
	return append(dst, byte(x))
}

// ErrNotCompact reports a frame whose first byte is not a compact dispatch
// version this module reads.
var ErrNotCompact = errors.New("wire: not a compact dispatch frame")

// DecodeDispatch decodes a compact frame into d and returns the producer's
// headers and the body. The strings of d and of the headers are substrings of
// one string copied from data (one allocation); the body is a subslice of
// data. The headers are nil when the frame has none; a name given twice keeps
// every value, in order. An error names the field that does not fit.
func DecodeDispatch(data []byte, d *Dispatch) (header map[string][]string, body []byte, err error) {
	if len(data) == 0 || data[0] != CompactDispatch {
		return nil, nil, ErrNotCompact
	}
	// Check every length first, allocating nothing.
	r := frameReader{b: data, off: 1}
	r.skip(r.uvarint("request id length"), "request id")
	r.skip(r.uvarint("class length"), "class")
	if rank := r.uvarint("dp rank"); rank > 1<<16-1 && r.err == nil {
		r.err = fmt.Errorf("dp rank %d above 65535", rank)
	}
	r.uvarint("seq")
	r.uvarint("cost")
	r.uvarint("queued ms")
	r.skip(r.uvarint("ack subject length"), "ack subject")
	r.uvarint("ack wait ms")
	names, values := 0, 0
	for r.err == nil {
		n := r.uvarint("header name length")
		if n == 0 {
			break
		}
		r.skip(n, "header name")
		c := r.uvarint("header value count")
		if c > uint64(len(data)-r.off) && r.err == nil { // each value takes a byte at least
			r.err = fmt.Errorf("header value count %d, %d bytes left", c, len(data)-r.off)
		}
		for i := uint64(0); i < c && r.err == nil; i++ {
			r.skip(r.uvarint("header value length"), "header value")
		}
		names++
		values += int(c)
	}
	if r.err != nil {
		return nil, nil, fmt.Errorf("wire: compact dispatch frame, byte %d: %w", r.off, r.err)
	}
	body = data[r.off:]

	s := StringReader{S: string(data[1:r.off])}
	d.RequestID = s.Str()
	d.Class = s.Str()
	d.DPRank = uint32(s.Uvarint())
	d.Seq = s.Uvarint()
	d.Cost = s.Uvarint()
	d.QueuedMs = s.Uvarint()
	d.Ack = s.Str()
	d.AckWaitMs = s.Uvarint()
	if names == 0 {
		return nil, body, nil
	}
	header = make(map[string][]string, names)
	vals := make([]string, values)
	for {
		name := s.Str()
		if name == "" {
			return header, body, nil
		}
		c := int(s.Uvarint())
		for i := range c {
			vals[i] = s.Str()
		}
		if prev, ok := header[name]; ok {
			header[name] = append(prev[:len(prev):len(prev)], vals[:c]...)
		} else {
			header[name] = vals[:c:c]
		}
		vals = vals[c:]
	}
}

// frameReader reads a frame, checking every length against what is left.
type frameReader struct {
	b   []byte
	off int
	err error
}

func (r *frameReader) uvarint(what string) uint64 {
	if r.err != nil {
		return 0
	}
	var x uint64
	for i, shift := 0, uint(0); r.off+i < len(r.b); i, shift = i+1, shift+7 {
		c := r.b[r.off+i]
		if i == 9 && c > 1 {
			break
		}
		x |= uint64(c&0x7f) << shift
		if c < 0x80 {
			r.off += i + 1
			return x
		}
	}
	r.err = fmt.Errorf("%s: truncated or overlong varint", what)
	return 0
}

func (r *frameReader) skip(n uint64, what string) {
	if r.err != nil {
		return
	}
	if n > uint64(len(r.b)-r.off) {
		r.err = fmt.Errorf("%s: %d bytes, %d left", what, n, len(r.b)-r.off)
		return
	}
	r.off += int(n)
}

// StringReader reads, from a string, what AppendUvarint and AppendString
// wrote. It trusts its input: check it first (DecodeDispatch does), or write
// it yourself (ingest's packed headers). A truncated varint reads as the bits
// it holds and ends the string.
type StringReader struct{ S string }

// More reports whether anything is left to read.
func (r *StringReader) More() bool { return len(r.S) > 0 }

// Uvarint reads a varint.
func (r *StringReader) Uvarint() uint64 {
	var x uint64
	var shift uint
	for i := 0; i < len(r.S); i++ {
		c := r.S[i]
		x |= uint64(c&0x7f) << shift
		if c < 0x80 {
			r.S = r.S[i+1:]
			return x
		}
		shift += 7
	}
	r.S = ""
	return x
}

// Str reads a string: a varint length, then that many bytes (a substring).
func (r *StringReader) Str() string {
	n := r.Uvarint()
	v := r.S[:n]
	r.S = r.S[n:]
	return v
}

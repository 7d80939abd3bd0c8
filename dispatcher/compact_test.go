package dispatcher

import (
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"pgregory.net/rapid"

	"fairdispatch/workers"
)

func (f *fixture) reportCompact(id string, compact uint8) {
	f.a.report(workers.Report{WorkerID: id, DPSize: 1, TTLms: 60000, Instance: "i", Compact: compact})
	f.a.drain()
}

// TestActorCompactFormCarriesWhatTheHeaderFormDoes: a worker that reads the
// compact form receives the same dispatch fields, the same forwarded
// producer headers (any producer-sent variant of the eight dispatch headers
// removed) and the same body as one that reads the header form.
func TestActorCompactFormCarriesWhatTheHeaderFormDoes(t *testing.T) {
	tt := t
	rapid.Check(t, func(t *rapid.T) {
		hdr := nats.Header{"Dispatch-ISL-Tokens": {"100"}}
		names := rapid.SliceOfN(rapid.SampledFrom([]string{"X-Trace", "x-other", "Nats-Msg-Id", "Dispatch-Fairness-Key",
			"dispatch-seq", "DISPATCH-CLASS", "Dispatch-Ack", "dispatch-queued-ms", "Dispatch-Reply-To"}), 0, 6).Draw(t, "names")
		for _, k := range names {
			value := `[ -~]{1,12}` // what admission reads must be valid, or nothing is dispatched
			switch k {
			case "Dispatch-Fairness-Key":
				value = `[a-z]{1,8}`
			case "Dispatch-Reply-To":
				value = `out\.[a-z]{1,6}`
			}
			hdr[k] = rapid.SliceOfN(rapid.StringMatching(value), 1, 3).Draw(t, k)
		}
		var got [2]sent
		for i, compact := range []uint8{0, 1} {
			f := newFixture(tt, policy)
			f.now = f.now.Add(time.Second)
			f.reportCompact("w1", compact)
			f.deliver(1, "premium", hdr)
			if len(f.b.sent) != 1 {
				t.Fatalf("compact %d: sent %d, want 1", compact, len(f.b.sent))
			}
			got[i] = f.b.sent[0]
		}
		header, compact := got[0], got[1]
		if header.compact || !compact.compact || compact.err != nil {
			t.Fatalf("forms: header-form worker got compact=%v; compact worker got compact=%v, frame error %v",
				header.compact, compact.compact, compact.err)
		}
		if !reflect.DeepEqual(header.hdr, compact.hdr) || string(header.body) != string(compact.body) {
			t.Fatalf("the two forms differ:\nheader  %q %q\ncompact %q %q", header.hdr, header.body, compact.hdr, compact.body)
		}
		for k := range compact.hdr {
			if isOwnHeader(k) && !strings.HasPrefix(k, "Dispatch-") {
				t.Fatalf("producer variant %q forwarded", k)
			}
		}
	})
}

// TestActorFollowsTheWorkersForm: the form follows the worker's latest
// report, so a worker restarted without the compact form gets headers again.
func TestActorFollowsTheWorkersForm(t *testing.T) {
	f := newFixture(t, policy)
	f.now = f.now.Add(time.Second)
	f.reportCompact("w1", 1)
	f.deliver(1, "premium", nats.Header{"Dispatch-ISL-Tokens": {"100"}})
	f.reportCompact("w1", 0)
	f.deliver(2, "premium", nats.Header{"Dispatch-ISL-Tokens": {"100"}})
	if len(f.b.sent) != 2 || !f.b.sent[0].compact || f.b.sent[1].compact {
		t.Fatalf("sent %+v, want a compact dispatch, then one in the header form", f.b.sent)
	}
	if s := f.b.sent[1]; s.hdr.Get("Dispatch-Seq") != "2" || string(s.body) != "body" {
		t.Fatalf("second dispatch %q %q, want seq 2 and the body", s.hdr, s.body)
	}
}

// TestActorCompactUnsendableHeaderIsTheRequestsFault: a header name NATS
// cannot send fails a compact dispatch as it fails the header form (the frame
// could carry it, but a request's fate does not depend on the worker's
// form): dead-lettered as bad_request naming it, with the body; the worker is
// not excluded and the next request goes out.
func TestActorCompactUnsendableHeaderIsTheRequestsFault(t *testing.T) {
	f := newFixture(t, twoClasses)
	f.now = f.now.Add(time.Second)
	f.reportCompact("w1", 1)
	f.deliver(1, "premium", nats.Header{"Dispatch-ISL-Tokens": {"100"}, "X/Y": {"v"}, "Z Z": {"w"}})
	f.deliver(2, "premium", nats.Header{"Dispatch-ISL-Tokens": {"100"}})
	if l := f.letters(); len(l) != 1 || l[0].DropBody || l[0].Code != "bad_request" ||
		!strings.Contains(l[0].Message, `header name "X/Y", "Z Z" cannot be sent over NATS`) {
		t.Fatalf("letters %+v, want one bad_request naming both headers, with the body", l)
	}
	if f.excluded(t, "w1") || len(f.b.sent) != 1 || f.b.sent[0].token != 2 || !f.b.sent[0].compact {
		t.Fatalf("excluded %v sent %+v; want w1 not excluded and request 2 sent compact", f.excluded(t, "w1"), f.b.sent)
	}
}

// TestActorReservedReplyToWhateverElseIsMalformed: a Dispatch-Reply-To aimed
// at a $-subject or at the prefix's own subjects gets no outcome, whatever
// other header is malformed beside it; the message names the first
// malformed header in the table's order (docs/protocol.md, Malformed
// headers), the reserved subject counted in Dispatch-Reply-To's place.
func TestActorReservedReplyToWhateverElseIsMalformed(t *testing.T) {
	f := newFixture(t, twoClasses)
	f.now = f.now.Add(time.Second)
	f.reportCompact("w1", 1)
	for i, tc := range []struct {
		hdr   nats.Header
		named string
	}{
		{nats.Header{"Dispatch-Reply-To": {"dispatch.req.premium"}, "Dispatch-ISL-Tokens": {"abc"}}, "Dispatch-ISL-Tokens"},
		{nats.Header{"Dispatch-Reply-To": {"$JS.API.STREAM.DELETE.X"}, "Dispatch-Fairness-Key": {"a b"}}, "Dispatch-Reply-To"},
		{nats.Header{"Dispatch-Reply-To": {"dispatch.load.w1"}}, "Dispatch-Reply-To"},
		{nats.Header{"Dispatch-Response-To": {"a.*"}, "Dispatch-Fairness-Key": {"a b"}}, "Dispatch-Fairness-Key"},
		{nats.Header{"Dispatch-Reply-To": {"producer.r5"}, "Dispatch-Fairness-Key": {"a b"}}, "Dispatch-Fairness-Key"},
	} {
		f.deliver(uint64(i+1), "premium", tc.hdr)
		f.a.deadLettered(dlqDone{seq: uint64(i + 1)}) // stored: the outcome goes out now, if anywhere
		l := f.letters()
		if len(l) != i+1 || l[i].Code != "bad_request" || !strings.HasPrefix(l[i].Message, "header "+tc.named+":") {
			t.Fatalf("case %d: letters %+v, want the last bad_request naming %s", i, l, tc.named)
		}
	}
	if !slices.Equal(f.subjects, []string{"producer.r5"}) {
		t.Fatalf("outcomes published to %q, want only the valid reply subject's", f.subjects)
	}
}

package wire_test

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	"fairdispatch/wire"
)

// TestResponseEndRoundTrip: an end marker's body, as a worker marshals it, is
// what a producer reads back, with the field names of docs/protocol.md, The
// end marker.
func TestResponseEndRoundTrip(t *testing.T) {
	for _, e := range []wire.ResponseEnd{
		{Status: wire.EndOK, Chunks: 3, FinishReason: "length", Usage: &wire.Usage{PromptTokens: 12, CompletionTokens: 3, CachedTokens: 8}},
		{Status: wire.EndFailed, Chunks: 1, Error: "engine <died>"},
		{Status: wire.EndFailed, Error: "engine answered 400: too long", Refused: true},
		{Status: wire.EndCancelled},
	} {
		b, err := wire.MarshalResponseEnd(e)
		if err != nil {
			t.Fatal(err)
		}
		got, err := wire.ParseResponseEnd(b)
		if err != nil {
			t.Fatalf("%s: %v", b, err)
		}
		if !reflect.DeepEqual(got, e) {
			t.Errorf("round trip of %s:\ngot  %+v\nwant %+v", b, got, e)
		}
		if strings.Contains(string(b), `\u003c`) {
			t.Errorf("%s: HTML-escaped", b)
		}
	}
	b, _ := wire.MarshalResponseEnd(wire.ResponseEnd{Status: wire.EndOK, Chunks: 2, FinishReason: "stop",
		Usage: &wire.Usage{PromptTokens: 5, CompletionTokens: 2}})
	if want := `{"status":"ok","chunks":2,"finish_reason":"stop","usage":{"prompt_tokens":5,"completion_tokens":2}}`; string(b) != want {
		t.Errorf("got %s, want %s", b, want)
	}
}

// TestResponseEndBounds: unknown statuses and oversized bodies are refused; a
// long error is cut to fit.
func TestResponseEndBounds(t *testing.T) {
	if _, err := wire.MarshalResponseEnd(wire.ResponseEnd{Status: "done"}); err == nil {
		t.Error("unknown status marshalled")
	}
	if _, err := wire.MarshalResponseEnd(wire.ResponseEnd{Status: wire.EndOK, Refused: true}); err == nil {
		t.Error("refused with status ok marshalled")
	}
	if e, err := wire.ParseResponseEnd([]byte(`{"status":"cancelled","refused":true}`)); err != nil || e.Refused {
		t.Errorf("refused with status cancelled: %+v, %v; want it ignored", e, err)
	}
	for _, b := range []string{`{"status":"done"}`, `{"chunks":1}`, `[1]`, `{"status":"ok"` + strings.Repeat(" ", wire.MaxEndBytes) + `}`} {
		if _, err := wire.ParseResponseEnd([]byte(b)); err == nil {
			t.Errorf("%.40q: accepted", b)
		}
	}
	b, err := wire.MarshalResponseEnd(wire.ResponseEnd{Status: wire.EndFailed, Error: strings.Repeat("x", 3*wire.MaxEndBytes)})
	if err != nil || len(b) > wire.MaxEndBytes {
		t.Errorf("long error: %d bytes, %v; want at most %d", len(b), err, wire.MaxEndBytes)
	}
	if _, err := wire.ParseResponseEnd(b); err != nil {
		t.Errorf("cut end marker: %v", err)
	}
	// An engine's long finish_reason, passed through, is cut too; a cut
	// keeps whole characters.
	b, err = wire.MarshalResponseEnd(wire.ResponseEnd{Status: wire.EndOK, FinishReason: strings.Repeat("é", 2500)})
	if err != nil || len(b) > wire.MaxEndBytes {
		t.Fatalf("long finish reason: %d bytes, %v; want at most %d", len(b), err, wire.MaxEndBytes)
	}
	e, err := wire.ParseResponseEnd(b)
	if err != nil || e.FinishReason == "" || strings.ContainsRune(e.FinishReason, utf8.RuneError) {
		t.Errorf("cut finish reason: %q, %v; want a shorter run of é", e.FinishReason, err)
	}
}

// TestCancelRoundTrip: a producer's cancellation carries the request id alone;
// the dispatcher's adds seq and reason.
func TestCancelRoundTrip(t *testing.T) {
	b, err := wire.MarshalCancel(wire.Cancel{RequestID: "r1"})
	if err != nil || string(b) != `{"request_id":"r1"}` {
		t.Errorf("producer cancel: got %s, %v", b, err)
	}
	c := wire.Cancel{RequestID: "r<1>", Seq: 7, Reason: wire.CancelReasonCancel}
	b, err = wire.MarshalCancel(c)
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"request_id":"r<1>","seq":7,"reason":"cancel"}`; string(b) != want {
		t.Errorf("got %s, want %s", b, want)
	}
	got, err := wire.ParseCancel(b)
	if err != nil || got != c {
		t.Errorf("round trip: got %+v, %v; want %+v", got, err, c)
	}
	for _, bad := range []string{`{}`, `{"request_id":""}`, `{"request_id":1}`, `nope`,
		`{"request_id":"` + strings.Repeat("a", wire.MaxCancelIDLen+1) + `"}`,
		`{"request_id":"a","x":"` + strings.Repeat("b", wire.MaxCancelBytes) + `"}`} {
		if _, err := wire.ParseCancel([]byte(bad)); err == nil {
			t.Errorf("%.40q: accepted", bad)
		}
	}
	var m map[string]any
	_ = json.Unmarshal([]byte(`{"request_id":"a","extra":1}`), &m)
	if _, err := wire.ParseCancel([]byte(`{"request_id":"a","extra":1}`)); err != nil {
		t.Errorf("unknown field refused: %v", err)
	}
}

// TestCancelledOutcome: the dispatcher's outcome of a cancelled request.
func TestCancelledOutcome(t *testing.T) {
	q := int64(40)
	b, err := wire.MarshalOutcome(wire.Outcome{RequestID: "r1", Status: wire.StatusCancelled, PolicyClass: "regular", QueuedMs: &q, Attempt: 1})
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"request_id":"r1","status":"cancelled","policy_class":"regular","queued_ms":40,"attempt":1}`; string(b) != want {
		t.Errorf("got %s, want %s", b, want)
	}
}

// TestResponseSeq parses Dispatch-Response-Seq.
func TestResponseSeq(t *testing.T) {
	if n, err := wire.ParseResponseSeq(" 12\t"); err != nil || n != 12 {
		t.Errorf("got %d, %v", n, err)
	}
	for _, bad := range []string{"", "-1", "+1", "x", "1.5"} {
		if _, err := wire.ParseResponseSeq(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

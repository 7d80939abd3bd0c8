package bus

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// TestReadLetterReadsWhatTheWriterWrites: the fields of a dead letter read
// back from the headers dlqHeader writes are the letter's own, and
// RequestHeader gives back the request's headers without the letter's and
// without Nats-* ones.
func TestReadLetterReadsWhatTheWriterWrites(t *testing.T) {
	dl := sampleLetter()
	dl.Header = nats.Header{"Dispatch-ISL-Tokens": {"64"}, "X-Trace": {"a", "b"}, "Nats-Expected-Stream": {"X"},
		"dispatch-error": {"forged"}}
	at := time.Unix(1700000000, 5)
	h := dlqHeader(dl)
	got := ReadLetter(7, at, "dispatch.dlq."+dl.Class, h, len(dl.Body))
	want := Letter{Seq: 7, Time: at.UTC(), Class: dl.Class, Error: dl.Code, RequestID: dl.RequestID,
		Message: strings.ReplaceAll(dl.Message, "\n", " "), // a header value holds no line break
		Subject: dl.Subject, Size: len(dl.Body)}
	if got != want {
		t.Errorf("ReadLetter:\ngot  %+v\nwant %+v", got, want)
	}
	if rh, want := RequestHeader(h), (nats.Header{"Dispatch-ISL-Tokens": {"64"}, "X-Trace": {"a", "b"}}); !reflect.DeepEqual(rh, want) {
		t.Errorf("RequestHeader = %v, want %v", rh, want)
	}

	dl.DropBody = true
	if got := ReadLetter(8, at, "dispatch.dlq.x", dlqHeader(dl), 0); !got.BodyDropped || got.Size != len(dl.Body) {
		t.Errorf("a letter without its body: got %+v, want BodyDropped and Size %d", got, len(dl.Body))
	}
	if got := ReadLetter(9, at, "dispatch.dlq.gold", nats.Header{}, 3); got.Class != "gold" {
		t.Errorf("a letter without Dispatch-Class: got class %q, want the subject's %q", got.Class, "gold")
	}
}

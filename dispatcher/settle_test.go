package dispatcher

import (
	"errors"
	"strings"
	"testing"
)

func TestParseCompletion(t *testing.T) {
	c, err := parseCompletion([]byte(`{"request_id":"r1","seq":7,"class":"premium","fairness_key":"t1","prefill_tokens":900,"output_tokens":20,"status":"failed","finished_at":"2026-01-01T00:00:00Z"}`))
	if err != nil {
		t.Fatal(err)
	}
	if c.RequestID != "r1" || c.Seq != 7 || c.PrefillTokens != 900 || c.OutputTokens != 20 || c.Status != "failed" {
		t.Fatalf("got %+v", c)
	}
	// Fields the dispatcher does not read are ignored whatever their type
	// (docs/protocol.md, Completion records).
	for _, other := range []string{`"finished_at":1712345678901`, `"started_at":"2025-01-01 12:00:00"`, `"queued_ms":12.5`,
		`"dp_rank":"0"`, `"cached_tokens":-1`, `"class":7`, `"fairness_key":null`, `"worker_id":{}`} {
		if c, err := parseCompletion([]byte(`{"seq":3,"prefill_tokens":5,` + other + `}`)); err != nil || c.Seq != 3 || c.PrefillTokens != 5 {
			t.Errorf("with %s: got %+v, %v; want it read", other, c, err)
		}
	}
	if c, err := parseCompletion([]byte(`{"seq":1}`)); err != nil || c.Status != "ok" {
		t.Fatalf("absent status: got %+v, %v; want ok", c, err)
	}
	for _, bad := range []string{
		`{}`, `{"seq":0}`, `[1]`, `{"seq":-1}`, `{"seq":1,"status":"done"}`,
		`{"seq":1,"prefill_tokens":1099511627777}`, `{"seq":1,"output_tokens":1e30}`,
		`{"seq":1,"request_id":"` + strings.Repeat("x", maxCompletionBytes) + `"}`,
	} {
		if _, err := parseCompletion([]byte(bad)); !errors.Is(err, errCompletion) {
			t.Errorf("parseCompletion(%.60s): got %v, want errCompletion", bad, err)
		}
	}
}

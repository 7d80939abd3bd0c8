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
	if c.RequestID != "r1" || c.Seq != 7 || c.FairnessKey != "t1" || c.PrefillTokens != 900 || c.OutputTokens != 20 || c.Status != "failed" {
		t.Fatalf("got %+v", c)
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

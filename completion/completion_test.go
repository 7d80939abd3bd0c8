package completion

import (
	"errors"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	r, err := Parse([]byte(`{"request_id":"r1","seq":7,"class":"premium","fairness_key":"t1","prefill_tokens":900,"output_tokens":20,"status":"failed","finished_at":"x"}`))
	if err != nil {
		t.Fatal(err)
	}
	want := Record{RequestID: "r1", Seq: 7, Class: "premium", FairnessKey: "t1", PrefillTokens: 900, OutputTokens: 20, Status: Failed}
	if r != want {
		t.Fatalf("got %+v, want %+v", r, want)
	}
	if r, err := Parse([]byte(`{"seq":1}`)); err != nil || r.Status != OK {
		t.Fatalf("absent status: got %+v, %v; want ok", r, err)
	}
	for _, bad := range []string{
		`{}`, `{"seq":0}`, `[1]`, `{"seq":-1}`, `{"seq":1,"status":"done"}`,
		`{"seq":1,"prefill_tokens":1099511627777}`, `{"seq":1,"output_tokens":1e30}`,
		`{"seq":1,"request_id":"` + strings.Repeat("x", MaxBytes) + `"}`,
	} {
		if _, err := Parse([]byte(bad)); !errors.Is(err, ErrInvalid) {
			t.Errorf("Parse(%.60s): got %v, want ErrInvalid", bad, err)
		}
	}
}

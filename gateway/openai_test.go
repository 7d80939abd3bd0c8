package gateway

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestOutputBoundIsTheEngines: the output bound the gateway checks is the
// one the engine applies: a chat's max_completion_tokens over its
// deprecated max_tokens, a completion's max_tokens alone; the limit error
// names that field.
func TestOutputBoundIsTheEngines(t *testing.T) {
	lim := Limits{}.withDefaults()
	for _, tc := range []struct {
		api, body string
		max       uint64
		field     string
	}{
		{APIChat, `{"model":"m","max_tokens":3,"max_completion_tokens":900,"messages":[{"role":"user","content":"x"}]}`, 900, "max_completion_tokens"},
		{APIChat, `{"model":"m","max_completion_tokens":900,"max_tokens":3,"messages":[{"role":"user","content":"x"}]}`, 900, "max_completion_tokens"},
		{APIChat, `{"model":"m","max_tokens":3,"messages":[{"role":"user","content":"x"}]}`, 3, "max_tokens"},
		{APICompletions, `{"model":"m","max_tokens":4,"max_completion_tokens":900,"prompt":"x"}`, 4, "max_tokens"},
	} {
		r, e := parseRequest(tc.api, []byte(tc.body), lim)
		if e != nil || r.maxTokens != tc.max || r.maxField != tc.field {
			t.Errorf("%s %s: bound %d from %q, %v; want %d from %q", tc.api, tc.body, r.maxTokens, r.maxField, e, tc.max, tc.field)
		}
	}
}

// TestNormaliseKeepsStreamOptions: the gateway turns include_usage on and
// leaves the client's other stream options as they were.
func TestNormaliseKeepsStreamOptions(t *testing.T) {
	r, e := parseRequest(APIChat, []byte(`{"model":"m","stream":true,"stream_options":{"continuous_usage_stats":true},"messages":[{"role":"user","content":"x"}]}`), Limits{}.withDefaults())
	if e != nil {
		t.Fatal(e)
	}
	out, err := r.normalise("engine", 0)
	if err != nil {
		t.Fatal(err)
	}
	var m struct {
		StreamOptions map[string]any `json:"stream_options"`
	}
	if err := json.Unmarshal(out, &m); err != nil || m.StreamOptions["include_usage"] != true || m.StreamOptions["continuous_usage_stats"] != true {
		t.Fatalf("normalised %s (%v): want include_usage and continuous_usage_stats both true", out, err)
	}
}

// FuzzParseRequest: any body is refused with an answer or read; a body read
// is normalised into valid JSON whose model is the engine's.
func FuzzParseRequest(f *testing.F) {
	for _, s := range []string{
		`{"model":"m","messages":[{"role":"user","content":"hi"}]}`,
		`{"model":"m","stream":true,"stream_options":{"include_usage":true},"max_tokens":3,"messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"image_url"}]}]}`,
		`{"model":"m","prompt":[1,2,3]}`, `{"model":"m","prompt":["a"]}`, `[[[[`, "\xff", `{"model":"m","n":2}`,
	} {
		f.Add(s)
	}
	lim := Limits{}.withDefaults()
	f.Fuzz(func(t *testing.T, body string) {
		for _, api := range []string{APIChat, APICompletions} {
			r, e := parseRequest(api, []byte(body), lim)
			if (r == nil) == (e == nil) {
				t.Fatalf("parseRequest(%q): request %v and error %v", body, r, e)
			}
			if e != nil {
				if e.status != 400 || e.code == "" || !json.Valid(e.body()) {
					t.Fatalf("parseRequest(%q): answer %+v", body, e)
				}
				continue
			}
			out, err := r.normalise("engine", 7)
			if err != nil {
				t.Fatalf("normalise(%q): %v", body, err)
			}
			var m map[string]json.RawMessage
			if err := json.Unmarshal(out, &m); err != nil || string(m["model"]) != `"engine"` {
				t.Fatalf("normalise(%q) = %s, %v", body, out, err)
			}
		}
	})
}

// TestNormaliseKeepsMarkup: a prompt of code or markup is published as the
// client sent it, not with each <, > and & grown to a six-byte escape.
func TestNormaliseKeepsMarkup(t *testing.T) {
	content := strings.Repeat("<a href='x'>&amp;</a>", 50)
	body := `{"model":"m","messages":[{"role":"user","content":"` + content + `"}]}`
	r, e := parseRequest(APIChat, []byte(body), Limits{}.withDefaults())
	if e != nil {
		t.Fatal(e)
	}
	out, err := r.normalise("m", 0)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(out), content) || len(out) > len(body)+16 {
		t.Fatalf("normalised %d bytes from %d, content kept: %v", len(out), len(body), strings.Contains(string(out), content))
	}
}

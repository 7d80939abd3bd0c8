package gateway

import (
	"encoding/json"
	"testing"
)

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

package gateway

import (
	"bytes"
	"strings"
	"testing"

	"github.com/rs/zerolog"
)

// The example file of configs/ loads, and its demo keys are its tenants'.
func TestDemoConfig(t *testing.T) {
	c, err := LoadConfig("../configs/gateway-demo.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for key, tenant := range map[string]string{"sk-acme-demo": "acme", "sk-globex-demo": "globex"} {
		found := false
		for _, tn := range c.Tenants {
			for _, h := range tn.APIKeySHA256 {
				found = found || (h == HashKey(key) && tn.Name == tenant)
			}
		}
		if !found {
			t.Errorf("key %s is not tenant %s's", key, tenant)
		}
	}
	if _, err := LoadTokenizers(c); err != nil {
		t.Fatal(err)
	}
}

func TestConfigProblems(t *testing.T) {
	ok := "models: [{name: m}]\ntenants: [{name: a, api_key_sha256: [" + HashKey("k") + "], classes: [c]}]\n"
	if c, err := ParseConfig("x", []byte(ok)); err != nil || c.Models[0].Prefix != "dispatch" || c.Tenants[0].DefaultClass != "c" || c.Tenants[0].MaxConcurrent != DefaultMaxConcurrent {
		t.Fatalf("defaults: %+v, %v", c, err)
	}
	for _, tc := range []struct{ doc, want string }{
		{"", "empty document"},
		{ok + "---\n" + ok, "more than one YAML document"},
		{ok + "extra: 1\n", "field extra not found"},
		{"models: []\ntenants: []\n", "at least one model"},
		{"models: [{name: m, prefix: 'a b'}]\ntenants: [{name: a, api_key_sha256: [k], classes: [c]}]\n", "want 64 hex digits"},
		{"models: [{name: m}, {name: m}]\ntenants: [{name: 'a b', api_key_sha256: [" + HashKey("k") + "], classes: [c], default_class: d}]\n", `"m" is given twice`},
		{"models: [{name: m}]\ntenants: [{name: a, api_key_sha256: [" + HashKey("k") + "], classes: [c]}, {name: b, api_key_sha256: [" + HashKey("k") + "], classes: [c]}]\n", `already tenant "a"'s`},
		{"models: [{name: m, max_tokens: 10, default_max_tokens: 20}]\ntenants: [{name: a, api_key_sha256: [" + HashKey("k") + "], classes: [c], priority: 5, max_priority: 1}]\n", "over max_tokens"},
	} {
		_, err := ParseConfig("x.yaml", []byte(tc.doc))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseConfig(%q): %v, want %q", tc.doc, err, tc.want)
		}
	}
	// Every problem at once, each with its path.
	_, err := ParseConfig("x.yaml", []byte("models: [{name: m, block_size: 5000}]\ntenants: [{name: 'a b', api_key_sha256: [zz], classes: ['c.d']}]\n"))
	for _, want := range []string{"models[0].block_size", "tenants[0].name", "tenants[0].api_key_sha256[0]", "tenants[0].classes[0]"} {
		if err == nil || !strings.Contains(err.Error(), "x.yaml: "+want+":") {
			t.Errorf("missing %s in %v", want, err)
		}
	}
}

// hasTemplate is a Tokenizer that says whether it has a chat template; its
// other methods are never called here.
type hasTemplate struct {
	Tokenizer
	has bool
}

func (h hasTemplate) HasChatTemplate() bool { return h.has }

// A model whose tokenizer has no chat template is named in a warning at
// start: its chat requests fall back to the estimate, which an operator who
// gave it a tokenizer did not expect. One with a template is not.
func TestWarnsOfATokenizerWithoutAChatTemplate(t *testing.T) {
	for _, has := range []bool{false, true} {
		var logged bytes.Buffer
		startGateway(t, func(o *Options) {
			o.Tokenizers = map[string]Tokenizer{"m1": hasTemplate{has: has}}
			o.Log = zerolog.New(&logged)
		})
		warned := strings.Contains(logged.String(), `"model":"m1"`) && strings.Contains(logged.String(), "no chat template")
		if warned == has {
			t.Errorf("template %v: logged %q", has, logged.String())
		}
	}
}

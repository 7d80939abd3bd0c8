package configs

import (
	"errors"
	"strings"
	"testing"
)

const keysBase = `default_policy_family: f
uncached_isl_buckets:
  - {min_tokens: 0, bucket: all}
policy_classes:
  - name: c
    policy_family: f
    cache_bucket: all
    quantum: 10
`

// TestKeyWeights: key_weights, default_key_weight and output_token_weight are
// read with their defaults, and shown by --check-config (Matrix).
func TestKeyWeights(t *testing.T) {
	p, err := Parse("k.yaml", []byte(keysBase+`    key_weights: {gold: 3, "team.a@x:1": 0.5}
    default_key_weight: 2
    output_token_weight: 0.25
`))
	if err != nil {
		t.Fatal(err)
	}
	c := p.Classes[0]
	if c.KeyWeights["gold"] != 3 || c.KeyWeights["team.a@x:1"] != 0.5 || c.DefaultKeyWeight != 2 || c.OutputTokenWeight != 0.25 {
		t.Fatalf("got %v default %v output %v", c.KeyWeights, c.DefaultKeyWeight, c.OutputTokenWeight)
	}
	if m := p.Matrix(); !strings.Contains(m, "gold=3, team.a@x:1=0.5") || !strings.Contains(m, "  c      2 ") {
		t.Fatalf("matrix does not show the key weights:\n%s", m)
	}
	p, err = Parse("k.yaml", []byte(keysBase))
	if err != nil {
		t.Fatal(err)
	}
	if c := p.Classes[0]; c.DefaultKeyWeight != 1 || c.OutputTokenWeight != 0 || c.KeyWeights != nil {
		t.Fatalf("defaults: got %v %v %v, want nil 1 0", c.KeyWeights, c.DefaultKeyWeight, c.OutputTokenWeight)
	}
}

// TestKeyWeightsInvalid: every bad value is reported with its path.
func TestKeyWeightsInvalid(t *testing.T) {
	_, err := Parse("k.yaml", []byte(keysBase+`    key_weights: {gold: 1001, "bad key": 1, low: 0.001, x: [1]}
    default_key_weight: 0
    output_token_weight: -1
`))
	var ve *ValidationError
	if !errors.As(err, &ve) {
		t.Fatalf("got %v, want a *ValidationError", err)
	}
	msg := err.Error()
	for _, want := range []string{
		"policy_classes[0].key_weights.gold: must be in [0.01, 1000], got 1001",
		"policy_classes[0].key_weights: keys must be fairness keys",
		"policy_classes[0].key_weights.low: must be in [0.01, 1000], got 0.001",
		"policy_classes[0].key_weights.x: must be a number",
		"policy_classes[0].default_key_weight: must be in [0.01, 1000], got 0",
		"policy_classes[0].output_token_weight: must be in [0, 1000], got -1",
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("missing problem %q in:\n%s", want, msg)
		}
	}
}

func TestValidKey(t *testing.T) {
	for s, want := range map[string]bool{
		"_": true, "a.b:c@d-e_f": true, strings.Repeat("k", 64): true,
		"": false, strings.Repeat("k", 65): false, "a b": false, "a/b": false, "é": false,
	} {
		if got := ValidKey(s); got != want {
			t.Errorf("ValidKey(%q) = %v, want %v", s, got, want)
		}
	}
}

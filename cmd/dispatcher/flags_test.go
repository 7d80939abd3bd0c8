package main

import (
	"bytes"
	"flag"
	"strings"
	"testing"
	"time"
)

func env(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func TestEnvName(t *testing.T) {
	if got := EnvName("active-prefill-tokens-threshold-frac"); got != "DISPATCHER_ACTIVE_PREFILL_TOKENS_THRESHOLD_FRAC" {
		t.Fatalf("EnvName = %s", got)
	}
}

func TestSettingsFromEnvAndFlags(t *testing.T) {
	s, err := parseSettings([]string{"--ack-wait", "10s"}, env(map[string]string{
		"DISPATCHER_ACK_WAIT":                        "20s", // the flag wins
		"DISPATCHER_MAX_HELD":                        "7",
		"DISPATCHER_ACTIVE_PREFILL_TOKENS_THRESHOLD": "4096",
	}), &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if s.ackWait != 10*time.Second || s.maxHeld != 7 || s.prefillTokens.v == nil || *s.prefillTokens.v != 4096 {
		t.Fatalf("got ack-wait %v max-held %d prefill %v, want 10s 7 4096", s.ackWait, s.maxHeld, s.prefillTokens.v)
	}
	if s.decodeBlocks.v != nil || s.queueThreshold.v != nil {
		t.Fatal("unset optional thresholds should stay nil")
	}
}

func TestNoWorkersTimeout(t *testing.T) {
	s, err := parseSettings(nil, env(nil), &bytes.Buffer{})
	if err != nil || s.noWorkersTimeout != 0 {
		t.Fatalf("default --no-workers-timeout = %v (%v), want 0", s.noWorkersTimeout, err)
	}
	s, err = parseSettings(nil, env(map[string]string{"DISPATCHER_NO_WORKERS_TIMEOUT": "2s"}), &bytes.Buffer{})
	if err != nil || s.noWorkersTimeout != 2*time.Second {
		t.Fatalf("DISPATCHER_NO_WORKERS_TIMEOUT=2s: got %v (%v), want 2s", s.noWorkersTimeout, err)
	}
}

func TestSettingsErrorsNameTheInput(t *testing.T) {
	cases := []struct {
		args []string
		env  map[string]string
		want string
	}{
		{nil, map[string]string{"DISPATCHER_MAX_HELD": "lots"}, "DISPATCHER_MAX_HELD"},
		{[]string{"--stream-storage", "tape"}, nil, "--stream-storage"},
		{[]string{"--queue-policy", "lifo"}, nil, "--queue-policy"},
		{[]string{"--dispatch-timeout", "40s"}, nil, "--dispatch-timeout"},
		{[]string{"--block-size", "0"}, nil, "--block-size"},
		{[]string{"--router-temperature", "-1"}, nil, "--router-temperature"},
		{[]string{"--log-format", "xml"}, nil, "--log-format"},
		{[]string{"--no-workers-timeout", "-1s"}, nil, "--no-workers-timeout"},
		{[]string{"extra"}, nil, "unexpected argument"},
		{[]string{"--record-buffer", "0"}, nil, "--record-buffer 0"},
		{nil, map[string]string{"DISPATCHER_RECORD_STREAM_MAX_BYTES": "-1"}, "--record-stream-max-bytes -1"},
		// A value that parses but is out of bounds names its variable too.
		{nil, map[string]string{"DISPATCHER_LEASE_TTL": "2m"}, "--lease-ttl 2m0s: want 200ms to 1m (--lease-ttl from DISPATCHER_LEASE_TTL)"},
		{nil, map[string]string{"DISPATCHER_SUBJECT_PREFIX": "a.*"}, "(--subject-prefix from DISPATCHER_SUBJECT_PREFIX)"},
		{[]string{"--nats-inbox-prefix", "_INBOX.*"}, nil, "--nats-inbox-prefix"},
		// The consumer's MaxAckPending is their sum: refused at start, not at the first lead.
		{[]string{"--max-held", "600000000"}, nil, "--max-held 600000000 + --max-in-worker 0"},
		{[]string{"--max-held", "1000", "--max-in-worker", "2147483000"}, nil, "--max-held 1000 + --max-in-worker 2147483000"},
		// A prefix that would make an invalid stream or bucket name is refused, naming both.
		{[]string{"--subject-prefix", "a.*"}, nil, `--subject-prefix: naming: invalid subject prefix "a.*"`},
		{[]string{"--subject-prefix", "team/llama"}, nil, `prefix "team/llama": stream name "TEAM/LLAMA_REQ"`},
		{nil, map[string]string{"DISPATCHER_SUBJECT_PREFIX": "llama+qwen"}, `prefix "llama+qwen": bucket name "fairdispatch_llama+qwen_leader"`},
	}
	for _, c := range cases {
		_, err := parseSettings(c.args, env(c.env), &bytes.Buffer{})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("args %v env %v: error %v, want one naming %s", c.args, c.env, err, c.want)
		}
	}
	var stderr bytes.Buffer
	_, err := parseSettings([]string{"--no-such-flag"}, env(nil), &stderr)
	var pe parseError
	if err == nil || !asParse(err, &pe) || !strings.Contains(stderr.String(), "no-such-flag") {
		t.Fatalf("unknown flag: err %v, stderr %q", err, stderr.String())
	}
	if _, err := parseSettings([]string{"-h"}, env(nil), &stderr); err != flag.ErrHelp {
		t.Fatalf("-h: err %v, want flag.ErrHelp", err)
	}
}

func asParse(err error, pe *parseError) bool {
	p, ok := err.(parseError)
	*pe = p
	return ok
}

func TestCheckConfig(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run([]string{"--check-config", "../../configs/policy-cached-uncached.yaml"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	if !strings.Contains(out.String(), "uncached") {
		t.Fatalf("matrix does not name the classes:\n%s", out.String())
	}
	out.Reset()
	if code := run([]string{"--check-config", "../../configs/testdata/invalid.yaml"}, &out, &errb); code != 1 {
		t.Fatalf("invalid policy: exit %d, want 1", code)
	}
}

// TestSettingsErrorNamesOnlyTheVariableThatSetIt: a bad value from the
// command line is not blamed on an environment variable that the flag
// overrode.
func TestSettingsErrorNamesOnlyTheVariableThatSetIt(t *testing.T) {
	_, err := parseSettings([]string{"--lease-ttl", "2m"}, env(map[string]string{"DISPATCHER_LEASE_TTL": "1s"}), &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "--lease-ttl 2m0s") || strings.Contains(err.Error(), "DISPATCHER_LEASE_TTL") {
		t.Fatalf("error %v, want --lease-ttl named without the variable", err)
	}
}

package main

import (
	"io"
	"strings"
	"testing"
	"time"
)

func env(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

// Every flag has its GATEWAY_<FLAG> variable; the command line wins; a bad
// value names the variable.
func TestFlagsFromEnvironment(t *testing.T) {
	s, err := parseSettings([]string{"--listen", "127.0.0.1:9000"}, env(map[string]string{
		"GATEWAY_CONFIG": "g.yaml", "GATEWAY_LISTEN": "0.0.0.0:1", "GATEWAY_WRITE_TIMEOUT": "5s", "GATEWAY_MAX_BODY_BYTES": "4096",
	}), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if s.config != "g.yaml" || s.listen != "127.0.0.1:9000" || s.writeTimeout != 5*time.Second || s.maxBody != 4096 {
		t.Fatalf("settings %+v", s)
	}
	if _, err := parseSettings(nil, env(map[string]string{"GATEWAY_CONFIG": "g", "GATEWAY_READ_TIMEOUT": "soon"}), io.Discard); err == nil || !strings.Contains(err.Error(), "GATEWAY_READ_TIMEOUT") {
		t.Fatalf("bad environment value: %v", err)
	}
	if _, err := parseSettings(nil, env(nil), io.Discard); err == nil || !strings.Contains(err.Error(), "--config: required") {
		t.Fatalf("no --config: %v", err)
	}
	if _, err := parseSettings([]string{"--config", "g", "--response-prefix", "a.*"}, env(nil), io.Discard); err == nil {
		t.Fatal("a wildcard response prefix was accepted")
	}
	if got := EnvName("max-json-depth"); got != "GATEWAY_MAX_JSON_DEPTH" {
		t.Fatalf("EnvName: %s", got)
	}
	// GATEWAY_VERSION set in an image must not turn the gateway into a version printer.
	if s, err := parseSettings([]string{"--config", "g"}, env(map[string]string{"GATEWAY_VERSION": "1.2"}), io.Discard); err != nil || s.version {
		t.Fatalf("GATEWAY_VERSION: %v, %v", s, err)
	}
}

func TestCheckConfig(t *testing.T) {
	var out, errOut strings.Builder
	if code := run([]string{"--check-config", "../../configs/gateway-demo.yaml"}, &out, &errOut); code != 0 || !strings.Contains(out.String(), "tenant acme") {
		t.Fatalf("check-config: %d %q %q", code, out.String(), errOut.String())
	}
}

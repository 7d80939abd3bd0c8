package wire

import "testing"

// TestLookupHeader: the exact casing first; of other casings the one that
// sorts first byte-wise, every time (a map's order would pick one at random);
// a present empty value is found.
func TestLookupHeader(t *testing.T) {
	h := map[string][]string{"dispatch-response-to": {"b"}, "DISPATCH-RESPONSE-TO": {"a"}, "Dispatch-Status": {""}}
	for range 50 {
		if v, ok := LookupHeader(h, HeaderResponseTo); v != "a" || !ok {
			t.Fatalf("two other casings: got %q %v, want the byte-wise first's %q", v, ok, "a")
		}
	}
	h[HeaderResponseTo] = []string{"exact"}
	if v := HeaderValue(h, HeaderResponseTo); v != "exact" {
		t.Errorf("with the exact casing: got %q", v)
	}
	if v, ok := LookupHeader(h, HeaderStatus); v != "" || !ok {
		t.Errorf("empty value: got %q %v, want present", v, ok)
	}
	if _, ok := LookupHeader(h, HeaderClass); ok {
		t.Error("absent header found")
	}
}

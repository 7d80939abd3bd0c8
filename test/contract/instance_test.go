package contract

import (
	"fmt"
	"strings"
	"testing"

	"fairdispatch/wire"
	"fairdispatch/workers"
)

// TestInstanceBoundsAgree: a worker sends one instance in its load reports
// and its KV cache events (docs/protocol.md, Load report; KV cache events),
// so both readers accept the same instances: 1 to 128 bytes (a load report
// may also leave it empty).
func TestInstanceBoundsAgree(t *testing.T) {
	for _, n := range []int{1, 64, 128, 129} {
		inst := strings.Repeat("i", n)
		_, repErr := workers.ParseReport("w1", []byte(fmt.Sprintf(`{"worker_id":"w1","instance":%q}`, inst)))
		_, evErr := wire.ParseKVEvent([]byte(fmt.Sprintf(`{"instance":%q,"event_id":1}`, inst)))
		if want := n <= 128; (repErr == nil) != want || (evErr == nil) != want {
			t.Errorf("instance of %d bytes: load report error %v, KV event error %v; want both accepted: %v", n, repErr, evErr, want)
		}
	}
}

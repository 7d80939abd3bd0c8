package bus

import (
	"fmt"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// Sync is how often a nats-server's JetStream file store syncs its writes to
// disk (docs/deployment.md, Durability): before acknowledging each write
// (Always), or every Interval. JetStream acknowledges a publish once the write
// is in the operating system's page cache; what is not yet synced survives a
// process crash but not a power loss or an operating system crash.
type Sync struct {
	Always   bool
	Interval time.Duration // when not Always; > 0
}

// DefaultSync is the embedded server's default: sync before every
// acknowledgement, so that a power loss loses no acknowledged request
// (docs/deployment.md, Durability, with its throughput cost).
var DefaultSync = Sync{Always: true}

// ParseSync reads a --nats-sync value: "always", or a Go duration of at
// least 10ms (nats-server's own default is 2m).
func ParseSync(s string) (Sync, error) {
	if s == "always" {
		return Sync{Always: true}, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 10*time.Millisecond {
		return Sync{}, fmt.Errorf("want always or a duration of at least 10ms, e.g. 1s")
	}
	return Sync{Interval: d}, nil
}

// String returns s as ParseSync reads it.
func (s Sync) String() string {
	if s.Always {
		return "always"
	}
	return s.Interval.String()
}

// Apply sets s on the options of an embedded nats-server.
func (s Sync) Apply(o *server.Options) {
	o.SyncAlways = s.Always
	o.SyncInterval = 0
	if !s.Always {
		o.SyncInterval = s.Interval
	}
}

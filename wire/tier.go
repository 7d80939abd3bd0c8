package wire

import "fmt"

// Tier is a cache tier of a worker rank (docs/protocol.md, KV cache events).
type Tier uint8

// The tiers, in the order of their bits in a [Tiers] set.
const (
	Device Tier = iota // accelerator memory
	Host               // host-pinned memory
	Disk               // local disk
	Shared             // a cache shared between workers
	NumTiers
)

var tierNames = [NumTiers]string{"device", "host", "disk", "shared"}

// String returns the tier's wire name: device, host, disk or shared.
func (t Tier) String() string {
	if t < NumTiers {
		return tierNames[t]
	}
	return fmt.Sprintf("tier(%d)", uint8(t))
}

// ParseTier returns the tier of a wire name (exact, lower case).
func ParseTier(s string) (Tier, bool) {
	for i, n := range tierNames {
		if n == s {
			return Tier(i), true
		}
	}
	return 0, false
}

// Tiers is a set of tiers, one bit per [Tier].
type Tiers uint8

// AllTiers is the set of every tier: a `cleared` naming all of them is a
// resynchronisation (docs/protocol.md, KV cache events).
const AllTiers Tiers = 1<<NumTiers - 1

// Has reports whether t is in the set.
func (s Tiers) Has(t Tier) bool { return s&(1<<t) != 0 }

package dispatcher

import (
	"math"

	"fairdispatch/ingest"
)

// deliveryCount returns dl's JetStream delivery count for an outcome's attempt
// field (docs/protocol.md, Outcomes), or 0 (left out) when it is unknown.
func deliveryCount(dl *ingest.Delivery) uint32 {
	return uint32(min(dl.NumDelivered, math.MaxUint32))
}

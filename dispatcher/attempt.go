package dispatcher

import (
	"math"
	"strings"

	"fairdispatch/ingest"
)

// deliveryCount returns dl's JetStream delivery count for an outcome's attempt
// field (docs/protocol.md, Outcomes), or 0 (left out) when it is unknown.
func deliveryCount(dl *ingest.Delivery) uint32 {
	return uint32(min(dl.NumDelivered, math.MaxUint32))
}

// token returns the last token of the request's subject: its class token
// (docs/design.md, Class resolution).
func (h *held) token() string {
	s := h.msg.Subject()
	return s[strings.LastIndexByte(s, '.')+1:]
}

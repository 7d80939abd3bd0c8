package dispatcher

import "github.com/nats-io/nats.go/jetstream"

// attempt returns m's JetStream delivery count for an outcome's attempt field
// (docs/protocol.md, Outcomes), or 0 (left out) when m has no metadata.
func attempt(m jetstream.Msg) uint64 {
	if m == nil {
		return 0
	}
	md, err := m.Metadata()
	if err != nil {
		return 0
	}
	return md.NumDelivered
}

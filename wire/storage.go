package wire

// JetStream's refusals of a write for want of room (docs/protocol.md, When a
// stream or the store is full). A producer's publish, a dead letter, a KV
// cache event or a policy put that JetStream refuses this way gets a publish
// acknowledgement whose error carries one of these codes (the JSON field
// err_code; nats.go's jetstream.APIError.ErrorCode) and descriptions
// (description; APIError.Description). They are nats-server's own
// (server/jetstream_errors_generated.go and server/store.go, v2.15.2): the
// refusal is JetStream's, not the dispatcher's, and the same write succeeds
// once there is room again.
const (
	// JSErrCodeStoreFailed (HTTP-like code 503) is a stream at one of its own
	// limits with discard policy "new"; the description says which one:
	// RefusalMaxBytes, RefusalMaxMsgs or RefusalMaxMsgsPerSubject. The same
	// code with another description ("message too large") is not a refusal
	// for room.
	JSErrCodeStoreFailed = 10077
	// JSErrCodeInsufficientResources (503) is the server's JetStream store
	// full (max_file_store, or max_memory_store for a memory stream): every
	// stream of the server refuses writes, whatever its own limits.
	// Description RefusalInsufficientResources.
	JSErrCodeInsufficientResources = 10023
	// JSErrCodeAccountResourcesExceeded (400) is the account's JetStream
	// storage limit reached. Description RefusalAccountResources.
	JSErrCodeAccountResourcesExceeded = 10002
)

// The descriptions of the refusals above, as nats-server writes them.
const (
	RefusalMaxBytes              = "maximum bytes exceeded"
	RefusalMaxMsgs               = "maximum messages exceeded"
	RefusalMaxMsgsPerSubject     = "maximum messages per subject exceeded"
	RefusalInsufficientResources = "insufficient resources"
	RefusalAccountResources      = "resource limits exceeded for account"
)

// StorageRefusal reports whether a JetStream API error, given by its error
// code and description, refuses a write for want of room: a stream at its own
// limit, the server's store full, or the account's limit reached. Retrying
// the same write later (with the same Nats-Msg-Id) can succeed.
func StorageRefusal(code int, description string) bool {
	switch code {
	case JSErrCodeInsufficientResources, JSErrCodeAccountResourcesExceeded:
		return true
	case JSErrCodeStoreFailed:
		switch description {
		case RefusalMaxBytes, RefusalMaxMsgs, RefusalMaxMsgsPerSubject:
			return true
		}
	}
	return false
}

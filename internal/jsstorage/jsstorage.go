// Package jsstorage tells a JetStream write refused for want of room from
// every other error: a stream at its own limit (discard policy "new"), the
// server's store full, or the account's limit reached (docs/protocol.md, When
// a stream or the store is full). The codes and descriptions are the
// protocol's (wire.StorageRefusal); this package only finds the JetStream API
// error in a chain of wrapped errors, for every program that writes to
// JetStream: the dispatcher's dead letters, its lease and policy buckets, the
// load generator and the gateway.
package jsstorage

import (
	"errors"

	"github.com/nats-io/nats.go/jetstream"

	"fairdispatch/wire"
)

// Refused reports whether err (or an error it wraps) is JetStream's refusal
// of a write for want of room, and its reason: the server's description
// (wire.RefusalMaxBytes, wire.RefusalInsufficientResources...). The same
// write can succeed later, once the stream or the store has room again.
func Refused(err error) (reason string, ok bool) {
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) || !wire.StorageRefusal(int(apiErr.ErrorCode), apiErr.Description) {
		return "", false
	}
	return apiErr.Description, true
}

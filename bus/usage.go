package bus

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
)

// StreamUse is a stream's state and its own limits (docs/operations.md,
// When storage runs out); a limit <= 0 is none.
type StreamUse struct {
	Bytes, Msgs       uint64
	MaxBytes, MaxMsgs int64
	// DiscardNew: at its limits the stream refuses new messages (false: it
	// deletes its oldest ones).
	DiscardNew bool
}

// StoreUse is JetStream storage use and limits, in bytes, of file and memory
// storage; a limit <= 0 is none.
type StoreUse struct {
	FileBytes, MemoryBytes uint64
	FileMax, MemoryMax     int64
}

// ReadStream returns the use and limits of stream name, from one stream
// info request. A missing stream is jetstream.ErrStreamNotFound.
func ReadStream(ctx context.Context, js jetstream.JetStream, name string) (StreamUse, error) {
	s, err := js.Stream(ctx, name)
	if err != nil {
		return StreamUse{}, fmt.Errorf("bus: stream %s: %w", name, err)
	}
	info := s.CachedInfo()
	return StreamUse{
		Bytes: info.State.Bytes, Msgs: info.State.Msgs, MaxBytes: info.Config.MaxBytes, MaxMsgs: info.Config.MaxMsgs,
		DiscardNew: info.Config.Discard == jetstream.DiscardNew,
	}, nil
}

// ReadAccount returns the JetStream use and limits of the connection's
// account: those of the tier of replicas streams (R1, R3...) when the
// account has tiered limits, else the account's. The server's own store
// limit (max_file_store) is not visible to an account: an account without
// limits of its own shows none.
func ReadAccount(ctx context.Context, js jetstream.JetStream, replicas int) (StoreUse, error) {
	ai, err := js.AccountInfo(ctx)
	if err != nil {
		return StoreUse{}, fmt.Errorf("bus: account info: %w", err)
	}
	t := ai.Tier
	if tier, ok := ai.Tiers[fmt.Sprintf("R%d", max(replicas, 1))]; ok {
		t = tier
	}
	return StoreUse{FileBytes: t.Store, MemoryBytes: t.Memory, FileMax: t.Limits.MaxStore, MemoryMax: t.Limits.MaxMemory}, nil
}

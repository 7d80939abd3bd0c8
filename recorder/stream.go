package recorder

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
)

// DefaultStreamMaxBytes is the default size limit of the trace stream.
const DefaultStreamMaxBytes = 256 << 20

// EnsureStream creates the trace stream name on subject if it is absent:
// limits retention, at most maxBytes (<= 0: DefaultStreamMaxBytes), the
// oldest records discarded beyond it. An existing stream is left as the
// operator configured it.
func EnsureStream(ctx context.Context, js jetstream.JetStream, name, subject string, maxBytes int64, replicas int,
	storage jetstream.StorageType) error {
	if maxBytes <= 0 {
		maxBytes = DefaultStreamMaxBytes
	}
	_, err := js.Stream(ctx, name)
	if err == nil {
		return nil
	}
	if !errors.Is(err, jetstream.ErrStreamNotFound) {
		return fmt.Errorf("recorder: trace stream %s: %w", name, err)
	}
	_, err = js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{subject}, Retention: jetstream.LimitsPolicy,
		Discard: jetstream.DiscardOld, MaxBytes: maxBytes, Replicas: max(1, replicas), Storage: storage})
	if err != nil && !errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
		return fmt.Errorf("recorder: create trace stream %s: %w", name, err)
	}
	return nil
}

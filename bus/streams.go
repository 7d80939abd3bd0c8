package bus

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
)

// DefaultDuplicateWindow is the duplicate window used when
// StreamConfig.DuplicateWindow is 0 (docs/config.md, Flags and environment, --duplicate-window).
const DefaultDuplicateWindow = 2 * time.Minute

// DefaultKVMaxAge is the max age of a new KV event stream when
// StreamConfig.KVMaxAge is 0. It bounds the replay after a restart and the
// stream's size; events older than it are gone, and a rank whose first
// remaining event is not its instance's first is resynchronised
// (docs/protocol.md, Resynchronisation).
const DefaultKVMaxAge = time.Hour

// ErrStreamConflict reports an existing stream whose configuration cannot be
// changed into the wanted one (JetStream cannot change a stream's storage type
// or move it to or from work-queue retention). The error names the stream.
var ErrStreamConflict = errors.New("bus: stream conflict")

// StreamConfig is what the dispatcher's three streams are made of (docs/protocol.md; docs/config.md, Flags and environment).
type StreamConfig struct {
	// Prefix is the subject prefix; "" means DefaultPrefix.
	Prefix string
	// Replicas is the number of stream replicas, 1 to 5; 0 means 1.
	Replicas int
	// Storage is file (the zero value) or memory.
	Storage jetstream.StorageType
	// DuplicateWindow is how long JetStream remembers Nats-Msg-Id values to drop
	// duplicates; 0 means DefaultDuplicateWindow.
	DuplicateWindow time.Duration
	// KVMaxAge is the max age of the KV event stream when it is created
	// (an existing stream keeps its own); 0 means DefaultKVMaxAge.
	KVMaxAge time.Duration
	// Log receives the warning of a stream whose discard policy is changed
	// (the zero value logs nothing).
	Log zerolog.Logger
}

// EnsureStreams creates the prefix's request stream ("<Q>_REQ", subjects
// "<prefix>.req.*", work-queue retention), dead-letter stream ("<Q>_DLQ",
// subjects "<prefix>.dlq.*", limits retention) and KV event stream ("<Q>_KV",
// subjects "<prefix>.kv.*", limits retention, max age KVMaxAge) when they are
// missing (Subjects.ReqStream, Subjects.DLQStream, Subjects.KVStream), and otherwise updates them to the
// configured replicas and duplicate window, keeping every other setting an
// operator may have made (limits, max age, placement...). A stream that
// already matches is left alone. An existing stream with another storage type
// or retention policy fails with ErrStreamConflict naming it: JetStream cannot
// change either in place. So does one that captures other subjects: it
// belongs to another deployment whose prefix names the same streams ("a.b"
// and "a_b" both name A_B_REQ; docs/deployment.md, Several pools on one NATS
// account), and taking its subjects would take its requests.
func EnsureStreams(ctx context.Context, js jetstream.JetStream, c StreamConfig) error {
	subj, err := NewSubjects(c.Prefix)
	if err != nil {
		return fmt.Errorf("bus: ensure streams: %w", err)
	}
	if c.Replicas == 0 {
		c.Replicas = 1
	}
	if c.Replicas < 1 || c.Replicas > 5 {
		return fmt.Errorf("bus: ensure streams: replicas %d out of range 1 to 5", c.Replicas)
	}
	if c.Storage != jetstream.FileStorage && c.Storage != jetstream.MemoryStorage {
		return fmt.Errorf("bus: ensure streams: unknown storage type %d", c.Storage)
	}
	if c.DuplicateWindow == 0 {
		c.DuplicateWindow = DefaultDuplicateWindow
	}
	if c.DuplicateWindow < 0 {
		return fmt.Errorf("bus: ensure streams: negative duplicate window %s", c.DuplicateWindow)
	}
	if c.KVMaxAge == 0 {
		c.KVMaxAge = DefaultKVMaxAge
	}
	if c.KVMaxAge < 0 {
		return fmt.Errorf("bus: ensure streams: negative kv max age %s", c.KVMaxAge)
	}
	want := []struct {
		cfg        jetstream.StreamConfig
		discardNew bool   // enforce discard new on an existing stream
		whatIsLost string // what discard old deletes, for the warning
	}{
		{jetstream.StreamConfig{
			Name:       subj.ReqStream(),
			Subjects:   []string{subj.ReqAll()},
			Retention:  jetstream.WorkQueuePolicy,
			Discard:    jetstream.DiscardNew,
			Storage:    c.Storage,
			Replicas:   c.Replicas,
			Duplicates: c.DuplicateWindow,
		}, true, "the oldest requests, which no worker ran and no dead letter records"},
		{jetstream.StreamConfig{
			Name:       subj.DLQStream(),
			Subjects:   []string{subj.DLQAll()},
			Retention:  jetstream.LimitsPolicy,
			Discard:    jetstream.DiscardNew,
			Storage:    c.Storage,
			Replicas:   c.Replicas,
			Duplicates: c.DuplicateWindow,
		}, true, "the oldest dead letters"},
		{jetstream.StreamConfig{
			// Limits retention: every dispatcher (a standby, a restarted
			// one) reads it all, so no read may remove a message.
			Name:       subj.KVStream(),
			Subjects:   []string{subj.KVAll()},
			Retention:  jetstream.LimitsPolicy,
			Discard:    jetstream.DiscardOld,
			MaxAge:     c.KVMaxAge,
			Storage:    c.Storage,
			Replicas:   c.Replicas,
			Duplicates: c.DuplicateWindow,
		}, false, ""},
	}
	for _, w := range want {
		fixed, err := ensureStream(ctx, js, w.cfg, w.discardNew)
		if err != nil {
			return err
		}
		if fixed {
			c.Log.Warn().Str("component", "bus").Str("stream", w.cfg.Name).
				Msgf("stream had discard policy old, a data-loss setting: at its limits it would have deleted %s; "+
					"set to discard new, so that a full stream refuses publishes instead (docs/protocol.md, When a stream or the store is full)", w.whatIsLost)
		}
	}
	return nil
}

// ensureStream creates w or brings the existing stream of that name in line;
// with discardNew, an existing stream's discard policy becomes w's, and
// fixed says whether it was another.
func ensureStream(ctx context.Context, js jetstream.JetStream, w jetstream.StreamConfig, discardNew bool) (fixed bool, err error) {
	s, err := retryAPI(ctx, func(ctx context.Context) (jetstream.Stream, error) { return js.Stream(ctx, w.Name) })
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		if _, err := retryAPI(ctx, func(ctx context.Context) (jetstream.Stream, error) { return js.CreateStream(ctx, w) }); err != nil {
			// Another dispatcher may have created it meanwhile: fall through
			// to the update path once.
			if isSubjectOverlap(err) {
				return false, fmt.Errorf("bus: create stream %s: %w: another stream captures %v (one created by an earlier release for this prefix "+
					"is named DISPATCH_REQ or DISPATCH_DLQ: docs/deployment.md, Several pools on one NATS account)", w.Name, err, w.Subjects)
			}
			if !errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
				return false, fmt.Errorf("bus: create stream %s: %w", w.Name, err)
			}
			if s, err = retryAPI(ctx, func(ctx context.Context) (jetstream.Stream, error) { return js.Stream(ctx, w.Name) }); err != nil {
				return false, fmt.Errorf("bus: look up stream %s: %w", w.Name, err)
			}
		} else {
			return false, nil
		}
	} else if err != nil {
		return false, fmt.Errorf("bus: look up stream %s: %w", w.Name, err)
	}

	cur := s.CachedInfo().Config
	if cur.Storage != w.Storage {
		return false, fmt.Errorf("%w: stream %s has %s storage, configured %s; JetStream cannot change the storage type of a stream: "+
			"move its messages and delete it, or configure %s storage", ErrStreamConflict, w.Name, cur.Storage, w.Storage, cur.Storage)
	}
	if cur.Retention != w.Retention {
		return false, fmt.Errorf("%w: stream %s has %s retention, want %s; JetStream cannot change it: delete or rename the stream",
			ErrStreamConflict, w.Name, cur.Retention, w.Retention)
	}
	if !sameSet(cur.Subjects, w.Subjects) {
		return false, fmt.Errorf("%w: stream %s captures %v, want %v: another deployment whose subject prefix names the same streams uses it; "+
			"choose a prefix that differs after upper-casing and turning '.' and '-' into '_'", ErrStreamConflict, w.Name, cur.Subjects, w.Subjects)
	}
	fixed = discardNew && cur.Discard != w.Discard
	if cur.Replicas == w.Replicas && cur.Duplicates == w.Duplicates && !fixed {
		return false, nil
	}
	next := cur
	next.Replicas = w.Replicas
	next.Duplicates = w.Duplicates
	if discardNew {
		next.Discard = w.Discard
	}
	if _, err := retryAPI(ctx, func(ctx context.Context) (jetstream.Stream, error) { return js.UpdateStream(ctx, next) }); err != nil {
		return false, fmt.Errorf("bus: update stream %s: %w", w.Name, err)
	}
	return fixed, nil
}

// jsErrSubjectOverlap is the JetStream error code of "subjects overlap with an
// existing stream" (nats-server's JSStreamSubjectOverlapErr).
const jsErrSubjectOverlap jetstream.ErrorCode = 10065

// isSubjectOverlap reports whether err is JetStream's refusal to create a
// stream whose subjects another stream captures.
func isSubjectOverlap(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == jsErrSubjectOverlap
}

// sameSet reports whether a and b hold the same strings, in any order.
func sameSet(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

// apiTimeout bounds one JetStream API request of EnsureStreams. Right after a
// server starts, a request can go unanswered; it is retried rather than left
// to hang until the caller's deadline.
const apiTimeout = 5 * time.Second

// retryAPI calls f with a per-attempt timeout until it succeeds, fails with an
// error that retrying cannot fix, or ctx ends. It retries unanswered requests,
// missing responders and a JetStream that is not (yet) enabled.
func retryAPI[T any](ctx context.Context, f func(context.Context) (T, error)) (T, error) {
	b := backoff.NewExponentialBackOff()
	b.InitialInterval = 50 * time.Millisecond
	b.MaxInterval = 2 * time.Second
	b.MaxElapsedTime = 0
	b.Reset()
	for {
		actx, cancel := context.WithTimeout(ctx, apiTimeout)
		v, err := f(actx)
		cancel()
		transient := errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) ||
			errors.Is(err, nats.ErrNoResponders) || errors.Is(err, jetstream.ErrJetStreamNotEnabled)
		if err == nil || !transient || ctx.Err() != nil {
			return v, err
		}
		t := time.NewTimer(b.NextBackOff())
		select {
		case <-ctx.Done():
			t.Stop()
			return v, fmt.Errorf("%w (last error: %v)", ctx.Err(), err)
		case <-t.C:
		}
	}
}

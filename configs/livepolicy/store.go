package livepolicy

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"fairdispatch/configs"
	"fairdispatch/internal/jsstorage"
)

// Key is the key of the policy YAML in the bucket.
const Key = "policy"

// History is how many revisions of the key the bucket keeps (JetStream's
// maximum), for `fairctl policy history` and `rollback`.
const History = 64

// ErrNoPolicy is returned when the bucket holds no policy (the key was never
// put, or its last revision deletes it).
var ErrNoPolicy = errors.New("no policy in the bucket")

// Revision is one revision of the policy key.
type Revision struct {
	Revision uint64    // the bucket's revision number (a stream sequence)
	Created  time.Time // when the server stored it
	YAML     []byte    // the policy YAML; nil for a delete
	Deleted  bool      // the revision deletes or purges the key
}

// Store is the policy's key-value bucket.
type Store struct {
	kv     jetstream.KeyValue
	bucket string
	// leaderWait bounds how long a start-up read or seed waits for the
	// bucket's stream to have a leader (LeaderWait; tests shorten it).
	leaderWait time.Duration
}

// LeaderWait is how long Seed and Get retry while the bucket's stream has no
// leader: JetStream answers "no responders" for a replicated bucket just
// created or electing after a node loss, for about a second of a healthy
// cluster's time and longer on a loaded one. A dispatcher starting then
// waits for the election instead of exiting.
const LeaderWait = 30 * time.Second

// whileLeaderless runs f, again every 100 ms while it fails with no
// responders (the stream has no leader yet), until s.leaderWait has passed
// or ctx ends; it returns f's last error.
func (s *Store) whileLeaderless(ctx context.Context, f func() error) error {
	deadline := time.Now().Add(s.leaderWait)
	for {
		err := f()
		if !errors.Is(err, nats.ErrNoResponders) || !time.Now().Before(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// BucketConfig says how to create the bucket when it is missing.
type BucketConfig struct {
	Replicas int                   // at least 1
	Storage  jetstream.StorageType // file or memory
}

// Open returns the store of bucket, creating the bucket when it is missing
// (an existing bucket is used as it is).
func Open(ctx context.Context, js jetstream.JetStream, bucket string, cfg BucketConfig) (*Store, error) {
	kv, err := js.KeyValue(ctx, bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		kv, err = js.CreateKeyValue(ctx, jetstream.KeyValueConfig{
			Bucket: bucket, Description: "fairdispatch policy (docs/design.md, Live policy)",
			History: History, Replicas: max(cfg.Replicas, 1), Storage: cfg.Storage,
		})
		if errors.Is(err, jetstream.ErrBucketExists) { // created meanwhile by another dispatcher
			kv, err = js.KeyValue(ctx, bucket)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("policy bucket %s: %w", bucket, err)
	}
	return &Store{kv: kv, bucket: bucket, leaderWait: LeaderWait}, nil
}

// ErrNoBucket is returned by Bind for a bucket that does not exist.
var ErrNoBucket = errors.New("not found: a dispatcher of the pool creates it when it starts (with the pool's --stream-replicas and --stream-storage); start one first, or check --subject-prefix")

// Bind returns the store of an existing bucket, or an error wrapping
// ErrNoBucket: a tool (fairctl) must not create the bucket, which would
// have neither the pool's replicas nor its storage, nor leave one behind
// for a mistyped prefix.
func Bind(ctx context.Context, js jetstream.JetStream, bucket string) (*Store, error) {
	kv, err := js.KeyValue(ctx, bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		err = ErrNoBucket
	}
	if err != nil {
		return nil, fmt.Errorf("policy bucket %s: %w", bucket, err)
	}
	return &Store{kv: kv, bucket: bucket, leaderWait: LeaderWait}, nil
}

// Bucket returns the bucket's name.
func (s *Store) Bucket() string { return s.bucket }

// Name is how a revision is named in validation errors and logs, in the
// place of a file name: "<bucket>@<revision>", so that a problem reads
// "fairdispatch_policy@2:17: policy_classes[1].quantum: must be > 0".
func (s *Store) Name(rev uint64) string { return fmt.Sprintf("%s@%d", s.bucket, rev) }

// Seed puts yaml as the first revision when the key has none. It never
// writes over a valid policy, nor over a delete or purge marker while the
// history keeps a valid revision (jetstream's Create would, undoing the
// live policy the running dispatchers kept in the marker's place: they run
// that revision, and a restarted one runs it too). Over a marker with no
// valid revision left (a purge), it does put yaml: every dispatcher would
// otherwise run a policy of its own, the running ones the last they held,
// a restarted one its file. created is false when nothing was written; rev
// is then 0.
func (s *Store) Seed(ctx context.Context, yaml []byte) (rev uint64, created bool, err error) {
	err = s.whileLeaderless(ctx, func() (err error) { rev, err = s.kv.Update(ctx, Key, yaml, 0); return err })
	if errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		if res, rerr := s.Resolve(ctx); rerr == nil && res.Current.Deleted && res.Policy == nil {
			rev, err = s.kv.Update(ctx, Key, yaml, res.Current.Revision)
		}
	}
	switch {
	case errors.Is(err, jetstream.ErrKeyRevisionMismatch): // Update maps a wrong last sequence to it
		return 0, false, nil
	case err != nil:
		return 0, false, fmt.Errorf("policy bucket %s: seed: %w", s.bucket, sizeHint(err))
	}
	return rev, true, nil
}

// Get returns the current revision, or an error wrapping ErrNoPolicy that
// names the bucket.
func (s *Store) Get(ctx context.Context) (Revision, error) {
	var e jetstream.KeyValueEntry
	err := s.whileLeaderless(ctx, func() (err error) { e, err = s.kv.Get(ctx, Key); return err })
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return Revision{}, fmt.Errorf("policy bucket %s: %w", s.bucket, ErrNoPolicy)
	}
	if err != nil {
		return Revision{}, fmt.Errorf("policy bucket %s: get: %w", s.bucket, err)
	}
	return revision(e), nil
}

// At returns revision rev of the key; a revision no longer kept (or of
// another key) is an error.
func (s *Store) At(ctx context.Context, rev uint64) (Revision, error) {
	e, err := s.kv.GetRevision(ctx, Key, rev)
	if err != nil {
		return Revision{}, fmt.Errorf("policy bucket %s: revision %d: %w", s.bucket, rev, err)
	}
	return revision(e), nil
}

// Put validates yaml as --check-config does and stores it as a new
// revision. An invalid policy is not stored: the error is the
// *configs.ValidationError listing every problem. It returns the new
// revision and the parsed policy.
func (s *Store) Put(ctx context.Context, name string, yaml []byte) (uint64, *configs.Policy, error) {
	p, err := configs.Parse(name, yaml)
	if err != nil {
		return 0, nil, err
	}
	rev, err := s.kv.Put(ctx, Key, yaml)
	if err != nil {
		return 0, nil, fmt.Errorf("policy bucket %s: put: %w", s.bucket, sizeHint(err))
	}
	return rev, p, nil
}

// History returns the kept revisions, oldest first, or ErrNoPolicy.
func (s *Store) History(ctx context.Context) ([]Revision, error) {
	es, err := s.kv.History(ctx, Key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, ErrNoPolicy
	}
	if err != nil {
		return nil, fmt.Errorf("policy bucket %s: history: %w", s.bucket, err)
	}
	out := make([]Revision, len(es))
	for i, e := range es {
		out[i] = revision(e)
	}
	return out, nil
}

// Watch calls fn with every revision of the key from the current one on, in
// order, until ctx ends (docs/design.md, Live policy). It returns nil then, or
// an error if the watch cannot be started. The watch survives reconnections
// (an ordered consumer that recreates itself). It ends with an error when
// the bucket was made again (ErrMadeAgain, checked every watchCheck): the
// ordered consumer would resume past the old bucket's last sequence and miss
// the new bucket's first revisions, where a new watch starts from its
// current one. A bucket is made again when its stream's creation time
// changed (deleted and created), or its last sequence is below a revision
// delivered (a cluster rebuilds a memory stream lost with its server empty,
// under its old creation time).
func (s *Store) Watch(ctx context.Context, fn func(Revision)) error {
	first, _ := s.stream(ctx)
	w, err := s.kv.Watch(ctx, Key)
	if err != nil {
		return fmt.Errorf("policy bucket %s: watch: %w", s.bucket, err)
	}
	defer func() { _ = w.Stop() }()
	check := time.NewTicker(watchCheck)
	defer check.Stop()
	var last uint64 // the highest revision delivered
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-check.C:
			now, err := s.stream(ctx)
			switch {
			case err != nil: // gone, or unanswered: checked again later
			case first == nil: // unanswered at the start
				first = now
			case madeAgain(first, now, last):
				return fmt.Errorf("policy bucket %s: %w (created %s, last sequence %d; was created %s, revision %d delivered)", s.bucket, ErrMadeAgain,
					now.Created.UTC().Format(time.RFC3339Nano), now.State.LastSeq, first.Created.UTC().Format(time.RFC3339Nano), last)
			}
		case e, ok := <-w.Updates():
			if !ok {
				if ctx.Err() != nil {
					return nil
				}
				return fmt.Errorf("policy bucket %s: watch ended", s.bucket)
			}
			if e == nil { // the current value has been delivered
				continue
			}
			last = max(last, e.Revision())
			fn(revision(e))
		}
	}
}

// madeAgain reports whether the bucket's stream now is another than the one
// first seen, a watch of which delivered revisions up to last.
func madeAgain(first, now *jetstream.StreamInfo, last uint64) bool {
	return !now.Created.Equal(first.Created) || now.State.LastSeq < last
}

// ErrMadeAgain says that the bucket a watch followed was made again: its
// revisions number anew.
var ErrMadeAgain = errors.New("made again")

// watchCheck is how often Watch checks that its bucket is the one it
// started on.
var watchCheck = 5 * time.Second

// stream returns the bucket's stream info, waiting at most a second: the
// watch's revisions wait behind it.
func (s *Store) stream(ctx context.Context) (*jetstream.StreamInfo, error) {
	c, cancel := context.WithTimeout(ctx, min(watchCheck, time.Second))
	defer cancel()
	st, err := s.kv.Status(c)
	if err != nil {
		return nil, err
	}
	if b, ok := st.(*jetstream.KeyValueBucketStatus); ok && b.StreamInfo() != nil {
		return b.StreamInfo(), nil
	}
	return nil, errors.New("no stream info")
}

func revision(e jetstream.KeyValueEntry) Revision {
	r := Revision{Revision: e.Revision(), Created: e.Created()}
	if e.Operation() == jetstream.KeyValuePut {
		r.YAML = e.Value()
	} else {
		r.Deleted = true
	}
	return r
}

// sizeHint explains a policy over the server's max_payload, or refused for
// want of room in the JetStream store.
func sizeHint(err error) error {
	if errors.Is(err, nats.ErrMaxPayload) {
		return fmt.Errorf("%w (a policy is one message: it must fit the server's max_payload, 1 MiB by default; docs/config.md, Live policy)", err)
	}
	if _, full := jsstorage.Refused(err); full {
		return fmt.Errorf("%w (no room: the JetStream store is full, or the account's storage limit is reached; the policy that runs stays; "+
			"put it again once there is room: docs/operations.md, When storage runs out)", err)
	}
	return err
}

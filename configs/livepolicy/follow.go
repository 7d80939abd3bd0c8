package livepolicy

import (
	"context"
	"errors"
	"time"

	"github.com/rs/zerolog"

	"fairdispatch/configs"
	"fairdispatch/internal/jsstorage"
)

// Applier runs the policies a Follower hands it (dispatcher.Actor).
type Applier interface {
	// ApplyPolicy applies a valid revision atomically between two
	// arbitration calls and returns once it runs.
	ApplyPolicy(ctx context.Context, rev uint64, created time.Time, p *configs.Policy) error
	// RefusePolicy records a revision refused as invalid; it never blocks.
	RefusePolicy(rev uint64, created time.Time, err error)
}

// Follower follows the policy key of a Store for one dispatcher: each
// revision newer than the one it runs is validated as --check-config does; a
// valid one is applied, an invalid one (or a delete of the key) is refused:
// the last good policy stays, and the error is logged with the revision and
// handed to RefusePolicy, which counts it.
type Follower struct {
	Store   *Store
	Applier Applier
	Log     zerolog.Logger
	// Running is the revision the dispatcher started with (0: none from the
	// bucket); revisions up to it are not applied again. RunningCreated is
	// when it was stored (zero: learnt from the watch): a revision numbered
	// up to Running but stored after it is of a bucket made again (deleted
	// by an operator, or a memory bucket lost with its server), whose
	// revisions number from 1 anew, and is followed.
	Running        uint64
	RunningCreated time.Time
}

// Started is the policy a dispatcher starts with (Start).
type Started struct {
	Policy *configs.Policy
	// Current is the bucket's current revision (zero when the key has none).
	Current Revision
	// Running is the revision whose policy runs: Current's when it is valid,
	// else the newest valid one the bucket's history keeps (the last good
	// policy, which the dispatchers already running keep); 0 when the
	// fallback runs.
	Running uint64
	// Refused says why Current does not run (invalid, or the key deleted).
	Refused error
}

// Start reads the policy a dispatcher starts with: the bucket's current
// revision when it is valid; else seed (the --policy-config file, nil when
// none) is put as the first revision when the key has none, and fallback runs
// (the policy of --policy-config or the flags). An invalid current revision
// (or a deleted key) is reported in Refused, and the newest valid revision of
// the bucket's history runs in its place, as it does on the dispatchers that
// refused the revision live: a dispatcher restarted after a bad put runs the
// same classes as the others, not its file's. Only when the history holds no
// valid revision does the fallback run. A seed JetStream refuses for want of
// room (the store full) is logged and the fallback runs: a dispatcher must
// start, and lead, to drain a full store.
func Start(ctx context.Context, s *Store, seed []byte, fallback *configs.Policy, log zerolog.Logger) (Started, error) {
	if seed != nil {
		rev, created, err := s.Seed(ctx, seed)
		if reason, full := jsstorage.Refused(err); full {
			log.Error().Str("component", "policy").Str("bucket", s.Bucket()).Str("reason", reason).
				Msg("policy bucket not seeded from --policy-config: no room in the JetStream store; the file's policy runs (docs/operations.md, When storage runs out)")
			err, created = nil, false
		}
		if err != nil {
			return Started{}, err
		}
		if created {
			log.Info().Str("bucket", s.Bucket()).Uint64("revision", rev).Msg("policy bucket seeded from --policy-config")
		}
	}
	res, err := s.Resolve(ctx)
	if errors.Is(err, ErrNoPolicy) {
		return Started{Policy: fallback}, nil
	}
	if err != nil {
		return Started{}, err
	}
	st := Started{Policy: res.Policy, Current: res.Current, Running: res.Running.Revision, Refused: res.Refused}
	if st.Policy == nil {
		st.Policy = fallback
	}
	if res.Refused == nil && seed != nil && string(seed) != string(res.Current.YAML) {
		log.Warn().Str("bucket", s.Bucket()).Uint64("revision", res.Current.Revision).
			Msg("--policy-config differs from the policy bucket: the bucket's revision runs (fairctl policy put changes it)")
	}
	return st, nil
}

// Resolved is what the bucket's key holds and what runs of it (Resolve).
type Resolved struct {
	// Current is the key's current revision, a delete included.
	Current Revision
	// Running is the revision whose policy runs, parsed in Policy: Current
	// when it is valid, else the newest valid one the history keeps; zero,
	// with Policy nil, when none is valid.
	Running Revision
	Policy  *configs.Policy
	// Refused says why Current does not run (invalid, or the key deleted).
	Refused error
}

// Resolve reads the key as the dispatchers run it: its current revision,
// or, when that one is refused (invalid, or a delete the history still
// shows), the last good one (LastGood). It returns an error wrapping
// ErrNoPolicy when the key never had a revision, or no history is left.
func (s *Store) Resolve(ctx context.Context) (Resolved, error) {
	cur, err := s.Get(ctx)
	if errors.Is(err, ErrNoPolicy) {
		// None ever, or deleted (Get does not tell): a delete the history
		// still shows is refused like one seen live.
		hist, _ := s.History(ctx)
		if len(hist) == 0 || !hist[len(hist)-1].Deleted {
			return Resolved{}, err
		}
		cur, err = hist[len(hist)-1], nil
	}
	if err != nil {
		return Resolved{}, err
	}
	res := Resolved{Current: cur}
	if cur.Deleted {
		res.Refused = errors.New("the key is deleted")
	} else if res.Policy, err = configs.Parse(s.Name(cur.Revision), cur.YAML); err != nil {
		res.Policy, res.Refused = nil, err
	}
	if res.Refused != nil {
		res.Policy, res.Running = s.LastGood(ctx, cur.Revision)
		return res, nil
	}
	res.Running = cur
	return res, nil
}

// LastGood returns the newest valid revision older than before that the
// bucket's history keeps, parsed; nil when there is none (or the history
// cannot be read). It is the policy the dispatchers run while the revisions
// after it are refused.
func (s *Store) LastGood(ctx context.Context, before uint64) (*configs.Policy, Revision) {
	hist, err := s.History(ctx)
	if err != nil {
		return nil, Revision{}
	}
	for i := len(hist) - 1; i >= 0; i-- {
		r := hist[i]
		if r.Revision >= before || r.Deleted {
			continue
		}
		if p, err := configs.Parse(s.Name(r.Revision), r.YAML); err == nil {
			return p, r
		}
	}
	return nil, Revision{}
}

// Run follows the key until ctx ends, restarting the watch (after a pause)
// if it cannot be started or ends. A bucket made again (ErrMadeAgain) is
// followed from its current revision, whatever its number.
func (f *Follower) Run(ctx context.Context) {
	log := f.Log.With().Str("component", "policy").Str("bucket", f.Store.Bucket()).Logger()
	const firstPause = 500 * time.Millisecond
	pause := firstPause
	for ctx.Err() == nil {
		started := time.Now()
		err := f.Store.Watch(ctx, func(r Revision) { f.handle(ctx, log, r) })
		if err == nil || ctx.Err() != nil {
			return
		}
		if errors.Is(err, ErrMadeAgain) {
			log.Warn().Err(err).Uint64("was", f.Running).Msg("the policy bucket was made again: following it from its current revision")
			f.Running, f.RunningCreated, pause = 0, time.Time{}, firstPause
			continue
		}
		if time.Since(started) > 10*time.Second {
			pause = firstPause // a watch that ran a while: not a failure in a row
		}
		log.Warn().Err(err).Dur("retry_in", pause).Msg("policy watch failed; the running policy stays")
		select {
		case <-ctx.Done():
			return
		case <-time.After(pause):
		}
		pause = min(2*pause, 10*time.Second)
	}
}

func (f *Follower) handle(ctx context.Context, log zerolog.Logger, r Revision) {
	if r.Revision <= f.Running {
		if r.Revision == f.Running && f.RunningCreated.IsZero() {
			f.RunningCreated = r.Created
		}
		if f.RunningCreated.IsZero() || !r.Created.After(f.RunningCreated) {
			return // seen (a watch that starts delivers the current revision)
		}
		log.Warn().Uint64("revision", r.Revision).Uint64("was", f.Running).
			Msg("the policy bucket was made again (its revisions number from 1 anew): following it")
	}
	f.Running, f.RunningCreated = r.Revision, r.Created
	var p *configs.Policy
	err := errors.New("the key is deleted")
	if !r.Deleted {
		p, err = configs.Parse(f.Store.Name(r.Revision), r.YAML)
	}
	if err != nil {
		log.Error().Uint64("revision", r.Revision).Str("error", err.Error()).
			Msg("policy revision refused: the last good policy stays")
		f.Applier.RefusePolicy(r.Revision, r.Created, err)
		return
	}
	if err := f.Applier.ApplyPolicy(ctx, r.Revision, r.Created, p); err != nil && ctx.Err() == nil {
		log.Error().Err(err).Uint64("revision", r.Revision).Msg("policy revision not applied")
	}
}

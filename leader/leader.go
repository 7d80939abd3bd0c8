// Package leader elects the one active dispatcher among any number of
// processes with a lease held in a JetStream key-value bucket.
//
// The lease is one key whose bucket has a TTL (the bucket's MaxAge): a process
// becomes leader by creating the key (Create fails while it exists) and stays
// leader by updating it with the revision it last wrote (Update fails if anyone
// else wrote it since) every TTL/4. The server removes the key TTL after the
// last update, so a crashed leader's lease runs out by itself.
//
// Safety: the leader considers its lease valid only until 3/4 of the TTL after
// it *started* its last successful renewal. The server keeps the key at least
// a TTL after that renewal was stored, which is later, so a leader always
// steps down before any other process can create the key: two leaders never
// overlap, whatever the network does, as long as clocks run at the same rate.
//
// Why a lease and not JetStream's pinned-client priority groups: a pinned
// client is chosen by the server, and a leader cut off from the server is not
// told that it lost the pin; it would go on dispatching the requests it holds.
// With a lease the leader knows, from its own clock, the moment its lease ends,
// and stops at once (docs/design.md, Delivery guarantees and issue 5: "stops dispatching at once").
//
// Failover bound: a standby retries every TTL/4, and the key disappears at
// most TTL after the dead leader's last renewal, so a standby leads within
// about TTL + TTL/4 of a crash (plus the server's expiry scan), and at once
// after a clean shutdown, which deletes the key.
//
// # Storage
//
// The bucket is created in memory storage. A lease lives one TTL, so nothing
// of it needs to outlive a server restart (after one the next campaign
// creates the key again), and it must not share the fate of the file store:
// at the server's store limit (max_file_store) JetStream refuses every write
// to every file-backed stream, and a file-backed lease would lose its
// renewals exactly when the leader must keep dispatching, so that workers
// acknowledge requests and free the store (docs/operations.md, When storage
// runs out). Where memory storage is refused (an account or server without
// JetStream memory), the bucket is created in file storage, with a warning.
// An existing bucket is bound to as it is, whatever its storage: JetStream
// cannot change a stream's storage in place, and deleting a lease bucket in
// use could let two leaders overlap. A file-backed one (made by an older
// dispatcher) is warned about, with how to move it.
//
// A memory bucket is lost when its server restarts (for one replica; with
// three, when all restart), and with it the key of a leader that may still
// count its lease valid for up to 3/4 TTL: the safety argument above needs
// the key to outlive the leader's validity. So a leader whose bucket has
// gone steps down at once; a campaign that finds the bucket gone creates it
// again; and no process creates the key in a bucket younger than one TTL (by
// the server's clock: its stream info's creation and current times) when a
// dispatcher may have led with an earlier bucket (Config.MayHaveLed). A
// fresh deployment's first bucket is used at once, and a handover in it too.
// A cluster rebuilds a memory stream lost with all its servers empty, under
// its old creation time: a bucket older than a TTL that was never written is
// taken for one, and no key is created in it before it has been seen so for
// a TTL. "One TTL" is the longest the campaigner knows: its own, or the
// longest it saw the lost bucket keep (the pool's longest, which the bucket
// took with it). A dispatcher that started after the loss knows only its
// own: should the pool's TTLs differ then (mid-way through a rolling change
// of --lease-ttl), a leader with a longer one may lead beside it until its
// next renewal finds the bucket gone; docs/config.md asks for one TTL.
package leader

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
)

// Defaults. The dispatcher passes the bucket of its prefix,
// naming.Names.LeaderBucket: DefaultBucket for the default prefix,
// fairdispatch_<q>_leader for another (docs/deployment.md, Several pools on
// one NATS account).
const (
	DefaultBucket = "fairdispatch_leader"
	DefaultKey    = "dispatcher"
	DefaultTTL    = 3 * time.Second
)

// Config configures an Elector.
type Config struct {
	Bucket   string // KV bucket; default DefaultBucket
	Key      string // lease key; default DefaultKey
	ID       string // this process's id, stored as the key's value; required
	TTL      time.Duration
	Replicas int
	// RenewalFailed, when not nil, is called from Run's goroutine with the
	// error of each renewal that failed for another reason than the lease
	// being taken (which steps down): unanswered, or refused by JetStream
	// (for a file-backed bucket, a full store). Each is retried TTL/4 later;
	// the lease is lost when none succeeds within 3/4 TTL.
	RenewalFailed func(error)
	// MayHaveLed reports whether a dispatcher may have held a lease in a
	// bucket before the current one, created at created (the server's
	// clock); the dispatcher's answer: the request stream's durable
	// consumer, which the first leader creates, is older than the bucket.
	// It is asked only while the bucket is younger than one TTL; then, when
	// true, campaigns wait until it is a TTL old (see the package doc). nil:
	// always true.
	MayHaveLed func(ctx context.Context, created time.Time) bool
	// LeaderWait bounds how long New retries while the bucket's stream has
	// no leader (JetStream answers no responders); default DefaultLeaderWait.
	LeaderWait time.Duration
	Now        func() time.Time
}

// DefaultLeaderWait is how long New waits for the lease bucket's stream to
// elect a leader: a replicated bucket just created, or electing after a node
// loss, answers no responders for about a second of a healthy cluster's time
// and longer on a loaded one, and a dispatcher starting then waits for the
// election instead of exiting (the policy bucket waits as long:
// livepolicy.LeaderWait).
const DefaultLeaderWait = 30 * time.Second

// Elector campaigns for the lease and keeps it.
type Elector struct {
	cfg    Config
	js     jetstream.JetStream
	kv     jetstream.KeyValue // replaced by Run's goroutine when the bucket is created again
	log    zerolog.Logger
	leader atomic.Bool
	// base is when the Elector was made, and validUntil the lease's validity
	// in nanoseconds since base (Valid): durations of cfg.Now's clock, which
	// for time.Now is the monotonic one, as Run's; written by Run's goroutine.
	base       time.Time
	validUntil atomic.Int64
	// lease is the lease time: cfg.TTL, or the bucket's TTL (its MaxAge) when
	// that is shorter (a bucket created again by a dispatcher with a shorter
	// --lease-ttl: the key lives no longer than that); Run's goroutine only.
	lease time.Duration
	// emptySince is when a campaign first found the bucket older than a
	// TTL yet never written (mayCampaign); zero otherwise. Run's goroutine.
	emptySince time.Time
	// poolTTL is the longest TTL this process has seen the bucket keep (its
	// MaxAge: the longest any dispatcher of the pool asked for), which a
	// bucket lost with its server takes with it: the wait before a key in a
	// bucket made again is the longer of it and cfg.TTL. Run's goroutine.
	poolTTL time.Duration
}

// New binds to the lease bucket, creating it in memory storage when missing
// (see Storage in the package doc), and updates its replicas to cfg's and its
// TTL to cfg's when that is longer: a shorter TTL would let the server drop
// the key of a running leader with a longer one before that leader's lease
// ran out.
func New(ctx context.Context, js jetstream.JetStream, cfg Config, log zerolog.Logger) (*Elector, error) {
	if cfg.Bucket == "" {
		cfg.Bucket = DefaultBucket
	}
	if cfg.Key == "" {
		cfg.Key = DefaultKey
	}
	if cfg.TTL <= 0 {
		cfg.TTL = DefaultTTL
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.LeaderWait <= 0 {
		cfg.LeaderWait = DefaultLeaderWait
	}
	if cfg.ID == "" {
		return nil, errors.New("leader: an id is required")
	}
	log = log.With().Str("component", "leader").Str("id", cfg.ID).Logger()
	kv, err := bindWhileLeaderless(ctx, js, cfg, log)
	if err != nil {
		return nil, fmt.Errorf("leader: lease bucket %s: %w", cfg.Bucket, err)
	}
	return &Elector{cfg: cfg, js: js, kv: kv, log: log, base: cfg.Now(), lease: cfg.TTL}, nil
}

// jsErrMemoryResources is nats-server's JSMemoryResourcesExceededErr:
// "insufficient memory resources available", the refusal to create a memory
// stream where the server or the account has no JetStream memory left.
const jsErrMemoryResources jetstream.ErrorCode = 10028

// bindWhileLeaderless calls bind, again every 100 ms while it fails with no
// responders (the bucket's stream has no leader yet), until cfg.LeaderWait
// has passed or ctx ends; it returns bind's last answer.
func bindWhileLeaderless(ctx context.Context, js jetstream.JetStream, cfg Config, log zerolog.Logger) (jetstream.KeyValue, error) {
	deadline := time.Now().Add(cfg.LeaderWait)
	for {
		kv, err := bind(ctx, js, cfg, log)
		if !errors.Is(err, nats.ErrNoResponders) || !time.Now().Before(deadline) {
			return kv, err
		}
		log.Debug().Err(err).Msg("lease bucket has no leader yet; waiting for its election")
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// bind returns the lease bucket: the existing one, in its own storage, or a
// new one in memory storage (file storage where memory is refused).
func bind(ctx context.Context, js jetstream.JetStream, cfg Config, log zerolog.Logger) (jetstream.KeyValue, error) {
	want := jetstream.KeyValueConfig{
		Bucket: cfg.Bucket, Description: "fairdispatch dispatcher leader lease",
		History: 1, TTL: cfg.TTL, Replicas: max(cfg.Replicas, 1), Storage: jetstream.MemoryStorage,
	}
	for range 2 { // a bucket created meanwhile by another dispatcher is bound to on the second round
		kv, err := js.KeyValue(ctx, cfg.Bucket)
		if err == nil {
			st, err := kv.Status(ctx)
			if err != nil {
				return nil, err
			}
			if bs, ok := st.(*jetstream.KeyValueBucketStatus); ok {
				want.Storage = bs.StreamInfo().Config.Storage
			}
			if ttl := st.TTL(); ttl > want.TTL {
				// Never lower it: a leader counts its lease valid for 3/4
				// of its own TTL, and a shorter one would make the server
				// drop its key while it still leads.
				log.Warn().Str("bucket", cfg.Bucket).Dur("bucket_ttl", ttl).Dur("lease_ttl", cfg.TTL).
					Msg("the lease bucket's TTL is longer than this dispatcher's --lease-ttl: kept, so a standby takes over within about the bucket's TTL " +
						"(to lower it, stop every dispatcher of this pool, delete the bucket and start them again; docs/config.md, --lease-ttl)")
				want.TTL = ttl
			}
			if want.Storage == jetstream.FileStorage {
				log.Warn().Str("bucket", cfg.Bucket).
					Msg("the lease bucket is file-backed (made by an older dispatcher, or where memory storage was refused): when the JetStream " +
						"store is full its renewals are refused and no dispatcher can lead; to move it to memory storage, stop every dispatcher " +
						"of this pool, delete it (nats kv del " + cfg.Bucket + ") and start them again (docs/operations.md, When storage runs out)")
			}
			return js.UpdateKeyValue(ctx, want)
		}
		if !errors.Is(err, jetstream.ErrBucketNotFound) {
			return nil, err
		}
		kv, err = js.CreateKeyValue(ctx, want)
		var apiErr *jetstream.APIError
		if errors.As(err, &apiErr) && apiErr.ErrorCode == jsErrMemoryResources {
			log.Warn().Err(err).Str("bucket", cfg.Bucket).
				Msg("memory storage refused for the lease bucket: creating it in file storage, whose renewals a full JetStream store refuses " +
					"(docs/operations.md, When storage runs out)")
			want.Storage = jetstream.FileStorage
			kv, err = js.CreateKeyValue(ctx, want)
		}
		if !errors.Is(err, jetstream.ErrBucketExists) {
			return kv, err
		}
	}
	return nil, errors.New("created and deleted meanwhile by another process")
}

// Leader reports whether this process holds the lease now.
func (e *Elector) Leader() bool { return e.leader.Load() }

// TTL returns the lease time.
func (e *Elector) TTL() time.Duration { return e.cfg.TTL }

// Run campaigns and keeps the lease until ctx ends. It calls onChange(true)
// when this process becomes leader and onChange(false) when it stops being one
// (its renewal was refused, or its lease ran out before a renewal succeeded),
// from Run's goroutine, and waits for onChange to return. On ctx's end a leader
// deletes the key, so that a standby takes over at once; Run then returns
// without calling onChange.
func (e *Elector) Run(ctx context.Context, onChange func(leader bool)) {
	t := time.NewTimer(0)
	defer t.Stop()
	var rev uint64
	var validUntil time.Time
	for {
		select {
		case <-ctx.Done():
			if e.leader.Load() {
				e.leader.Store(false)
				e.release(rev)
			}
			return
		case <-t.C:
		}
		start := e.cfg.Now()
		lease := e.lease // the term's: mayCampaign reads the bucket's before a campaign
		if e.leader.Load() {
			if !start.Before(validUntil) {
				e.stepDown("lease ran out before a renewal succeeded", onChange)
			} else {
				// An unanswered renewal waits no longer than the lease is
				// valid, so that the step-down below comes at its end.
				r, err := e.call(ctx, min(lease/2, validUntil.Sub(start)), func(c context.Context) (uint64, error) {
					return e.kv.Update(c, e.cfg.Key, []byte(e.cfg.ID), rev)
				})
				switch {
				case err == nil:
					rev, validUntil = r, start.Add(lease*3/4)
					e.validUntil.Store(int64(validUntil.Sub(e.base)))
				case errors.Is(err, jetstream.ErrKeyExists) || isMismatch(err):
					e.stepDown("lease taken: "+err.Error(), onChange)
				case errors.Is(err, jetstream.ErrNoStreamResponse) && ctx.Err() == nil && e.bucketGone(ctx, validUntil.Sub(e.cfg.Now())):
					// Its server restarted (a memory bucket) or it was deleted:
					// the key is gone, and another process may create it.
					e.stepDown("the lease bucket is gone: "+err.Error(), onChange)
				case ctx.Err() != nil: // shutting down: the release follows
				default:
					e.log.Warn().Err(err).Time("valid_until", validUntil).Msg("lease renewal failed; retrying")
					if e.cfg.RenewalFailed != nil {
						e.cfg.RenewalFailed(err)
					}
					if !e.cfg.Now().Before(validUntil) {
						e.stepDown("lease ran out before a renewal succeeded", onChange)
					}
				}
			}
		} else if e.mayCampaign(ctx) {
			lease = e.lease
			r, err := e.call(ctx, lease/2, func(c context.Context) (uint64, error) {
				return e.kv.Create(c, e.cfg.Key, []byte(e.cfg.ID))
			})
			if err == nil {
				rev, validUntil = r, start.Add(lease*3/4)
				e.validUntil.Store(int64(validUntil.Sub(e.base)))
				e.leader.Store(true)
				e.log.Info().Dur("ttl", e.cfg.TTL).Msg("lease acquired: leading")
				onChange(true)
				// Taking the lead (the dispatcher creates its consumer) renews
				// nothing meanwhile: a lease that ran out during it ends now.
				if !e.cfg.Now().Before(validUntil) {
					e.stepDown("lease ran out while taking the lead", onChange)
				}
			} else if !errors.Is(err, jetstream.ErrKeyExists) && ctx.Err() == nil {
				e.log.Debug().Err(err).Msg("campaign failed")
			}
		}
		t.Reset(e.untilNext(start, lease/4, validUntil))
	}
}

// untilNext returns the wait before Run's next round: the next renewal, a
// period after this round's start, or a leader's validity's end when that
// comes first, so that a leader steps down when its lease ends.
func (e *Elector) untilNext(start time.Time, every time.Duration, validUntil time.Time) time.Duration {
	next := start.Add(every)
	if e.leader.Load() && validUntil.Before(next) {
		next = validUntil
	}
	return max(0, next.Sub(e.cfg.Now()))
}

// Valid reports whether this process holds the lease and counts it valid now
// (3/4 TTL after its last successful renewal started): the fence a leader's
// work checks before it starts something only a leader may do.
func (e *Elector) Valid() bool {
	return e.leader.Load() && int64(e.cfg.Now().Sub(e.base)) < e.validUntil.Load()
}

// mayCampaign reports whether a campaign may try to create the key now: the
// bucket exists (one that is gone is created again, and the campaign waits
// for the next round) and is at least a TTL old, or no dispatcher may have
// led before it existed (see the package doc). It costs one stream info
// request, and MayHaveLed's while the bucket is young.
func (e *Elector) mayCampaign(ctx context.Context) bool {
	info, err := e.streamInfo(ctx)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		e.rebind(ctx)
		return false
	}
	if err != nil {
		e.log.Debug().Err(err).Msg("campaign deferred: lease bucket not readable")
		return false
	}
	e.poolTTL = max(e.poolTTL, info.Config.MaxAge)
	wait := max(e.cfg.TTL, e.poolTTL) // a leader of the lost bucket may have had the longest
	lease := e.cfg.TTL
	if ttl := info.Config.MaxAge; ttl > 0 && ttl < lease {
		// Made again by a dispatcher with a shorter --lease-ttl (rebind):
		// the server keeps the key no longer than that, so neither does our
		// lease. The bucket is not raised here: another may lead under it.
		lease = ttl
	}
	if lease != e.lease && lease < e.cfg.TTL {
		e.log.Warn().Dur("bucket_ttl", lease).Dur("lease_ttl", e.cfg.TTL).
			Msg("the lease bucket's TTL is shorter than this dispatcher's --lease-ttl (made again by another dispatcher): leading on the bucket's")
	}
	e.lease = lease
	now := info.TimeStamp // the server's clock, like Created (absent from servers before 2.10: then ours)
	if now.IsZero() {
		now = e.cfg.Now()
	}
	age := now.Sub(info.Created)
	if info.State.LastSeq == 0 && age >= wait {
		// Older than a lease, and no key ever written: a cluster rebuilt it
		// empty (a memory stream lost with its servers keeps its creation
		// time), and a leader of the lost one may count its lease valid
		// still. Campaign once it has been seen so for a TTL.
		if e.emptySince.IsZero() {
			e.emptySince = now
		}
		if now.Sub(e.emptySince) < wait {
			e.log.Debug().Msg("campaign deferred: the lease bucket is older than the lease but was never written (rebuilt empty?), and a leader may still count its lease valid")
			return false
		}
	} else {
		e.emptySince = time.Time{}
	}
	if age < wait {
		c, cancel := context.WithTimeout(ctx, e.cfg.TTL/2)
		defer cancel()
		if e.cfg.MayHaveLed == nil || e.cfg.MayHaveLed(c, info.Created) {
			e.log.Debug().Dur("bucket_age", age).Msg("campaign deferred: the lease bucket is younger than the lease, and a leader may have held a key in an earlier one")
			return false
		}
	}
	return true
}

// bucketGone reports whether the lease bucket's stream no longer exists,
// asking for no longer than within (what is left of the lease: an
// unanswered question must not keep a leader leading past it).
func (e *Elector) bucketGone(ctx context.Context, within time.Duration) bool {
	if within <= 0 {
		return false
	}
	c, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	_, err := e.streamInfo(c)
	return errors.Is(err, jetstream.ErrStreamNotFound)
}

func (e *Elector) streamInfo(ctx context.Context) (*jetstream.StreamInfo, error) {
	c, cancel := context.WithTimeout(ctx, e.cfg.TTL/2)
	defer cancel()
	s, err := e.js.Stream(c, "KV_"+e.cfg.Bucket)
	if err != nil {
		return nil, err
	}
	return s.CachedInfo(), nil
}

// rebind creates the lease bucket again after it was lost (a memory bucket
// whose server restarted).
func (e *Elector) rebind(ctx context.Context) {
	c, cancel := context.WithTimeout(ctx, e.cfg.TTL/2)
	defer cancel()
	kv, err := bind(c, e.js, e.cfg, e.log)
	if err != nil {
		e.log.Warn().Err(err).Str("bucket", e.cfg.Bucket).Msg("the lease bucket is gone and could not be created again; retrying")
		return
	}
	e.kv = kv
	e.log.Warn().Str("bucket", e.cfg.Bucket).Dur("ttl", e.cfg.TTL).
		Msg("the lease bucket was gone (its server restarted?): created again; where a dispatcher may have led, none leads before it is a lease TTL old")
}

// release deletes the key if it is still ours, so that a standby leads at
// once. A renewal cut short by the shutdown may have been stored anyway, so a
// revision mismatch is checked against the key's current value and retried
// with its current revision.
func (e *Elector) release(rev uint64) {
	ctx, cancel := context.WithTimeout(context.Background(), e.cfg.TTL)
	defer cancel()
	err := e.kv.Delete(ctx, e.cfg.Key, jetstream.LastRevision(rev))
	if err != nil && (errors.Is(err, jetstream.ErrKeyExists) || isMismatch(err)) {
		if cur, gerr := e.kv.Get(ctx, e.cfg.Key); gerr == nil && string(cur.Value()) == e.cfg.ID {
			err = e.kv.Delete(ctx, e.cfg.Key, jetstream.LastRevision(cur.Revision()))
		}
	}
	if err != nil {
		e.log.Warn().Err(err).Msg("lease not released; a standby leads once it expires")
		return
	}
	e.log.Info().Msg("lease released")
}

func (e *Elector) call(ctx context.Context, timeout time.Duration, f func(context.Context) (uint64, error)) (uint64, error) {
	c, cancel := context.WithTimeout(ctx, timeout) // a slow call is retried at the next round; validity still bounds the lead
	defer cancel()
	return f(c)
}

func (e *Elector) stepDown(why string, onChange func(bool)) {
	e.leader.Store(false)
	e.log.Warn().Str("reason", why).Msg("lease lost: standing by")
	onChange(false)
}

func isMismatch(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence
}

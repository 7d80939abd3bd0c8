package main

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"fairdispatch/bus"
	"fairdispatch/configs/livepolicy"
	"fairdispatch/dispatcher"
	"fairdispatch/filters"
	"fairdispatch/metrics"
	"fairdispatch/naming"
)

// control adapts the actor to the admin API.
type control struct {
	a         *dispatcher.Actor
	nc        *nats.Conn
	names     naming.Names
	storage   *metrics.Storage
	srv       *server.Server // the embedded nats-server; nil with --nats-url
	replicas  int
	streamsOK atomic.Bool
}

func (c *control) Thresholds() filters.Thresholds { return c.a.Thresholds() }
func (c *control) SetThresholds(ctx context.Context, t filters.Thresholds) error {
	return c.a.SetThresholds(ctx, t)
}
func (c *control) Queues() any { return c.a.View() }

// Ready is docs/config.md, Admin HTTP API's readiness: connected, streams present, grace over,
// leading, and some worker live (docs/design.md, Fleet outage).
func (c *control) Ready() error {
	switch {
	case !c.nc.IsConnected():
		return fmt.Errorf("not connected to NATS")
	case !c.streamsOK.Load():
		return fmt.Errorf("stream %s or %s missing", c.names.ReqStream(), c.names.DLQStream())
	case c.a.InGrace():
		return fmt.Errorf("start-up grace running")
	case !c.a.Leader():
		return fmt.Errorf("standby: another dispatcher holds the leader lease")
	case c.a.NoLiveWorkers():
		return fmt.Errorf("no live workers")
	}
	return nil
}

// watchStreams checks every few seconds that both streams exist, records
// the streams', the account's and an embedded server's storage use and
// limits (docs/operations.md, When storage runs out), and copies the
// handshaker's count of late answers and the dead letterer's count of
// retries into the metrics.
func (c *control) watchStreams(ctx context.Context, js jetstream.JetStream, hs *bus.Handshaker, dl *bus.DeadLetterer, m *metrics.Metrics, log zerolog.Logger) {
	t := time.NewTicker(3 * time.Second)
	defer t.Stop()
	var late, retries uint64
	for first := true; ; first = false {
		if !first { // the gauges are read once at start, then every tick
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
		for n := hs.Late(); late < n; late++ {
			m.Handshake(metrics.OutcomeLate)
		}
		for n := dl.Retries(); retries < n; retries++ {
			m.DeadLetterRetried()
		}
		if c.srv != nil {
			if info, err := c.srv.Jsz(nil); err == nil {
				c.storage.SetServer(metrics.StoreUsage{FileBytes: info.Store, MemoryBytes: info.Memory, FileMax: info.Config.MaxStore, MemoryMax: info.Config.MaxMemory})
			}
		}
		if !c.nc.IsConnected() {
			continue
		}
		ok := true
		for _, name := range []string{c.names.ReqStream(), c.names.DLQStream(), c.names.KVStream()} {
			cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			u, err := bus.ReadStream(cctx, js, name)
			cancel()
			switch {
			case err == nil:
				c.storage.SetStream(name, metrics.StreamUsage{Bytes: u.Bytes, Msgs: u.Msgs, MaxBytes: u.MaxBytes, MaxMsgs: u.MaxMsgs})
			case errors.Is(err, jetstream.ErrStreamNotFound) && name != c.names.KVStream():
				ok = false
				log.Error().Str("stream", name).Msg("stream missing: not ready")
			}
		}
		c.streamsOK.Store(ok)
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		if u, err := bus.ReadAccount(cctx, js, c.replicas); err == nil {
			c.storage.SetAccount(metrics.StoreUsage{FileBytes: u.FileBytes, MemoryBytes: u.MemoryBytes, FileMax: u.FileMax, MemoryMax: u.MemoryMax})
		}
		cancel()
	}
}

// demoPolicy puts the demo's policy file into the bucket as a new revision
// when the bucket holds another one.
func demoPolicy(ctx context.Context, store *livepolicy.Store, name string, yaml []byte) error {
	cur, err := store.Get(ctx)
	if err == nil && !cur.Deleted && string(cur.YAML) == string(yaml) {
		return nil
	}
	if err != nil && !errors.Is(err, livepolicy.ErrNoPolicy) {
		return fmt.Errorf("--demo: %w", err)
	}
	if _, _, err := store.Put(ctx, name, yaml); err != nil {
		return fmt.Errorf("--demo: %w", err)
	}
	return nil
}

package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"fairdispatch/dispatcher"
	"fairdispatch/ingest"
)

// puller pulls the request stream while this process leads: one consumer per
// leadership term, started when the lease is won and stopped when it is lost.
type puller struct {
	js    jetstream.JetStream
	cfg   ingest.Config
	a     *dispatcher.Actor
	log   zerolog.Logger
	fatal chan error // a term that could not start pulling
	// valid reports whether the lease is still valid (leader.Elector.Valid);
	// nil without leader election.
	valid func() bool

	mu     sync.Mutex
	cons   *ingest.Consumer
	done   chan error
	closed bool
}

// lead is the elector's callback: start or stop pulling and dispatching.
func (p *puller) lead(lead bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return
	}
	if lead {
		if err := p.start(); err != nil {
			p.fatal <- err
			return
		}
		if p.valid != nil && !p.valid() {
			// The lease ran out while the consumer was being created (the
			// elector renews nothing meanwhile): another dispatcher may lead
			// already. The elector steps down next.
			p.log.Warn().Msg("the lease ran out while taking the lead: not dispatching")
			return
		}
		p.a.SetLeader(true)
		return
	}
	// Stop dispatching at once, stop pulling, then hand back what is held, in
	// that order: a message handed back while our pull is open comes straight back.
	p.a.SetLeader(false)
	p.stop()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := p.a.HandBack(ctx); err != nil {
		p.log.Error().Err(err).Msg("handing back held requests")
	}
}

// start creates this term's consumer, retrying for a few seconds.
func (p *puller) start() error {
	var cons *ingest.Consumer
	op := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		c, err := ingest.NewConsumer(ctx, p.js, p.cfg, p.log)
		cons = c
		return err
	}
	b := backoff.NewExponentialBackOff(backoff.WithMaxElapsedTime(15 * time.Second))
	if err := backoff.Retry(op, b); err != nil {
		return fmt.Errorf("consumer %s on %s: %w", p.cfg.Durable, p.cfg.Stream, err)
	}
	p.cons, p.done = cons, make(chan error, 1)
	out := p.a.SetConsumer(cons) // this term's channel: its batches are never admitted in another term
	go func(done chan error) { done <- cons.Run(context.Background(), out) }(p.done)
	return nil
}

func (p *puller) stop() {
	if p.cons == nil {
		return
	}
	p.cons.Stop()
	if err := <-p.done; err != nil {
		p.log.Warn().Err(err).Msg("consumer stopped")
	}
	p.cons = nil
}

// close stops pulling for good (shutdown).
func (p *puller) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	p.stop()
}

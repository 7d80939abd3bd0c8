// Package ingest is the adapter between the request stream and the queue actor:
// it decodes request headers (docs/protocol.md, Request headers), pulls request messages from the durable
// JetStream consumer under explicit flow control (docs/design.md, Delivery guarantees; docs/config.md, Flags and environment), and keeps held
// messages from redelivery. It carries out; it never decides: a malformed header
// is reported in the Delivery (Delivery.Err), and what to do with it (bad_request,
// dead letter) is the actor's call.
//
// # Headers
//
// Decode turns a nats.Header into Headers. Dispatch-* names match
// case-insensitively, Nats-Msg-Id exactly. A repeated name counts its first value;
// the same header under differently-cased names counts the name that sorts first
// byte-wise (deterministic, whatever the map order), so the canonical spelling beats
// an all-lower-case one. Spaces and tabs around values, list items and the `=` of a
// pair are ignored. A malformed header yields a *HeaderError naming it; with
// several, the first in docs/protocol.md, Request headers table order, and every other header still decodes.
// Cost: O(keys + value bytes); no allocation unless a list header is present (one
// slice for each), no strconv allocation for integers.
//
// # Flow control
//
// The consumer is explicit-ack, AckWait --ack-wait, MaxAckPending MaxHeld +
// InFlight (NATS-NOTES: the server's limit counts held messages and those in
// flight at workers; the held count is ours to bound). Consumer.Run keeps at most
// one pull request (Fetch) open, for at most min(Batch, MaxHeld-Held) messages,
// and issues the next as soon as one ends, so Held never exceeds MaxHeld and, below
// MaxHeld, the server always has a pull to deliver to. It never blocks while a
// pull is open without also receiving from it: deliveries wait in Run while the
// actor is busy, so a slow actor cannot leave the consumer without a pull (the
// stall NATS-NOTES describes for a blocking Consume callback). Each pull expires
// after Config.PullWait (1 s by default) and is replaced. While Config.Gate is
// closed (no worker is live: docs/design.md, Fleet outage) no pull is opened; the
// one open when it closes runs to its end.
//
// # Accounting contract
//
// Every Delivery handed out counts as held until the actor calls Release for it,
// exactly once, when it leaves the dispatcher: accepted by a worker,
// dead-lettered, handed back (NAK), or found to be a redelivery of a request
// already held (replace its Msg where it lies and release it at once: the
// request is not queued twice). Malformed deliveries count too.
//
// # Keeping and shutdown
//
// Keeper (owned by the actor) sends +WPI for each held message untouched for half
// the ack wait, and only those (each is a server operation). On SIGTERM: call
// Consumer.Stop, wait for Run to return (it NAKs what it received but had not
// handed out, after its last pull has ended), then hand back what the receiver
// holds (the dispatcher's actor NAKs what it queued and what still waits in the
// channel, unadmitted, and releases each to this Consumer). NAKing while a pull
// of ours is still open would have the message redelivered straight back to us,
// so the hand-back belongs after Run has returned.
//
// # Concurrency
//
// Decode and the HeaderError methods are pure and safe for concurrent use.
// Consumer: Run is its only goroutine and may not run twice at once (ErrRunning);
// Release, Held and Stop are safe from any goroutine. A slice received from Run's
// channel belongs to the receiver. Keeper is not safe for concurrent use: one
// goroutine (the queue actor) owns it, and passes it non-decreasing times.
//
// Logging: zerolog with component=ingest; pull failures at warn (they are retried
// with backoff from 50 ms to 2 s, and a deleted consumer is created again).
package ingest

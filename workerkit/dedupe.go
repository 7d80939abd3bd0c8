package workerkit

import (
	"time"

	"github.com/nats-io/nats.go"
)

// joinedDispatch is a further dispatch of a request this worker runs
// (docs/protocol.md, A second dispatch of a request already running): the
// fields its completion record needs, and its acknowledgement subject.
type joinedDispatch struct {
	seq, queuedMs   uint64
	ack, class, key string
	rank            int
}

// dedupe answers a dispatch of a request this worker runs or has finished,
// without calling Offer, and reports whether it did (docs/protocol.md, A
// second dispatch of a request already running; A dispatch of a request
// already finished):
//
//   - A request running here: accept, add the dispatch to the running
//     execution (its subject is kept alive and acknowledged with it, and
//     PublishCompletion gives it a record with 0 tokens), count nothing new.
//   - A request finished here within FinishedWindow: accept, acknowledge at
//     once as it was (+ACK, or +TERM for one dropped), and, when the request
//     had a completion record, publish one with 0 tokens for this dispatch.
//
// Either way seen_seq moves past the dispatch, as for any answered one. Both
// are answered while the worker stops too: refusing would send the request
// to another worker to run again. m.Reply is not empty; it runs on the
// subscription's goroutine, like onMsg.
func (w *Worker) dedupe(m *nats.Msg, r *Request) bool {
	if r.RequestID == "" {
		return false
	}
	now := time.Now()
	w.mu.Lock()
	if p := w.running[r.RequestID]; p != nil && p.state == stateHeld {
		p.joined = append(p.joined, joinedDispatch{seq: r.Seq, queuedMs: r.QueuedMs, ack: r.Ack, class: r.Class,
			key: r.FairnessKey, rank: r.DPRank})
		wake := false
		if r.Ack != "" {
			// The new delivery's ack wait may be shorter (another dispatcher).
			if per := w.keepAlive(r); p.period == 0 || per < p.period {
				p.period = per
			}
			if n := now.Add(p.period); p.next.IsZero() || n.Before(p.next) {
				p.next = n
			}
			wake = w.progressWake.IsZero() || p.next.Before(w.progressWake)
		}
		w.answeredLocked(r)
		w.joined++
		w.mu.Unlock()
		w.accept(m, r)
		if wake {
			select {
			case w.progressKick <- struct{}{}:
			default:
			}
		}
		about(w.log.Debug(), r).Msg("dispatch of a running request joined to its execution")
		return true
	}
	e, ok := w.finished.get(r.RequestID, now)
	if !ok {
		w.mu.Unlock()
		return false
	}
	w.answeredLocked(r)
	w.repeated++
	w.mu.Unlock()
	w.accept(m, r)
	body := ackAck
	if e.term {
		body = ackTerm
	}
	if err := w.acknowledge(r, r.Ack, body, nil); err != nil {
		about(w.log.Error(), r).Err(err).Msg("acknowledgement of a request finished already")
	}
	if e.recorded {
		c := r.Completion(0, 0, false)
		c.Status = memoStatuses[e.status]
		if err := w.publishCompletion(c); err != nil {
			about(w.log.Error(), r).Err(err).Msg("completion record of a request finished already")
		}
	}
	about(w.log.Debug(), r).Msg("dispatch of a request finished already: acknowledged without running it")
	return true
}

// answeredLocked advances seen_seq past r, answered without Offer; w.mu is held.
func (w *Worker) answeredLocked(r *Request) {
	if r.Seq > w.seenSeq {
		w.seenSeq = r.Seq
	}
}

// accept replies to the dispatch m of r with an acceptance and asks for a
// report (seen_seq moved).
func (w *Worker) accept(m *nats.Msg, r *Request) {
	w.kickReport()
	if err := w.nc.PublishMsg(&nats.Msg{Subject: m.Reply}); err != nil {
		about(w.log.Error(), r).Err(err).Msg("reply to dispatch")
	}
}

// Stats counts what the helper did on its own, beside the handler.
type Stats struct {
	// Joined counts dispatches of a request running here, accepted and
	// joined to its execution without calling Offer.
	Joined uint64 `json:"joined"`
	// AlreadyFinished counts dispatches of a request finished here within
	// FinishedWindow, acknowledged at once without calling Offer.
	AlreadyFinished uint64 `json:"already_finished"`
	// FinishedRemembered is the number of request ids the finished-request
	// memory holds now (at most FinishedIDs).
	FinishedRemembered int `json:"finished_remembered"`
	// AcksConfirmed counts acknowledgements JetStream answered.
	AcksConfirmed uint64 `json:"acks_confirmed"`
	// AckRetries counts attempts beyond each acknowledgement's first.
	AckRetries uint64 `json:"ack_retries"`
	// AcksUnconfirmed counts acknowledgements given up unanswered (see
	// [Request.Done]): each one's request may be dispatched again.
	AcksUnconfirmed uint64 `json:"acks_unconfirmed"`
	// AcksPending is the number of acknowledgements waiting for JetStream's
	// answer now.
	AcksPending int `json:"acks_pending"`
	// AcksPlain counts acknowledgements published plain: all of them with
	// Config.PlainAcks, and those sent after Stop.
	AcksPlain uint64 `json:"acks_plain"`
}

// Stats returns the counters so far. Acknowledgements that
// [Request.DoneConfirmed], [Request.DoneSync] and [Response.End] send
// themselves are not counted.
func (w *Worker) Stats() Stats {
	w.mu.Lock()
	s := Stats{Joined: w.joined, AlreadyFinished: w.repeated, FinishedRemembered: w.finished.len()}
	a := w.ack
	w.mu.Unlock()
	s.AcksPlain = w.plainAcks.Load()
	if a != nil {
		c := a.counters()
		s.AcksConfirmed, s.AckRetries, s.AcksUnconfirmed = c.confirmed, c.retries, c.unconfirmed
		s.AcksPlain += c.plain
		s.AcksPending = a.pending()
	}
	return s
}

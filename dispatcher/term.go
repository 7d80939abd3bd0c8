package dispatcher

import "fairdispatch/ingest"

// term is one leadership term's source of deliveries: the consumer that
// pulls them and the channel it sends them on. A channel per term tags every
// batch with the consumer it came from, so that a batch pulled in one term is
// never admitted in another, with message handles gone stale and released to
// the wrong consumer (docs/decisions.md, Delivery).
type term struct {
	rel  Releaser
	ch   chan []ingest.Delivery
	prev *term // the term before, until the actor has retired it
}

func newTerm(r Releaser) *term { return &term{rel: r, ch: make(chan []ingest.Delivery, 64)} }

// SetConsumer starts a new term whose deliveries come from r, and returns
// the channel r must send them on (ingest.Consumer.Run's out). Stop the
// previous term's consumer first: what it left in its channel is handed back
// (-NAK) and released to it, never admitted.
func (a *Actor) SetConsumer(r Releaser) chan<- []ingest.Delivery {
	t := newTerm(r)
	a.termMu.Lock()
	t.prev = a.term.Load() // set before t is published: the actor reads it after Load
	a.term.Store(t)
	a.termMu.Unlock()
	a.signalRole()
	return t.ch
}

// Deliveries returns the current term's delivery channel.
func (a *Actor) Deliveries() chan<- []ingest.Delivery { return a.term.Load().ch }

// syncTerm switches the actor to the latest term, handing back what every
// earlier one left in its channel, including terms that were superseded
// before the actor ever admitted from them.
func (a *Actor) syncTerm() {
	t := a.term.Load()
	if t == a.cur {
		return
	}
	for x := t.prev; x != nil; x = x.prev {
		a.retire(x)
		if x == a.cur {
			break
		}
	}
	t.prev = nil // only the actor reads prev once a term is published
	a.cur = t
}

// retire hands back every delivery waiting in t's channel and releases it to
// t's consumer, and returns how many it handed back. A delivery of a request
// already held (a redelivery) is only released: handing it back would have the
// server redeliver a request that is queued or with a worker.
func (a *Actor) retire(t *term) int {
	n := 0
	for {
		select {
		case batch := <-t.ch:
			for i := range batch {
				dl := &batch[i]
				if a.held[dl.StreamSeq] == nil {
					if err := dl.Msg.Nak(); err != nil {
						a.log.Warn().Err(err).Uint64("stream_seq", dl.StreamSeq).Msg("hand back of a pulled delivery")
					}
					n++
				}
				t.rel.Release(1)
			}
		default:
			if n > 0 {
				a.log.Info().Int("handed_back", n).Msg("deliveries pulled and not admitted handed back")
			}
			return n
		}
	}
}

// admitBatch admits a batch of the current term, then gives the slice back
// to ingest: admit keeps nothing that points into it.
func (a *Actor) admitBatch(batch []ingest.Delivery) {
	now := a.cfg.Now()
	for i := range batch {
		a.admit(now, &batch[i])
	}
	ingest.Recycle(batch)
}

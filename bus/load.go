package bus

import (
	"fmt"
	"strings"

	"github.com/nats-io/nats.go"
)

// SubscribeLoad subscribes to "<prefix>.load.*" (docs/protocol.md, Load report) and calls fn with
// each report's subject token (the worker id it claims to be from) and raw
// body, on the subscription's one goroutine, in arrival order. fn must not
// block for long: reports queue behind it, and past the subscription's
// pending limits NATS drops them (logged as a slow-consumer async error).
// Parsing and checking the report is the caller's business. Unsubscribe the
// returned subscription to stop.
func SubscribeLoad(nc *nats.Conn, prefix string, fn func(token string, data []byte)) (*nats.Subscription, error) {
	return subscribeTokens(nc, prefix, "load", Subjects.LoadAll, fn)
}

// SubscribeDone subscribes to "<prefix>.done.*" (docs/protocol.md, Completion
// records) and calls fn with each record's subject token (the worker id it was
// published under, which NATS permissions can tie to the worker's credentials)
// and raw body, on the subscription's one goroutine, in arrival order. fn must
// not block for long. Parsing and settling the record is the caller's
// business. Unsubscribe the returned subscription to stop.
func SubscribeDone(nc *nats.Conn, prefix string, fn func(token string, data []byte)) (*nats.Subscription, error) {
	return subscribeTokens(nc, prefix, "done", Subjects.DoneAll, fn)
}

// subscribeTokens subscribes to the subject all names for prefix and calls fn
// with each message's last subject token and body; what names the subscription
// in errors.
func subscribeTokens(nc *nats.Conn, prefix, what string, all func(Subjects) string, fn func(token string, data []byte)) (*nats.Subscription, error) {
	subj, err := NewSubjects(prefix)
	if err != nil {
		return nil, fmt.Errorf("bus: subscribe %s: %w", what, err)
	}
	if nc == nil || fn == nil {
		return nil, fmt.Errorf("bus: subscribe %s: nil connection or function", what)
	}
	sub, err := nc.Subscribe(all(subj), func(m *nats.Msg) {
		fn(m.Subject[strings.LastIndexByte(m.Subject, '.')+1:], m.Data)
	})
	if err != nil {
		return nil, fmt.Errorf("bus: subscribe %s: %w", all(subj), err)
	}
	return sub, nil
}

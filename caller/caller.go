package caller

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"fairdispatch/naming"
	"fairdispatch/wire"
)

// DefaultResponsePrefix is the subject prefix of response subjects: a
// request's response subject is <prefix>.<token of its id>. It is outside
// _INBOX on purpose (docs/protocol.md, Responses: permissions): workers
// publish to response subjects, and must not be able to publish into a
// producer's inbox, where its JetStream acknowledgements arrive.
const DefaultResponsePrefix = "_RESP.fdgw"

// Defaults of Config.
const (
	DefaultBrokenAfter    = 3 * time.Second
	DefaultMaxBuffered    = 4096
	DefaultPublishTimeout = 5 * time.Second
)

// Config configures a Caller.
type Config struct {
	// Prefix is the dispatcher's subject prefix ("" means naming.DefaultPrefix).
	Prefix string
	// ResponsePrefix is the prefix of response subjects, a literal subject
	// ("" means DefaultResponsePrefix). NATS permissions: the caller
	// subscribes under it.
	ResponsePrefix string
	// BrokenAfter is how long the execution that sent a chunk may stay
	// silent before the response counts as broken (> 0; default 3 s, three
	// of the worker's 1 s ping intervals).
	BrokenAfter time.Duration
	// MaxBuffered is the most chunks a call holds that Recv has not taken
	// (>= 1; default 4096); beyond it the response is broken and cancelled.
	MaxBuffered int
	// PublishTimeout bounds the wait for JetStream's acknowledgement of a
	// request, or Start's context's deadline when that comes first (default 5 s).
	PublishTimeout time.Duration
}

// Caller publishes requests and follows their responses on one connection.
type Caller struct {
	nc    *nats.Conn
	js    jetstream.JetStream
	names naming.Names
	cfg   Config
}

// New returns a Caller on nc, or an error for an invalid configuration.
func New(nc *nats.Conn, cfg Config) (*Caller, error) {
	names, err := naming.New(cfg.Prefix)
	if err != nil {
		return nil, fmt.Errorf("caller: %w", err)
	}
	cfg.ResponsePrefix = cmp.Or(cfg.ResponsePrefix, DefaultResponsePrefix)
	if !naming.ValidSubject(cfg.ResponsePrefix) || strings.HasPrefix(cfg.ResponsePrefix, "$") ||
		strings.HasPrefix(cfg.ResponsePrefix+".", names.Prefix()+".") {
		return nil, fmt.Errorf("caller: response prefix %q: want a literal subject, not starting with $ or %s.", cfg.ResponsePrefix, names.Prefix())
	}
	cfg.BrokenAfter = cmp.Or(cfg.BrokenAfter, DefaultBrokenAfter)
	cfg.MaxBuffered = cmp.Or(cfg.MaxBuffered, DefaultMaxBuffered)
	cfg.PublishTimeout = cmp.Or(cfg.PublishTimeout, DefaultPublishTimeout)
	if cfg.BrokenAfter < 0 || cfg.MaxBuffered < 1 || cfg.PublishTimeout < 0 {
		return nil, errors.New("caller: BrokenAfter and PublishTimeout must be > 0, MaxBuffered >= 1")
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("caller: jetstream: %w", err)
	}
	return &Caller{nc: nc, js: js, names: names, cfg: cfg}, nil
}

// Names returns the names of the caller's deployment.
func (c *Caller) Names() naming.Names { return c.names }

// Conn returns the caller's connection.
func (c *Caller) Conn() *nats.Conn { return c.nc }

// Request is one request to publish.
type Request struct {
	// ID is the request id, sent as Nats-Msg-Id: JetStream's dedupe key, so a
	// retry with the same id inside the duplicate window is stored once.
	// Required.
	ID string
	// Class is the subject token: the request goes to <prefix>.req.<Class>.
	Class string
	// Header holds the other request headers (docs/protocol.md, Request
	// headers). Start sets Nats-Msg-Id, Dispatch-Response-To and
	// Dispatch-Reply-To over any given here.
	Header nats.Header
	// Body is the request body, forwarded to the worker untouched.
	Body []byte
	// KeepUnconfirmed, when true, sends no cancellation for a request whose
	// publication JetStream neither confirmed nor refused: its caller will
	// retry with the same ID (an idempotency key) and attach to it. When
	// false, Start cancels such a request, so that it never runs if it was
	// stored after all.
	KeepUnconfirmed bool
}

// ResponseSubject returns the response subject of request id: the
// ResponsePrefix, a dot, and the id itself when it is a token of
// [A-Za-z0-9_-] of at most 128 bytes, else the first 32 hex digits of its
// SHA-256.
func (c *Caller) ResponseSubject(id string) string {
	return c.cfg.ResponsePrefix + "." + subjectToken(id)
}

func subjectToken(id string) string {
	if wire.ValidToken(id) {
		return id
	}
	sum := sha256.Sum256([]byte(id))
	return hex.EncodeToString(sum[:16])
}

// Start subscribes to the request's response subject, publishes the request
// and waits for JetStream's acknowledgement. It returns the call, or a
// *PublishError when the request was not stored (or JetStream did not say).
func (c *Caller) Start(ctx context.Context, req Request) (*Call, error) {
	if req.ID == "" {
		return nil, errors.New("caller: request without an id")
	}
	if !naming.ValidToken(req.Class) {
		return nil, fmt.Errorf("caller: class %q is not a subject token", req.Class)
	}
	if !c.nc.IsConnected() {
		return nil, &PublishError{ID: req.ID, Stored: StoredNo, Err: nats.ErrConnectionClosed}
	}
	subj := c.ResponseSubject(req.ID)
	call := newCall(c, req.ID, subj)
	sub, err := c.nc.Subscribe(subj, call.onMsg)
	if err != nil {
		return nil, &PublishError{ID: req.ID, Stored: StoredNo, Err: err}
	}
	_ = sub.SetPendingLimits(-1, -1) // bounded by MaxBuffered, counted in onMsg
	call.sub = sub

	m := nats.NewMsg(c.names.Req(req.Class))
	for k, v := range req.Header {
		// The two subjects Start sets, under any casing: the dispatcher
		// refuses a header given under two (docs/protocol.md, Request headers).
		if strings.EqualFold(k, wire.HeaderResponseTo) || strings.EqualFold(k, wire.HeaderReplyTo) {
			continue
		}
		m.Header[k] = v
	}
	m.Header.Set(jetstream.MsgIDHeader, req.ID)
	m.Header.Set(wire.HeaderResponseTo, subj)
	m.Header.Set(wire.HeaderReplyTo, subj)
	m.Data = req.Body
	pctx, cancel := context.WithTimeout(ctx, c.cfg.PublishTimeout) // or ctx's earlier deadline
	defer cancel()
	ack, err := c.js.PublishMsg(pctx, m, jetstream.WithExpectStream(c.names.ReqStream()))
	if err != nil {
		pe := &PublishError{ID: req.ID, Stored: classifyPublish(err), Err: err}
		switch {
		case pe.Stored == StoredUnknown && req.KeepUnconfirmed:
			pe.Kept = true
		case pe.Stored == StoredUnknown:
			// It may be stored: cancel it, so that it never runs (the
			// dispatcher cancels an id it has not seen yet at admission).
			// Cancelled only once the server has it: while reconnecting,
			// nats.go buffers the publication, and a close loses it.
			pe.Cancelled = c.Cancel(req.ID) == nil && c.nc.FlushTimeout(time.Second) == nil
		}
		_ = sub.Unsubscribe()
		return nil, pe
	}
	call.duplicate = ack.Duplicate
	return call, nil
}

// classifyPublish says whether a failed publication may have been stored. A
// connection closed for good is not known to have stored nothing: nats.go
// says so too when it closed after the request was sent, while its answer
// was awaited (one closed before is caught by Start's check).
func classifyPublish(err error) Stored {
	var apiErr *jetstream.APIError
	switch {
	case errors.Is(err, nats.ErrNoResponders), errors.Is(err, jetstream.ErrNoStreamResponse),
		errors.Is(err, nats.ErrMaxPayload), errors.Is(err, nats.ErrBadSubject):
		return StoredNo
	case errors.As(err, &apiErr):
		return StoredNo // the stream answered with an error: not stored
	}
	return StoredUnknown
}

// Cancel publishes a cancellation of request id on <prefix>.cancel (core
// NATS, fire and forget; buffered by the client while it reconnects).
func (c *Caller) Cancel(id string) error {
	b, err := wire.MarshalCancel(wire.Cancel{RequestID: id})
	if err != nil {
		return err
	}
	return c.nc.Publish(c.names.Cancel(), b)
}

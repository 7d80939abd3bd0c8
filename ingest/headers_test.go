package ingest

import (
	"errors"
	"math"
	"reflect"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"

	"fairdispatch/request"
	"fairdispatch/wire"
)

// hdr builds a header from name/value pairs, adding repeated names in order.
func hdr(kv ...string) nats.Header {
	h := nats.Header{}
	for i := 0; i+1 < len(kv); i += 2 {
		h.Add(kv[i], kv[i+1])
	}
	return h
}

// with returns the decoded value of no headers, changed by f.
func with(f func(*Headers)) Headers {
	d := Headers{Arrival: request.Arrival{Pin: request.Target{Rank: request.AnyRank}}}
	if f != nil {
		f(&d)
	}
	return d
}

func ov(w string, n uint64) request.Overlap   { return request.Overlap{Worker: w, Tokens: n} }
func taint(n string, w float64) request.Taint { return request.Taint{Name: n, Weight: w} }

type decodeCase struct {
	name    string
	h       nats.Header
	want    Headers
	wantErr string // header named by the *HeaderError; "" for none
}

var (
	long128 = strings.Repeat("w", 128)
	long129 = strings.Repeat("w", 129)
)

var decodeCases = []decodeCase{
	// No headers at all.
	{name: "nil", h: nil, want: with(nil)},
	{name: "empty", h: nats.Header{}, want: with(nil)},
	{name: "unrelated", h: hdr("Content-Type", "x", "Dispatch-Unknown", "1"), want: with(nil)},
	{name: "no values", h: nats.Header{wire.HeaderISLTokens: {}}, want: with(nil)},

	// Nats-Msg-Id: exact case only; empty means absent.
	{name: "msg id", h: hdr("Nats-Msg-Id", "r1"), want: with(func(d *Headers) { d.MsgID = "r1" })},
	{name: "msg id repeated", h: hdr("Nats-Msg-Id", "r1", "Nats-Msg-Id", "r2"), want: with(func(d *Headers) { d.MsgID = "r1" })},
	{name: "msg id other case ignored", h: hdr("nats-msg-id", "r1"), want: with(nil)},
	{name: "msg id empty", h: hdr("Nats-Msg-Id", ""), want: with(nil)},
	{name: "msg id not utf-8", h: hdr("Nats-Msg-Id", "order-\xff42"), wantErr: wire.HeaderMsgID},

	// Dispatch-Fairness-Key: 1 to 64 bytes of [A-Za-z0-9_.:@-].
	{name: "key", h: hdr(wire.HeaderFairnessKey, "tenant-7"), want: with(func(d *Headers) { d.Key = "tenant-7" })},
	{name: "key every char", h: hdr("dispatch-fairness-key", " a.B:c@d-e_9 "), want: with(func(d *Headers) { d.Key = "a.B:c@d-e_9" })},
	{name: "key at max", h: hdr(wire.HeaderFairnessKey, strings.Repeat("k", 64)), want: with(func(d *Headers) { d.Key = strings.Repeat("k", 64) })},
	{name: "key past max", h: hdr(wire.HeaderFairnessKey, strings.Repeat("k", 65)), wantErr: wire.HeaderFairnessKey},
	{name: "key empty", h: hdr(wire.HeaderFairnessKey, ""), wantErr: wire.HeaderFairnessKey},
	{name: "key blank", h: hdr(wire.HeaderFairnessKey, "  "), wantErr: wire.HeaderFairnessKey},
	{name: "key slash", h: hdr(wire.HeaderFairnessKey, "a/b"), wantErr: wire.HeaderFairnessKey},
	{name: "key space inside", h: hdr(wire.HeaderFairnessKey, "a b"), wantErr: wire.HeaderFairnessKey},
	{name: "key non-ascii", h: hdr(wire.HeaderFairnessKey, "t\u00e9"), wantErr: wire.HeaderFairnessKey},
	{name: "key repeated first counts", h: hdr(wire.HeaderFairnessKey, "a", wire.HeaderFairnessKey, "b"), want: with(func(d *Headers) { d.Key = "a" })},

	// Dispatch-ISL-Tokens.
	{name: "isl", h: hdr(wire.HeaderISLTokens, "4096"), want: with(func(d *Headers) { d.ISL = 4096 })},
	{name: "isl zero", h: hdr(wire.HeaderISLTokens, "0"), want: with(nil)},
	{name: "isl leading zeros", h: hdr(wire.HeaderISLTokens, "007"), want: with(func(d *Headers) { d.ISL = 7 })},
	{name: "isl spaces", h: hdr(wire.HeaderISLTokens, " 12\t"), want: with(func(d *Headers) { d.ISL = 12 })},
	{name: "isl at max", h: hdr(wire.HeaderISLTokens, "1099511627776"), want: with(func(d *Headers) { d.ISL = 1 << 40 })},
	{name: "isl past max", h: hdr(wire.HeaderISLTokens, "1099511627777"), wantErr: wire.HeaderISLTokens},
	{name: "isl huge", h: hdr(wire.HeaderISLTokens, "99999999999999999999999999"), wantErr: wire.HeaderISLTokens},
	{name: "isl not number", h: hdr(wire.HeaderISLTokens, "abc"), wantErr: wire.HeaderISLTokens},
	{name: "isl huge then junk", h: hdr(wire.HeaderISLTokens, "99999999999999999999999x"), wantErr: wire.HeaderISLTokens},
	{name: "isl negative", h: hdr(wire.HeaderISLTokens, "-1"), wantErr: wire.HeaderISLTokens},
	{name: "isl minus zero", h: hdr(wire.HeaderISLTokens, "-0"), wantErr: wire.HeaderISLTokens},
	{name: "isl plus", h: hdr(wire.HeaderISLTokens, "+1"), wantErr: wire.HeaderISLTokens},
	{name: "isl minus", h: hdr(wire.HeaderISLTokens, "-"), wantErr: wire.HeaderISLTokens},
	{name: "isl float", h: hdr(wire.HeaderISLTokens, "1.5"), wantErr: wire.HeaderISLTokens},
	{name: "isl empty", h: hdr(wire.HeaderISLTokens, ""), wantErr: wire.HeaderISLTokens},
	{name: "isl inner space", h: hdr(wire.HeaderISLTokens, "1 2"), wantErr: wire.HeaderISLTokens},
	{name: "isl lower case", h: hdr("dispatch-isl-tokens", "5"), want: with(func(d *Headers) { d.ISL = 5 })},
	{name: "isl upper case", h: hdr("DISPATCH-ISL-TOKENS", "5"), want: with(func(d *Headers) { d.ISL = 5 })},
	{name: "isl repeated", h: hdr(wire.HeaderISLTokens, "5", wire.HeaderISLTokens, "6"), want: with(func(d *Headers) { d.ISL = 5 })},
	{name: "isl repeated, bad second", h: hdr(wire.HeaderISLTokens, "5", wire.HeaderISLTokens, "x"), want: with(func(d *Headers) { d.ISL = 5 })},
	{name: "isl three cases", h: hdr("dispatch-isl-tokens", "6", wire.HeaderISLTokens, "5", "dispatch-ISL-tokens", "7"), wantErr: wire.HeaderISLTokens},
	{name: "isl two cases", h: hdr("DISPATCH-ISL-TOKENS", "8", wire.HeaderISLTokens, "5"), wantErr: wire.HeaderISLTokens},

	// Dispatch-Cached-Tokens.
	{name: "cached", h: hdr(wire.HeaderCachedTokens, "100"), want: with(func(d *Headers) { d.Cached = 100 })},
	{name: "cached above isl kept", h: hdr(wire.HeaderISLTokens, "10", wire.HeaderCachedTokens, "100"), want: with(func(d *Headers) { d.ISL, d.Cached = 10, 100 })},
	{name: "cached at max", h: hdr(wire.HeaderCachedTokens, "1099511627776"), want: with(func(d *Headers) { d.Cached = 1 << 40 })},
	{name: "cached past max", h: hdr(wire.HeaderCachedTokens, "1099511627777"), wantErr: wire.HeaderCachedTokens},
	{name: "cached negative", h: hdr(wire.HeaderCachedTokens, "-5"), wantErr: wire.HeaderCachedTokens},
	{name: "cached junk", h: hdr(wire.HeaderCachedTokens, "5k"), wantErr: wire.HeaderCachedTokens},
	{name: "cached mixed case", h: hdr("dIsPaTcH-cAcHeD-tOkEnS", "3"), want: with(func(d *Headers) { d.Cached = 3 })},

	// Dispatch-Worker-Overlap.
	{name: "overlap", h: hdr(wire.HeaderWorkerOverlap, "w1=100, w-2 = 0,w_3=1099511627776"), want: with(func(d *Headers) {
		d.Overlap = []request.Overlap{ov("w1", 100), ov("w-2", 0), ov("w_3", 1<<40)}
	})},
	{name: "overlap one", h: hdr(wire.HeaderWorkerOverlap, "w1=5"), want: with(func(d *Headers) { d.Overlap = []request.Overlap{ov("w1", 5)} })},
	{name: "overlap duplicates kept", h: hdr(wire.HeaderWorkerOverlap, "w1=5,w1=6"), want: with(func(d *Headers) { d.Overlap = []request.Overlap{ov("w1", 5), ov("w1", 6)} })},
	{name: "overlap tokens past max", h: hdr(wire.HeaderWorkerOverlap, "w1=1099511627777"), wantErr: wire.HeaderWorkerOverlap},
	{name: "overlap no =", h: hdr(wire.HeaderWorkerOverlap, "w1"), wantErr: wire.HeaderWorkerOverlap},
	{name: "overlap no tokens", h: hdr(wire.HeaderWorkerOverlap, "w1="), wantErr: wire.HeaderWorkerOverlap},
	{name: "overlap no id", h: hdr(wire.HeaderWorkerOverlap, "=5"), wantErr: wire.HeaderWorkerOverlap},
	{name: "overlap bad id", h: hdr(wire.HeaderWorkerOverlap, "w.1=5"), wantErr: wire.HeaderWorkerOverlap},
	{name: "overlap negative", h: hdr(wire.HeaderWorkerOverlap, "w1=-5"), wantErr: wire.HeaderWorkerOverlap},
	{name: "overlap two =", h: hdr(wire.HeaderWorkerOverlap, "w1=5=6"), wantErr: wire.HeaderWorkerOverlap},
	{name: "overlap empty item", h: hdr(wire.HeaderWorkerOverlap, "w1=5,,w2=6"), wantErr: wire.HeaderWorkerOverlap},
	{name: "overlap trailing comma", h: hdr(wire.HeaderWorkerOverlap, "w1=5,"), wantErr: wire.HeaderWorkerOverlap},
	{name: "overlap empty", h: hdr(wire.HeaderWorkerOverlap, ""), wantErr: wire.HeaderWorkerOverlap},
	{name: "overlap id at 128", h: hdr(wire.HeaderWorkerOverlap, long128+"=1"), want: with(func(d *Headers) { d.Overlap = []request.Overlap{ov(long128, 1)} })},
	{name: "overlap id at 129", h: hdr(wire.HeaderWorkerOverlap, long129+"=1"), wantErr: wire.HeaderWorkerOverlap},

	// Dispatch-Strict-Priority.
	{name: "strict", h: hdr(wire.HeaderStrictPriority, "3"), want: with(func(d *Headers) { d.Strict = 3 })},
	{name: "strict at max", h: hdr(wire.HeaderStrictPriority, "2147483647"), want: with(func(d *Headers) { d.Strict = math.MaxInt32 })},
	{name: "strict past max", h: hdr(wire.HeaderStrictPriority, "2147483648"), wantErr: wire.HeaderStrictPriority},
	{name: "strict negative", h: hdr(wire.HeaderStrictPriority, "-1"), wantErr: wire.HeaderStrictPriority},
	{name: "strict junk", h: hdr(wire.HeaderStrictPriority, "high"), wantErr: wire.HeaderStrictPriority},

	// Dispatch-Priority.
	{name: "jump", h: hdr(wire.HeaderPriority, "2.5"), want: with(func(d *Headers) { d.Jump = 2.5 })},
	{name: "jump exponent", h: hdr(wire.HeaderPriority, "1e3"), want: with(func(d *Headers) { d.Jump = 1000 })},
	{name: "jump at max", h: hdr(wire.HeaderPriority, "1000000"), want: with(func(d *Headers) { d.Jump = 1e6 })},
	{name: "jump past max", h: hdr(wire.HeaderPriority, "1000000.0001"), wantErr: wire.HeaderPriority},
	{name: "jump zero", h: hdr(wire.HeaderPriority, "0"), want: with(nil)},
	{name: "jump minus zero", h: hdr(wire.HeaderPriority, "-0"), want: with(nil)},
	{name: "jump negative", h: hdr(wire.HeaderPriority, "-0.5"), wantErr: wire.HeaderPriority},
	{name: "jump NaN", h: hdr(wire.HeaderPriority, "NaN"), wantErr: wire.HeaderPriority},
	{name: "jump Inf", h: hdr(wire.HeaderPriority, "+Inf"), wantErr: wire.HeaderPriority},
	{name: "jump overflow", h: hdr(wire.HeaderPriority, "1e400"), wantErr: wire.HeaderPriority},
	{name: "jump junk", h: hdr(wire.HeaderPriority, "soon"), wantErr: wire.HeaderPriority},
	{name: "jump empty", h: hdr(wire.HeaderPriority, ""), wantErr: wire.HeaderPriority},

	// Dispatch-Worker and Dispatch-DP-Rank.
	{name: "worker", h: hdr(wire.HeaderWorker, "w-1_A"), want: with(func(d *Headers) { d.Pin.Worker = "w-1_A" })},
	{name: "worker at 128", h: hdr(wire.HeaderWorker, long128), want: with(func(d *Headers) { d.Pin.Worker = long128 })},
	{name: "worker at 129", h: hdr(wire.HeaderWorker, long129), wantErr: wire.HeaderWorker},
	{name: "worker dot", h: hdr(wire.HeaderWorker, "w.1"), wantErr: wire.HeaderWorker},
	{name: "worker inner space", h: hdr(wire.HeaderWorker, "w 1"), wantErr: wire.HeaderWorker},
	{name: "worker empty", h: hdr(wire.HeaderWorker, ""), wantErr: wire.HeaderWorker},
	{name: "worker utf8", h: hdr(wire.HeaderWorker, "wé"), wantErr: wire.HeaderWorker},
	{name: "worker and rank", h: hdr(wire.HeaderWorker, "w1", wire.HeaderDPRank, "3"), want: with(func(d *Headers) { d.Pin = request.Target{Worker: "w1", Rank: 3} })},
	{name: "rank zero", h: hdr(wire.HeaderWorker, "w1", wire.HeaderDPRank, "0"), want: with(func(d *Headers) { d.Pin = request.Target{Worker: "w1", Rank: 0} })},
	{name: "rank at max", h: hdr(wire.HeaderWorker, "w1", wire.HeaderDPRank, "65535"), want: with(func(d *Headers) { d.Pin = request.Target{Worker: "w1", Rank: 65535} })},
	{name: "rank past max", h: hdr(wire.HeaderWorker, "w1", wire.HeaderDPRank, "65536"), want: with(nil), wantErr: wire.HeaderDPRank},
	{name: "rank negative", h: hdr(wire.HeaderWorker, "w1", wire.HeaderDPRank, "-1"), want: with(nil), wantErr: wire.HeaderDPRank},
	{name: "rank junk", h: hdr(wire.HeaderWorker, "w1", wire.HeaderDPRank, "any"), want: with(nil), wantErr: wire.HeaderDPRank},
	{name: "rank without worker", h: hdr(wire.HeaderDPRank, "1"), want: with(nil), wantErr: wire.HeaderDPRank},
	{name: "rank with bad worker", h: hdr(wire.HeaderWorker, "w.1", wire.HeaderDPRank, "1"), want: with(nil), wantErr: wire.HeaderWorker},
	{name: "worker case", h: hdr("dispatch-worker", "w1", "DISPATCH-DP-RANK", "2"), want: with(func(d *Headers) { d.Pin = request.Target{Worker: "w1", Rank: 2} })},

	// Dispatch-Allowed-Workers.
	{name: "allowed", h: hdr(wire.HeaderAllowedWorkers, "w1, w2,w3"), want: with(func(d *Headers) { d.Allowed = []string{"w1", "w2", "w3"} })},
	{name: "allowed one", h: hdr(wire.HeaderAllowedWorkers, "w1"), want: with(func(d *Headers) { d.Allowed = []string{"w1"} })},
	{name: "allowed at 128", h: hdr(wire.HeaderAllowedWorkers, "a,"+long128), want: with(func(d *Headers) { d.Allowed = []string{"a", long128} })},
	{name: "allowed at 129", h: hdr(wire.HeaderAllowedWorkers, "a,"+long129), wantErr: wire.HeaderAllowedWorkers},
	{name: "allowed empty", h: hdr(wire.HeaderAllowedWorkers, ""), wantErr: wire.HeaderAllowedWorkers},
	{name: "allowed spaces only", h: hdr(wire.HeaderAllowedWorkers, "  "), wantErr: wire.HeaderAllowedWorkers},
	{name: "allowed empty item", h: hdr(wire.HeaderAllowedWorkers, "w1,,w2"), wantErr: wire.HeaderAllowedWorkers},
	{name: "allowed leading comma", h: hdr(wire.HeaderAllowedWorkers, ",w1"), wantErr: wire.HeaderAllowedWorkers},
	{name: "allowed trailing comma", h: hdr(wire.HeaderAllowedWorkers, "w1,"), wantErr: wire.HeaderAllowedWorkers},
	{name: "allowed taint chars", h: hdr(wire.HeaderAllowedWorkers, "w1,zone:a"), wantErr: wire.HeaderAllowedWorkers},

	// Dispatch-Required-Taints.
	{name: "required", h: hdr(wire.HeaderRequiredTaints, "h200,zone-a, gpu.type/x:1"), want: with(func(d *Headers) { d.Required = []string{"h200", "zone-a", "gpu.type/x:1"} })},
	{name: "required at 128", h: hdr(wire.HeaderRequiredTaints, long128), want: with(func(d *Headers) { d.Required = []string{long128} })},
	{name: "required at 129", h: hdr(wire.HeaderRequiredTaints, long129), wantErr: wire.HeaderRequiredTaints},
	{name: "required bad char", h: hdr(wire.HeaderRequiredTaints, "a=b"), wantErr: wire.HeaderRequiredTaints},
	{name: "required empty item", h: hdr(wire.HeaderRequiredTaints, "a,,b"), wantErr: wire.HeaderRequiredTaints},
	{name: "required empty", h: hdr(wire.HeaderRequiredTaints, ""), wantErr: wire.HeaderRequiredTaints},

	// Dispatch-Preferred-Taints.
	{name: "preferred", h: hdr(wire.HeaderPreferredTaints, "h200=2.5, zone-a ,slow=-3, x = 1e6"), want: with(func(d *Headers) {
		d.Preferred = []request.Taint{taint("h200", 2.5), taint("zone-a", 1), taint("slow", -3), taint("x", 1e6)}
	})},
	{name: "preferred weight at -max", h: hdr(wire.HeaderPreferredTaints, "a=-1000000"), want: with(func(d *Headers) { d.Preferred = []request.Taint{taint("a", -1e6)} })},
	{name: "preferred weight past max", h: hdr(wire.HeaderPreferredTaints, "a=1000000.5"), wantErr: wire.HeaderPreferredTaints},
	{name: "preferred weight past -max", h: hdr(wire.HeaderPreferredTaints, "a=-1000000.5"), wantErr: wire.HeaderPreferredTaints},
	{name: "preferred weight NaN", h: hdr(wire.HeaderPreferredTaints, "a=NaN"), wantErr: wire.HeaderPreferredTaints},
	{name: "preferred weight Inf", h: hdr(wire.HeaderPreferredTaints, "a=-Inf"), wantErr: wire.HeaderPreferredTaints},
	{name: "preferred weight empty", h: hdr(wire.HeaderPreferredTaints, "a="), wantErr: wire.HeaderPreferredTaints},
	{name: "preferred weight junk", h: hdr(wire.HeaderPreferredTaints, "a=high"), wantErr: wire.HeaderPreferredTaints},
	{name: "preferred no taint", h: hdr(wire.HeaderPreferredTaints, "=1"), wantErr: wire.HeaderPreferredTaints},
	{name: "preferred taint at 129", h: hdr(wire.HeaderPreferredTaints, long129+"=1"), wantErr: wire.HeaderPreferredTaints},
	{name: "preferred empty item", h: hdr(wire.HeaderPreferredTaints, "a,,b"), wantErr: wire.HeaderPreferredTaints},
	{name: "preferred empty", h: hdr(wire.HeaderPreferredTaints, ""), wantErr: wire.HeaderPreferredTaints},

	// Dispatch-Deadline-Ms.
	{name: "deadline", h: hdr(wire.HeaderDeadlineMs, "1500"), want: with(func(d *Headers) { d.DeadlineMs, d.HasDeadline = 1500, true })},
	{name: "deadline zero", h: hdr(wire.HeaderDeadlineMs, "0"), want: with(func(d *Headers) { d.HasDeadline = true })},
	{name: "deadline at max", h: hdr(wire.HeaderDeadlineMs, "86400000"), want: with(func(d *Headers) { d.DeadlineMs, d.HasDeadline = 86400000, true })},
	{name: "deadline past max", h: hdr(wire.HeaderDeadlineMs, "86400001"), wantErr: wire.HeaderDeadlineMs},
	{name: "deadline negative", h: hdr(wire.HeaderDeadlineMs, "-1"), wantErr: wire.HeaderDeadlineMs},
	{name: "deadline junk", h: hdr(wire.HeaderDeadlineMs, "1s"), wantErr: wire.HeaderDeadlineMs},

	// Dispatch-Reply-To.
	{name: "reply", h: hdr(wire.HeaderReplyTo, "_INBOX.abc.1"), want: with(func(d *Headers) { d.ReplyTo = "_INBOX.abc.1" })},
	{name: "reply one token", h: hdr(wire.HeaderReplyTo, "out"), want: with(func(d *Headers) { d.ReplyTo = "out" })},
	// A * or > inside a token: nats-server takes the subject as literal, but
	// no publisher here sends to it (docs/protocol.md, Request headers).
	{name: "reply star inside token", h: hdr(wire.HeaderReplyTo, "a.b*c"), wantErr: wire.HeaderReplyTo},
	{name: "reply gt inside token", h: hdr(wire.HeaderReplyTo, "a.>x"), wantErr: wire.HeaderReplyTo},
	// A subject over wire.MaxSubjectLen would make the dispatcher's own
	// publish line too long for the server, which closes the connection.
	{name: "reply at max length", h: hdr(wire.HeaderReplyTo, strings.Repeat("a", wire.MaxSubjectLen)), want: with(func(d *Headers) { d.ReplyTo = strings.Repeat("a", wire.MaxSubjectLen) })},
	{name: "reply past max length", h: hdr(wire.HeaderReplyTo, strings.Repeat("a", wire.MaxSubjectLen+1)), wantErr: wire.HeaderReplyTo},
	{name: "response past max length", h: hdr(wire.HeaderResponseTo, strings.Repeat("a.", wire.MaxSubjectLen/2)+"b"), wantErr: wire.HeaderResponseTo},
	{name: "reply star", h: hdr(wire.HeaderReplyTo, "a.*.c"), wantErr: wire.HeaderReplyTo},
	{name: "reply gt", h: hdr(wire.HeaderReplyTo, "a.>"), wantErr: wire.HeaderReplyTo},
	{name: "reply empty token", h: hdr(wire.HeaderReplyTo, "a..b"), wantErr: wire.HeaderReplyTo},
	{name: "reply leading dot", h: hdr(wire.HeaderReplyTo, ".a"), wantErr: wire.HeaderReplyTo},
	{name: "reply trailing dot", h: hdr(wire.HeaderReplyTo, "a."), wantErr: wire.HeaderReplyTo},
	{name: "reply space", h: hdr(wire.HeaderReplyTo, "a b"), wantErr: wire.HeaderReplyTo},
	{name: "reply control", h: hdr(wire.HeaderReplyTo, "a\x00b"), wantErr: wire.HeaderReplyTo},
	{name: "response", h: hdr(wire.HeaderResponseTo, " _RESP.gw.r1 "), want: with(func(d *Headers) { d.ResponseTo = "_RESP.gw.r1" })},
	{name: "response star", h: hdr(wire.HeaderResponseTo, "a.*"), wantErr: wire.HeaderResponseTo},
	{name: "response gt", h: hdr(wire.HeaderResponseTo, ">"), wantErr: wire.HeaderResponseTo},
	{name: "response empty token", h: hdr(wire.HeaderResponseTo, "a..b"), wantErr: wire.HeaderResponseTo},
	{name: "response space", h: hdr(wire.HeaderResponseTo, "a b"), wantErr: wire.HeaderResponseTo},
	{name: "reply empty", h: hdr(wire.HeaderReplyTo, ""), wantErr: wire.HeaderReplyTo},
	{name: "reply case", h: hdr("dispatch-reply-to", "x.y"), want: with(func(d *Headers) { d.ReplyTo = "x.y" })},

	// Dispatch-Block-Hashes: the vector of docs/protocol.md, Block hashes.
	{name: "hashes", h: hdr(wire.HeaderBlockHashes, "wT_9PiW6dX6CFylZ_27bbA"), want: with(func(d *Headers) {
		d.Hashes = []uint64{0x7e75ba253efd3fc1, 0x6cdb6eff59291782}
	})},
	{name: "hashes one, spaces, lower case", h: hdr("dispatch-block-hashes", " wT_9PiW6dX4\t"), want: with(func(d *Headers) {
		d.Hashes = []uint64{0x7e75ba253efd3fc1}
	})},
	{name: "hashes empty", h: hdr(wire.HeaderBlockHashes, ""), wantErr: wire.HeaderBlockHashes},
	{name: "hashes padded", h: hdr(wire.HeaderBlockHashes, "wT_9PiW6dX4="), wantErr: wire.HeaderBlockHashes},
	{name: "hashes standard alphabet", h: hdr(wire.HeaderBlockHashes, "wT/9PiW6dX4"), wantErr: wire.HeaderBlockHashes},
	{name: "hashes inner space", h: hdr(wire.HeaderBlockHashes, "wT_9P W6dX4"), wantErr: wire.HeaderBlockHashes},
	{name: "hashes partial hash", h: hdr(wire.HeaderBlockHashes, "wT_9PiW6dX"), wantErr: wire.HeaderBlockHashes},
	{name: "hashes trailing bits", h: hdr(wire.HeaderBlockHashes, "wT_9PiW6dX5"), wantErr: wire.HeaderBlockHashes},
	{name: "hashes last in table order", h: hdr(wire.HeaderBlockHashes, "x", wire.HeaderReplyTo, "a..b"), wantErr: wire.HeaderReplyTo},
	{name: "response-to last in table order", h: hdr(wire.HeaderResponseTo, "a.*", wire.HeaderFairnessKey, "a b", wire.HeaderBlockHashes, "x"), wantErr: wire.HeaderFairnessKey},

	// Several headers; the first malformed one in table order is reported, and
	// the others still decode.
	{name: "typical", h: hdr("Nats-Msg-Id", "r1", wire.HeaderISLTokens, "4096", wire.HeaderReplyTo, "out.r1"), want: with(func(d *Headers) {
		d.MsgID, d.ISL, d.ReplyTo = "r1", 4096, "out.r1"
	})},
	{name: "partial on error", h: hdr("Nats-Msg-Id", "r1", wire.HeaderISLTokens, "x", wire.HeaderStrictPriority, "2", wire.HeaderDeadlineMs, "-1", wire.HeaderReplyTo, "out.r1"), want: with(func(d *Headers) {
		d.MsgID, d.Strict, d.ReplyTo = "r1", 2, "out.r1"
	}), wantErr: wire.HeaderISLTokens},
	{name: "all", h: hdr("Nats-Msg-Id", "r1", wire.HeaderISLTokens, "100", wire.HeaderCachedTokens, "40", wire.HeaderWorkerOverlap, "w1=40",
		wire.HeaderStrictPriority, "1", wire.HeaderPriority, "0.5", wire.HeaderWorker, "w1", wire.HeaderDPRank, "1", wire.HeaderAllowedWorkers, "w1,w2",
		wire.HeaderRequiredTaints, "h200", wire.HeaderPreferredTaints, "h200=2", wire.HeaderDeadlineMs, "500", wire.HeaderReplyTo, "o.r1"),
		want: Headers{MsgID: "r1", ReplyTo: "o.r1", Arrival: request.Arrival{ISL: 100, Cached: 40, Overlap: []request.Overlap{ov("w1", 40)},
			Strict: 1, Jump: 0.5, Pin: request.Target{Worker: "w1", Rank: 1}, Allowed: []string{"w1", "w2"}, Required: []string{"h200"},
			Preferred: []request.Taint{taint("h200", 2)}, DeadlineMs: 500, HasDeadline: true}}},
}

// TestPrecedes: the order in which Decode reports malformed headers.
func TestPrecedes(t *testing.T) {
	order := []string{wire.HeaderMsgID, wire.HeaderISLTokens, wire.HeaderDeadlineMs, wire.HeaderReplyTo,
		wire.HeaderFairnessKey, wire.HeaderBlockHashes, wire.HeaderResponseTo, "X-Unknown"}
	for i, a := range order {
		for j, b := range order {
			if got := NewHeaderError(a, "v", "bad").Precedes(b); got != (i < j) {
				t.Errorf("%s precedes %s: %v, want %v", a, b, got, i < j)
			}
		}
	}
}

func TestDecode(t *testing.T) {
	for _, tc := range decodeCases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Decode(tc.h)
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("got error %v, want none", err)
				}
			} else {
				var he *HeaderError
				if !errors.As(err, &he) {
					t.Fatalf("got error %v (%T), want a *HeaderError", err, err)
				}
				if he.Header != tc.wantErr {
					t.Fatalf("got error naming %q, want %q (%v)", he.Header, tc.wantErr, err)
				}
				if he.Reason == "" || !strings.HasPrefix(err.Error(), "header "+tc.wantErr+": ") {
					t.Fatalf("got message %q, want it to start with the header and give a reason", err)
				}
			}
			want := tc.want
			if reflect.DeepEqual(want, Headers{}) {
				want = with(nil) // a malformed header alone leaves every field absent
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("got %+v, want %+v", got, want)
			}
		})
	}
}

func TestHeaderErrorMessage(t *testing.T) {
	_, err := Decode(hdr(wire.HeaderISLTokens, "abc"))
	if got, want := err.Error(), `header Dispatch-ISL-Tokens: "abc" is not an unsigned integer`; got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
	_, err = Decode(hdr("dispatch-allowed-workers", "w1,,w2"))
	if got, want := err.Error(), `header Dispatch-Allowed-Workers: "w1,,w2" has an empty item (item 2)`; got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
	_, err = Decode(hdr(wire.HeaderISLTokens, strings.Repeat("9", 1000)))
	var he *HeaderError
	if !errors.As(err, &he) || len(he.Value) > maxErrValue+3 {
		t.Fatalf("got value of %d bytes in %v, want at most %d", len(he.Value), err, maxErrValue+3)
	}
}

// TestDecodeTwoCasingsRefused: a header given under two casings is
// malformed, named with both casings the same way however the map happens to
// be iterated (the dispatcher forwards the producer's headers, and a worker
// could otherwise read the casing it did not check).
func TestDecodeTwoCasingsRefused(t *testing.T) {
	h := hdr("dispatch-priority", "3", "Dispatch-Priority", "2", "DISPATCH-PRIORITY", "1", "Dispatch-priority", "4")
	for i := 0; i < 100; i++ {
		_, err := Decode(h)
		var he *HeaderError
		if !errors.As(err, &he) || he.Header != wire.HeaderPriority ||
			!strings.Contains(he.Reason, "two casings of the name (DISPATCH-PRIORITY and dispatch-priority)") {
			t.Fatalf("got %v; want Dispatch-Priority refused, naming DISPATCH-PRIORITY and dispatch-priority", err)
		}
	}
	// The review's case: a short response subject the dispatcher would check,
	// beside a long one a worker could read.
	long := hdr("DISPATCH-RESPONSE-TO", "_RESP.ok", wire.HeaderResponseTo, "_RESP."+strings.Repeat("x", 5000))
	if d, err := Decode(long); err == nil || d.ResponseTo != "" {
		t.Fatalf("two casings of Dispatch-Response-To: %q, %v; want refused", d.ResponseTo, err)
	}
}

// typical is the header set of most requests: an id, an ISL and a reply subject.
var typical = hdr("Nats-Msg-Id", "req-0000000001", wire.HeaderISLTokens, "4096", wire.HeaderReplyTo, "_INBOX.loadgen.0001")

func TestDecodeTypicalAllocs(t *testing.T) {
	if n := testing.AllocsPerRun(100, func() { _, _ = Decode(typical) }); n != 0 {
		t.Fatalf("got %v allocs per Decode of typical headers, want 0", n)
	}
}

func BenchmarkDecode(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		d, err := Decode(typical)
		if err != nil || d.ISL != 4096 {
			b.Fatal(d, err)
		}
	}
}

// FuzzDecode takes a header block, one "name: value" a line, decodes it and
// checks that a nil error implies every bound of docs/protocol.md, Request headers.
func FuzzDecode(f *testing.F) {
	for _, tc := range decodeCases {
		var sb strings.Builder
		for k, vs := range tc.h {
			for _, v := range vs {
				sb.WriteString(k + ": " + v + "\n")
			}
		}
		f.Add(sb.String())
	}
	f.Fuzz(func(t *testing.T, block string) {
		h := nats.Header{}
		for _, line := range strings.Split(block, "\n") {
			k, v, ok := strings.Cut(line, ":")
			if !ok {
				continue
			}
			h.Add(k, strings.TrimPrefix(v, " "))
		}
		d, err := Decode(h)
		if err != nil {
			var he *HeaderError
			if !errors.As(err, &he) {
				t.Fatalf("got %T error %v, want *HeaderError", err, err)
			}
			if he.Header == wire.HeaderMsgID {
				return
			}
			for _, n := range names {
				if he.Header == n {
					return
				}
			}
			t.Fatalf("error names unknown header %q", he.Header)
		}
		checkBounds(t, d)
		if len(d.MsgID) > wire.MaxValueBytes {
			t.Fatalf("msg id of %d bytes", len(d.MsgID))
		}
	})
}

func checkBounds(t *testing.T, d Headers) {
	t.Helper()
	if d.ISL > wire.MaxTokens || d.Cached > wire.MaxTokens || d.Strict > wire.MaxStrict || d.DeadlineMs > wire.MaxDeadlineMs {
		t.Fatalf("number out of range: %+v", d)
	}
	if !d.HasDeadline && d.DeadlineMs != 0 {
		t.Fatalf("deadline without HasDeadline: %+v", d)
	}
	if math.IsNaN(d.Jump) || d.Jump < 0 || d.Jump > wire.MaxJump || math.Signbit(d.Jump) {
		t.Fatalf("jump out of range: %v", d.Jump)
	}
	if d.Key != "" && checkKey(d.Key) != "" {
		t.Fatalf("bad fairness key %q", d.Key)
	}
	if d.Pin.Rank < request.AnyRank || d.Pin.Rank > wire.MaxRank {
		t.Fatalf("rank out of range: %v", d.Pin.Rank)
	}
	if d.Pin.Rank != request.AnyRank && d.Pin.Worker == "" {
		t.Fatalf("rank without worker: %+v", d.Pin)
	}
	if d.Pin.Worker != "" && checkToken(d.Pin.Worker, wire.ValidToken, "") != "" {
		t.Fatalf("bad worker %q", d.Pin.Worker)
	}
	for _, o := range d.Overlap {
		if checkToken(o.Worker, wire.ValidToken, "") != "" || o.Tokens > wire.MaxTokens {
			t.Fatalf("bad overlap %+v", o)
		}
	}
	if d.Overlap != nil && len(d.Overlap) == 0 {
		t.Fatalf("empty non-nil overlap")
	}
	for _, l := range [][]string{d.Allowed, d.Required} {
		if l != nil && len(l) == 0 {
			t.Fatalf("empty non-nil list")
		}
	}
	if len(d.Allowed) > wire.MaxListItems || len(d.Required) > wire.MaxListItems || len(d.Preferred) > wire.MaxListItems || len(d.Overlap) > wire.MaxListItems {
		t.Fatalf("a list over %d items: %d allowed, %d required, %d preferred, %d overlap",
			wire.MaxListItems, len(d.Allowed), len(d.Required), len(d.Preferred), len(d.Overlap))
	}
	for _, a := range d.Allowed {
		if checkToken(a, wire.ValidToken, "") != "" {
			t.Fatalf("bad allowed %q", a)
		}
	}
	for _, r := range d.Required {
		if checkToken(r, wire.ValidTaint, "") != "" {
			t.Fatalf("bad required %q", r)
		}
	}
	for _, p := range d.Preferred {
		if checkToken(p.Name, wire.ValidTaint, "") != "" || math.IsNaN(p.Weight) || math.Abs(p.Weight) > wire.MaxWeight {
			t.Fatalf("bad preferred %+v", p)
		}
	}
	if d.ReplyTo != "" && checkSubject(d.ReplyTo) != "" {
		t.Fatalf("bad reply subject %q", d.ReplyTo)
	}
	if d.Hashes != nil && (len(d.Hashes) == 0 || len(d.Hashes) > wire.MaxHashes) {
		t.Fatalf("%d hashes", len(d.Hashes))
	}
}

// list returns n comma-separated copies of item.
func list(item string, n int) string {
	return strings.TrimSuffix(strings.Repeat(item+",", n), ",")
}

// TestDecodeBounds checks the size bounds: wire.MaxListItems items in each list
// header and wire.MaxValueBytes in each value, both inclusive.
func TestDecodeBounds(t *testing.T) {
	atLimit := strings.Repeat("0", wire.MaxValueBytes-1) + "7" // a valid number, wire.MaxValueBytes long
	tests := []struct {
		name    string
		h       nats.Header
		wantErr string // header named; "" for none
		reason  string // part of the reason
		check   func(Headers) bool
	}{
		{"allowed at limit", hdr(wire.HeaderAllowedWorkers, list("w1", wire.MaxListItems)), "", "",
			func(d Headers) bool { return len(d.Allowed) == wire.MaxListItems }},
		{"allowed over limit", hdr(wire.HeaderAllowedWorkers, list("w1", wire.MaxListItems+1)), wire.HeaderAllowedWorkers, "has more than 256 items (257)", nil},
		{"required at limit", hdr(wire.HeaderRequiredTaints, list("h200", wire.MaxListItems)), "", "",
			func(d Headers) bool { return len(d.Required) == wire.MaxListItems }},
		{"required over limit", hdr(wire.HeaderRequiredTaints, list("h200", wire.MaxListItems+1)), wire.HeaderRequiredTaints, "more than 256 items", nil},
		{"preferred at limit", hdr(wire.HeaderPreferredTaints, list("h200=2", wire.MaxListItems)), "", "",
			func(d Headers) bool { return len(d.Preferred) == wire.MaxListItems }},
		{"preferred over limit", hdr(wire.HeaderPreferredTaints, list("h200=2", wire.MaxListItems+1)), wire.HeaderPreferredTaints, "more than 256 items", nil},
		{"overlap at limit", hdr(wire.HeaderWorkerOverlap, list("w1=5", wire.MaxListItems)), "", "",
			func(d Headers) bool { return len(d.Overlap) == wire.MaxListItems }},
		{"overlap over limit", hdr(wire.HeaderWorkerOverlap, list("w1=5", wire.MaxListItems+1)), wire.HeaderWorkerOverlap, "more than 256 items", nil},
		// Empty items count too: a value of commas is refused before anything is allocated.
		{"commas", hdr(wire.HeaderAllowedWorkers, strings.Repeat(",", 10000)), wire.HeaderAllowedWorkers, "more than 256 items (10001)", nil},
		// The longest valid lists fit well within wire.MaxValueBytes.
		{"longest valid overlap", hdr(wire.HeaderWorkerOverlap, list(long128+"=1099511627776", wire.MaxListItems)), "", "",
			func(d Headers) bool { return len(d.Overlap) == wire.MaxListItems }},
		{"value at limit", hdr(wire.HeaderISLTokens, atLimit), "", "", func(d Headers) bool { return d.ISL == 7 }},
		{"value over limit", hdr(wire.HeaderISLTokens, atLimit+" "), wire.HeaderISLTokens, "is longer than 65536 bytes", nil},
		{"reply over limit", hdr(wire.HeaderReplyTo, strings.Repeat("a", wire.MaxValueBytes+1)), wire.HeaderReplyTo, "longer than", nil},
		{"float over limit", hdr(wire.HeaderPriority, "0."+strings.Repeat("0", wire.MaxValueBytes)+"1"), wire.HeaderPriority, "longer than", nil},
		{"msg id at limit", hdr(wire.HeaderMsgID, strings.Repeat("m", wire.MaxValueBytes)), "", "",
			func(d Headers) bool { return len(d.MsgID) == wire.MaxValueBytes }},
		{"msg id over limit", hdr(wire.HeaderMsgID, strings.Repeat("m", wire.MaxValueBytes+1), wire.HeaderISLTokens, "5"), wire.HeaderMsgID, "longer than",
			func(d Headers) bool { return d.MsgID == "" && d.ISL == 5 }},
		// Table order still decides which problem is reported: the overlap
		// (3rd) before the allow-list (8th), and the others still decode.
		{"order", hdr(wire.HeaderAllowedWorkers, list("w", 300), wire.HeaderWorkerOverlap, strings.Repeat("x", wire.MaxValueBytes+1), wire.HeaderReplyTo, "o.r"),
			wire.HeaderWorkerOverlap, "longer than", func(d Headers) bool { return d.ReplyTo == "o.r" && d.Overlap == nil && d.Allowed == nil }},
		{"hashes at limit", hdr(wire.HeaderBlockHashes, "\t"+wire.EncodeHashes(make([]uint64, wire.MaxHashes))+" "), "", "",
			func(d Headers) bool { return len(d.Hashes) == wire.MaxHashes }},
		{"hashes over count", hdr(wire.HeaderBlockHashes, wire.EncodeHashes(make([]uint64, wire.MaxHashes+1))), wire.HeaderBlockHashes, "more than 8192 hashes",
			func(d Headers) bool { return d.Hashes == nil }},
		{"hashes over length", hdr(wire.HeaderBlockHashes, strings.Repeat("A", wire.MaxHashValueBytes+1)), wire.HeaderBlockHashes, "longer than 98304 bytes", nil},
		{"oversized worker leaves the pin off", hdr(wire.HeaderWorker, strings.Repeat("w", wire.MaxValueBytes+1), wire.HeaderDPRank, "1"), wire.HeaderWorker, "longer than",
			func(d Headers) bool { return d.Pin == request.Target{Rank: request.AnyRank} }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d, err := Decode(tc.h)
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("got error %v, want none", err)
				}
			} else {
				var he *HeaderError
				if !errors.As(err, &he) || he.Header != tc.wantErr || !strings.Contains(he.Reason, tc.reason) {
					t.Fatalf("got error %v, want one naming %s with %q", err, tc.wantErr, tc.reason)
				}
				if len(he.Value) > maxErrValue+3 {
					t.Fatalf("got a quoted value of %d bytes, want at most %d", len(he.Value), maxErrValue+3)
				}
			}
			if tc.check != nil && !tc.check(d) {
				t.Fatalf("got %+v, which fails the check", d)
			}
		})
	}
}

// TestDecodeBoundsAllocs checks that refusing an oversized list costs a few
// small allocations (the error), not one the size of the list: the bound is
// checked before the list is built.
func TestDecodeBoundsAllocs(t *testing.T) {
	h := hdr(wire.HeaderWorkerOverlap, strings.Repeat(",", wire.MaxValueBytes))
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	const runs = 20
	for range runs {
		if _, err := Decode(h); err == nil {
			t.Fatal("got no error for 64 KiB of commas")
		}
	}
	runtime.ReadMemStats(&after)
	if per := (after.TotalAlloc - before.TotalAlloc) / runs; per > 1024 {
		t.Fatalf("got %d bytes allocated per Decode of 64 KiB of commas, want at most 1024", per)
	}
}

func TestBoundReasonsMatchConstants(t *testing.T) {
	if want := "is longer than " + strconv.Itoa(wire.MaxValueBytes) + " bytes"; tooLong != want {
		t.Fatalf("got %q, want %q", tooLong, want)
	}
	if want := "has more than " + strconv.Itoa(wire.MaxListItems) + " items"; tooMany != want {
		t.Fatalf("got %q, want %q", tooMany, want)
	}
}

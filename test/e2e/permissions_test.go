package e2e

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/crypto/bcrypt"

	"fairdispatch/mockworker"
	"fairdispatch/wire"
)

// These tests run the example configs/nats-accounts.conf unchanged (only the
// listen address and storage directory are overridden) and check that NATS
// itself refuses what a role may not do, while every role can do its part of
// the protocol.

// The example secrets whose bcrypt hashes are in configs/nats-accounts.conf.
const (
	permAccount          = "FAIRDISPATCH"
	permDispatcherSecret = "dispatcher-example-secret"
	permPremiumSecret    = "producer-premium-example-secret"
	permRegularSecret    = "producer-regular-example-secret"
	permW1Secret         = "worker-w1-example-secret"
	permW2Secret         = "worker-w2-example-secret"
	permMonitorSecret    = "monitor-example-secret"
	permPolicySecret     = "policy-admin-example-secret"
	permGatewaySecret    = "gateway-example-secret"
	// Pool qwen (TestPermissionsPoolsConfined).
	permQwenDispatcherSecret = "dispatcher-qwen-example-secret"
	permQwenProducerSecret   = "producer-qwen-example-secret"
	permQwenW1Secret         = "worker-qwen-w1-example-secret"
)

// permSecrets maps each user of the example to its secret.
var permSecrets = map[string]string{
	"dispatcher": permDispatcherSecret, "producer_premium": permPremiumSecret, "producer_regular": permRegularSecret,
	"worker_w1": permW1Secret, "worker_w2": permW2Secret, "monitor": permMonitorSecret, "policy_admin": permPolicySecret,
	"gateway": permGatewaySecret, "dispatcher_qwen": permQwenDispatcherSecret, "producer_qwen": permQwenProducerSecret, "worker_qwen_w1": permQwenW1Secret,
}

// TestPermissionsExampleSecrets checks that the bcrypt hashes in the example
// are those of the secrets the tests use, and that every user is in the
// FAIRDISPATCH account, which has JetStream.
func TestPermissionsExampleSecrets(t *testing.T) {
	t.Parallel() // no timing bound; see doc.go
	conf, err := server.ProcessConfigFile(permConfigPath(t))
	if err != nil {
		t.Fatalf("configs/nats-accounts.conf: %v", err)
	}
	if len(conf.Users) != len(permSecrets) {
		t.Fatalf("got %d users, want %d", len(conf.Users), len(permSecrets))
	}
	for _, u := range conf.Users {
		if u.Account == nil || u.Account.Name != permAccount {
			t.Fatalf("user %q is not in account %s", u.Username, permAccount)
		}
		if !strings.HasPrefix(u.Password, "$2a$11$") {
			t.Fatalf("user %q: password is not a bcrypt hash of cost 11", u.Username)
		}
		if err := bcrypt.CompareHashAndPassword([]byte(u.Password), []byte(permSecrets[u.Username])); err != nil {
			t.Fatalf("user %q: the hash does not match the example secret: %v", u.Username, err)
		}
	}
}

// permConfigPath is the example configuration, relative to this file.
func permConfigPath(t testing.TB) string {
	t.Helper()
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("no caller information")
	}
	return filepath.Join(filepath.Dir(file), "..", "..", "configs", "nats-accounts.conf")
}

// permStart starts a nats-server from the example configuration and a
// dispatcher connected as its dispatcher user.
func permStart(t *testing.T, extra ...string) (*natsServer, *proc) {
	t.Helper()
	conf, err := server.ProcessConfigFile(permConfigPath(t))
	if err != nil {
		t.Fatalf("configs/nats-accounts.conf: %v", err)
	}
	// The example stores bcrypt hashes of cost 11. Checking one takes the
	// race-enabled server in this process seconds, more than a client's
	// connect timeout, so the users get their plaintext secrets here;
	// TestPermissionsExampleSecrets checks that the hashes match them.
	conf = conf.Clone()
	for _, u := range conf.Users {
		secret, ok := permSecrets[u.Username]
		if !ok {
			t.Fatalf("configs/nats-accounts.conf: user %q has no known example secret", u.Username)
		}
		u.Password = secret
	}
	n := startNATS(t, func(o *server.Options) {
		dir := o.StoreDir
		*o = *conf
		o.Host, o.Port, o.StoreDir, o.JetStream, o.NoLog, o.NoSigs = "127.0.0.1", -1, dir, true, true, true
	})
	t.Setenv("DISPATCHER_NATS_PASSWORD", permDispatcherSecret)
	p := startDispatcher(t, n.URL(), append([]string{"--nats-user", "dispatcher", "--policy-config", policyFile(t, "permissions")}, extra...)...)
	return n, p
}

// permOutcomes subscribes to a producer's outcome subject and counts the
// dispatched outcomes per class.
type permOutcomes struct {
	mu  sync.Mutex
	per map[string]int
}

func permFollow(t *testing.T, nc *nats.Conn, subject string) *permOutcomes {
	t.Helper()
	o := &permOutcomes{per: map[string]int{}}
	onOutcome(t, nc, subject, func(out wire.Outcome) {
		if out.Status == wire.StatusDispatched {
			o.mu.Lock()
			o.per[out.PolicyClass]++
			o.mu.Unlock()
		}
	})
	return o
}

func (o *permOutcomes) count(class string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.per[class]
}

// permPublish publishes one request with JetStream and returns its stream
// sequence or the error.
func permPublish(nc *nats.Conn, class, id, replyTo string) (uint64, error) {
	return permPublishTo(nc, "dispatch.req."+class, id, replyTo)
}

// permPublishTo is permPublish to any subject.
func permPublishTo(nc *nats.Conn, subject, id, replyTo string) (uint64, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return 0, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	m := nats.NewMsg(subject)
	m.Header.Set("Nats-Msg-Id", id)
	m.Header.Set("Dispatch-ISL-Tokens", "64")
	if replyTo != "" {
		m.Header.Set("Dispatch-Reply-To", replyTo)
	}
	m.Data = []byte("body of " + id)
	ack, err := js.PublishMsg(ctx, m)
	if err != nil {
		return 0, err
	}
	return ack.Sequence, nil
}

// TestPermissionsExampleConfigServes: under the example permissions every
// role can do its part: producers publish to their granted classes, workers
// report, accept and acknowledge, the dispatcher dispatches, and outcomes
// reach the producers' own inboxes.
func TestPermissionsExampleConfigServes(t *testing.T) {
	n, p := permStart(t, "--record-stream") // the example grants the trace stream too
	for _, w := range []struct{ id, user, secret string }{{"w1", "worker_w1", permW1Secret}, {"w2", "worker_w2", permW2Secret}} {
		// Its own inbox, for JetStream's answers to its confirmed acknowledgements.
		nc, errs := secConnect(t, n.URL(), w.user, w.secret, "_INBOX_"+w.user)
		startMock(t, nc, mockworker.Config{ID: w.id, TTL: 3 * time.Second})
		t.Cleanup(func() {
			// The mock also announces completions on dispatch.done.<id> for
			// loadgen, outside the protocol; the example does not grant it.
			if errs.hasOther(`Publish to "dispatch.done.` + w.id + `"`) {
				t.Errorf("worker %s got asynchronous errors:\n%s", w.id, errs)
			}
		})
	}
	waitFor(t, 10*time.Second, "both workers live", func() bool { return p.metric("fairdispatch_live_workers") == 2 })

	premium, premErrs := secConnect(t, n.URL(), "producer_premium", permPremiumSecret, "_INBOX_producer_premium")
	regular, regErrs := secConnect(t, n.URL(), "producer_regular", permRegularSecret, "_INBOX_producer_regular")
	premOut := permFollow(t, premium, "_INBOX_producer_premium.outcomes")
	regOut := permFollow(t, regular, "_INBOX_producer_regular.outcomes")
	const each = 10
	for i := range each {
		if _, err := permPublish(premium, "premium", fmt.Sprintf("prem-%d", i), "_INBOX_producer_premium.outcomes"); err != nil {
			t.Fatalf("producer_premium to premium: %v", err)
		}
		if _, err := permPublish(premium, "regular", fmt.Sprintf("prem-reg-%d", i), "_INBOX_producer_premium.outcomes"); err != nil {
			t.Fatalf("producer_premium to regular: %v", err)
		}
		if _, err := permPublish(regular, "regular", fmt.Sprintf("reg-%d", i), "_INBOX_producer_regular.outcomes"); err != nil {
			t.Fatalf("producer_regular to regular: %v", err)
		}
	}
	waitFor(t, 20*time.Second, "every outcome", func() bool {
		return premOut.count("premium") == each && premOut.count("regular") == each && regOut.count("regular") == each
	})
	js := jsOf(t, secConnectAs(t, n.URL(), "dispatcher", permDispatcherSecret))
	waitFor(t, 20*time.Second, "every request acknowledged by its worker", func() bool {
		return streamMsgs(t, js, "DISPATCH_REQ") == 0
	})
	if got := p.metric("fairdispatch_dispatched_total"); got != 3*each {
		t.Fatalf("got %v dispatched, want %d", got, 3*each)
	}
	// The header, an arrival and an accepted dispatch per request.
	waitFor(t, 20*time.Second, "the trace in DISPATCH_TRACE", func() bool {
		return streamMsgs(t, js, "DISPATCH_TRACE") >= 1+2*3*each
	})
	if premErrs.String() != "" || regErrs.String() != "" {
		t.Fatalf("producers got asynchronous errors:\n%s\n%s", premErrs, regErrs)
	}
}

// connectAs connects as a user of the example configuration.
func secConnectAs(t testing.TB, url, user, secret string) *nats.Conn {
	t.Helper()
	nc, _ := secConnect(t, url, user, secret, "")
	return nc
}

// TestPermissionsProducerWithoutGrantRefused: producer_regular may not use
// class premium. NATS refuses the publish; nothing reaches the stream or the
// dispatcher.
func TestPermissionsProducerWithoutGrantRefused(t *testing.T) {
	n, p := permStart(t)
	regular, errs := secConnect(t, n.URL(), "producer_regular", permRegularSecret, "_INBOX_producer_regular")

	// A JetStream publish gets no acknowledgement: the server dropped it.
	if seq, err := permPublish(regular, "premium", "forbidden-1", ""); err == nil {
		t.Fatalf("publish to dispatch.req.premium stored at sequence %d, want it refused", seq)
	}
	// A core publish too; the server says why.
	if err := regular.Publish("dispatch.req.premium", []byte("forbidden-2")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, "the permission violation", func() bool {
		return errs.has("Permissions Violation", `Publish to "dispatch.req.premium"`)
	})

	// The same connection's granted publish is stored as the stream's first
	// message: nothing before it got in.
	seq, err := permPublish(regular, "regular", "allowed-1", "")
	if err != nil {
		t.Fatalf("publish to the granted class: %v", err)
	}
	if seq != 1 {
		t.Fatalf("the granted request got stream sequence %d, want 1 (the refused ones must not be stored)", seq)
	}
	if got := secStreamLastSeq(t, n.Running(), permAccount, "DISPATCH_REQ"); got != 1 {
		t.Fatalf("got DISPATCH_REQ last sequence %d, want 1", got)
	}
	// No worker is live: the dispatcher leaves the granted request in the
	// stream (docs/design.md, Fleet outage), and never handled a premium one.
	waitFor(t, 10*time.Second, "the dispatcher's fleet outage", func() bool {
		code, body := p.get("/readyz")
		return code == http.StatusServiceUnavailable && strings.Contains(body, "no live workers")
	})
	if got := p.metric("fairdispatch_rejected_total", `class="premium"`) + p.metric("fairdispatch_dispatched_total", `class="premium"`); got != 0 {
		t.Fatalf("got %v premium requests handled, want 0", got)
	}
}

// TestPermissionsWorkerCannotActForAnother: worker_w1 may not report w2's
// load, receive w2's work, or publish requests. NATS refuses each; w2's state
// in the dispatcher is unchanged. What w1 can still do, acknowledge any
// request message, is checked last (docs/security.md).
func TestPermissionsWorkerCannotActForAnother(t *testing.T) {
	n, p := permStart(t)
	w2, _ := secConnect(t, n.URL(), "worker_w2", permW2Secret, "")
	if err := w2.Publish("dispatch.load.w2", loadReport("w2", 100, false, 10*time.Minute)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "w2 live", func() bool {
		v, ok := p.queues()
		return ok && len(v.Workers) == 1 && v.Workers[0].ID == "w2" && v.Workers[0].Ranks[0].ReportedPrefill == 100
	})

	w1, errs := secConnect(t, n.URL(), "worker_w1", permW1Secret, "")
	// A forged report for w2: draining, and a load that would keep it from work.
	if err := w1.Publish("dispatch.load.w2", loadReport("w2", 999_999, true, 10*time.Minute)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, "the load permission violation", func() bool {
		return errs.has("Permissions Violation", `Publish to "dispatch.load.w2"`)
	})
	// Barrier: a report of w1's own that the dispatcher drops as invalid
	// (ttl_ms 1). Reports from one connection arrive in order, so once it is
	// counted, the forged one would have been applied had it got through.
	invalid := p.metric("fairdispatch_load_reports_dropped_total", `reason="invalid"`)
	if err := w1.Publish("dispatch.load.w1", loadReport("w1", 0, false, time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "w1's own invalid report counted", func() bool {
		return p.metric("fairdispatch_load_reports_dropped_total", `reason="invalid"`) == invalid+1
	})
	v := secFreshView(t, p, time.Now())
	if len(v.Workers) != 1 || v.Workers[0].ID != "w2" || v.Workers[0].Draining || v.Workers[0].Ranks[0].ReportedPrefill != 100 {
		t.Fatalf("got workers %+v, want only w2, not draining, reported prefill 100", v.Workers)
	}
	if got := p.metric("fairdispatch_load_reports_dropped_total", `reason="mismatch"`); got != 0 {
		t.Fatalf("got %v mismatched reports, want 0 (the forged one never arrived)", got)
	}

	// Nor may w1 receive w2's work, send work, or publish requests.
	if _, err := w1.Subscribe("dispatch.work.w2", func(*nats.Msg) {}); err != nil {
		t.Fatal(err)
	}
	for _, subj := range []string{"dispatch.work.w2", "dispatch.req.regular"} {
		if err := w1.Publish(subj, []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, 20*time.Second, "the other permission violations", func() bool {
		return errs.has("Permissions Violation", `Subscription to "dispatch.work.w2"`) &&
			errs.has("Permissions Violation", `Publish to "dispatch.work.w2"`) &&
			errs.has("Permissions Violation", `Publish to "dispatch.req.regular"`)
	})

	// Nor may w1 publish a completion record under w2's id; one under its own id
	// for a dispatch it never got is counted as unknown and changes nothing
	// (docs/design.md, Cost settlement).
	if err := w1.Publish("dispatch.done.w2", []byte(`{"request_id":"r1","seq":1,"prefill_tokens":999999}`)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "the completion permission violation", func() bool {
		return errs.has("Permissions Violation", `Publish to "dispatch.done.w2"`)
	})
	unknown := p.metric("fairdispatch_settlements_total", `outcome="unknown"`)
	if err := w1.Publish("dispatch.done.w1", []byte(`{"request_id":"r1","seq":1,"prefill_tokens":999999}`)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "w1's record for a dispatch it never got counted unknown", func() bool {
		return p.metric("fairdispatch_settlements_total", `outcome="unknown"`) == unknown+1
	})
	if got := p.metric("fairdispatch_settlements_total", `outcome="settled"`); got != 0 {
		t.Fatalf("got %v settled records, want 0", got)
	}

	// What remains: the acknowledgement subject names the stream sequence, not
	// the worker, so w1 may publish an acknowledgement for any message. The
	// server accepts it without complaint; docs/security.md says how to see it.
	before := len(errs.String())
	if err := w1.Publish("$JS.ACK.DISPATCH_REQ.dispatcher.1.1.1.0.0", []byte("+ACK")); err != nil {
		t.Fatal(err)
	}
	if err := w1.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := w1.Publish("dispatch.load.w1", loadReport("w1", 0, false, time.Millisecond)); err != nil { // barrier, as above
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the second barrier report", func() bool {
		return p.metric("fairdispatch_load_reports_dropped_total", `reason="invalid"`) == invalid+2
	})
	if len(errs.String()) != before {
		t.Fatalf("an acknowledgement was refused, which the example does not do: %s", errs.String()[before:])
	}
}

// TestPermissionsKVEvents: under the example permissions, a dispatcher with
// --kv-index consumes DISPATCH_KV and asks a worker to resynchronise, and a
// mock worker with a prefix cache publishes its own KV events (JetStream
// acknowledgements in its inbox) and receives its resynchronisation
// requests; worker_w1 may not publish w2's KV events nor read w2's requests.
func TestPermissionsKVEvents(t *testing.T) {
	n, p := permStart(t, "--kv-index")
	w1, errs := secConnect(t, n.URL(), "worker_w1", permW1Secret, "_INBOX_worker_w1")
	m := startMock(t, w1, mockworker.Config{ID: "w1", KVCapacity: 16})
	waitFor(t, 20*time.Second, "w1's first KV event applied", func() bool {
		return p.metric("fairdispatch_kv_events_total", `result="applied"`) >= 1
	})

	// A gap on w1's rank (an event of another instance, first id 5) makes
	// the dispatcher ask w1 to resynchronise, which w1 receives.
	js, err := jetstream.New(w1)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := js.Publish(ctx, "dispatch.kv.w1", []byte(`{"instance":"gap","event_id":5}`)); err != nil {
		t.Fatalf("w1 publishing its own KV event: %v", err)
	}
	waitFor(t, 20*time.Second, "w1 asked to resynchronise", func() bool { return m.Helper().KVStats().Requests >= 1 })
	// Its first event, the gap and its resynchronisation (one event: it holds nothing).
	waitFor(t, 20*time.Second, "w1's resynchronisation applied", func() bool {
		return p.metric("fairdispatch_kv_events_total", `result="applied"`) == 3
	})

	// w2's subjects are refused.
	if _, err := w1.Subscribe("dispatch.kvsync.w2", func(*nats.Msg) {}); err != nil {
		t.Fatal(err)
	}
	applied := p.metric("fairdispatch_kv_events_total", `result="applied"`)
	dropped := p.metric("fairdispatch_kv_events_total", `result="dropped"`)
	if err := w1.Publish("dispatch.kv.w2", []byte(`{"instance":"forged","event_id":1,"stored":{"device":"wT_9PiW6dX4"}}`)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, "the KV permission violations", func() bool {
		return errs.has("Permissions Violation", `Publish to "dispatch.kv.w2"`) &&
			errs.has("Permissions Violation", `Subscription to "dispatch.kvsync.w2"`)
	})
	// Barrier: an invalid event of w1's own, dropped by the dispatcher.
	// Events of one connection are stored in order, so once it is counted
	// the forged one would have been applied had it got through.
	if err := w1.Publish("dispatch.kv.w1", []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, "w1's invalid event dropped", func() bool {
		return p.metric("fairdispatch_kv_events_total", `result="dropped"`) == dropped+1
	})
	if got := p.metric("fairdispatch_kv_events_total", `result="applied"`); got != applied {
		t.Fatalf("applied events went from %v to %v: the forged w2 event (or another) was applied", applied, got)
	}
}

// TestPermissionsReplyToCannotForgeLoad: a producer names a load subject as
// its Dispatch-Reply-To, hoping the dispatcher publishes the "dispatched"
// outcome there; the outcome carries worker_id, so it would parse as a load
// report of that worker. The dispatcher rejects such a reply subject as
// bad_request and publishes nothing to it; under the example permissions it
// could not publish load reports anyway. The worker's state is unchanged.
func TestPermissionsReplyToCannotForgeLoad(t *testing.T) {
	n, p := permStart(t)
	w1nc, _ := secConnect(t, n.URL(), "worker_w1", permW1Secret, "_INBOX_worker_w1")
	startMock(t, w1nc, mockworker.Config{ID: "w1", TTL: 3 * time.Second})
	waitFor(t, 10*time.Second, "w1 live", func() bool { return p.metric("fairdispatch_live_workers") == 1 })

	premium, _ := secConnect(t, n.URL(), "producer_premium", permPremiumSecret, "_INBOX_producer_premium")
	if _, err := permPublish(premium, "premium", "deputy-1", "dispatch.load.w1"); err != nil {
		t.Fatal(err)
	}
	// The dispatcher refuses a reply subject inside its own protocol outright
	// (bad_request), so it never even tries to publish there; the permissions
	// would refuse that publish as well.
	waitFor(t, 10*time.Second, "the request rejected as bad_request", func() bool {
		return p.metric("fairdispatch_rejected_total", `reason="bad_request"`) == 1
	})
	if got := p.metric("fairdispatch_dispatched_total", `class="premium"`); got != 0 {
		t.Fatalf("dispatched %v premium requests, want 0", got)
	}
	if got := p.metric("fairdispatch_load_reports_dropped_total"); got != 0 {
		t.Fatalf("got %v dropped reports, want 0", got)
	}
}

// TestPermissionsPoolsConfined: the example's two pools, dispatch (the
// default prefix) and qwen, on one account. Each pool serves under its own
// users; every user of one pool is refused by NATS whatever it tries in the
// other: workers cannot report, receive work or acknowledge there, producers
// cannot publish requests there or read the other's outcomes, and neither
// dispatcher can call the JetStream API of the other's streams, consumer or
// lease bucket, nor read the other's inbox or load reports.
func TestPermissionsPoolsConfined(t *testing.T) {
	n, p := permStart(t)
	q := startDispatcher(t, n.URL(), "--nats-user", "dispatcher_qwen", "--nats-password", permQwenDispatcherSecret,
		"--subject-prefix", "qwen", "--nats-inbox-prefix", "_INBOX_dispatcher_qwen", "--policy-config", policyFile(t, "permissions-qwen"))

	// Both pools serve, each under its own users; worker id w1 in each.
	w1, w1Errs := secConnect(t, n.URL(), "worker_w1", permW1Secret, "_INBOX_worker_w1")
	qw1, qw1Errs := secConnect(t, n.URL(), "worker_qwen_w1", permQwenW1Secret, "_INBOX_worker_qwen_w1")
	startMock(t, w1, mockworker.Config{ID: "w1", TTL: 3 * time.Second})
	startMock(t, qw1, mockworker.Config{ID: "w1", Prefix: "qwen", TTL: 3 * time.Second})
	waitFor(t, 10*time.Second, "w1 live in both pools", func() bool {
		return p.metric("fairdispatch_live_workers") == 1 && q.metric("fairdispatch_live_workers") == 1
	})
	premium, premErrs := secConnect(t, n.URL(), "producer_premium", permPremiumSecret, "_INBOX_producer_premium")
	qprod, qprodErrs := secConnect(t, n.URL(), "producer_qwen", permQwenProducerSecret, "_INBOX_producer_qwen")
	premOut := permFollow(t, premium, "_INBOX_producer_premium.outcomes")
	qOut := permFollow(t, qprod, "_INBOX_producer_qwen.outcomes")
	const each = 5
	for i := range each {
		if _, err := permPublish(premium, "premium", fmt.Sprintf("prem-%d", i), "_INBOX_producer_premium.outcomes"); err != nil {
			t.Fatalf("producer_premium to premium: %v", err)
		}
		if _, err := permPublishTo(qprod, "qwen.req.gold", fmt.Sprintf("gold-%d", i), "_INBOX_producer_qwen.outcomes"); err != nil {
			t.Fatalf("producer_qwen to gold: %v", err)
		}
	}
	waitFor(t, 20*time.Second, "every outcome in both pools", func() bool {
		return premOut.count("premium") == each && qOut.count("gold") == each
	})
	if got := p.metric("fairdispatch_dispatched_total"); got != each {
		t.Errorf("pool dispatch dispatched %v, want %d", got, each)
	}
	if got := q.metric("fairdispatch_dispatched_total", `class="gold"`); got != each {
		t.Errorf("pool qwen dispatched %v gold, want %d", got, each)
	}
	// The mocks' completion records (<prefix>.done.w1) are outside the protocol and not granted.
	for _, e := range []*secAsyncErrors{w1Errs, qw1Errs} {
		if e.hasOther(`.done.w1"`) {
			t.Fatalf("a worker got asynchronous errors while serving:\n%s", e)
		}
	}
	if premErrs.String() != "" || qprodErrs.String() != "" {
		t.Fatalf("producers got asynchronous errors while serving:\n%s\n%s", premErrs, qprodErrs)
	}

	// Each role tries the other pool. Core publishes and subscriptions: the
	// server refuses each with a permission violation.
	disp, dispErrs := secConnect(t, n.URL(), "dispatcher", permDispatcherSecret, "")
	qdisp, qdispErrs := secConnect(t, n.URL(), "dispatcher_qwen", permQwenDispatcherSecret, "_INBOX_dispatcher_qwen")
	for _, c := range []struct {
		who       string
		nc        *nats.Conn
		errs      *secAsyncErrors
		publish   []string
		subscribe []string
	}{
		{"pool qwen's worker w1", qw1, qw1Errs,
			[]string{"dispatch.load.w1", "$JS.ACK.DISPATCH_REQ.dispatcher.1.1.1.0.0", "dispatch.req.premium"},
			[]string{"dispatch.work.w1"}},
		{"pool dispatch's worker w1", w1, w1Errs,
			[]string{"qwen.load.w1", "$JS.ACK.QWEN_REQ.dispatcher.1.1.1.0.0", "qwen.req.gold"},
			[]string{"qwen.work.w1"}},
		{"producer_qwen", qprod, qprodErrs,
			[]string{"dispatch.req.premium", "$JS.API.STREAM.INFO.DISPATCH_REQ"},
			[]string{"_INBOX_producer_premium.>"}},
		{"producer_premium", premium, premErrs,
			[]string{"qwen.req.gold"},
			[]string{"_INBOX_producer_qwen.>"}},
		{"dispatcher_qwen", qdisp, qdispErrs,
			[]string{"$JS.API.STREAM.INFO.DISPATCH_REQ", "$JS.API.STREAM.UPDATE.DISPATCH_REQ", "$JS.API.STREAM.INFO.KV_fairdispatch_leader",
				"$JS.API.CONSUMER.CREATE.DISPATCH_REQ.spy", "$JS.API.CONSUMER.MSG.NEXT.DISPATCH_REQ.dispatcher",
				"$JS.API.DIRECT.GET.KV_fairdispatch_leader", "$KV.fairdispatch_leader.dispatcher",
				"$JS.ACK.DISPATCH_REQ.dispatcher.1.1.1.0.0", "dispatch.work.w1", "dispatch.dlq.premium", "_INBOX_producer_premium.outcomes"},
			[]string{"dispatch.load.*", "_INBOX.>"}},
		{"dispatcher", disp, dispErrs,
			[]string{"$JS.API.STREAM.INFO.QWEN_REQ", "$JS.API.STREAM.UPDATE.QWEN_DLQ", "$JS.API.STREAM.INFO.KV_fairdispatch_qwen_leader",
				"$JS.API.CONSUMER.CREATE.QWEN_REQ.spy", "$JS.API.CONSUMER.MSG.NEXT.QWEN_REQ.dispatcher",
				"$JS.API.DIRECT.GET.KV_fairdispatch_qwen_leader", "$KV.fairdispatch_qwen_leader.dispatcher",
				"$JS.ACK.QWEN_REQ.dispatcher.1.1.1.0.0", "qwen.work.w1", "qwen.dlq.gold", "_INBOX_producer_qwen.outcomes"},
			[]string{"qwen.load.*", "_INBOX_dispatcher_qwen.>"}},
	} {
		for _, subj := range c.publish {
			if err := c.nc.Publish(subj, []byte("{}")); err != nil {
				t.Fatal(err)
			}
		}
		for _, subj := range c.subscribe {
			if _, err := c.nc.Subscribe(subj, func(*nats.Msg) {}); err != nil {
				t.Fatal(err)
			}
		}
		if err := c.nc.Flush(); err != nil {
			t.Fatal(err)
		}
		var allowed []string // attempts the server has not refused (yet)
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			allowed = nil
			for _, subj := range c.publish {
				if !c.errs.has("Permissions Violation", `Publish to "`+subj+`"`) {
					allowed = append(allowed, "publish "+subj)
				}
			}
			for _, subj := range c.subscribe {
				if !c.errs.has("Permissions Violation", `Subscription to "`+subj+`"`) {
					allowed = append(allowed, "subscribe "+subj)
				}
			}
			if len(allowed) == 0 || time.Now().After(deadline) {
				break
			}
		}
		if len(allowed) > 0 {
			t.Errorf("%s may, in the other pool: %v", c.who, allowed)
		}
	}
	// Nothing reached the other pool: its dispatcher still counts only its
	// own requests and knows only its own worker, unchanged.
	for _, d := range []*proc{p, q} {
		if got := d.metric("fairdispatch_dispatched_total"); got != each {
			t.Errorf("a dispatcher dispatched %v after the attempts, want %d", got, each)
		}
		if got := d.metric("fairdispatch_load_reports_dropped_total"); got != 0 {
			t.Errorf("a dispatcher dropped %v load reports, want 0 (the forged ones never arrived)", got)
		}
	}
	for _, c := range []struct{ stream string }{{"DISPATCH_REQ"}, {"QWEN_REQ"}} {
		if got := secStreamLastSeq(t, n.Running(), permAccount, c.stream); got != each {
			t.Errorf("%s last sequence %d, want %d (no refused request stored)", c.stream, got, each)
		}
	}
}

// TestPermissionsResponsePath: under the example permissions a worker
// streams a response to a producer's _RESP.<user> subject and gets the
// producer's answers on its own inbox, the producer cancels through
// dispatch.cancel and the dispatcher forwards it to the worker, and another
// producer cannot read the first one's responses.
func TestPermissionsResponsePath(t *testing.T) {
	n, p := permStart(t)
	w1, w1Errs := secConnect(t, n.URL(), "worker_w1", permW1Secret, "_INBOX_worker_w1")
	startMock(t, w1, mockworker.Config{ID: "w1", TTL: 3 * time.Second, OutputTokens: 3, NoCompletions: true})
	waitFor(t, 10*time.Second, "w1 live", func() bool { return p.metric("fairdispatch_live_workers") == 1 })
	premium, premErrs := secConnect(t, n.URL(), "producer_premium", permPremiumSecret, "_INBOX_producer_premium")
	js, err := jetstream.New(premium)
	if err != nil {
		t.Fatal(err)
	}

	done := rsFollowOn(t, premium, "perm-r1", "_RESP.producer_premium.perm-r1")
	done.publish(js, "premium", map[string]string{"Dispatch-ISL-Tokens": "64"})
	waitFor(t, 10*time.Second, "the response", func() bool { _, end, broken, _, _ := done.state(); return end != nil || broken != "" })
	if chunks, end, broken, _, _ := done.state(); broken != "" || end.Status != "ok" || chunks != 3 {
		t.Fatalf("response: %d chunks, end %+v, broken %q; want 3 chunks and ok", chunks, end, broken)
	}
	waitFor(t, 10*time.Second, "the dispatched outcome on the response subject", func() bool { return done.outcomesOf("dispatched") == 1 })

	long := rsFollowOn(t, premium, "perm-r2", "_RESP.producer_premium.perm-r2")
	long.publish(js, "premium", map[string]string{"Dispatch-ISL-Tokens": "64", "Dispatch-Output-Tokens": "1000000"})
	<-long.firstChunk
	rsCancel(t, premium, "perm-r2")
	waitFor(t, 10*time.Second, "the cancelled end marker", func() bool { _, end, _, _, _ := long.state(); return end != nil })
	if _, end, _, _, _ := long.state(); end.Status != "cancelled" {
		t.Errorf("end status %q, want cancelled", end.Status)
	}

	regular, regErrs := secConnect(t, n.URL(), "producer_regular", permRegularSecret, "_INBOX_producer_regular")
	if _, err := regular.SubscribeSync("_RESP.producer_premium.>"); err != nil {
		t.Fatal(err)
	}
	_ = regular.Flush()
	waitFor(t, 5*time.Second, "the refusal of another producer's response subjects", func() bool {
		return regErrs.has(`Subscription to "_RESP.producer_premium.>"`)
	})
	if s := premErrs.String() + w1Errs.String(); s != "" {
		t.Errorf("asynchronous errors:\n%s", s)
	}
}

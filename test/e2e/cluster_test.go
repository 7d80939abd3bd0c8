package e2e

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"

	"fairdispatch/mockworker"
)

// haCluster starts a three-node NATS cluster with JetStream on loopback: each
// server has its own name, client port, cluster port and storage directory,
// the same cluster name, and routes to all three. It returns once JetStream
// answers (a meta leader is elected).
func haCluster(t *testing.T) []*natsServer {
	t.Helper()
	var cports []int
	var routes []string
	for range 3 {
		_, port, _ := net.SplitHostPort(freeAddr(t))
		var p int
		fmt.Sscanf(port, "%d", &p)
		cports = append(cports, p)
		routes = append(routes, fmt.Sprintf("nats://127.0.0.1:%d", p))
	}
	var nodes []*natsServer
	for i := range 3 {
		nodes = append(nodes, startNATS(t, func(o *server.Options) {
			o.ServerName = fmt.Sprintf("n%d", i)
			o.Cluster.Name = "fairdispatch-e2e"
			o.Cluster.Host = "127.0.0.1"
			o.Cluster.Port = cports[i]
			o.Routes = server.RoutesFromStr(strings.Join(routes, ","))
		}))
	}
	js := jsOf(t, connect(t, nodes[0].URL()))
	waitFor(t, 30*time.Second, "JetStream of the cluster to answer", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_, err := js.AccountInfo(ctx)
		return err == nil
	})
	return nodes
}

// haURLs lists the client URLs of nodes, starting with nodes[first].
func haURLs(nodes []*natsServer, first int) string {
	var us []string
	for i := range nodes {
		us = append(us, nodes[(first+i)%len(nodes)].URL())
	}
	return strings.Join(us, ",")
}

// TestClusterNodeLossNothingLost: a three-node NATS cluster, the dispatcher
// with --stream-replicas 3 and every node's URL, six mock workers spread over
// the nodes (two on each), 10,000 requests. Mid-run the node leading the
// request stream is shut down: the streams, the consumer and the leader lease
// (all three replicas) elect new leaders on the other two nodes, clients on
// the dead node reconnect to the others, and nothing is lost or duplicated.
func TestClusterNodeLossNothingLost(t *testing.T) {
	t.Parallel() // no timing bound; see doc.go
	const n = 10000
	nodes := haCluster(t)
	all := haURLs(nodes, 0)
	p := startDispatcher(t, all, append(haLog, "--stream-replicas", "3")...)

	// Kill the request stream's leader; the test watches from another node.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	js0 := jsOf(t, connect(t, nodes[0].URL()))
	s, err := js0.Stream(ctx, "DISPATCH_REQ")
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.Config.Replicas != 3 || info.Cluster == nil {
		t.Fatalf("DISPATCH_REQ has %d replicas (cluster %+v), want 3", info.Config.Replicas, info.Cluster)
	}
	victim := -1
	for i := range nodes {
		if info.Cluster.Leader == fmt.Sprintf("n%d", i) {
			victim = i
		}
	}
	if victim < 0 {
		t.Fatalf("no leader for DISPATCH_REQ: %+v", info.Cluster)
	}
	lease, err := js0.KeyValue(ctx, "fairdispatch_leader")
	if err != nil {
		t.Fatal(err)
	}
	if st, err := lease.Status(ctx); err != nil || st.(*jetstream.KeyValueBucketStatus).StreamInfo().Config.Replicas != 3 {
		t.Fatalf("lease bucket: %v, want 3 replicas", err)
	}
	watch := (victim + 1) % 3
	rec := haRecord(t, haConnect(t, nodes[watch].URL()))
	js := jsOf(t, haConnect(t, nodes[watch].URL()))
	for i := range 6 {
		haStartMock(t, rec, haURLs(nodes, i%3), mockworker.Config{ID: fmt.Sprintf("w%d", i+1), PrefillTokensPerSec: 20000})
	}
	waitLive(t, p, "w1", "w2", "w3", "w4", "w5", "w6")

	pub := &haPublisher{run: "cluster", n: n}
	start := time.Now()
	pub.start(t, haConnect(t, nodes[watch].URL()), 16)
	waitFor(t, 60*time.Second, "2,500 completed", func() bool { return rec.completed() >= 2500 })
	before := p.metric("fairdispatch_dispatched_total")
	killAt := time.Now()
	nodes[victim].Stop()
	t.Logf("NODE LOSS: n%d (leader of DISPATCH_REQ) shut down %v into the run: %d published, %d completed",
		victim, killAt.Sub(start).Round(time.Millisecond), pub.published.Load(), rec.completed())
	waitFor(t, 30*time.Second, "the dispatcher to dispatch again", func() bool {
		return p.metric("fairdispatch_dispatched_total") > before+100
	})
	t.Logf("dispatching again (100 more) %v after the node loss; leader gauge %v", time.Since(killAt).Round(time.Millisecond),
		p.metric("fairdispatch_leader"))

	pub.wait(t, 60*time.Second)
	haCheck(t, js, rec, []*haPublisher{pub}, nil, 60*time.Second, p)
	if info, err := s.Info(context.Background()); err == nil && info.Cluster != nil {
		t.Logf("DISPATCH_REQ now led by %s; run %v in all; publisher retries %d; dispatcher log:\n%s", info.Cluster.Leader,
			time.Since(start).Round(time.Millisecond), pub.retries.Load(),
			strings.Join(haLogLines(p, "lease", "nats ", "role", "consumer"), "\n"))
	}
}

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// leaderNode is the cluster server every client of the bench connects to,
// and where placeLeaders moves the leaders.
const leaderNode = "n0"

// placeLeaders moves the leader of the request stream and of each of its
// consumers to leaderNode (a stepdown with that server preferred), so that
// every system measured on a cluster (--cluster) has the same placement:
// publications, deliveries and acknowledgements reach the leaders without a
// route hop, and only the replication goes to the other servers. Without
// it each system's would be wherever its elections fell, a difference of a
// route hop per message between two systems of one run.
func (b *bench) placeLeaders() error {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	stream := b.opt.names.ReqStream()
	s, err := b.js.Stream(ctx, stream)
	if err != nil {
		return err
	}
	if err := b.moveLeader(ctx, "$JS.API.STREAM.LEADER.STEPDOWN."+stream, stream, func() (*jetstream.ClusterInfo, error) {
		info, err := s.Info(ctx)
		if err != nil {
			return nil, err
		}
		return info.Cluster, nil
	}); err != nil {
		return err
	}
	names := s.ConsumerNames(ctx)
	var consumers []string
	for n := range names.Name() {
		consumers = append(consumers, n)
	}
	if err := names.Err(); err != nil {
		return fmt.Errorf("list consumers of %s: %w", stream, err)
	}
	for _, c := range consumers {
		what := stream + " consumer " + c
		if err := b.moveLeader(ctx, "$JS.API.CONSUMER.LEADER.STEPDOWN."+stream+"."+c, what, func() (*jetstream.ClusterInfo, error) {
			cons, err := s.Consumer(ctx, c)
			if err != nil {
				return nil, err
			}
			info, err := cons.Info(ctx)
			if err != nil {
				return nil, err
			}
			return info.Cluster, nil
		}); err != nil {
			return err
		}
	}
	b.logf("leaders of %s and its %d consumers on %s", stream, len(consumers), leaderNode)
	return nil
}

// moveLeader asks the raft group whose stepdown subject is api to elect
// leaderNode, until cluster reports it as the leader.
func (b *bench) moveLeader(ctx context.Context, api, what string, cluster func() (*jetstream.ClusterInfo, error)) error {
	req, _ := json.Marshal(map[string]any{"placement": map[string]string{"preferred": leaderNode}})
	var last string
	for {
		ci, err := cluster()
		switch {
		case err != nil:
			last = err.Error()
		case ci == nil:
			return fmt.Errorf("%s: no cluster information", what)
		case ci.Leader == leaderNode:
			return nil
		case ci.Leader != "":
			last = "leader " + ci.Leader
			if _, err := b.nc.RequestWithContext(ctx, api, req); err != nil {
				last = err.Error()
			}
		default:
			last = "no leader"
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: leader not on %s (last: %s)", what, leaderNode, last)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

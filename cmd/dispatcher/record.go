package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"fairdispatch/dispatcher"
	"fairdispatch/metrics"
	"fairdispatch/naming"
	"fairdispatch/recorder"
)

// startRecorder starts the traffic recorder of --record and --record-stream
// (docs/config.md, Recording), or returns nil when neither is given. With
// --record-stream it creates the trace stream if absent (limits retention,
// --record-stream-max-bytes, the oldest discarded); an existing one is left
// as the operator configured it. running is the YAML of the policy the
// dispatcher starts with when it comes from the policy bucket (docs/design.md,
// Live policy), nil otherwise: the trace header names the policy that runs.
func startRecorder(ctx context.Context, s *settings, nc *nats.Conn, js jetstream.JetStream, names naming.Names,
	reg prometheus.Registerer, log zerolog.Logger, running []byte) (*recorder.Recorder, error) {
	if s.record == "" && !s.recordStream {
		return nil, nil
	}
	policyYAML := string(running)
	if running == nil && s.policy != "" {
		b, err := os.ReadFile(s.policy)
		if err != nil {
			return nil, fmt.Errorf("--record: policy file: %w", err)
		}
		policyYAML = string(b)
	}
	var sinks []recorder.Sink
	if s.recordStream {
		storage := jetstream.FileStorage
		if s.storage == "memory" {
			storage = jetstream.MemoryStorage
		}
		if err := recorder.EnsureStream(ctx, js, names.TraceStream(), names.Trace(), s.recordStreamBytes, s.replicas, storage); err != nil {
			return nil, fmt.Errorf("--record-stream: %w", err)
		}
		sinks = append(sinks, recorder.StreamSink{P: nc, Subject: names.Trace()})
	}
	if s.record != "" {
		f, err := recorder.OpenFile(s.record)
		if err != nil {
			return nil, fmt.Errorf("--record: %w", err)
		}
		sinks = append(sinks, f)
	}
	rec, err := recorder.New(policyYAML, time.Now().UnixNano(), s.recordBuffer, metrics.NewTrace(reg), log, sinks...)
	if err != nil {
		return nil, err
	}
	log.Info().Str("file", s.record).Bool("stream", s.recordStream).Str("trace_stream", names.TraceStream()).Msg("recording the traffic trace")
	return rec, nil
}

// tracer is rec as the actor's Tracer; nil when not recording.
func tracer(rec *recorder.Recorder) dispatcher.Tracer {
	if rec == nil {
		return nil
	}
	return rec
}

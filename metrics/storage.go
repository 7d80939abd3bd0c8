package metrics

import "github.com/prometheus/client_golang/prometheus"

// Storage holds the gauges of the JetStream storage the dispatcher depends
// on (docs/operations.md, When storage runs out): its streams' use and own
// limits, the account's, and, with the embedded nats-server, the server's.
// Set about every 3 s by the stream watch. A limit of 0 means none. A nil
// *Storage records nothing.
//
//	name                                          type   labels
//	fairdispatch_stream_bytes                     gauge  stream
//	fairdispatch_stream_messages                  gauge  stream
//	fairdispatch_stream_max_bytes                 gauge  stream (0: no limit of its own)
//	fairdispatch_stream_max_messages              gauge  stream (0: no limit of its own)
//	fairdispatch_jetstream_account_bytes          gauge  storage (file, memory)
//	fairdispatch_jetstream_account_max_bytes      gauge  storage (0: no account limit)
//	fairdispatch_jetstream_server_bytes           gauge  storage (embedded server only)
//	fairdispatch_jetstream_server_max_bytes       gauge  storage (embedded server only)
type Storage struct {
	streamBytes, streamMsgs, streamMaxBytes, streamMaxMsgs *prometheus.GaugeVec
	accountBytes, accountMax                               *prometheus.GaugeVec
	serverBytes, serverMax                                 *prometheus.GaugeVec // nil without an embedded server
}

// StreamUsage is one stream's state and its own limits, in bytes and
// messages; a limit <= 0 is none.
type StreamUsage struct {
	Bytes, Msgs       uint64
	MaxBytes, MaxMsgs int64
}

// StoreUsage is the use and the limit, in bytes, of JetStream's file and
// memory storage, for an account or a server; a limit <= 0 is none.
type StoreUsage struct {
	FileBytes, MemoryBytes uint64
	FileMax, MemoryMax     int64
}

// The storage label values.
const (
	StorageFile   = "file"
	StorageMemory = "memory"
)

// NewStorage builds the storage gauges and registers them on reg (nil:
// none). Every series of streams (their names) exists from the start at 0;
// the server's gauges exist only when embedded.
func NewStorage(reg prometheus.Registerer, streams []string, embedded bool) *Storage {
	vec := func(name, help, label string) *prometheus.GaugeVec {
		return prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: namespace, Name: name, Help: help}, []string{label})
	}
	s := &Storage{
		streamBytes:    vec("stream_bytes", "Bytes stored in the stream.", "stream"),
		streamMsgs:     vec("stream_messages", "Messages stored in the stream.", "stream"),
		streamMaxBytes: vec("stream_max_bytes", "The stream's own byte limit (max_bytes); 0: none.", "stream"),
		streamMaxMsgs:  vec("stream_max_messages", "The stream's own message limit (max_msgs); 0: none.", "stream"),
		accountBytes:   vec("jetstream_account_bytes", "JetStream storage the account uses, per storage type.", "storage"),
		accountMax: vec("jetstream_account_max_bytes",
			"The account's JetStream storage limit, per storage type; 0: none (the server's store limit still applies).", "storage"),
	}
	cs := []prometheus.Collector{s.streamBytes, s.streamMsgs, s.streamMaxBytes, s.streamMaxMsgs, s.accountBytes, s.accountMax}
	if embedded {
		s.serverBytes = vec("jetstream_server_bytes", "JetStream storage the embedded nats-server uses, per storage type.", "storage")
		s.serverMax = vec("jetstream_server_max_bytes",
			"The embedded nats-server's JetStream store limit (max_file_store, max_memory_store), per storage type: at it every stream refuses writes.", "storage")
		cs = append(cs, s.serverBytes, s.serverMax)
	}
	for _, n := range streams {
		for _, v := range []*prometheus.GaugeVec{s.streamBytes, s.streamMsgs, s.streamMaxBytes, s.streamMaxMsgs} {
			v.WithLabelValues(n)
		}
	}
	for _, st := range []string{StorageFile, StorageMemory} {
		for _, v := range cs[4:] {
			v.(*prometheus.GaugeVec).WithLabelValues(st)
		}
	}
	if reg != nil {
		reg.MustRegister(cs...)
	}
	return s
}

// SetStream records one stream's use and limits.
func (s *Storage) SetStream(name string, u StreamUsage) {
	if s == nil {
		return
	}
	s.streamBytes.WithLabelValues(name).Set(float64(u.Bytes))
	s.streamMsgs.WithLabelValues(name).Set(float64(u.Msgs))
	s.streamMaxBytes.WithLabelValues(name).Set(limit(u.MaxBytes))
	s.streamMaxMsgs.WithLabelValues(name).Set(limit(u.MaxMsgs))
}

// SetAccount records the account's JetStream use and limits.
func (s *Storage) SetAccount(u StoreUsage) {
	if s == nil {
		return
	}
	setStore(s.accountBytes, s.accountMax, u)
}

// SetServer records the embedded server's JetStream use and limits; without
// an embedded server (NewStorage's embedded false) it does nothing.
func (s *Storage) SetServer(u StoreUsage) {
	if s == nil || s.serverBytes == nil {
		return
	}
	setStore(s.serverBytes, s.serverMax, u)
}

func setStore(used, max *prometheus.GaugeVec, u StoreUsage) {
	used.WithLabelValues(StorageFile).Set(float64(u.FileBytes))
	used.WithLabelValues(StorageMemory).Set(float64(u.MemoryBytes))
	max.WithLabelValues(StorageFile).Set(limit(u.FileMax))
	max.WithLabelValues(StorageMemory).Set(limit(u.MemoryMax))
}

// limit is a limit's gauge value: 0 for none (JetStream says -1).
func limit(v int64) float64 { return float64(max(v, 0)) }

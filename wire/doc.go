// Package wire holds the JSON records that both sides of the dispatch protocol
// encode or decode (docs/protocol.md): outcomes (the dispatcher writes them,
// producers read them), load reports (workers write them, the dispatcher reads
// them), completion records (workers write them, load generators and tests
// read them), and KV cache events and resync requests (workers write the
// events and read the requests, the dispatcher the other way round), and
// trace records (a recording dispatcher writes them, fairctl sim reads them).
// Each record's JSON field names are written here once.
//
// The package is pure: plain structs and encoding/json, no NATS, no clocks, so
// the deterministic core may import it. Validation stays with the reader that
// needs it (workers.ParseReport validates a load report); wire only fixes the
// shape.
package wire

package wire

import (
	"bytes"
	"encoding/json"
)

// Marshal returns v's JSON as the protocol's records are written: without
// HTML escaping (a message keeps its <, > and &) and without a trailing
// newline. MarshalOutcome, MarshalResponseEnd, MarshalCancel and the traffic
// recorder's trace records use it.
func Marshal(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

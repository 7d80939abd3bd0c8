package wire

import (
	"bytes"
	"encoding/json"
	"fmt"
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

// unmarshalBounded decodes b, of at most max bytes, into v, as ParseCancel
// and ParseResponseEnd read their records; its errors start with what.
func unmarshalBounded(what string, b []byte, max int, v any) error {
	if len(b) > max {
		return fmt.Errorf("%s: %d bytes, more than %d", what, len(b), max)
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}

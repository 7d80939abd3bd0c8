package loadgen

import "time"

// SetStreamLookupWait sets how long the request stream's lookup waits, and
// returns a function that puts the old value back.
func SetStreamLookupWait(d time.Duration) (restore func()) {
	old := streamLookupWait
	streamLookupWait = d
	return func() { streamLookupWait = old }
}

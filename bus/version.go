package bus

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// MinServerVersion is the oldest nats-server the dispatcher supports
// (docs/deployment.md, NATS server version). 2.9.0 added what the jetstream
// client package relies on: the consumer create API that names the consumer in
// the subject ($JS.API.CONSUMER.CREATE.<stream>.<consumer>), used for the
// request stream's durable consumer, and direct gets, used by the key-value
// bucket of the leader lease. The dispatcher uses no later server feature.
const MinServerVersion = "2.9.0"

// ErrServerTooOld reports a nats-server older than MinServerVersion.
var ErrServerTooOld = errors.New("nats-server too old")

// CheckServerVersion returns an error wrapping ErrServerTooOld when version
// (as the server announces it, e.g. "2.10.22" or "v2.11.0-RC.1") is older than
// MinServerVersion, and an error when version cannot be read.
func CheckServerVersion(version string) error {
	older, err := versionLess(version, MinServerVersion)
	if err != nil {
		return fmt.Errorf("nats-server version %q: %w", version, err)
	}
	if older {
		return fmt.Errorf("%w: the server is %s, the oldest this dispatcher supports is %s (docs/deployment.md, NATS server version)",
			ErrServerTooOld, version, MinServerVersion)
	}
	return nil
}

// versionLess reports whether version a is older than b, comparing major,
// minor and patch numbers; a pre-release or build suffix is ignored, so
// 2.9.0-RC.1 counts as 2.9.0.
func versionLess(a, b string) (bool, error) {
	va, err := parseVersion(a)
	if err != nil {
		return false, err
	}
	vb, err := parseVersion(b)
	if err != nil {
		return false, err
	}
	for i := range va {
		if va[i] != vb[i] {
			return va[i] < vb[i], nil
		}
	}
	return false, nil
}

func parseVersion(v string) ([3]int, error) {
	var out [3]int
	s := strings.TrimPrefix(strings.TrimSpace(v), "v")
	if i := strings.IndexAny(s, "-+"); i >= 0 {
		s = s[:i]
	}
	parts := strings.Split(s, ".")
	if len(parts) < 2 || len(parts) > 3 {
		return out, errors.New("want major.minor.patch")
	}
	for i, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 {
			return out, errors.New("want major.minor.patch")
		}
		out[i] = n
	}
	return out, nil
}

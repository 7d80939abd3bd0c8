package main

import (
	"fmt"
	"io"
	"net/http"
	"time"
)

// probeTimeout bounds one health probe.
const probeTimeout = 3 * time.Second

// probe is --health-probe: GET url and report 0 on HTTP 200, 1 otherwise, with
// the reason on stderr. The distroless image has no shell or curl, so its
// container healthcheck runs the dispatcher binary itself (docker-compose.yml).
func probe(url string, stderr io.Writer) int {
	c := &http.Client{Timeout: probeTimeout}
	resp, err := c.Get(url)
	if err != nil {
		fmt.Fprintln(stderr, "health probe:", err)
		return 1
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	if resp.StatusCode != http.StatusOK {
		fmt.Fprintf(stderr, "health probe: %s: %s %s\n", url, resp.Status, body)
		return 1
	}
	return 0
}

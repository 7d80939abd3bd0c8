package gateway

import (
	"bufio"
	"context"
	"errors"
	"net/http"
	"strings"
)

// StreamChat is one client of the gateway at base (http://host:port), for
// the demo and the tests: it posts body, a chat completion request with
// "stream": true, to /v1/chat/completions with API key key and the headers
// of header (nil: none), and reads the server-sent events to data: [DONE].
// It returns nil once they end so, else why not: the request's error, an
// HTTP status other than 200, or a stream that ended before [DONE].
func StreamChat(ctx context.Context, hc *http.Client, base, key, body string, header http.Header) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/chat/completions", strings.NewReader(body))
	if err != nil {
		return err
	}
	for k, vs := range header {
		for _, v := range vs {
			req.Header.Add(k, v)
		}
	}
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return errors.New(resp.Status)
	}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if sc.Text() == "data: [DONE]" {
			return nil
		}
	}
	return errors.New("the stream ended without data: [DONE]")
}

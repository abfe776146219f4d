package localapi

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/fleet-agent/fleet-agent/internal/refusal"
)

// Client talks to a running agent over its socket.
type Client struct {
	path string
	http *http.Client
}

// NewClient returns a client of the agent at socket path.
func NewClient(path string) *Client {
	tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", path)
	}}
	return &Client{path: path, http: &http.Client{Transport: tr}}
}

// Running reports whether an agent answers on the socket.
func (c *Client) Running(ctx context.Context) bool {
	if _, err := os.Stat(c.path); err != nil {
		return false
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	var out map[string]any
	return c.Do(ctx, "GET", "/v1/ping", nil, &out) == nil
}

// Do sends one request; a refusal comes back as *refusal.Error.
func (c *Client) Do(ctx context.Context, method, path string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://agent"+path, body)
	if err != nil {
		return err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return refusal.Wrap(refusal.Unavailable, err, "no agent answers on %s", c.path)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 256<<20))
	if err != nil {
		return refusal.Wrap(refusal.Unavailable, err, "the agent's answer was cut")
	}
	if resp.StatusCode != http.StatusOK {
		var e apiError
		if json.Unmarshal(data, &e) != nil || e.Code == "" {
			return refusal.New(refusal.Internal, "the agent answered %s: %s", resp.Status, strings.TrimSpace(string(data)))
		}
		r := refusal.New(e.Code, "%s", e.Message)
		if e.Plan != "" {
			return &PlanRefusal{Refusal: r, Plan: e.Plan}
		}
		return r
	}
	if out == nil {
		return nil
	}
	if w, ok := out.(io.Writer); ok {
		_, err := w.Write(data)
		return err
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("the agent's answer: %w", err)
	}
	return nil
}

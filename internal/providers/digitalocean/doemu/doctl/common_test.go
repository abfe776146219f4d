package doctl_test

import (
	"bytes"
	"context"
	"encoding/json"
	"regexp"
	"time"

	"github.com/fleet-agent/fleet-agent/internal/clock"
	"github.com/fleet-agent/fleet-agent/internal/providers/digitalocean/doemu"
)

const (
	token      = "dop_v1_doctltranscripttoken"
	transcript = "testdata/doctl-kubernetes.json"
)

// emulator is the emulator both the recording and the replay run against:
// a clock that stands still (so times repeat) and two observations to
// every change, so that doctl's wait sees provisioning once, sleeps its
// five seconds once, and then sees running.
func emulator() *doemu.Emulator {
	return doemu.New(doemu.Options{
		Clock:    clock.NewFake(time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)),
		Steps:    doemu.Steps{Cluster: 2, Node: 1, Upgrade: 2, Delete: 1, Drain: 1},
		Accounts: []doemu.Account{{Token: token, Team: "doctl", Email: "doctl@example.com", DropletLimit: 50}},
	})
}

// secret are the members whose values differ on every run: minted tokens,
// the emulator's CA (made per emulator), and request ids.
var secret = map[string]bool{"token": true, "certificate_authority_data": true, "request_id": true}

var (
	secretYAML = regexp.MustCompile(`(?m)^(\s*(?:token|certificate-authority-data):) \S+$`)
	// localURL is where a run's emulator listened: a new port every run.
	localURL = regexp.MustCompile(`http://127\.0\.0\.1:\d+`)
	// requestQuoted is a request id as godo's errors quote it.
	requestQuoted = regexp.MustCompile(`request "[^"]*"`)
	// klogLine is the prefix of a line client-go's loader logs.
	klogLine = regexp.MustCompile(`(?m)^[IWEF]\d{4} \d\d:\d\d:\d\d\.\d+\s+\d+ `)
)

// text normalises what differs on every run in a text.
func text(s string) string {
	s = secretYAML.ReplaceAllString(s, "$1 <normalised>")
	s = localURL.ReplaceAllString(s, "$$API_URL")
	s = requestQuoted.ReplaceAllString(s, `request "<normalised>"`)
	return klogLine.ReplaceAllString(s, "")
}

// normalise replaces what differs on every run, in a JSON value or in
// kubeconfig text.
func normalise(v any) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			if secret[k] {
				x[k] = "<normalised>"
			} else {
				x[k] = normalise(e)
			}
		}
	case []any:
		for i := range x {
			x[i] = normalise(x[i])
		}
	case string:
		return text(x)
	}
	return v
}

// body is a JSON body normalised, or nil with the text normalised when it
// is not JSON.
func body(b []byte) (json.RawMessage, string) {
	if len(bytes.TrimSpace(b)) == 0 {
		return nil, ""
	}
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		return nil, normalise(string(b)).(string)
	}
	out, err := json.Marshal(normalise(v))
	if err != nil {
		panic(err)
	}
	return out, ""
}

func contextWithTimeout(t interface{ Context() context.Context }, d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(t.Context(), d)
}

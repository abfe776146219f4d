package config

import (
	"bytes"
	"errors"
	"testing"

	"github.com/fleet-agent/fleet-agent/internal/refusal"
)

// FuzzParse checks that no input makes Parse panic, that every refusal is
// INVALID_INPUT with problems on lines of the input, and that what it
// accepts is consistent. Run it longer with
// go test -run '^$' -fuzz FuzzParse -fuzztime 60s ./internal/config/
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		contractExample,
		"",
		"git: { url: git@h:r, auth: { sshKey: secret://k, knownHosts: /k } }",
		"github: { repository: a/b, app: { id: 1, installationId: 2, privateKey: secret://k } }",
		"providers:\n  fake:\n    steps: { cluster: 1 }\n    token: env://X\n    list: [ {apiKey: x}, *a ]\n",
		"a: &a [*a]\n",
		"tenant: a\ntenant: b\n---\nx: 1\n",
		"git:\n  <<: {branch: x}\n  ? [a]\n  : b\n",
		"tenant: !!binary aGVsbG8=\nlisten: '[::1]:0'\ndrift: {every: 1h}\n",
		"\tbad: yaml: [\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse("f.yaml", data, noEnv)
		if err != nil {
			var r *refusal.Error
			if !errors.As(err, &r) || r.Code != refusal.InvalidInput {
				t.Fatalf("not an INVALID_INPUT refusal: %T %v", err, err)
			}
			ps := AsProblems(err)
			if len(ps) == 0 {
				t.Fatalf("no problems behind %v", err)
			}
			lines := bytes.Count(data, []byte("\n")) + 2
			for _, p := range ps {
				if p.Line < 0 || p.Line > lines || p.File != "f.yaml" || p.Message == "" {
					t.Fatalf("bad problem %+v for %d lines", p, lines)
				}
			}
			return
		}
		if c.Tenant == "" || c.State == "" || c.Socket == "" || c.Listen == "" || c.Git.Branch == "" || c.Git.Path == "" ||
			c.Git.Interval <= 0 || c.Drift.Every <= 0 {
			t.Fatalf("accepted config lacks a default: %+v", c)
		}
		if g := c.GitHub; g != nil && (g.Repository == "" || (g.Token == "") == (g.App == nil) || g.APIURL[len(g.APIURL)-1] != '/') {
			t.Fatalf("inconsistent github: %+v", g)
		}
		if ch := c.Changes(c); len(ch) != 0 {
			t.Fatalf("a config differs from itself: %v", ch)
		}
		_ = c.CheckForRun()
	})
}
